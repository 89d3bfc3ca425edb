"""`agentlab serve` answers like the real Messages API where clients depend on it: request ids, usage fields,
list-form system prompts, validated count_tokens bodies, retry-steering headers, request-dependent errors,
and a used-up script that no client can take for a retryable error."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

from agentlab.observatory.observe import lenient
from agentlab.backend.scenario import load_scenario
from agentlab.backend.scripted import ScenarioEngine
from agentlab.backend.serve import ScenarioServer

USER = [{"role": "user", "content": "hi"}]
USAGE_KEYS = ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "cache_creation",
              "output_tokens", "service_tier"]


def sdk(server: ScenarioServer, **kwargs) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", **{"max_retries": 0, **kwargs})


def events(body: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")]


def test_every_response_carries_a_request_id() -> None:
    with ScenarioServer("api_errors") as server, httpx2.Client() as http:
        url = server.base_url
        replies = [http.head(url + "/"), http.get(url + "/nowhere"),
                   http.post(url + "/v1/messages", json={"model": "m", "max_tokens": 5, "messages": USER}),
                   http.post(url + "/v1/messages/count_tokens", json={"model": "m", "messages": USER}),
                   http.post(url + "/v1/messages", json={"model": "m"})]
        ids = [r.headers.get("request-id") for r in replies]
        with pytest.raises(anthropic.APIStatusError) as error:
            sdk(server).messages.create(model="m", max_tokens=5, messages=USER)
    assert all(ids) and len(set(ids)) == len(ids), ids
    assert replies[2].status_code == 529 and replies[2].json()["request_id"] == ids[2]
    assert error.value.request_id and error.value.request_id.startswith("req_")


def test_usage_has_every_field_the_api_sends_in_json_and_in_the_stream() -> None:
    with ScenarioServer("tool_use") as server, httpx2.Client() as http:
        whole = http.post(server.base_url + "/v1/messages",
                          json={"model": "m", "max_tokens": 50, "messages": USER}).json()
    assert list(whole["usage"]) == USAGE_KEYS
    assert whole["usage"]["service_tier"] == "standard" and whole["usage"]["cache_read_input_tokens"] == 0
    with ScenarioServer("tool_use") as server, httpx2.Client() as http:
        streamed = events(http.post(server.base_url + "/v1/messages",
                                    json={"model": "m", "max_tokens": 50, "stream": True, "messages": USER}).content)
    start = streamed[0]["message"]["usage"]
    delta = next(e for e in streamed if e["type"] == "message_delta")["usage"]
    assert list(start) == USAGE_KEYS and start["input_tokens"] == whole["usage"]["input_tokens"]
    assert start["output_tokens"] == 1 and delta["output_tokens"] == whole["usage"]["output_tokens"] > 1


def test_role_system_items_keep_a_list_form_system() -> None:
    system = [{"type": "text", "text": "You are a careful assistant. " * 40, "cache_control": {"type": "ephemeral"}}]
    reminder = {"role": "system", "content": "a short reminder"}
    with ScenarioServer("end_turn") as server, httpx2.Client() as http:
        url = server.base_url + "/v1/messages/count_tokens"
        alone = http.post(url, json={"model": "m", "system": system, "messages": USER}).json()["input_tokens"]
        both = http.post(url, json={"model": "m", "system": system, "messages": [reminder, *USER]}).json()
        message = http.post(server.base_url + "/v1/messages",
                            json={"model": "m", "max_tokens": 9, "system": system, "messages": [reminder, *USER]})
    assert both["input_tokens"] > alone > 100  # the list-form system survives next to the item
    assert message.status_code == 200


@pytest.mark.parametrize("body, named", [({}, "model"), ({"model": "m"}, "messages"),
                                         ({"model": "m", "messages": "hi"}, "messages"),
                                         ({"model": "m", "messages": [{"content": "hi"}]}, "messages.0")])
def test_count_tokens_validates_its_body_like_messages(body: dict, named: str) -> None:
    with ScenarioServer("end_turn") as server, httpx2.Client() as http:
        counted = http.post(server.base_url + "/v1/messages/count_tokens", json=body)
        created = http.post(server.base_url + "/v1/messages", json={**body, "max_tokens": 5})
        # nothing was used up: the scenario's one answer is still there
        answer = http.post(server.base_url + "/v1/messages", json={"model": "m", "max_tokens": 5, "messages": USER})
    for reply in (counted, created):
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["type"] == "invalid_request_error"
        assert reply.json()["error"]["message"].startswith(named)
    assert answer.status_code == 200


def test_messages_needs_max_tokens() -> None:
    with ScenarioServer("end_turn") as server, httpx2.Client() as http:
        reply = http.post(server.base_url + "/v1/messages", json={"model": "m", "messages": USER})
    assert reply.status_code == 400 and reply.json()["error"]["message"] == "max_tokens: Field required"


def test_a_used_up_script_ends_the_turn_and_counts_model_requests_not_probes() -> None:
    with ScenarioServer("end_turn") as server, httpx2.Client() as http:
        http.head(server.base_url + "/")
        http.post(server.base_url + "/v1/messages/count_tokens", json={"model": "m", "messages": USER})
        client = sdk(server, max_retries=2)
        client.messages.create(model="m", max_tokens=5, messages=USER)
        extra = client.messages.create(model="m", max_tokens=5, messages=USER)
    assert extra.stop_reason == "end_turn"  # not an error any client would retry
    assert "is used up" in extra.content[0].text and "model request 2 was not expected" in extra.content[0].text
    assert [r.kind for r in server.engine.requests][-1] == "unexpected"
    assert len(server.engine.failures) == 1 and len(server.exchanges) == 4  # and no retry came


def test_error_steps_send_the_headers_the_api_sends(monkeypatch) -> None:
    # the SDK's waits between retries are recorded instead of slept (the second follows retry-after: 2 s)
    waits: list[float] = []
    monkeypatch.setattr(anthropic.Anthropic, "_sleep_for_retry", lambda self, **kw: waits.append(
        self._calculate_retry_timeout(kw["max_retries"] - kw["retries_taken"], kw["options"],
                                      kw["response"].headers if kw["response"] else None)))
    fatal = load_scenario("api_error_fatal").steps[0].error
    assert fatal is not None and fatal.api_headers == {"x-should-retry": "false"}
    with ScenarioServer("api_error_fatal") as server:
        with pytest.raises(anthropic.AuthenticationError) as error:
            sdk(server, max_retries=2).messages.create(model="m", max_tokens=5, messages=USER)
    assert error.value.response.headers["x-should-retry"] == "false"
    assert len(server.exchanges) == 1  # the SDK obeys the header: no retry
    with ScenarioServer("api_errors") as server:
        sdk(server, max_retries=3).messages.create(model="m", max_tokens=5, messages=USER)
    assert [e.reply.headers.get("x-should-retry") for e in server.exchanges] == ["true", "true", "true", None]
    assert server.exchanges[1].reply.headers["retry-after"] == "2"
    assert len(waits) == 3 and waits[1] == 2.0, waits  # one wait per retry; after the reply saying 2 s, 2 s


@pytest.mark.parametrize("asked, status", [(64000, 400), (4097, 400), (4096, 200), (1024, 200)])
def test_the_max_tokens_ceiling_error_answers_the_request(asked: int, status: int) -> None:
    # as `agentlab observe` serves it: the step's expect (agentlab escalates to 64000) is not enforced
    engine = ScenarioEngine(lenient(load_scenario("max_tokens_clamp")))
    with ScenarioServer(engine) as server, httpx2.Client() as http:
        url = server.base_url + "/v1/messages"
        http.post(url, json={"model": "claude-3-haiku-20240307", "max_tokens": 256, "messages": USER})
        reply = http.post(url, json={"model": "claude-3-haiku-20240307", "max_tokens": asked, "messages": USER})
    assert reply.status_code == status
    if status == 400:
        assert reply.json()["error"]["message"].startswith(f"max_tokens: {asked} > 4096, which is the maximum")
        assert "claude-3-haiku-20240307" in reply.json()["error"]["message"]
    else:
        assert reply.json()["stop_reason"] == "end_turn"


def test_the_canned_summary_uses_the_analysis_summary_form_and_agentlab_keeps_the_summary() -> None:
    from agentlab.lab import scenario_loop
    from agentlab.backend.scripted import summary_reply_text

    assert summary_reply_text("S").startswith("<analysis>") and "<summary>\nS\n</summary>" in summary_reply_text("S")
    loop = scenario_loop("context_window_exceeded")
    loop.run()
    summary_requests = [r for r in loop.engine.requests if r.kind == "summary"]
    assert summary_requests, "the run compacts with a summary"
    later = [r.body for r in loop.engine.requests if r.body and r.index > summary_requests[0].index]
    text = json.dumps(later)
    assert "notes.txt says the door code is 4711" in text  # the summary itself went into the history
    assert "<analysis>" not in text and "<summary>" not in text  # its analysis and tags did not


def test_a_scenario_that_uses_a_server_tool_has_agentlab_offer_it() -> None:
    from agentlab.lab import scenario_loop

    loop = scenario_loop("pause_turn")
    result = loop.run()
    first = loop.engine.requests[0].body
    assert [t["name"] for t in first["tools"]] == ["web_search"]
    assert first["tools"][0]["type"] == "web_search_20250305"
    assert result.subtype == "success" and loop.engine.failures == []
