"""The loop through the scripted backend and the real SDK: every scenario, then each branch on the wire.

``loop.engine.requests`` holds the request bodies the loop actually sent; the assertions below read them.
Every test that talks to the backend runs both non-streaming and streaming.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from agentlab import AgentLoop, ScenarioError, Trace
from agentlab.backend.scenario import Scenario, load_scenario, parse_scenario, scenario_names
from agentlab.backend.scripted import ScenarioEngine, mock_transport
from agentlab.core.compaction import estimate_tokens, validate_history
from agentlab.core.config import RunConfig
from agentlab.core.hooks import Hooks
from agentlab.core.loop import SUBTYPES
from agentlab.core.transitions import CONTINUATION_TEXT, MAX_TURNS_MARKER, NUDGE_TEXT
from agentlab.lab import scenario_loop

SECRET = "sk-ant-test-SECRET123456"
DEFAULT_MODEL = Scenario.model_fields["model"].default
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}  # offered, so the scripted search is sent


@pytest.fixture(params=[False, True], ids=["json", "stream"])
def stream(request) -> bool:
    return request.param


def inline(steps: list[dict[str, Any]], **fields: Any):
    raw = {"name": "inline", "description": "a scenario written in the test", "steps": steps, **fields}
    return parse_scenario(raw, "inline.yaml")


def run(scenario, stream: bool, *, as_scripted: bool = False, **overrides: Any):
    overrides.setdefault("cache", False)  # these tests compare whole bodies; caching has its own tests
    loop = scenario_loop(scenario, stream=stream, **overrides)
    loop.engine.as_scripted = as_scripted  # a call to a tool the loop never offered is sent all the same
    loop.run()
    assert loop.engine.failures == [], loop.engine.failures
    return loop


def bodies(loop) -> list[dict[str, Any]]:
    """The bodies of the model-turn requests (summary requests for compaction left out)."""
    return [r.body for r in loop.engine.requests if r.kind != "summary"]


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def step_content(loop, index: int) -> list[dict[str, Any]]:
    """The content blocks scripted step ``index`` answered with, as the loop should send them back."""
    step = loop.scenario.steps[index]
    scenario_only = {"partial_json", "interchangeable", "unoffered"}
    return [b.model_dump(exclude_none=True, exclude=scenario_only) for b in step.content or []]


def blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [text(content)] if isinstance(content, str) else content


# --- every scenario, both transports --------------------------------------------------------------------

@pytest.mark.parametrize("name", scenario_names())
def test_scenario_meets_its_expectations(name, stream):
    scenario = load_scenario(name)
    assert scenario.expect is not None, f"{name} has no expect"
    loop = scenario_loop(scenario, stream=stream)
    result = loop.run()
    assert loop.engine.failures == [], loop.engine.failures
    expect = scenario.expect
    assert result.subtype == expect.subtype
    assert result.subtype in SUBTYPES
    assert result.is_error == (expect.subtype != "success")
    if expect.num_turns is not None:
        assert result.num_turns == expect.num_turns
    if expect.requests is not None:
        assert result.requests == expect.requests
    if expect.stop_reason is not None:
        assert result.stop_reason == expect.stop_reason
    assert result.requests == len(loop.engine.requests) >= 1
    # a request whose max_tokens implies more than 10 minutes of output streams either way (the SDK's rule)
    assert all(r.stream == (stream or (r.body or {}).get("max_tokens", 0) > 21_333) for r in loop.engine.requests)
    assert bodies(loop), "no model-turn request was sent"
    for body in bodies(loop):
        assert validate_history(body["messages"]) == [], body["messages"]
    assert loop.trace.events[-1].kind == "result"


def test_every_row_of_the_table_has_a_scenario():
    rows = {load_scenario(name).row for name in scenario_names()}
    for row in ("0", "0b", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"):
        assert row in rows, f"no scenario for row {row}"


# --- row 2: tool_use ------------------------------------------------------------------------------------

def assert_tool_results_answer(previous: dict[str, Any], reply: dict[str, Any]) -> list[dict[str, Any]]:
    ids = [b["id"] for b in previous["content"] if b["type"] == "tool_use"]
    assert previous["role"] == "assistant" and ids
    assert reply["role"] == "user"
    assert isinstance(reply["content"], list)
    assert all(b["type"] == "tool_result" for b in reply["content"]), reply["content"]
    assert [b["tool_use_id"] for b in reply["content"]] == ids  # every id answered once, in order
    return reply["content"]


def test_tool_use_is_answered_by_one_user_message_of_tool_results(stream):
    loop = run("tool_use", stream)
    first, second = bodies(loop)
    assert second["messages"][:-2] == first["messages"]
    assistant, reply = second["messages"][-2:]
    assert assistant == {"role": "assistant", "content": step_content(loop, 0)}
    results = assert_tool_results_answer(assistant, reply)
    assert "6912" in json.dumps(results)


def test_several_tool_uses_are_answered_in_one_message(stream):
    scenario = inline([
        {"content": [text("Three things at once."),
                     {"type": "tool_use", "id": "toolu_a", "name": "calculator", "input": {"expression": "2 ** 10"}},
                     {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"location": "Lima"}},
                     {"type": "tool_use", "id": "toolu_c", "name": "no_such_tool", "input": {}}],
         "stop_reason": "tool_use"},
        {"expect": {"has_tool_result": True}, "content": [text("Done.")], "stop_reason": "end_turn"},
    ], tools="demo")
    loop = run(scenario, stream, as_scripted=True)
    assert loop.result.subtype == "success"
    last = bodies(loop)[1]["messages"]
    results = assert_tool_results_answer(last[-2], last[-1])
    assert "1024" in json.dumps(results[0])
    assert results[2].get("is_error") is True  # an unknown tool is an error result, not a crash


def test_mislabelled_end_turn_with_tool_use_runs_the_tool(stream):
    loop = run("mislabel_end_turn", stream)
    messages = bodies(loop)[1]["messages"]
    assert_tool_results_answer(messages[-2], messages[-1])


def test_tool_use_without_tools_is_answered_with_an_error(stream):
    scenario = inline([
        {"content": [{"type": "tool_use", "id": "toolu_x", "name": "calculator", "input": {"expression": "1"}}],
         "stop_reason": "tool_use"},
        {"expect": {"tool_result_error": True}, "content": [text("No tools, then.")]},
    ])
    loop = run(scenario, stream, as_scripted=True)
    messages = bodies(loop)[1]["messages"]
    results = assert_tool_results_answer(messages[-2], messages[-1])
    assert results[0]["is_error"] is True


# --- row 1: incomplete tool_use ---------------------------------------------------------------------------

def test_incomplete_tool_use_resends_unchanged_messages_with_more_max_tokens(stream):
    loop = run("incomplete_tool_use", stream)
    first, second, third = bodies(loop)
    assert second["messages"] == first["messages"]
    assert second["max_tokens"] > first["max_tokens"]
    # the same request with more max_tokens (streamed when the escalated max_tokens requires it)
    assert {k: v for k, v in second.items() if k not in ("max_tokens", "stream")} == {
        k: v for k, v in first.items() if k not in ("max_tokens", "stream")}
    assert_tool_results_answer(third["messages"][-2], third["messages"][-1])
    # the cut-off block was never sent back
    assert "toolu_cut_1" not in json.dumps(third)


# --- row 3: max_tokens ----------------------------------------------------------------------------------

def test_max_tokens_escalates_then_continues_keeping_the_partial_text(stream):
    loop = run("max_tokens_continue", stream)
    first, second, third = bodies(loop)
    assert second["messages"] == first["messages"] and second["max_tokens"] >= 64_000
    *head, partial, continuation = third["messages"]
    assert head == first["messages"]
    assert partial == {"role": "assistant", "content": step_content(loop, 1)}
    assert continuation == {"role": "user", "content": CONTINUATION_TEXT}
    assert loop.result.escalations == 1 and loop.result.continuations == 1


def test_max_tokens_gives_up_after_three_recoveries(stream):
    loop = run("max_tokens_give_up", stream)
    assert loop.result.subtype == "error_max_output_tokens"
    assert (loop.result.escalations, loop.result.continuations) == (1, 3)
    last = bodies(loop)[-1]["messages"]
    # the partial texts are kept in order, each followed by a continuation request
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert all(m["content"] == CONTINUATION_TEXT for m in last[2::2])


# --- rows 0b and 4: compaction ----------------------------------------------------------------------------

def test_prompt_too_long_compacts_and_the_next_request_is_smaller(stream):
    loop = run("prompt_too_long", stream)
    sent = [r for r in loop.engine.requests if r.kind != "summary"]
    failed = next(i for i, r in enumerate(sent) if r.status == 400)
    before, after = sent[failed].body["messages"], sent[failed + 1].body["messages"]
    assert estimate_tokens(after) < estimate_tokens(before)
    assert blocks_of(after[0])[0] == blocks_of(before[0])[0]  # the first request is kept
    assert validate_history(after) == []
    assert loop.result.compactions >= 1


def test_context_window_exceeded_compacts_and_the_next_request_is_smaller(stream):
    loop = run("context_window_exceeded", stream)
    sent = bodies(loop)
    overflow = next(i for i, r in enumerate(r for r in loop.engine.requests if r.kind != "summary")
                    if r.stop_reason == "model_context_window_exceeded")
    before, after = sent[overflow]["messages"], sent[overflow + 1]["messages"]
    assert estimate_tokens(after) < estimate_tokens(before)
    assert blocks_of(after[0])[0] == blocks_of(before[0])[0]
    assert validate_history(after) == []
    # the overflowing partial answer is not kept
    assert "Cairo is next, and then" not in json.dumps(after)


# --- row 5: refusal ---------------------------------------------------------------------------------------

def test_refusal_sends_nothing_more(stream):
    loop = run("refusal", stream)
    assert len(loop.engine.requests) == 1
    assert loop.result.subtype == "error_refusal" and loop.result.is_error
    assert "cyber" in loop.result.result and "another model" in loop.result.result


def test_refusal_fallback_retries_once_on_the_other_model(stream):
    loop = run("refusal_fallback", stream)
    first, second = bodies(loop)
    assert second["model"] == "claude-haiku-4-5" != first["model"]
    assert second["messages"] == first["messages"]
    assert loop.result.fallbacks == 1


def test_refusal_on_the_fallback_model_ends(stream):
    scenario = inline([
        {"content": [], "stop_reason": "refusal"},
        {"content": [], "stop_reason": "refusal"},
        {"content": [text("never reached")]},
    ], refusal_fallback_model="claude-haiku-4-5")
    loop = run(scenario, stream)
    assert loop.result.subtype == "error_refusal"
    assert len(loop.engine.requests) == 2


# --- row 6: pause_turn ------------------------------------------------------------------------------------

def test_pause_turn_resends_the_content_unchanged(stream):
    loop = run("pause_turn", stream)
    first, second = bodies(loop)
    assert second["messages"][:-1] == first["messages"]
    resent = second["messages"][-1]
    assert resent == {"role": "assistant", "content": step_content(loop, 0)}
    assert any(b["type"] == "server_tool_use" and b["id"] == "srvtoolu_1" for b in resent["content"])
    assert second["max_tokens"] == first["max_tokens"] and second["model"] == first["model"]


def test_repeated_pause_turn_merges_into_one_assistant_turn_and_is_bounded(stream):
    pause = {"content": [{"type": "server_tool_use", "name": "web_search", "input": {"query": "q"}}],
             "stop_reason": "pause_turn"}
    loop = run(inline([dict(pause) for _ in range(8)], server_tools=[WEB_SEARCH]), stream)
    limit = loop.limits.max_pause_continuations
    assert loop.result.subtype == "error_during_execution"
    assert len(loop.engine.requests) == limit + 1
    for k, body in enumerate(bodies(loop)[1:], start=1):
        messages = body["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant"]
        assert len(messages[-1]["content"]) == k  # every paused block kept, in one assistant message


# --- row 7: stop_sequence ---------------------------------------------------------------------------------

def test_stop_sequence_is_recorded(stream):
    loop = run("stop_sequence", stream)
    branches = [e.data for e in loop.trace.of_kind("transition")]
    assert branches[-2]["branch"] == "stop_sequence" and "END" in branches[-2]["reason"]
    assert loop.trace.of_kind("response")[0].data["stop_sequence"] == "END"
    assert loop.result.subtype == "success"


# --- row 8: empty end_turn ----------------------------------------------------------------------------------

def test_empty_end_turn_after_tool_results_is_nudged_once(stream):
    loop = run("empty_end_turn", stream)
    last = bodies(loop)[2]["messages"]
    assert last[-1] == {"role": "user", "content": NUDGE_TEXT}
    assert last[-2]["role"] == "user" and all(b["type"] == "tool_result" for b in last[-2]["content"])
    assert bodies(loop)[1]["messages"] == last[:-1]  # a nudge, never a bare resend


def test_empty_end_turn_is_nudged_only_once(stream):
    calc = {"type": "tool_use", "name": "calculator", "input": {"expression": "3 * 3"}}
    loop = run(inline([{"content": [calc], "stop_reason": "tool_use"},
                       {"content": [], "stop_reason": "end_turn"},
                       {"content": [], "stop_reason": "end_turn"}], tools="demo"), stream)
    assert loop.result.subtype == "success" and loop.result.nudges == 1
    assert len(loop.engine.requests) == 3


def test_empty_end_turn_without_tool_results_is_not_nudged(stream):
    loop = run(inline([{"content": [], "stop_reason": "end_turn"}]), stream)
    assert loop.result.subtype == "success" and loop.result.nudges == 0
    assert len(loop.engine.requests) == 1


# --- unknown stop reasons ----------------------------------------------------------------------------------

def test_missing_stop_reason_is_a_failed_call_and_its_tool_calls_do_not_run(stream):
    calc = {"type": "tool_use", "name": "calculator", "input": {"expression": "3 * 3"}}
    loop = run(inline([{"content": [calc], "stop_reason": None},
                       {"expect": {"has_tool_result": False}, "content": [text("9")], "stop_reason": "end_turn"}],
                      tools="demo"), stream)
    assert loop.result.subtype == "success" and loop.result.stop_reason == "end_turn"
    assert loop.result.retries == 1 and loop.trace.of_kind("tool") == []
    assert [e.data["error_type"] for e in loop.trace.of_kind("api_error")] == ["incomplete_response"]


# --- row 0: API errors ------------------------------------------------------------------------------------

def test_retries_send_the_identical_body(stream):
    loop = run("api_errors", stream)
    sent = bodies(loop)
    assert len(sent) == 4
    assert all(body == sent[0] for body in sent)
    assert loop.result.retries == 3


def test_fatal_error_is_not_retried(stream):
    loop = run("api_error_fatal", stream)
    assert len(loop.engine.requests) == 1
    assert loop.result.subtype == "error_api" and "invalid x-api-key" in loop.result.result


def test_should_retry_false_is_not_retried(stream):
    scenario = inline([{"error": {"status": 529, "type": "overloaded_error", "message": "Overloaded",
                                  "headers": {"x-should-retry": "false"}}},
                       {"content": [text("never reached")]}])
    loop = run(scenario, stream)
    assert loop.result.subtype == "error_api" and len(loop.engine.requests) == 1


def test_retries_are_capped(stream):
    errors = [{"error": {"status": 500, "message": "Internal server error"}} for _ in range(30)]
    loop = run(inline(errors), stream)
    assert loop.result.subtype == "error_api"
    assert len(loop.engine.requests) == loop.limits.max_api_retries + 1


def test_backoff_waits_are_taken_through_the_injected_sleep(stream):
    waits: list[float] = []
    scenario = inline([{"error": {"status": 500}}, {"error": {"status": 500}},
                       {"error": {"status": 429, "retry_after": 3}}, {"content": [text("ok")]}])
    loop = run(scenario, stream, sleep=waits.append)
    base = loop.limits.backoff_base
    assert len(waits) == 3
    assert base <= waits[0] <= base * 1.25 and 2 * base <= waits[1] <= 2 * base * 1.25  # doubling plus jitter
    assert 3 <= waits[2] <= 3 * 1.25  # retry-after honoured


def test_fallback_model_after_three_overloads(stream):
    loop = run("overloaded_fallback", stream)
    sent = bodies(loop)
    assert [b["model"] for b in sent] == [loop.scenario.model] * 3 + ["claude-haiku-4-5"]
    assert all({k: v for k, v in b.items() if k != "model"} == {k: v for k, v in sent[0].items() if k != "model"}
               for b in sent)
    assert loop.result.fallbacks == 1 and loop.result.model == "claude-haiku-4-5"


def test_no_fallback_without_a_fallback_model(stream):
    overloads = [{"error": {"status": 529, "type": "overloaded_error", "message": "Overloaded"}} for _ in range(4)]
    loop = run(inline([*overloads, {"expect": {"model": DEFAULT_MODEL}, "content": [text("ok")]}]), stream)
    assert loop.result.subtype == "success" and loop.result.fallbacks == 0


def test_fallback_needs_consecutive_overloads(stream):
    overloaded = {"error": {"status": 529, "type": "overloaded_error", "message": "Overloaded"}}
    scenario = inline([overloaded, {"error": {"status": 500}}, overloaded, overloaded,
                       {"expect": {"model": DEFAULT_MODEL}, "content": [text("ok")]}],
                      fallback_model="claude-haiku-4-5")
    loop = run(scenario, stream)
    assert loop.result.fallbacks == 0


def test_connection_error_is_retried(stream):
    engine = ScenarioEngine(inline([{"content": [text("after the reconnect")]}]))
    transport = mock_transport(engine)
    calls = {"n": 0}

    def flaky(request: httpx2.Request) -> httpx2.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            raise httpx2.ConnectError("connection refused", request=request)
        return transport.handle_request(request)

    client = anthropic.Anthropic(api_key="offline", base_url="http://scripted.agentlab", max_retries=0,
                                 http_client=httpx2.Client(transport=httpx2.MockTransport(flaky)))
    loop = AgentLoop(client, RunConfig.of(prompt="Hello", stream=stream), sleep=lambda s: None)
    result = loop.run()
    assert result.subtype == "success" and result.retries == 1
    assert loop.trace.of_kind("api_error")[0].data["status"] is None


# --- row 9: max_turns -------------------------------------------------------------------------------------

def test_max_turns_makes_no_extra_call(stream):
    loop = run("max_turns", stream)
    assert len(loop.engine.requests) == 3 == loop.scenario.max_turns
    assert loop.engine.next_step == 3  # the fourth step was never asked for
    assert loop.result.subtype == "error_max_turns"
    markers = [e for e in loop.trace.of_kind("append") if e.data.get("role") == "marker"]
    assert markers and markers[-1].data["content"][0]["text"] == MAX_TURNS_MARKER
    # the last tool calls were answered before the run stopped
    messages = loop.result.messages
    assert_tool_results_answer(messages[-2], messages[-1])


def test_max_turns_override(stream):
    loop = run("tool_use", stream, max_turns=1)
    assert loop.result.subtype == "error_max_turns" and len(loop.engine.requests) == 1


# --- row 10: Stop hooks -----------------------------------------------------------------------------------

def test_stop_hook_feedback_is_sent_as_a_user_message(stream):
    loop = run("stop_hook", stream)
    second = bodies(loop)[1]["messages"]
    reason = loop.scenario.stop_hook.reason
    assert second[-2] == {"role": "assistant", "content": step_content(loop, 0)}
    assert second[-1]["role"] == "user" and reason in json.dumps(second[-1]["content"])
    assert loop.result.stop_hook_blocks == 1


def test_stop_hook_cap_ends_after_eight_blocks_fed_back(stream):
    loop = run("stop_hook_cap", stream)
    sent = bodies(loop)
    assert loop.limits.stop_hook_block_cap == 8
    assert len(sent) == 8 + 1  # every block but the last is fed back and answered
    assert loop.result.stop_hook_blocks >= 8
    assert loop.result.subtype == "error_during_execution"
    for k, body in enumerate(sent[1:]):
        assert body["messages"][-1]["role"] == "user"
        assert "Not done yet." in json.dumps(body["messages"][-1]["content"])
        assert body["messages"][-2] == {"role": "assistant", "content": step_content(loop, k)}


def test_stop_hook_payload_has_stop_hook_active(stream):
    seen: list[dict[str, Any]] = []
    hooks = Hooks()

    @hooks.on("Stop")
    def stop(payload):
        seen.append(payload)
        return {"decision": "block", "reason": "Once more."} if len(seen) == 1 else None

    loop = run(inline([{"content": [text("one")]}, {"content": [text("two")]}]), stream, hooks=hooks)
    assert loop.result.subtype == "success"
    assert [p["stop_hook_active"] for p in seen] == [False, True]
    assert seen[0]["last_assistant_message"] == "one"


def test_stop_hook_continue_false_ends_the_run(stream):
    hooks = Hooks()
    hooks.on("Stop", lambda payload: {"continue": False, "stopReason": "enough"})
    loop = run(inline([{"content": [text("one")]}, {"content": [text("never")]}]), stream, hooks=hooks)
    assert len(loop.engine.requests) == 1


def test_stop_hook_feedback_after_an_empty_turn_keeps_roles_alternating(stream):
    loop = run(inline([{"content": [], "stop_reason": "end_turn"}, {"content": [text("Done.")]}],
                      stop_hook={"times": 1, "reason": "Say something."}), stream)
    second = bodies(loop)[1]["messages"]
    # nothing to append from the empty turn: the feedback joins the prompt, never a second user message
    assert [m["role"] for m in second] == ["user"], second
    assert [b["text"] for b in second[0]["content"]] == ["Hello", "Stop hook feedback:\nSay something."]


def test_stop_hook_feedback_after_a_nudge_keeps_the_history_valid(stream):
    calc = {"type": "tool_use", "name": "calculator", "input": {"expression": "3 * 3"}}
    loop = run(inline([{"content": [calc], "stop_reason": "tool_use"},
                       {"content": [], "stop_reason": "end_turn"},
                       {"content": [], "stop_reason": "end_turn"},
                       {"content": [text("9")]}], tools="demo", stop_hook={"times": 1}), stream)
    assert loop.result.subtype == "success" and len(bodies(loop)) == 4
    for body in bodies(loop):
        assert validate_history(body["messages"]) == []


@pytest.mark.parametrize("case", ["empty_max_tokens_partial", "blank_text_then_stop_hook"])
def test_empty_assistant_content_is_not_sent_back(stream, case):
    if case == "empty_max_tokens_partial":
        scenario = inline([{"content": [text("Part one")], "stop_reason": "max_tokens"},
                           {"content": [], "stop_reason": "max_tokens"},
                           {"content": [text("Done.")]}])
    else:
        scenario = inline([{"content": [text("")], "stop_reason": "end_turn"}, {"content": [text("Done.")]}],
                          stop_hook={"times": 1})
    loop = run(scenario, stream)
    sent = bodies(loop)
    assert loop.result.subtype == "success" and len(sent) == (3 if case == "empty_max_tokens_partial" else 2)
    # the empty or blank turn left nothing behind: the last request is the prompt alone (plus the feedback)
    assert [m["role"] for m in sent[-1]["messages"]] == ["user"]
    for body in sent:
        for message in body["messages"]:
            assert message["content"], body["messages"]
            assert all(b.get("text", "x").strip() for b in blocks_of(message)), body["messages"]


@pytest.mark.parametrize("case", ["after_pause", "with_tool_use"])
def test_refusal_leaves_a_valid_transcript(stream, case):
    if case == "after_pause":
        steps = [{"content": [{"type": "server_tool_use", "name": "web_search", "input": {"query": "q"}}],
                  "stop_reason": "pause_turn"},
                 {"content": [text("I won't go on.")], "stop_reason": "refusal"}]
    else:
        steps = [{"content": [{"type": "tool_use", "name": "calculator", "input": {"expression": "1"}}],
                  "stop_reason": "refusal"}]
    loop = run(inline(steps, tools="demo", server_tools=[WEB_SEARCH]), stream)
    assert loop.result.subtype == "error_refusal"
    assert validate_history(loop.result.messages) == []


def test_refusal_keeps_thinking_and_redacted_thinking_blocks_alike(stream):
    steps = [{"content": [{"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
                          {"type": "thinking", "thinking": "I should not help with this."},
                          text("I can't help with that.")], "stop_reason": "refusal"}]
    loop = run(inline(steps, thinking=1024, max_tokens=2048), stream)
    assert loop.result.subtype == "error_refusal"
    kept = loop.result.messages[-1]
    assert kept["role"] == "assistant"
    assert [b["type"] for b in kept["content"]] == ["redacted_thinking", "thinking", "text"]
    assert kept["content"][0]["data"] == "ZW5jcnlwdGVk"


# --- the trace ---------------------------------------------------------------------------------------------

def test_trace_is_written_and_flushed_event_by_event(tmp_path):
    path = tmp_path / "run.jsonl"
    loop = scenario_loop("tour", trace=Trace(path))
    for _ in range(4):
        loop.step()
    assert not loop.done
    lines = path.read_text(encoding="utf-8").splitlines()  # read while the run is still going
    assert len(lines) == len(loop.trace.events)
    on_disk = [json.loads(line) for line in lines]
    assert [e["seq"] for e in on_disk] == list(range(len(on_disk)))
    completed = {e.call for e in loop.trace.of_kind("response", "api_error")}
    assert completed == {e["call"] for e in on_disk if e["kind"] in ("response", "api_error")}
    assert len(completed) == loop.requests == 4
    loop.run()
    loop.trace.close()
    assert Trace.load(path).events == loop.trace.events


def test_trace_load_skips_a_truncated_last_line(tmp_path):
    path = tmp_path / "killed.jsonl"
    loop = scenario_loop("tool_use", trace=Trace(path))
    loop.step()
    complete = len(loop.trace.events)
    with path.open("a", encoding="utf-8") as f:
        f.write('{"seq": 99, "kind": "respo')  # a run killed mid-write
    loaded = Trace.load(path)
    assert len(loaded.events) == complete
    assert loaded.events == loop.trace.events[:complete]


def test_trace_load_rejects_a_broken_line_in_the_middle(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"seq": 0, "kind": "start", "call": 0, "data": {}}\nnot json\n'
                    '{"seq": 1, "kind": "result", "call": 0, "data": {}}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        Trace.load(path)


def test_trace_to_frame_has_one_row_per_event():
    loop = scenario_loop("tool_use")
    loop.run()
    frame = loop.trace.to_frame()
    assert len(frame) == len(loop.trace.events)
    assert list(frame["kind"]) == [e.kind for e in loop.trace.events]


def test_trace_never_contains_the_api_key(tmp_path, stream):
    scenario = inline([
        {"error": {"status": 529, "type": "overloaded_error", "message": f"Overloaded (key {SECRET})"}},
        {"content": [{"type": "tool_use", "name": "calculator", "input": {"expression": "2 + 2"}}],
         "stop_reason": "tool_use"},
        {"content": [text(f"Your key is {SECRET}, and 2 + 2 = 4.")]},
    ], tools="demo")
    engine = ScenarioEngine(scenario)
    seen_keys: list[str] = []
    transport = mock_transport(engine)

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen_keys.append(request.headers.get("x-api-key") or request.headers.get("authorization", ""))
        return transport.handle_request(request)

    client = anthropic.Anthropic(api_key=SECRET, base_url="http://scripted.agentlab", max_retries=0,
                                 http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    path = tmp_path / "secret.jsonl"
    trace = Trace(path, secrets=(SECRET,))
    from agentlab.lab import build_tools

    loop = AgentLoop(client, RunConfig.of(prompt="What is 2 + 2?", tools=build_tools("demo"), stream=stream),
                     trace=trace, sleep=lambda s: None)
    result = loop.run()
    trace.close()
    assert result.subtype == "success" and engine.failures == []
    assert seen_keys and all(SECRET in k for k in seen_keys)  # the key did go on the wire
    on_disk = path.read_text(encoding="utf-8")
    assert SECRET not in on_disk and "SECRET123456" not in on_disk
    assert all(SECRET not in e.to_json() for e in trace.events)
    assert SECRET not in trace.to_frame().to_json()
    assert "[redacted]" in on_disk


# --- malformed scenarios ------------------------------------------------------------------------------------

BAD_SCENARIOS = {
    "missing_content_type": ("""
description: a block without a type
steps:
  - content: [{type: text, text: "fine"}]
  - content: [{text: "no type here"}]
""", ["steps[1]", "content[0]", "type"]),
    "wrong_stop_reason_type": ("""
description: stop_reason is a number
steps:
  - content: [{type: text, text: "hi"}]
    stop_reason: 5
""", ["steps[0]", "stop_reason"]),
    "unknown_stop_reason": ("""
description: an unknown stop_reason without the flag
steps:
  - content: [{type: text, text: "hi"}]
  - content: [{type: text, text: "hi"}]
    stop_reason: banana
""", ["steps[1]", "stop_reason", "banana", "unknown_stop_reason"]),
    "cases_with_content": ("""
description: cases next to content
steps:
  - content: [{type: text, text: "hi"}]
    cases:
      - content: [{type: text, text: "a"}]
""", ["steps[0]", "cases", "content"]),
    "cases_when_missing": ("""
description: a case without when before the last
steps:
  - cases:
      - content: [{type: text, text: "a"}]
      - when: {max_tokens_at_least: 100}
        content: [{type: text, text: "b"}]
""", ["steps[0]", "when"]),
    "cases_empty": ("""
description: no cases
steps:
  - cases: []
""", ["steps[0]", "cases"]),
    "case_unknown_field": ("""
description: a misspelt field in a case
steps:
  - cases:
      - when: {max_tokens_at_least: 100}
        stopreason: end_turn
""", ["steps[0]", "cases[0]", "stopreason"]),
    "tool_use_without_name": ("""
description: tool_use needs a name
steps:
  - content: [{type: tool_use, input: {}}]
""", ["steps[0]", "content[0]", "name"]),
}


@pytest.mark.parametrize("name", sorted(BAD_SCENARIOS))
def test_malformed_scenario_names_file_step_and_field(tmp_path, name):
    source, expected = BAD_SCENARIOS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(source, encoding="utf-8")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert str(path) in message
    for part in expected:
        assert part in message, (part, message)
    with pytest.raises(ScenarioError):
        scenario_loop(str(path))


def test_scenario_that_is_not_yaml_is_rejected(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("steps: [\n  - {content: ", encoding="utf-8")
    with pytest.raises(ScenarioError, match="broken.yaml"):
        load_scenario(path)


def test_a_scenario_is_read_again_each_time_and_a_caller_cannot_change_the_next_load(tmp_path):
    """Parses are kept by text: an edited file gives the edited scenario, a file made bad fails, and one
    caller's changes to its scenario are not seen by the next caller."""
    path = tmp_path / "edited.yaml"
    path.write_text("description: edited\nsteps:\n  - content: [{type: text, text: first}, {type: tool_use, "
                    "name: calculator, input: {expression: 6 * 7}}]\n", encoding="utf-8")
    first = load_scenario(path)
    first.steps[0].content[0].text = "changed by a caller"
    first.steps[0].content[1].input["expression"] = "changed by a caller"
    first.steps.append(first.steps[0])
    again = load_scenario(path)
    assert len(again.steps) == 1 and again.steps[0].content[0].text == "first"
    assert again.steps[0].content[1].input == {"expression": "6 * 7"}
    path.write_text("description: edited\nsteps:\n  - content: [{type: text, text: second}]\n", encoding="utf-8")
    assert load_scenario(path).steps[0].content[0].text == "second"
    path.write_text("steps: [\n  - {content: ", encoding="utf-8")
    for _ in range(2):
        with pytest.raises(ScenarioError, match="not valid YAML"):
            load_scenario(path)
    path.write_text("description: edited\nsteps:\n  - content: [{type: text, text: first}]\n", encoding="utf-8")
    assert load_scenario(path).steps[0].content[0].text == "first"


def test_unknown_scenario_name_lists_the_known_ones():
    with pytest.raises(ScenarioError, match="tool_use"):
        load_scenario("no_such_scenario_anywhere")


def test_scenario_expect_failure_is_reported_not_hidden(stream):
    scenario = inline([{"content": [text("one")]},
                       {"expect": {"model": "some-other-model"}, "content": [text("two")]}],
                      stop_hook={"times": 1})
    loop = scenario_loop(scenario, stream=stream)
    result = loop.run()
    assert result.subtype == "error_api"
    assert loop.engine.failures and "step 1" in loop.engine.failures[0]


def test_scenarios_directory_is_the_one_shipped():
    assert Path(load_scenario("tour").source).parent.name == "scenarios"
