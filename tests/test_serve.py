"""`agentlab serve`: the scenario engine behind a real HTTP server, driven by the real `anthropic` client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import anthropic
import httpx2
import pytest

from agentlab.backend.scenario import load_scenario, scenario_names
from agentlab.backend.serve import ScenarioServer, reply_message
from agentlab.cli import main as cli_main
from agentlab.core.errors import ConfigError
from agentlab.lab import scenario_loop
from forked import as_from_a_terminal

REPO = Path(__file__).resolve().parent.parent
USER = [{"role": "user", "content": "hi"}]
CALCULATOR = {"name": "calculator", "description": "Evaluate an arithmetic expression.",
              "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}},
                               "required": ["expression"]}}


def sdk(server: ScenarioServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)


def http_loop(name: str, server: ScenarioServer, *, stream: bool):
    """The scenario's loop, exactly as `scenario_loop` wires it, but talking HTTP to `server`."""
    loop = scenario_loop(name, stream=stream, engine=server.engine)
    loop.client = sdk(server)
    return loop


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("name", scenario_names())
def test_every_scenario_over_http_ends_as_expected(name: str, stream: bool) -> None:
    sc = load_scenario(name)
    assert sc.expect is not None, f"{name}: no expect block"
    with ScenarioServer(sc) as server:
        result = http_loop(name, server, stream=stream).run()
    assert server.engine.failures == []
    assert result.subtype == sc.expect.subtype
    if sc.expect.num_turns is not None:
        assert result.num_turns == sc.expect.num_turns
    if sc.expect.requests is not None:
        assert result.requests == sc.expect.requests
    if sc.expect.stop_reason is not None:
        assert result.stop_reason == sc.expect.stop_reason
    messages = [r for r in server.engine.requests if r.body is not None and r.path.startswith("/v1/messages")]
    # a request whose max_tokens implies more than 10 minutes of output streams either way (the SDK's rule)
    assert messages and all(r.stream is (stream or r.body.get("max_tokens", 0) > 21_333) for r in messages)


def test_errors_reach_the_sdk_with_status_type_and_retry_after() -> None:
    with ScenarioServer("api_errors") as server:
        client = sdk(server)
        with pytest.raises(anthropic.APIStatusError) as overloaded:
            client.messages.create(model="m", max_tokens=5, messages=USER)
        with pytest.raises(anthropic.RateLimitError) as limited:
            client.messages.create(model="m", max_tokens=5, messages=USER)
        with pytest.raises(anthropic.InternalServerError):
            client.messages.create(model="m", max_tokens=5, messages=USER)
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"]["type"] == "overloaded_error"
    assert limited.value.response.headers["retry-after"] == "2"
    assert "rate limit" in limited.value.message


def test_streaming_sends_every_event_type_in_chunks() -> None:
    with ScenarioServer("tool_use") as server, httpx2.Client() as http:
        with http.stream("POST", server.base_url + "/v1/messages",
                         json={"model": "m", "max_tokens": 5, "stream": True, "messages": USER,
                               "tools": [CALCULATOR]}) as response:
            chunks = list(response.iter_raw())
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers.get("transfer-encoding") == "chunked"
    text = b"".join(chunks).decode()
    for event in ("message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
                  "message_delta", "message_stop"):
        assert f"event: {event}\n" in text
    assert '"input_json_delta"' in text and '"stop_reason": "tool_use"' in text


def test_head_and_get_probes_answer_200_and_unknown_routes_404() -> None:
    with ScenarioServer("end_turn") as server, httpx2.Client() as http:
        assert http.head(server.base_url + "/").status_code == 200
        assert http.head(server.base_url + "/api/hello").status_code == 200
        assert http.get(server.base_url + "/").status_code == 200
        missing = http.post(server.base_url + "/v1/complete", json={})
        assert missing.status_code == 404
        assert "POST /v1/messages" in missing.json()["error"]["message"]
        # probes use no step: the scenario's one answer is still there
        assert sdk(server).messages.create(model="m", max_tokens=5, messages=USER).stop_reason == "end_turn"


def test_count_tokens_answers_without_using_a_step() -> None:
    with ScenarioServer("end_turn") as server:
        client = sdk(server)
        counted = client.messages.count_tokens(model="m", messages=USER)
        message = client.messages.create(model="m", max_tokens=5, messages=USER)
    assert counted.input_tokens > 0
    assert message.content[0].text == "The capital of France is Paris."
    assert [r.kind for r in server.engine.requests] == ["count_tokens", "message"]


def test_beta_query_role_system_items_and_unknown_fields_are_accepted() -> None:
    messages = [{"role": "system", "content": "Be brief."}, *USER,
                {"role": "system", "content": [{"type": "text", "text": "a reminder"}]}]
    with ScenarioServer("end_turn") as server:
        message = sdk(server).messages.create(
            model="m", max_tokens=5, messages=messages,  # type: ignore[arg-type]
            extra_query={"beta": "true"},
            extra_body={"thinking": {"type": "disabled"}, "context_management": {"edits": []},
                        "output_config": {"effort": "low"}},
            metadata={"user_id": "u1"}, extra_headers={"anthropic-beta": "whatever-2099-01-01"})
    assert message.stop_reason == "end_turn"
    recorded = server.engine.requests[-1]
    assert recorded.path == "/v1/messages?beta=true" and recorded.status == 200 and recorded.step == 0


def test_a_request_that_does_not_match_the_step_gets_a_clear_400() -> None:
    with ScenarioServer("tool_use") as server:
        client = sdk(server)
        client.messages.create(model="m", max_tokens=5, messages=USER)
        with pytest.raises(anthropic.BadRequestError) as mismatch:
            client.messages.create(model="m", max_tokens=5, messages=USER)
    assert "step 1: the request did not match" in mismatch.value.message
    assert server.engine.failures and server.exchanges[-1].request.kind == "expect_failed"


def test_a_body_that_is_not_json_gets_a_400_not_a_hang() -> None:
    with ScenarioServer("end_turn") as server, httpx2.Client() as http:
        response = http.post(server.base_url + "/v1/messages", content=b"{not json",
                             headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert "not JSON" in response.json()["error"]["message"]


def test_server_held_threads_put_the_conversation_back_in_front() -> None:
    with ScenarioServer("tool_use") as server, httpx2.Client() as http:
        url = server.base_url + "/v1/messages"
        first = http.post(url, json={"model": "m", "max_tokens": 5, "messages": USER, "tools": [CALCULATOR],
                                     "thread": {"type": "create"}}).json()
        results = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_calc_1",
                                                 "content": "6912"}]}]
        second = http.post(url, json={"model": "m", "max_tokens": 5, "messages": results,
                                      "thread": {"type": "continue", "previous_message_id": first["id"]}})
        again = http.post(url, json={"model": "m", "max_tokens": 5, "messages": results,
                                     "thread": {"type": "continue", "previous_message_id": first["id"]}})
        lost = http.post(url, json={"model": "m", "max_tokens": 5, "messages": results,
                                    "thread": {"type": "continue", "previous_message_id": "msg_nope"}})
    assert second.status_code == 200 and second.json()["stop_reason"] == "end_turn"
    seen = server.exchanges[1].request.body
    assert [m["role"] for m in seen["messages"]] == ["user", "assistant", "user"]
    assert seen["tools"] == [CALCULATOR] and server.exchanges[1].sent["messages"] == results
    assert again.json()["error"]["details"]["error_code"] == "thread_already_continued"
    assert lost.status_code == 400 and lost.json()["error"]["details"]["error_code"] == "thread_not_found"


def test_reply_message_rebuilds_a_streamed_message() -> None:
    with ScenarioServer("incomplete_tool_use") as server:
        sdk(server).messages.create(model="m", max_tokens=64, messages=USER, stream=True,
                                    tools=[CALCULATOR]).close()  # type: ignore[list-item]
    rebuilt = reply_message(server.exchanges[0].reply)
    assert rebuilt is not None and rebuilt["stop_reason"] == "max_tokens"
    assert [b["type"] for b in rebuilt["content"]] == ["text", "tool_use"]
    assert rebuilt["content"][0]["text"] == "I'll use the calculator."
    assert rebuilt["content"][1]["input"] == {}  # cut off mid-JSON: no input


def test_record_appends_one_json_line_per_request(tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    with ScenarioServer("api_errors", record=record) as server:
        client = sdk(server)
        for _ in range(2):
            with pytest.raises(anthropic.APIStatusError):
                client.messages.create(model="m", max_tokens=5, messages=USER)
        httpx2.head(server.base_url + "/")
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(x["index"], x["method"], x["status"], x["step"]) for x in lines] == \
        [(0, "POST", 529, 0), (1, "POST", 429, 1), (2, "HEAD", 200, None)]
    assert lines[0]["body"]["messages"] == USER and lines[0]["stream"] is False
    assert lines[1]["error"].startswith("Number of request tokens")
    assert {"index", "method", "path", "stream", "step", "status", "kind", "body"} <= set(lines[0])


def test_start_stop_and_a_port_in_use() -> None:
    server = ScenarioServer("end_turn")
    url = server.start()
    assert server.running and url == f"http://127.0.0.1:{server.port}" and server.port > 0
    try:
        with pytest.raises(ConfigError, match="cannot listen"):
            ScenarioServer("end_turn", port=server.port).start()
    finally:
        server.stop()
    assert not server.running
    server.stop()  # a second stop is harmless
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(url)


def test_cli_serve_bad_scenario_exits_2_with_a_message(tmp_path: Path, capsys) -> None:
    assert cli_main(["serve", "no_such_scenario"]) == 2
    assert "no scenario 'no_such_scenario'" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("description: x\nsteps:\n  - {stop_reason: end_turn, content: [{type: txt}]}\n")
    assert cli_main(["serve", str(broken)]) == 2
    assert "broken.yaml: steps[0].content[0]" in capsys.readouterr().err


def test_cli_serve_prints_its_url_answers_records_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    record = tmp_path / "serve.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    proc = subprocess.Popen([sys.executable, "-m", "agentlab", "serve", "end_turn", "--port", "0",
                             "--record", str(record)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, env=env, preexec_fn=as_from_a_terminal)
    guard = threading.Timer(60, proc.kill)  # never hang the suite if the server does not come up
    guard.start()
    try:
        first = proc.stdout.readline()
        assert first.startswith("agentlab serve: http://127.0.0.1:") and first.rstrip().endswith("(scenario end_turn)")
        url = first.split()[2]
        client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)
        assert client.messages.create(model="m", max_tokens=5, messages=USER).stop_reason == "end_turn"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "#1 POST /v1/messages -> 200 message step 0 end_turn" in err
    assert "stopped after 1 request(s), 0 unexpected" in err
    assert json.loads(record.read_text().splitlines()[0])["kind"] == "message"
