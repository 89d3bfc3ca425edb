"""Faults on the wire: a local server on 127.0.0.1 that answers the Messages API badly, on purpose.

Each reply is raw bytes (status, headers, body) so the tests can send what a broken proxy or a dropped
connection would: a stream cut before ``message_stop``, an SSE ``event: error``, a 200 that is not JSON,
wrong field types, a stream that stalls. The loop must treat every one as a failed call (retried, or
``error_api`` with the cause), never as a success, never run a tool from it, and never raise.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anthropic
import pytest
from wire import MessagesServer, Raw, event, message, ok, sse_events, streamed, text

from agentlab.core.config import RunConfig
from agentlab.core.loop import AgentLoop
from agentlab.core.tools import ToolRegistry
from agentlab.core.transitions import Limits

TOOL_CALL = {"type": "tool_use", "id": "toolu_cut", "name": "record", "input": {"note": "ran"}}


@pytest.fixture
def serve():
    servers: list[MessagesServer] = []

    def start(*replies: Raw) -> MessagesServer:
        server = MessagesServer(list(replies))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def recording_tools(ran: list[Any]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool
    def record(note: str) -> str:
        """Record a note."""
        ran.append(note)
        return "recorded"

    return tools


def run_against(server: MessagesServer, *, stream: bool, retries: int = 2, tools: ToolRegistry | None = None,
                timeout: float = 30.0) -> AgentLoop:
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    loop = AgentLoop(client, RunConfig.of(prompt="Go.", stream=stream, tools=tools,
                     limits=Limits(max_api_retries=retries), request_timeout=timeout), sleep=lambda s: None)
    loop.run()
    return loop


def errors(loop: AgentLoop) -> list[dict[str, Any]]:
    return [e.data for e in loop.trace.of_kind("api_error")]


# --- false success --------------------------------------------------------------------------------------------

CUT_TEXT = sse_events(message([text("The answer is")]))[:3]       # start, block start, one delta
CUT_TOOL = sse_events(message([TOOL_CALL], "tool_use"))[:4]      # the tool call is complete, no message_stop
NO_START = sse_events(message([text("Hello.")]))[1:]              # no message_start
NO_STOP = sse_events(message([text("Hello.")]))[:-1]              # everything but message_stop


@pytest.mark.parametrize("events", [CUT_TEXT, CUT_TOOL, NO_START, NO_STOP],
                         ids=["cut_text", "cut_tool", "no_message_start", "no_message_stop"])
def test_an_incomplete_stream_is_a_failed_call_that_is_retried(serve, events) -> None:
    ran: list[Any] = []
    server = serve(streamed(events), streamed(sse_events(message([text("Whole answer.")]))))
    loop = run_against(server, stream=True, tools=recording_tools(ran))
    assert loop.result.subtype == "success"
    assert loop.result.result == "Whole answer."
    assert loop.result.retries == 1 and len(server.seen) == 2
    assert ran == [], "a tool call from a cut-off stream was run"
    assert [e["error_type"] for e in errors(loop)] == ["incomplete_stream"]


def test_a_stream_that_is_always_cut_ends_error_api(serve) -> None:
    server = serve(*[streamed(CUT_TEXT) for _ in range(3)])
    loop = run_against(server, stream=True, retries=2)
    assert loop.result.subtype == "error_api" and loop.result.is_error
    assert "The answer is" not in loop.result.result
    assert "message_stop" in loop.result.result
    assert len(server.seen) == 3


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_message_without_stop_reason_is_a_failed_call(serve, stream) -> None:
    ran: list[Any] = []
    first = message([TOOL_CALL], None)
    wire = (lambda m: streamed(sse_events(m))) if stream else ok
    server = serve(wire(first), wire(message([text("Done.")])))
    loop = run_against(server, stream=stream, tools=recording_tools(ran))
    assert loop.result.subtype == "success" and loop.result.result == "Done."
    assert ran == []
    assert [e["error_type"] for e in errors(loop)] == ["incomplete_response"]


def sse_error(error_type: str, text_: str) -> list[bytes]:
    return [event("error", {"type": "error", "error": {"type": error_type, "message": text_}})]


@pytest.mark.parametrize(("error_type", "status"), [("overloaded_error", 529), ("api_error", 500),
                                                    ("rate_limit_error", 429)])
def test_a_retryable_sse_error_event_is_retried(serve, error_type, status) -> None:
    server = serve(streamed(sse_events(message([text("Hel")]))[:2] + sse_error(error_type, "Overloaded")),
                   streamed(sse_events(message([text("Hello.")]))))
    loop = run_against(server, stream=True)
    assert loop.result.subtype == "success" and loop.result.retries == 1
    assert [(e["status"], e["error_type"]) for e in errors(loop)] == [(status, error_type)]


def test_a_non_retryable_sse_error_event_ends_the_run(serve) -> None:
    server = serve(streamed(sse_error("invalid_request_error", "bad field")),
                   streamed(sse_events(message([text("never")]))))
    loop = run_against(server, stream=True)
    assert loop.result.subtype == "error_api" and "bad field" in loop.result.result
    assert len(server.seen) == 1


# --- replies that are not messages ----------------------------------------------------------------------------

BAD_BODIES = {
    "not_json": b"<html>gateway</html>",
    "empty": b"",
    "wrong_types": json.dumps({**message([text("x")]), "usage": {"input_tokens": "x", "output_tokens": 1}}).encode(),
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "huge_int": json.dumps({**message([text("x")])}).replace('"input_tokens": 25', '"input_tokens": ' + "9" * 5000)
    .encode(),
    "not_a_message": b'{"hello": "world"}',
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_a_200_that_is_not_a_message_is_a_failed_call(serve, name) -> None:
    server = serve(Raw(body=BAD_BODIES[name]), ok(message([text("Fine.")])))
    loop = run_against(server, stream=False)
    assert loop.result.subtype == "success" and loop.result.result == "Fine.", errors(loop)
    assert len(errors(loop)) == 1 and errors(loop)[0]["error_type"] == "invalid_response"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_wrong_field_types_in_a_200_print_no_warnings(serve, stream, capfd) -> None:
    import warnings

    bad = {**message([text("x")]), "usage": {"input_tokens": "x", "output_tokens": 1}}
    good = message([text("Fine.")])
    replies = (streamed(sse_events(bad)), streamed(sse_events(good))) if stream else (ok(bad), ok(good))
    server = serve(*replies)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop = run_against(server, stream=stream)
    assert loop.result.subtype == "success" and loop.result.result == "Fine.", errors(loop)
    assert [e["error_type"] for e in errors(loop)] == ["invalid_response"]
    assert "input_tokens" in errors(loop)[0]["message"]
    assert [str(w.message) for w in caught] == []
    assert capfd.readouterr().err == ""


def test_bad_200s_every_time_end_error_api_with_the_cause(serve) -> None:
    server = serve(*[Raw(body=b"not json") for _ in range(3)])
    loop = run_against(server, stream=False)
    assert loop.result.subtype == "error_api"
    assert "not json" in loop.result.result.lower() or "json" in loop.result.result.lower()


# --- hangs -----------------------------------------------------------------------------------------------------

def test_a_stalled_stream_times_out_and_is_retried(serve) -> None:
    stalled = Raw(body=b"".join(sse_events(message([text("Hel")]))[:2]), content_type="text/event-stream",
                  stall=True)
    server = serve(stalled, streamed(sse_events(message([text("Hello.")]))))
    loop = run_against(server, stream=True, timeout=0.5)
    assert loop.result.subtype == "success" and loop.result.retries == 1
    assert [e["error_type"] for e in errors(loop)] == ["timeout"]


DRIBBLED = message([text("A long answer, sent one byte at a time by a server that will not hurry.")])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_server_dribbling_bytes_cannot_outlast_the_call_deadline(serve, stream, asynchronous) -> None:
    """Every byte comes well within the timeout, so only a deadline on the whole call ends it: the body takes
    about 70 s at 0.1 s a byte, the deadline is 1 s."""
    body = b"".join(sse_events(DRIBBLED)) if stream else json.dumps(DRIBBLED).encode()
    server = serve(Raw(body=body, content_type="text/event-stream" if stream else "application/json", dribble=0.1))
    loop = (arun_against if asynchronous else run_against)(server, stream=stream, retries=0, timeout=1.0)
    assert loop.result.subtype == "error_api", loop.result
    (failure,) = errors(loop)
    assert failure["error_type"] == "timeout" and "more than 1 s in all" in failure["message"]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_call_without_data_for_a_while_says_so_in_the_trace(serve, asynchronous) -> None:
    """The server holds the call with no byte; once the loop says it is waiting, the server lets go."""
    stalled = Raw(body=b"".join(sse_events(message([text("Hel")]))[:1]), content_type="text/event-stream",
                  stall=True)
    server = serve(stalled)
    seen: list[str] = []

    def listen(e: Any) -> None:
        seen.append(e.kind)
        if e.kind == "waiting":
            server.release.set()

    client_cls = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
    loop = AgentLoop(client_cls(base_url=server.url, api_key="x", max_retries=0), RunConfig.of(prompt="Go.",
                     stream=True, request_timeout=600, limits=Limits(max_api_retries=0, quiet_notice_s=0.2)),
                     sleep=lambda s: None, asleep=_no_wait)
    loop.trace.subscribe(listen)
    if asynchronous:
        import asyncio

        asyncio.run(loop.arun())
    else:
        loop.run()
    assert seen.count("waiting") == 1 and seen.index("waiting") < seen.index("api_error"), seen
    (waiting,) = loop.trace.of_kind("waiting")
    assert waiting.call == 1 and waiting.data["seconds"] == 0.2 and waiting.data["deadline_s"] == 600
    assert "no data from the server for 0.2 s" in waiting.data["message"]
    assert "deadline is 600 s" in waiting.data["message"]


def test_quiet_notice_must_be_a_positive_number_or_none() -> None:
    from agentlab.core.errors import ConfigError

    for bad in (0, -1, float("nan"), float("inf"), "30", True):
        with pytest.raises(ConfigError, match="quiet_notice_s"):
            Limits(quiet_notice_s=bad)
    assert Limits(quiet_notice_s=None).quiet_notice_s is None


async def _no_wait(seconds: float) -> None:
    return None


# --- agentlab serve: bad requests get the API's JSON errors, and every request is recorded ----------------

def _post(server_url: str, body: bytes, method: str = "POST", path: str = "/v1/messages"):
    import httpx2

    return httpx2.request(method, server_url + path, content=body, headers={"content-type": "application/json"},
                          timeout=30)


BAD_REQUESTS = {
    "messages_not_a_list": b'{"model": "m", "max_tokens": 10, "messages": "abc"}',
    "body_is_a_list": b"[1, 2]",
    "content_is_a_number": b'{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": 5}]}',
    "not_json": b"{not json",
    "max_tokens_text": b'{"model": "m", "max_tokens": "x", "messages": [{"role": "user", "content": "hi"}]}',
    "deep_json": b'{"model": "m", "max_tokens": 10, "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "text_block_text_5": b'{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": '
                         b'[{"type": "text", "text": 5}]}]}',
    "thinking_5": b'{"model": "m", "max_tokens": 10, "thinking": 5, "messages": [{"role": "user", "content": "hi"}]}',
    "tool_use_input_list": b'{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}, '
                           b'{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", '
                           b'"input": [1]}]}]}',
    "system_block_text_5": b'{"model": "m", "max_tokens": 10, "system": [{"type": "text", "text": 5}], '
                           b'"messages": [{"role": "user", "content": "hi"}]}',
}


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"], ids=["messages", "count_tokens"])
@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_serve_answers_a_malformed_request_with_a_json_400_and_keeps_its_step(name, path, tmp_path, capfd) -> None:
    from agentlab.backend.serve import ScenarioServer

    record = tmp_path / "record.jsonl"
    with ScenarioServer("end_turn", record=record) as server:
        bad = _post(server.base_url, BAD_REQUESTS[name], path=path)
        good = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0).messages.create(
            model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    assert bad.status_code == 400 and bad.headers["content-type"] == "application/json"
    error = bad.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert good.stop_reason == "end_turn"  # the scenario's one step was still there for the good request
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["status"] for line in lines] == [400, 200]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/messages"), ("DELETE", "/v1/messages"),
                                              ("PUT", "/anything"), ("BREW", "/v1/messages")])
def test_serve_answers_a_method_it_does_not_serve_with_a_json_405(method, path, tmp_path) -> None:
    from agentlab.backend.serve import ScenarioServer

    record = tmp_path / "record.jsonl"
    with ScenarioServer("end_turn", record=record) as server:
        reply = _post(server.base_url, b"", method=method, path=path)
    assert reply.status_code == 405, reply.text
    assert reply.json()["error"]["type"] == "invalid_request_error" and reply.headers["allow"] == "POST"
    assert [json.loads(line)["status"] for line in record.read_text().splitlines()] == [405]


def test_serve_answers_a_body_over_32_mb_with_a_json_413(tmp_path) -> None:
    from agentlab.backend.serve import MAX_BODY_BYTES, ScenarioServer

    record = tmp_path / "record.jsonl"
    with ScenarioServer("end_turn", record=record) as server:
        reply = _post(server.base_url, b" " * (MAX_BODY_BYTES + 1))
        after = _post(server.base_url, b'{"model": "m", "max_tokens": 10, "messages": [{"role": "user", '
                                       b'"content": "hi"}]}')
    assert reply.status_code == 413 and reply.json()["error"]["type"] == "request_too_large"
    assert after.status_code == 200
    assert [json.loads(line)["status"] for line in record.read_text().splitlines()] == [413, 200]


def test_serve_answers_a_chunked_body_over_32_mb_with_a_json_413_and_records_it(tmp_path) -> None:
    import httpx2

    from agentlab.backend.serve import MAX_BODY_BYTES, ScenarioServer

    def chunks():
        piece = b" " * (1024 * 1024)
        for _ in range(MAX_BODY_BYTES // len(piece) + 2):
            yield piece

    record = tmp_path / "record.jsonl"
    with ScenarioServer("end_turn", record=record) as server:
        try:
            reply = httpx2.post(server.base_url + "/v1/messages", content=chunks(), timeout=30,
                                headers={"content-type": "application/json"})
        except httpx2.TransportError as exc:  # the server may close before the client finished sending
            pytest.fail(f"no answer to the oversized body: {exc!r}")
        after = _post(server.base_url, b'{"model": "m", "max_tokens": 10, "messages": [{"role": "user", '
                                       b'"content": "hi"}]}')
    assert reply.status_code == 413, reply.text
    assert reply.json()["error"]["type"] == "request_too_large"
    assert after.status_code == 200
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(line["index"], line["status"]) for line in lines] == [(0, 413), (1, 200)]


def test_serve_record_that_cannot_be_written_is_one_line_and_serving_goes_on(capfd) -> None:
    from agentlab.backend.serve import ScenarioServer

    lines: list[str] = []
    body = b'{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}'
    with ScenarioServer("end_turn", record="/dev/full", log=lines.append) as server:
        first, second = _post(server.base_url, body), _post(server.base_url, body)
    assert first.status_code == 200 and second.status_code == 200
    problems = [line for line in lines if "--record" in line]
    assert len(problems) == 1 and "/dev/full" in problems[0] and "No space left" in problems[0]
    assert server.record_error == problems[0]
    assert "Traceback" not in capfd.readouterr().err


def test_serve_records_a_request_the_engine_failed_on_and_answers_json_500(tmp_path) -> None:
    from agentlab.backend.serve import ScenarioServer

    record = tmp_path / "record.jsonl"
    with ScenarioServer("end_turn", record=record) as server:
        real = server.engine.handle
        calls = {"n": 0}

        def flaky(method, path, body, headers=None):
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("engine bug")
            return real(method, path, body, headers)

        server.engine.handle = flaky
        body = b'{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}'
        crashed, fine = _post(server.base_url, body), _post(server.base_url, body)
    assert crashed.status_code == 500 and crashed.json()["error"]["type"] == "api_error"
    assert "engine bug" in crashed.json()["error"]["message"]
    assert fine.status_code == 200
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(line["index"], line["status"]) for line in lines] == [(0, 500), (1, 200)]


def test_serve_record_indexes_are_unique_across_threaded_and_plain_requests(tmp_path) -> None:
    from agentlab.backend.serve import ScenarioServer

    record = tmp_path / "record.jsonl"
    with ScenarioServer("end_turn", record=record) as server:
        orphan = _post(server.base_url, json.dumps({
            "model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
            "thread": {"type": "continue", "previous_message_id": "msg_nowhere"}}).encode())
        plain = _post(server.base_url, b'{"model": "m", "max_tokens": 10, "messages": [{"role": "user", '
                                       b'"content": "hi"}]}')
    assert orphan.status_code == 400 and plain.status_code == 200
    indexes = [json.loads(line)["index"] for line in record.read_text().splitlines()]
    assert indexes == [0, 1]


# --- count_tokens ----------------------------------------------------------------------------------------------

COUNT_FAULTS = {
    "empty_object": (Raw(body=b"{}"), "invalid_response", "input_tokens"),
    "deep": (Raw(body=b"[" * 100_000 + b"]" * 100_000), "invalid_response", ""),
    "not_json": (Raw(body=b"<html>gateway</html>"), "invalid_response", ""),
    "stalled": (Raw(body=b"", stall=True), "timeout", ""),
    "overloaded": (Raw(status=529, body=json.dumps({"type": "error", "error": {
        "type": "overloaded_error", "message": "busy"}}).encode()), "overloaded_error", "busy"),
}


@pytest.mark.parametrize("name", list(COUNT_FAULTS))
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_failed_count_tokens_call_keeps_the_estimate_and_the_run_goes_on(serve, name, asynchronous) -> None:
    import asyncio
    import time

    reply, error_type, needle = COUNT_FAULTS[name]
    server = serve(reply, ok(message([text("Fine.")])))
    kind = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
    # the stalled count is given up after a short request timeout; a reply that does come is not raced against one
    # (a loaded machine once took more than 0.5 s to answer the 529, which then read as a timeout)
    timeout = 0.5 if name == "stalled" else 60.0
    config = RunConfig.of(prompt="Go.", count_tokens=True, limits=Limits(max_api_retries=2), request_timeout=timeout)
    loop = AgentLoop(kind(base_url=server.url, api_key="x", max_retries=0), config, sleep=lambda s: None)
    started = time.monotonic()
    result = asyncio.run(loop.arun()) if asynchronous else loop.run()
    assert time.monotonic() - started < 10  # the stalled count gave up after the 0.5 s request timeout
    assert result.subtype == "success" and result.result == "Fine.", errors(loop)
    assert loop.count_failure is not None and loop.count_failure.error_type == error_type
    assert needle in loop.count_failure.message
    assert [s.body.get("stream") for s in server.seen] == [None, None] and len(server.seen) == 2


# --- lone surrogates --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_model_text_and_a_tool_call_with_a_lone_surrogate_are_taken_in_as_u_fffd(serve, stream) -> None:
    ran: list[Any] = []
    # in a stream, the SDK's own parser of tool input refuses a lone surrogate (a failed call, retried): there
    # only the text holds one
    note = "ran" if stream else "r\ufffdn"
    call = {**TOOL_CALL, "input": {"note": note}}
    first = message([text("Let me \ufffd record."), call], "tool_use")
    body = (b"".join(sse_events(first)).replace(b"\\ufffd", b"\\ud800") if stream
            else json.dumps(first).replace("\\ufffd", "\\ud800").encode())
    reply = Raw(body=body, content_type="text/event-stream" if stream else "application/json")
    done = message([text("Recorded.")])
    server = serve(reply, streamed(sse_events(done)) if stream else ok(done))
    loop = run_against(server, stream=stream, tools=recording_tools(ran))
    assert loop.result.subtype == "success" and loop.result.result == "Recorded.", errors(loop)
    assert ran == [note] and errors(loop) == []
    sent = server.bodies[1]["messages"][1]["content"]
    assert sent[0]["text"] == "Let me \ufffd record." and sent[1]["input"] == {"note": note}
    response = loop.trace.of_kind("response")[0].data
    assert response["note"].startswith(f"{1 if stream else 2} lone surrogate(s)") and "U+FFFD" in response["note"]
    assert "note" not in loop.trace.of_kind("response")[1].data


@pytest.mark.parametrize("split_at", [None, 1, 2, 3, 4, 5], ids=lambda n: "whole" if n is None else f"cut{n}")
def test_a_surrogate_escape_is_seen_in_a_replys_bytes_even_when_a_chunk_cuts_it(split_at) -> None:
    """The call's byte stream notes a JSON surrogate escape (the only way JSON carries a lone surrogate), so the
    loop walks only a reply that has one; an escape cut across two chunks is seen all the same."""
    import httpx2

    from agentlab.core.calls import Progress, _DeadlineStream

    body = b'{"text": "a \\ud800 b"}'
    at = body.index(b"\\ud800") + (split_at or 0)
    chunks = [body] if split_at is None else [body[:at], body[at:]]
    for data, expected in ((chunks, True), ([b'{"text": "caf\\u00e9 \\\\ud800 is text"}'], True),
                           ([b'{"text": "plain", "n": "\\u00e9"}'], False)):
        progress = Progress()
        progress.surrogate_escapes = False
        assert b"".join(_DeadlineStream(httpx2.ByteStream(b"".join(data)) if len(data) == 1 else iter(data),
                                        progress)) == b"".join(data)
        assert progress.surrogate_escapes is expected


def test_a_reply_in_memory_is_walked_for_lone_surrogates_only_when_its_bytes_escape_one(monkeypatch) -> None:
    import httpx2

    import agentlab.core.loop as loop_module
    from agentlab.core.trace import without_lone_surrogates

    walked: list[Any] = []

    def counting(value: Any) -> Any:
        walked.append(value)
        return without_lone_surrogates(value)

    monkeypatch.setattr(loop_module, "without_lone_surrogates", counting)
    replies = [json.dumps(message([text("Plain \u00e9 text.")])).encode(),
               json.dumps(message([text("Odd \ufffd text.")])).replace("\\ufffd", "\\ud800").encode()]
    for body, note in zip(replies, (None, "1 lone surrogate(s)"), strict=True):
        walked.clear()
        transport = httpx2.MockTransport(lambda request, body=body: httpx2.Response(
            200, content=body, headers={"content-type": "application/json"}))
        client = anthropic.Anthropic(api_key="k", base_url="http://in.process", max_retries=0,
                                     http_client=httpx2.Client(transport=transport))
        loop = AgentLoop(client, RunConfig.of(prompt="hi", model="claude-sonnet-4-6", max_tokens=100))
        result = loop.run()
        response = loop.trace.of_kind("response")[0].data
        assert result.subtype == "success"
        if note is None:
            assert not any(isinstance(v, dict) and "content" in v for v in walked) and "note" not in response
            assert result.result == "Plain \u00e9 text."
        else:
            assert response["note"].startswith(note) and result.result == "Odd \ufffd text."


def test_a_streamed_reply_is_always_walked_for_lone_surrogates(monkeypatch) -> None:
    """A streamed message is put together from events (a tool's input from pieces of JSON, where an escape may be
    cut between two pieces): its bytes do not settle whether it holds a lone surrogate, so it is walked."""
    import httpx2

    import agentlab.core.loop as loop_module
    from agentlab.core.trace import without_lone_surrogates

    walked: list[Any] = []

    def counting(value: Any) -> Any:
        walked.append(value)
        return without_lone_surrogates(value)

    monkeypatch.setattr(loop_module, "without_lone_surrogates", counting)
    body = b"".join(sse_events(message([text("Plain text.")])))
    transport = httpx2.MockTransport(lambda request: httpx2.Response(
        200, content=body, headers={"content-type": "text/event-stream"}))
    client = anthropic.Anthropic(api_key="k", base_url="http://in.process", max_retries=0,
                                 http_client=httpx2.Client(transport=transport))
    loop = AgentLoop(client, RunConfig.of(prompt="hi", model="claude-sonnet-4-6", max_tokens=100, stream=True))
    assert loop.run().result == "Plain text."
    assert any(isinstance(v, dict) and v.get("content") == [{"type": "text", "text": "Plain text."}] for v in walked)


def test_a_tool_output_with_a_lone_surrogate_is_sent_as_u_fffd(serve) -> None:
    tools = ToolRegistry()

    @tools.tool
    def record(note: str) -> str:
        """Record a note."""
        return "stored \ud800 here"   # e.g. a file name read with errors="surrogateescape"

    server = serve(ok(message([text("Recording."), TOOL_CALL], "tool_use")), ok(message([text("Recorded.")])))
    loop = run_against(server, stream=False, tools=tools)
    assert loop.result.subtype == "success" and loop.result.result == "Recorded.", errors(loop)
    assert errors(loop) == [] and len(server.bodies) == 2
    result = server.bodies[1]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["content"] == "stored \ufffd here"
    tool = loop.trace.of_kind("tool")[0].data
    assert tool["output"] == "stored \ufffd here" and "U+FFFD" in tool["note"]


def test_a_stop_hook_reason_with_a_lone_surrogate_is_fed_back_as_u_fffd(serve, tmp_path) -> None:
    from agentlab.core.hooks import Hooks

    flag = tmp_path / "blocked"
    script = tmp_path / "stop.sh"
    script.write_text(f'if [ -e {flag} ]; then exit 0; fi\ntouch {flag}\n'
                      'printf \'{"decision": "block", "reason": "fix \\\\ud800 this"}\'\n')
    hooks = Hooks({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": f"sh {script}"}]}]}})
    server = serve(ok(message([text("One.")])), ok(message([text("Two.")])))
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    loop = AgentLoop(client, RunConfig.of(prompt="Go.", limits=Limits(max_api_retries=1)), hooks=hooks,
                     sleep=lambda s: None)
    loop.run()
    assert loop.result.subtype == "success" and loop.result.result == "Two.", errors(loop)
    assert errors(loop) == [] and len(server.bodies) == 2
    fed = server.bodies[1]["messages"][-1]["content"]
    assert any("fix \ufffd this" in block["text"] for block in fed), fed
    first = loop.trace.of_kind("hook")[0].data
    assert first["decision"] == "block" and first["reason"] == "fix \ufffd this"
    assert "lone surrogates" in first["error"] and "U+FFFD" in first["error"]


# --- the async client path (AgentLoop.arun with an AsyncAnthropic client) ---------------------------------------

def arun_against(server: MessagesServer, *, stream: bool, tools: ToolRegistry | None = None, retries: int = 2,
                 timeout: float = 30.0) -> AgentLoop:
    import asyncio

    async def no_wait(seconds: float) -> None:
        return None

    client = anthropic.AsyncAnthropic(base_url=server.url, api_key="x", max_retries=0)
    loop = AgentLoop(client, RunConfig.of(prompt="Go.", stream=stream, tools=tools,
                     limits=Limits(max_api_retries=retries), request_timeout=timeout), asleep=no_wait)
    asyncio.run(asyncio.wait_for(loop.arun(), 60))
    return loop


ASYNC_FAULTS = {
    "cut_stream": (True, lambda: streamed(CUT_TOOL), "incomplete_stream"),
    "no_message_start": (True, lambda: streamed(NO_START), "incomplete_stream"),
    "stop_reason_null_stream": (True, lambda: streamed(sse_events(message([TOOL_CALL], None))), "incomplete_response"),
    "stop_reason_null_json": (False, lambda: ok(message([TOOL_CALL], None)), "incomplete_response"),
    "not_json": (False, lambda: Raw(body=b"<html>gateway</html>"), "invalid_response"),
    "wrong_types": (False, lambda: Raw(body=BAD_BODIES["wrong_types"]), "invalid_response"),
    "not_a_message": (False, lambda: Raw(body=BAD_BODIES["not_a_message"]), "invalid_response"),
}


@pytest.mark.parametrize("name", list(ASYNC_FAULTS))
def test_async_a_reply_that_is_not_a_whole_message_is_a_failed_call_that_is_retried(serve, name) -> None:
    stream, bad, error_type = ASYNC_FAULTS[name]
    ran: list[Any] = []
    good = message([text("Whole answer.")])
    server = serve(bad(), streamed(sse_events(good)) if stream else ok(good))
    loop = arun_against(server, stream=stream, tools=recording_tools(ran))
    assert loop.result.subtype == "success" and loop.result.result == "Whole answer.", errors(loop)
    assert loop.result.retries == 1 and len(server.seen) == 2
    assert ran == [], "a tool call from a reply that was not a whole message was run"
    assert [e["error_type"] for e in errors(loop)] == [error_type]


def test_async_replies_that_are_never_whole_end_error_api_with_the_cause(serve) -> None:
    server = serve(*[streamed(CUT_TEXT) for _ in range(3)])
    loop = arun_against(server, stream=True)
    assert loop.result.subtype == "error_api" and "message_stop" in loop.result.result
    assert "The answer is" not in loop.result.result and len(server.seen) == 3


# --- Ctrl-C while read-only tools run together --------------------------------------------------------------

CTRL_C_CALLS = [{"type": "tool_use", "id": "toolu_slow", "name": "slow", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_int", "name": "interrupt", "input": {"path": "b"}}]


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt here as in a terminal, even where the suite was started in the background
    (a child of ``make test &`` inherits SIGINT ignored, and then Python installs no handler of its own)."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _slow_and_ctrl_c_tools():
    """Two read-only tools that run together: ``slow`` holds until ``release`` is set (then sets ``ended``),
    ``interrupt`` sends the process SIGINT, as Ctrl-C would."""
    import os
    import signal
    import threading

    release, ended = threading.Event(), threading.Event()
    tools = ToolRegistry()

    @tools.tool(read_only=True)
    def slow(path: str) -> str:
        """Read slowly."""
        release.wait(120)
        ended.set()
        return "slow contents"

    @tools.tool(read_only=True)
    def interrupt(path: str) -> str:
        """Press Ctrl-C."""
        os.kill(os.getpid(), signal.SIGINT)
        return "pressed"

    return tools, release, ended


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_while_tools_run_together_stops_at_once_and_leaves_the_history_alone(serve, ctrl_c_raises) -> None:
    """One tool sends the process SIGINT (Ctrl-C) while the other holds until the test lets it go: the run
    stops waiting at once, names the tool it cancelled, and the tool that ends later changes nothing."""
    import threading

    tools, release, ended = _slow_and_ctrl_c_tools()
    server = serve(ok(message(CTRL_C_CALLS, "tool_use")), ok(message([text("done")])))
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    loop = AgentLoop(client, RunConfig.of(prompt="Go.", tools=tools), sleep=lambda s: None)
    from agentlab.core.tools import ToolsCancelled

    with pytest.raises(ToolsCancelled) as raised:
        loop.run()
    assert not ended.is_set(), "the run waited for the slow tool"
    assert raised.value.cancelled == ["slow"] and "1 tool call(s) cancelled: slow" in str(raised.value)
    history = json.dumps(loop.messages)
    release.set()
    assert ended.wait(30)
    for thread in threading.enumerate():
        if thread.name.startswith("agentlab-tool-"):
            thread.join(30)
    assert json.dumps(loop.messages) == history, "a tool thread changed the history after Ctrl-C"
    assert not any(m["role"] == "user" and isinstance(m["content"], list) for m in loop.messages)
    cancelled = [e.data for e in loop.trace.of_kind("tool")]
    assert cancelled == [{**cancelled[0], "name": "slow", "is_error": True}]
    assert "cancelled" in cancelled[0]["output"]
    assert len(server.seen) == 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_async_ctrl_c_while_tools_run_together_does_not_wait_for_them(serve, ctrl_c_raises) -> None:
    """``asyncio.run`` waits at its end for the threads of its default executor: the tools run on a daemon
    thread of their own, so Ctrl-C ends the run while a tool still holds."""
    import asyncio

    tools, release, ended = _slow_and_ctrl_c_tools()
    server = serve(ok(message(CTRL_C_CALLS, "tool_use")), ok(message([text("done")])))
    client = anthropic.AsyncAnthropic(base_url=server.url, api_key="x", max_retries=0)
    loop = AgentLoop(client, RunConfig.of(prompt="Go.", tools=tools), asleep=_no_wait)
    history: list[str] = []

    async def run() -> None:
        try:
            await loop.arun()
        finally:
            history.append(json.dumps(loop.messages))

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(run())
    assert not ended.is_set(), "the run waited for the slow tool"
    release.set()
    assert ended.wait(30)
    assert json.dumps(loop.messages) == history[0] and len(server.seen) == 1


def test_a_call_runs_on_a_kept_worker_and_an_abandoned_one_holds_no_later_call() -> None:
    """Sync calls run on kept worker threads (a new thread per call cost three times the CPU): two calls in a
    row run on the same worker, and a call left running at its deadline keeps its worker busy while the next
    call gets another."""
    import threading

    from agentlab.core.calls import bounded_call
    from agentlab.core.transitions import Failure

    def where(_progress):
        return threading.current_thread()  # the Thread object, kept alive here: no id reused

    first = bounded_call(where, deadline_s=5, notice_s=None)
    assert bounded_call(where, deadline_s=5, notice_s=None) is first
    release = threading.Event()
    stuck = bounded_call(lambda _p: release.wait(5) and threading.current_thread(), deadline_s=0.01, notice_s=None)
    assert isinstance(stuck, Failure) and stuck.error_type == "timeout"
    try:
        assert bounded_call(where, deadline_s=5, notice_s=None) is not first  # its worker is still busy
    finally:
        release.set()


def test_a_forked_child_runs_its_calls_on_workers_of_its_own() -> None:
    """The kept workers are threads of the parent: a forked child (the tests' forked CLI runs, a server that
    forks) must not hand its calls to them, or its first call waits forever."""
    import multiprocessing

    from agentlab.core.calls import bounded_call

    assert bounded_call(lambda _p: 1, deadline_s=5, notice_s=None) == 1  # the parent now keeps an idle worker

    def child(out) -> None:
        out.put(bounded_call(lambda _p: 2, deadline_s=5, notice_s=None))

    context = multiprocessing.get_context("fork")
    out = context.Queue()
    proc = context.Process(target=child, args=(out,))
    proc.start()
    proc.join(timeout=30)
    alive = proc.is_alive()
    if alive:
        proc.kill()
    assert not alive and out.get(timeout=5) == 2


def test_a_call_through_the_sdk_runs_in_the_callers_thread_under_its_deadline() -> None:
    """A call through an httpx client runs in the caller's thread (handing it to a worker cost about 15 % of a
    scripted call's CPU); its reply is read under the deadline, and one the deadline overtakes is a timeout."""
    import threading

    import httpx2

    from agentlab.core.calls import bounded_call
    from agentlab.core.transitions import Failure

    clock = iter([0.0, 5.0, 11.0, 12.0])  # the reply's chunks come at 0, 5 and 11 s; the deadline is at 10

    class Chunks(httpx2.SyncByteStream):
        def __iter__(self):
            yield from (b"xxxx", b"xxxx", b"xx")

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, stream=Chunks())

    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    assert bounded_call(lambda _p: threading.current_thread(), deadline_s=10, notice_s=None,
                        http_client=http) is threading.current_thread()
    assert bounded_call(lambda _p: http.get("http://x/").read(), deadline_s=10, notice_s=None,
                        http_client=http) == b"x" * 10

    def slow(progress):
        progress.clock = lambda: next(clock)
        progress.deadline = 10.0
        try:
            return http.get("http://x/").read()
        except httpx2.ReadTimeout:  # as _send turns it into a Failure
            return None

    failed = bounded_call(slow, deadline_s=10, notice_s=None, http_client=http)
    assert isinstance(failed, Failure) and failed.error_type == "timeout" and "took more than 10 s" in failed.message
