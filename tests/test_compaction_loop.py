"""Compaction through the loop, checked on the wire: reactive and proactive triggers, the give-up bound,
the PreCompact hook, what each strategy keeps of the planted facts, and that every history stays valid."""

from __future__ import annotations

from typing import Any

import pytest

from agentlab.backend.scenario import is_summary_request, load_scenario, parse_scenario, request_payload
from agentlab.core.compaction import estimate_tokens, validate_history
from agentlab.core.hooks import Hooks
from agentlab.core.transitions import Limits
from agentlab.lab import scenario_loop
from agentlab.observatory.facts import COMPACTION_COLUMNS, compaction_frame, compare_strategies, fact_column

STRATEGIES = ("clear_tool_results", "drop_oldest", "summarize", "auto")
NEW_SCENARIOS = ("door_code", "proactive_compaction", "compaction_give_up")


# ---------------------------------------------------------------------------
# Reading the wire
# ---------------------------------------------------------------------------


def message_requests(loop) -> list[Any]:
    return [r for r in loop.engine.message_requests if r.body is not None]


def size(request) -> int:
    return estimate_tokens(request_payload(request.body))


def did_not_fit(request) -> bool:
    """The server said this request does not fit: a 400 'prompt is too long' or model_context_window_exceeded."""
    return request.kind == "prompt_too_long" or request.stop_reason == "model_context_window_exceeded" or (
        request.status == 400 and request.kind == "error")


def turn_requests(loop) -> list[Any]:
    """Message requests that are turns of the conversation, not summary calls."""
    return [r for r in message_requests(loop) if not is_summary_request(r.body)]


def assert_smaller_after_each_overflow(loop) -> int:
    """Every request that did not fit is followed by a smaller turn request; returns how many overflowed."""
    turns = turn_requests(loop)
    overflows = 0
    for failed, following in zip(turns, turns[1:], strict=False):
        if did_not_fit(failed):
            overflows += 1
            assert size(following) < size(failed), (
                f"request {following.index} ({size(following)} tokens) is not smaller than "
                f"request {failed.index} that did not fit ({size(failed)} tokens)")
    return overflows


def assert_every_history_valid(loop) -> None:
    for request in message_requests(loop):
        problems = validate_history(request.body["messages"])
        assert problems == [], f"request {request.index}: {problems}"
    assert validate_history(loop.result.messages, allow_pending_tool_use=True) == []


def run(name: str, **overrides: Any):
    loop = scenario_loop(name, **overrides)
    loop.run()
    assert loop.engine.failures == [], loop.engine.failures
    return loop


# ---------------------------------------------------------------------------
# The new scenarios end as their files say
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW_SCENARIOS)
def test_scenario_ends_as_its_file_expects(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.description and scenario.row and scenario.expect is not None
    loop = run(name)
    result = loop.result
    expect = scenario.expect
    assert result.subtype == expect.subtype
    assert result.num_turns == expect.num_turns
    assert result.requests == expect.requests
    assert result.stop_reason == expect.stop_reason
    assert result.requests == len(message_requests(loop))


# ---------------------------------------------------------------------------
# Reactive triggers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_reactive_on_prompt_too_long_from_the_server_window(strategy: str) -> None:
    loop = run("door_code", compaction=strategy)
    assert loop.result.subtype == "success"
    assert [r.kind for r in turn_requests(loop)].count("prompt_too_long") == 1
    events = loop.trace.of_kind("compaction")
    assert [e.data["trigger"] for e in events] == ["prompt_too_long"]
    expected = "clear_tool_results" if strategy == "auto" else strategy
    assert events[0].data["strategy"] == expected
    assert assert_smaller_after_each_overflow(loop) == 1
    # the retry fits the window the server enforces
    window = loop.scenario.context_window
    fitting = [r for r in turn_requests(loop) if r.kind != "prompt_too_long"]
    assert fitting and all(size(r) <= window for r in fitting)
    assert_every_history_valid(loop)


def test_reactive_on_a_scripted_400_prompt_too_long() -> None:
    loop = run("prompt_too_long")
    assert loop.result.subtype == "success"
    assert [e.data["trigger"] for e in loop.trace.of_kind("compaction")] == ["prompt_too_long"]
    assert assert_smaller_after_each_overflow(loop) == 1
    assert_every_history_valid(loop)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_reactive_on_model_context_window_exceeded(strategy: str) -> None:
    loop = run("context_window_exceeded", compaction=strategy)
    assert loop.result.subtype == "success"
    events = loop.trace.of_kind("compaction")
    # one trigger; the chain ("auto") goes on down its strategies until the history is at least halved
    assert {e.data["trigger"] for e in events} == {"context_window"}
    assert len(events) == (1 if strategy != "auto" else len(events)) >= 1
    assert all(e.data["tokens_after"] < e.data["tokens_before"] for e in events)
    exceeded = [r for r in turn_requests(loop) if r.stop_reason == "model_context_window_exceeded"]
    assert len(exceeded) == 1
    assert assert_smaller_after_each_overflow(loop) == 1
    assert_every_history_valid(loop)


# ---------------------------------------------------------------------------
# Proactive trigger
# ---------------------------------------------------------------------------


def test_proactive_compaction_never_lets_the_server_refuse() -> None:
    loop = run("proactive_compaction")
    window = loop.scenario.context_window
    threshold = loop.scenario.compact_threshold
    assert loop.result.subtype == "success"
    assert len(message_requests(loop)) >= 3  # compactions happen between requests: several were sent
    assert all(r.status == 200 for r in message_requests(loop))
    assert all(size(r) <= window for r in message_requests(loop))
    events = loop.trace.of_kind("compaction")
    assert len(events) == 2
    assert {e.data["trigger"] for e in events} == {"proactive"}
    # each compaction happened before a request that would otherwise have passed the threshold
    frame = compaction_frame(loop)
    assert (frame["request_tokens_after"] < threshold * window).all()
    assert_every_history_valid(loop)


def test_proactive_threshold_on_a_run_that_would_hit_the_window() -> None:
    reactive = run("door_code")
    proactive = run("door_code", compact_threshold=0.8)
    assert any(r.kind == "prompt_too_long" for r in message_requests(reactive))
    assert message_requests(proactive) and all(r.status == 200 for r in message_requests(proactive))
    assert {e.data["trigger"] for e in proactive.trace.of_kind("compaction")} == {"proactive"}
    assert proactive.result.subtype == "success"
    assert_every_history_valid(proactive)


# ---------------------------------------------------------------------------
# Giving up, within a bound
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_give_up_when_nothing_makes_it_fit(strategy: str) -> None:
    loop = run("compaction_give_up", compaction=strategy)
    limits = Limits()
    result = loop.result
    assert result.subtype == "error_context_window"
    assert result.is_error
    assert result.compactions <= limits.max_compactions
    refused = [r for r in turn_requests(loop) if r.kind == "prompt_too_long"]
    assert 1 <= len(refused) <= limits.max_compactions + 1
    summaries = len(message_requests(loop)) - len(turn_requests(loop))
    assert summaries <= limits.max_compactions
    # three answered turns, then at most max_compactions + 1 refusals, plus the summary calls
    assert result.requests <= 3 + limits.max_compactions + 1 + summaries
    assert loop.trace.of_kind("transition")[-1].data["branch"] == "context_give_up"
    assert_every_history_valid(loop)


def test_give_up_on_a_first_request_that_is_too_long() -> None:
    scenario = parse_scenario({
        "name": "huge_first_request", "description": "a prompt larger than the window",
        "prompt": "Please read this. " + "lorem ipsum dolor sit amet " * 400, "context_window": 500,
        "steps": [{"content": [{"type": "text", "text": "never sent"}]}]}, "test")
    loop = scenario_loop(scenario)
    result = loop.run()
    assert result.subtype == "error_context_window"
    assert result.requests == 1
    assert result.compactions == 0
    assert [r.kind for r in loop.engine.requests] == ["prompt_too_long"]


# ---------------------------------------------------------------------------
# The PreCompact hook
# ---------------------------------------------------------------------------


def test_precompact_hook_fires_before_every_compaction() -> None:
    seen: list[dict] = []
    order: list[int] = []
    hooks = Hooks()

    def pre_compact(payload: dict) -> None:
        seen.append(payload)
        order.append(len(loop.trace.of_kind("compaction")))

    hooks.on("PreCompact", pre_compact)
    loop = scenario_loop("proactive_compaction", hooks=hooks)
    loop.run()
    assert loop.result.subtype == "success"
    assert len(seen) == 2 == len(loop.trace.of_kind("compaction"))
    assert order == [0, 1]  # each firing came before its compaction
    assert all(p["hook_event_name"] == "PreCompact" for p in seen)
    assert [p["cause"] for p in seen] == ["proactive", "proactive"]
    hook_events = [e for e in loop.trace.of_kind("hook") if e.data.get("event") == "PreCompact"]
    assert len(hook_events) == 2


def test_precompact_hook_fires_on_reactive_compaction_and_on_giving_up() -> None:
    causes: list[str] = []
    hooks = Hooks()
    hooks.on("PreCompact", lambda payload: causes.append(payload["cause"]))
    loop = scenario_loop("compaction_give_up", hooks=hooks)
    loop.run()
    assert loop.result.subtype == "error_context_window"
    # one firing per compaction attempt: each compaction, and possibly the last attempt that found nothing
    assert set(causes) == {"prompt_too_long"}
    assert loop.result.compactions <= len(causes) <= loop.result.compactions + 1


# ---------------------------------------------------------------------------
# What each strategy keeps
# ---------------------------------------------------------------------------


def test_strategies_keep_different_facts_of_door_code() -> None:
    frame = compare_strategies("door_code")
    assert list(frame["strategy"]) == list(STRATEGIES)
    assert (frame["subtype"] == "success").all()
    assert (frame["script_failures"] == 0).all()
    assert (frame["compactions"] >= 1).all()
    table = frame.set_index("strategy")[["kept_door_code", "answered_door_code", "kept_deploy_day",
                                         "answered_deploy_day"]]
    assert table.to_dict("index") == {
        "clear_tool_results": {"kept_door_code": False, "answered_door_code": False,
                               "kept_deploy_day": True, "answered_deploy_day": True},
        "drop_oldest": {"kept_door_code": False, "answered_door_code": False,
                        "kept_deploy_day": False, "answered_deploy_day": False},
        "summarize": {"kept_door_code": True, "answered_door_code": True,
                      "kept_deploy_day": True, "answered_deploy_day": True},
        "auto": {"kept_door_code": False, "answered_door_code": False,
                 "kept_deploy_day": True, "answered_deploy_day": True},
    }
    # the three strategies differ from each other; the default chain clears first, and that was enough
    rows = {s: tuple(table.loc[s]) for s in STRATEGIES}
    assert len({rows["clear_tool_results"], rows["drop_oldest"], rows["summarize"]}) == 3
    assert rows["auto"] == rows["clear_tool_results"]
    answers = frame.set_index("strategy")["answer"]
    assert "I no longer know the door code" in answers["drop_oldest"]
    assert "4711" in answers["summarize"]
    # summarising costs one more request: the summary call
    requests = frame.set_index("strategy")["requests"]
    assert requests["summarize"] == requests["clear_tool_results"] + 1
    for before, after in zip(frame["tokens_before"], frame["tokens_after"], strict=True):
        assert len(before) == len(after) and all(a < b for b, a in zip(before, after, strict=True))


def test_compare_strategies_takes_facts_and_overrides() -> None:
    frame = compare_strategies("door_code", ("summarize",), facts={"Wi-Fi!": "harbour"}, max_turns=2)
    assert list(frame.columns[-2:]) == [fact_column("kept", "Wi-Fi!"), fact_column("answered", "Wi-Fi!")]
    assert fact_column("kept", "Wi-Fi!") == "kept_wi_fi"
    assert frame.loc[0, "subtype"] == "error_max_turns"
    assert frame.loc[0, "compactions"] == 0


def test_compaction_frame_from_trace_loop_events_and_dataframe() -> None:
    loop = run("door_code", compaction="drop_oldest")
    from_loop = compaction_frame(loop)
    assert list(from_loop.columns) == list(COMPACTION_COLUMNS)
    assert len(from_loop) == 1
    row = from_loop.iloc[0]
    assert row["trigger"] == "prompt_too_long" and row["strategy"] == "drop_oldest"
    assert row["tokens_saved"] == row["tokens_before"] - row["tokens_after"] > 0
    assert row["messages_after"] < row["messages_before"]
    assert row["removed_count"] == len(row["removed"]) > 0
    assert row["context_window"] == 2600
    assert row["request_tokens_after"] < row["request_tokens_before"]
    for other in (loop.trace, loop.trace.events, loop.trace.to_frame()):
        assert compaction_frame(other).equals(from_loop)


def test_compaction_frame_of_a_run_without_compaction_is_empty() -> None:
    loop = run("tool_use")
    frame = compaction_frame(loop.trace)
    assert frame.empty and list(frame.columns) == list(COMPACTION_COLUMNS)
    with pytest.raises(TypeError):
        compaction_frame("not a trace")


def test_count_tokens_option_measures_each_request_with_the_api() -> None:
    loop = scenario_loop("tool_use", count_tokens=True)
    assert loop.run().subtype == "success"
    kinds = [r.kind for r in loop.engine.requests]
    assert kinds == ["count_tokens", "message", "count_tokens", "message"]
    sent = [r for r in loop.engine.requests if r.kind == "message"]
    counted = [e.data["context_tokens"] for e in loop.trace.of_kind("request")]
    assert counted == [estimate_tokens(request_payload(r.body)) for r in sent]  # what the server counts
