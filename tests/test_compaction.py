"""Tests for agentlab.core.compaction: token estimates, the context meter, the three strategies and validation."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlab.core.compaction import (
    DEFAULT_CHAIN,
    STRATEGIES,
    SUMMARY_HEADER,
    SUMMARY_PROMPT,
    CompactionResult,
    ContextMeter,
    clear_tool_results,
    drop_oldest,
    estimate_tokens,
    facts_kept,
    summarize,
    summary_request_messages,
    validate_history,
)

PLACEHOLDER = "[tool result cleared to save context]"
FIRST_REQUEST = "Find out the weather in Oslo and Bergen, then plan my week."


# ---------------------------------------------------------------------------
# History builders
# ---------------------------------------------------------------------------


def user(content: Any) -> dict:
    return {"role": "user", "content": content}


def assistant(*blocks: dict) -> dict:
    return {"role": "assistant", "content": list(blocks)}


def text(t: str) -> dict:
    return {"type": "text", "text": t}


def tool_use(tid: str, name: str, **inp: Any) -> dict:
    return {"type": "tool_use", "id": tid, "name": name, "input": inp}


def tool_result(tid: str, content: Any, is_error: bool = False) -> dict:
    block = {"type": "tool_result", "tool_use_id": tid, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def weather_history() -> list[dict]:
    """Request, four tool turns (one result an error), a text turn and a final answer."""
    long = "temperature readings " * 60
    return [
        user(FIRST_REQUEST),
        assistant(
            text("The door code is 4711, noted. Checking Oslo."),
            tool_use("toolu_1", "get_weather", city="Oslo"),
        ),
        user([tool_result("toolu_1", "Oslo: 3°C, rain. " + long)]),
        assistant(
            tool_use("toolu_2", "get_weather", city="Bergen"), tool_use("toolu_3", "get_time", city="Bergen")
        ),
        user([tool_result("toolu_2", [text("Bergen: 5°C, wind. " + long)]), tool_result("toolu_3", "12:00")]),
        assistant(tool_use("toolu_4", "get_calendar", week=12)),
        user([tool_result("toolu_4", "calendar service unavailable " * 20, is_error=True)]),
        assistant(text("Could you tell me which days you are free?")),
        user("Monday and Friday."),
        assistant(tool_use("toolu_5", "get_weather", city="Oslo", day="Monday")),
        user([tool_result("toolu_5", "Monday: sunny. " + long)]),
    ]


def single_exchange() -> list[dict]:
    return [user("What is 2 + 2?"), assistant(text("4"))]


def assert_valid(messages: list[dict]) -> None:
    problems = validate_history(messages)
    assert problems == [], problems


def assert_consistent(result: CompactionResult, original: list[dict]) -> None:
    """Bookkeeping every result must satisfy."""
    assert result.tokens_before == estimate_tokens(original)
    assert result.tokens_after == estimate_tokens(result.messages)
    assert result.messages_before == len(original)
    assert result.messages_after == len(result.messages)
    assert result.messages is not original
    if result.changed:
        assert result.removed
        assert result.tokens_after < result.tokens_before
    else:
        assert result.messages == original
        assert result.removed == []
        assert result.tokens_after == result.tokens_before
        assert result.note


def first_request_kept(result: CompactionResult, original: list[dict]) -> bool:
    first, new = original[0], result.messages[0]
    if new == first:
        return True
    if new["role"] != "user" or not isinstance(new["content"], list):
        return False
    if isinstance(first["content"], str):
        return new["content"][0] == text(first["content"])
    kept = [
        b for b in first["content"] if not (b.get("type") == "text" and b["text"].startswith(SUMMARY_HEADER))
    ]
    return new["content"][: len(kept)] == kept


# ---------------------------------------------------------------------------
# estimate_tokens and ContextMeter
# ---------------------------------------------------------------------------


def test_estimate_tokens_of_strings_and_objects() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("ø" * 8) == 2  # counts characters, not bytes
    msg = user([text("héllo")])
    encoded = json.dumps(msg, ensure_ascii=False, separators=(",", ":"))
    assert estimate_tokens(msg) == math.ceil(len(encoded) / 4)
    assert estimate_tokens(msg) == estimate_tokens(copy.deepcopy(msg))


def test_meter_uses_exact_usage_plus_pending_estimates() -> None:
    meter = ContextMeter(window=1000)
    assert meter.tokens == 0 and meter.fill == 0.0
    meter.observe_usage(input_tokens=100, output_tokens=50, cache_read=300, cache_creation=20)
    assert meter.tokens == 470
    results = user([tool_result("toolu_1", "x" * 400)])
    meter.appended(results)
    assert meter.tokens == 470 + estimate_tokens(results)
    meter.appended(user("keep going"))
    assert meter.pending == estimate_tokens(results) + estimate_tokens(user("keep going"))
    assert meter.fill == pytest.approx(meter.tokens / 1000)
    meter.observe_usage(input_tokens=600, output_tokens=10)
    assert meter.tokens == 610 and meter.pending == 0


def test_meter_reset_estimates_the_whole_request() -> None:
    history = weather_history()
    tools = [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}]
    meter = ContextMeter()
    meter.observe_usage(10_000, 500)
    meter.appended(user("x"))
    meter.reset(history, system="You are helpful.", tools=tools)
    expected = estimate_tokens(history) + estimate_tokens("You are helpful.") + estimate_tokens(tools)
    assert meter.tokens == expected
    assert meter.pending == 0
    meter.reset(history)
    assert meter.tokens == estimate_tokens(history)
    assert meter.fill == pytest.approx(meter.tokens / 200_000)


def test_meter_rejects_a_non_positive_window() -> None:
    with pytest.raises(ValueError):
        ContextMeter(window=0)


# ---------------------------------------------------------------------------
# validate_history
# ---------------------------------------------------------------------------


def test_valid_histories_pass() -> None:
    assert_valid(weather_history())
    assert_valid(single_exchange())
    assert_valid([user("hi")])
    # a plain-text nudge after a tool_result message, and after the first request
    assert_valid(weather_history() + [user("Please finish up.")])
    assert_valid([user("hi"), user([text("still there?")]), assistant(text("yes"))])
    # the final assistant message may be empty
    assert_valid([user("hi"), assistant()])


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([], "empty"),
        ([assistant(text("hi"))], "start with a user"),
        ([user("a"), assistant(text("b")), assistant(text("c"))], "two assistant"),
        ([user("a"), assistant(tool_use("t1", "f")), user("done")], "only tool_result"),
        ([user("a"), assistant(tool_use("t1", "f")), user([tool_result("t2", "r")])], "no tool_result for"),
        ([user("a"), assistant(text("b")), user([tool_result("t1", "r")])], "lacks a tool_use"),
        ([user("a"), assistant(tool_use("t1", "f"))], "not answered"),
        (
            [user("a"), assistant(tool_use("t1", "f")), user([tool_result("t1", "r"), text("extra")])],
            "only tool_result",
        ),
        ([user("a"), user("b"), user("c")], "more than two"),
        ([user("a"), assistant(text("b")), user("c"), user([tool_result("t1", "r")])], "follow a user"),
        ([user("a"), assistant(), user("b")], "empty content"),
        ([user("a"), {"role": "system", "content": "x"}], "unknown role"),
    ],
)
def test_invalid_histories_are_reported(messages: list[dict], fragment: str) -> None:
    problems = validate_history(messages)
    assert problems, messages
    assert any(fragment in p for p in problems), problems


def test_pending_tool_use_can_be_allowed() -> None:
    messages = [user("a"), assistant(tool_use("t1", "f"))]
    assert validate_history(messages)
    assert validate_history(messages, allow_pending_tool_use=True) == []


# ---------------------------------------------------------------------------
# clear_tool_results
# ---------------------------------------------------------------------------


def test_clear_tool_results_replaces_all_but_the_last_ones() -> None:
    history = weather_history()
    snapshot = copy.deepcopy(history)
    result = clear_tool_results(history, keep_last=2)
    assert history == snapshot
    assert result.strategy == "clear_tool_results" and result.changed
    assert_consistent(result, history)
    assert_valid(result.messages)
    assert result.messages[0] == history[0]
    results = [
        b
        for m in result.messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert [b["tool_use_id"] for b in results] == ["toolu_1", "toolu_2", "toolu_3", "toolu_4", "toolu_5"]
    # toolu_3 ("12:00") is smaller than the placeholder and stays; toolu_4 and toolu_5 are the last two
    assert [b["content"] == PLACEHOLDER for b in results] == [True, True, False, False, False]
    assert results[3]["is_error"] is True
    assert len(result.removed) == 2
    assert result.removed[0].startswith("tool_result toolu_1 (get_weather, ")
    assert result.removed[1].startswith("tool_result toolu_2 (get_weather, ")
    # untouched messages are shared, not copied
    assert result.messages[1] is history[1]


def test_clear_tool_results_keeps_error_flags_and_everything_but_content() -> None:
    history = weather_history()
    result = clear_tool_results(history, keep_last=0)
    cleared = result.messages[6]["content"][0]
    assert cleared == {
        "type": "tool_result",
        "tool_use_id": "toolu_4",
        "content": PLACEHOLDER,
        "is_error": True,
    }
    assert any("toolu_4" in r and "error" in r for r in result.removed)
    assert [m["role"] for m in result.messages] == [m["role"] for m in history]


def test_clear_tool_results_is_idempotent_and_reports_nothing_to_do() -> None:
    once = clear_tool_results(weather_history(), keep_last=1)
    twice = clear_tool_results(once.messages, keep_last=1)
    assert not twice.changed
    assert_consistent(twice, once.messages)
    assert not clear_tool_results(single_exchange()).changed
    assert not clear_tool_results(weather_history(), keep_last=10).changed
    custom = clear_tool_results(weather_history(), keep_last=0, placeholder="[gone]")
    assert custom.messages[2]["content"][0]["content"] == "[gone]"


def test_clear_tool_results_reports_no_change_when_nothing_shrinks() -> None:
    # a result one character longer than the placeholder saves no whole token
    barely = [user("go"), assistant(tool_use("t1", "f")), user([tool_result("t1", PLACEHOLDER + "!")])]
    result = clear_tool_results(barely, keep_last=0)
    assert not result.changed
    assert_consistent(result, barely)


def test_clear_tool_results_rejects_negative_keep() -> None:
    with pytest.raises(ValueError):
        clear_tool_results(weather_history(), keep_last=-1)


# ---------------------------------------------------------------------------
# drop_oldest
# ---------------------------------------------------------------------------


def test_drop_oldest_without_target_drops_the_older_half() -> None:
    history = weather_history()  # 5 turns; 4 droppable with keep_last_turns=1
    snapshot = copy.deepcopy(history)
    result = drop_oldest(history)
    assert history == snapshot
    assert result.strategy == "drop_oldest" and result.changed
    assert_consistent(result, history)
    assert_valid(result.messages)
    assert result.messages[0] == history[0]
    assert result.messages[1:] == history[5:]
    assert "turn 1: assistant text 'The door code is 4711, noted. Checking Oslo.'" in result.removed
    assert "turn 1: tool_use toolu_1 get_weather" in result.removed
    assert any(r.startswith("turn 1: tool_result toolu_1 (get_weather, ") for r in result.removed)
    assert any(r.startswith("turn 2: tool_result toolu_3 (get_time, ") for r in result.removed)
    assert facts_kept(result.messages, {"door code": "4711"}) == {"door code": False}


def test_removed_descriptions_shorten_long_text() -> None:
    history = [user("go"), assistant(text("word " * 100)), user("next"), assistant(text("done"))]
    result = drop_oldest(history)
    assert result.removed[0] == "turn 1: assistant text '" + ("word " * 12).strip() + "…'"
    assert result.removed[1] == "turn 1: user text 'next'"


def test_drop_oldest_with_target_stops_as_soon_as_it_fits() -> None:
    history = weather_history()
    full = estimate_tokens(history)
    without_first = estimate_tokens(history[:1] + history[3:])
    result = drop_oldest(history, target_tokens=without_first)
    assert result.messages == history[:1] + history[3:]
    assert result.tokens_after <= without_first
    assert_consistent(result, history)

    tiny = drop_oldest(history, target_tokens=1, keep_last_turns=2)  # unreachable: drops all it may
    assert tiny.changed and tiny.tokens_after > 1
    assert tiny.messages == history[:1] + history[7:]
    assert_valid(tiny.messages)

    roomy = drop_oldest(history, target_tokens=full)
    assert not roomy.changed
    assert_consistent(roomy, history)


def test_drop_oldest_keeps_the_last_turns_and_head_nudges() -> None:
    history = [user("start"), user("are you there?")] + weather_history()[1:]
    result = drop_oldest(history, target_tokens=1, keep_last_turns=3)
    assert result.messages[:2] == history[:2]
    assert result.messages[2]["role"] == "assistant"
    assert result.messages[2:] == history[-6:]
    assert_valid(result.messages)
    everything = drop_oldest(history, keep_last_turns=0, target_tokens=0)
    assert everything.messages == history[:2]
    assert_valid(everything.messages)


def test_pending_tool_calls_are_never_removed() -> None:
    history = weather_history()[:9] + [assistant(tool_use("toolu_9", "get_weather", city="Oslo"))]
    dropped = drop_oldest(history, keep_last_turns=0, target_tokens=0)
    assert dropped.messages == [history[0], history[-1]]
    summed = summarize(history, RecordingSummarizer("s"), keep_last_turns=0)
    assert summed.messages[1:] == [history[-1]]
    for result in (dropped, summed):
        assert validate_history(result.messages, allow_pending_tool_use=True) == []


def test_drop_oldest_cannot_reduce_a_single_exchange() -> None:
    for messages in (single_exchange(), [user("hi")], weather_history()[:3]):
        result = drop_oldest(messages)
        assert not result.changed
        assert_consistent(result, messages)
    assert not drop_oldest(weather_history(), keep_last_turns=5).changed


# ---------------------------------------------------------------------------
# summarize
# ---------------------------------------------------------------------------


class RecordingSummarizer:
    def __init__(self, reply: str = "The user wants weather for Oslo and Bergen; door code 4711.") -> None:
        self.reply = reply
        self.calls: list[list[dict]] = []

    def __call__(self, older: list[dict]) -> str:
        self.calls.append(older)
        return self.reply


def test_summarize_output_shape() -> None:
    history = weather_history()
    snapshot = copy.deepcopy(history)
    summarizer = RecordingSummarizer()
    result = summarize(history, summarizer, keep_last_turns=2)
    assert history == snapshot
    assert result.strategy == "summarize" and result.changed
    assert_consistent(result, history)
    assert_valid(result.messages)
    # the summarizer saw everything before the last two turns, cut at a turn boundary
    assert summarizer.calls == [history[:7]]
    assert_valid(summarizer.calls[0])
    first = result.messages[0]
    assert first["role"] == "user"
    assert first["content"] == [text(FIRST_REQUEST), text(SUMMARY_HEADER + summarizer.reply)]
    assert result.messages[1:] == history[7:]
    assert result.messages[1]["role"] == "assistant"
    assert first_request_kept(result, history)
    assert "turn 1: assistant text 'The door code is 4711, noted. Checking Oslo.'" in result.removed
    assert facts_kept(result.messages, {"door code": "4711", "city": "Bergen"}) == {
        "door code": True,
        "city": True,
    }


def test_summarize_keeps_block_content_and_replaces_an_earlier_summary() -> None:
    history = weather_history()
    history[0] = user(
        [text(FIRST_REQUEST), {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]
    )
    first = summarize(history, RecordingSummarizer("first summary"), keep_last_turns=3)
    assert first.messages[0]["content"][:2] == history[0]["content"]
    longer = first.messages + [assistant(text("More work. " * 50)), user("and more " * 50)]
    second = summarize(longer, RecordingSummarizer("second summary"), keep_last_turns=1)
    assert second.changed
    assert second.messages[0]["content"] == history[0]["content"] + [text(SUMMARY_HEADER + "second summary")]
    assert second.removed[0].startswith("request: earlier summary")
    assert first_request_kept(second, longer)
    assert_valid(second.messages)


def test_summarize_summarises_nudges_after_the_request() -> None:
    history = [user("start"), user("hello?")] + weather_history()[1:]
    result = summarize(history, RecordingSummarizer("short"), keep_last_turns=1)
    assert result.messages[0]["content"][0] == text("start")
    assert result.messages[1]["role"] == "assistant"
    assert "request: user text 'hello?'" in result.removed
    assert_valid(result.messages)


def test_summarize_does_not_call_the_model_when_there_is_nothing_to_summarise() -> None:
    summarizer = RecordingSummarizer()
    for messages in (single_exchange(), [user("hi")]):
        result = summarize(messages, summarizer, keep_last_turns=1)
        assert not result.changed
        assert_consistent(result, messages)
    assert not summarize(weather_history(), summarizer, keep_last_turns=5).changed
    assert summarizer.calls == []


def test_summarize_rejects_useless_summaries() -> None:
    history = weather_history()
    blank = summarize(history, RecordingSummarizer("   "))
    assert not blank.changed and "empty" in blank.note
    huge = summarize(history, RecordingSummarizer("blah " * 10_000))
    assert not huge.changed and "shrink" in huge.note
    assert_consistent(huge, history)


def test_summarize_propagates_summarizer_errors() -> None:
    def broken(older: list[dict]) -> str:
        raise RuntimeError("model call failed")

    with pytest.raises(RuntimeError, match="model call failed"):
        summarize(weather_history(), broken)


def test_summary_prompt_and_request() -> None:
    assert "summary" in SUMMARY_PROMPT and "TEXT ONLY" in SUMMARY_PROMPT
    history = weather_history()
    after_results = summary_request_messages(history[:7])
    assert after_results[:7] == history[:7] and after_results[7] == user(SUMMARY_PROMPT)
    assert_valid(after_results)
    after_text = summary_request_messages(history[:9])
    assert len(after_text) == 9
    assert after_text[8]["content"] == [text("Monday and Friday."), text(SUMMARY_PROMPT)]
    assert history[8] == user("Monday and Friday.")
    assert_valid(after_text)


def test_registry_and_default_chain() -> None:
    assert STRATEGIES == {
        "clear_tool_results": clear_tool_results,
        "drop_oldest": drop_oldest,
        "summarize": summarize,
    }
    assert DEFAULT_CHAIN == ("clear_tool_results", "summarize", "drop_oldest")
    assert set(DEFAULT_CHAIN) == set(STRATEGIES)


# ---------------------------------------------------------------------------
# facts_kept
# ---------------------------------------------------------------------------


def test_facts_kept_looks_at_text_tool_inputs_and_results() -> None:
    messages = [
        user("The door code is 4711."),
        assistant(
            {"type": "thinking", "thinking": "the wifi password is hunter2", "signature": "s"},
            tool_use("toolu_1", "lookup", room=42),
        ),
        user([tool_result("toolu_1", [text("Room owner: Ada")]), tool_result("toolu_1b", "PIN 0000")]),
        assistant(text("Done.")),
    ]
    found = facts_kept(
        messages,
        {"door": "4711", "room": "42", "owner": "Ada", "pin": "0000", "wifi": "hunter2", "x": "nope"},
    )
    assert found == {"door": True, "room": True, "owner": True, "pin": True, "wifi": False, "x": False}
    cleared = clear_tool_results(messages, keep_last=0)
    assert facts_kept(cleared.messages, {"owner": "Ada", "door": "4711"}) == {"owner": False, "door": True}


# ---------------------------------------------------------------------------
# Random valid histories
# ---------------------------------------------------------------------------

TOOL_NAMES = ("get_weather", "read_file", "search", "run")


@st.composite
def histories(draw: st.DrawFn) -> list[dict]:
    counter = iter(range(10_000))
    first_text = "Request: " + draw(st.text(min_size=1, max_size=40))
    messages: list[dict] = [user(first_text if draw(st.booleans()) else [text(first_text)])]
    if draw(st.integers(0, 9)) == 0:
        messages.append(user("nudge: please start"))
    n_turns = draw(st.integers(0, 10))
    for turn in range(n_turns):
        last = turn == n_turns - 1
        blocks: list[dict] = []
        if draw(st.integers(0, 5)) == 0:
            blocks.append(
                {"type": "thinking", "thinking": "hmm " * draw(st.integers(1, 20)), "signature": "sig"}
            )
        if draw(st.booleans()):
            blocks.append(text(f"turn {turn} says " + "words " * draw(st.integers(0, 80))))
        if draw(st.booleans()):  # tool-use turn with 1-3 calls
            ids = [f"toolu_{next(counter)}" for _ in range(draw(st.integers(1, 3)))]
            blocks += [tool_use(tid, draw(st.sampled_from(TOOL_NAMES)), arg=tid) for tid in ids]
            if last and draw(st.integers(0, 4)) == 0:
                messages.append(assistant(*blocks))  # ends mid-call: tool results pending
                break
            messages.append(assistant(*blocks))
            results = []
            for tid in ids:
                size = draw(st.sampled_from([0, 5, 50, 400, 3000]))
                body = f"output of {tid}: " + "x" * size
                content = body if draw(st.booleans()) else [text(body)]
                results.append(tool_result(tid, content, is_error=draw(st.integers(0, 6)) == 0))
            messages.append(user(results))
        else:
            if not blocks:
                blocks.append(text(f"answer {turn}"))
            messages.append(assistant(*blocks))
            if last and draw(st.booleans()):
                break  # history ends with the assistant's answer
            messages.append(user(f"follow-up {turn} " + "please " * draw(st.integers(0, 30))))
        if draw(st.integers(0, 7)) == 0:
            messages.append(user([text("nudge: keep going")]))
    return messages


def _check(result: CompactionResult, original: list[dict], snapshot: list[dict]) -> None:
    assert original == snapshot, "input was mutated"
    problems = validate_history(result.messages, allow_pending_tool_use=True)
    assert problems == [], problems
    assert first_request_kept(result, original)
    assert_consistent(result, original)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=histories(),
    keep_results=st.integers(0, 3),
    keep_turns=st.integers(0, 3),
    target_fraction=st.one_of(st.none(), st.floats(0.0, 1.2)),
    summary_size=st.sampled_from([1, 20, 2000]),
)
def test_every_strategy_keeps_random_histories_valid(
    messages: list[dict],
    keep_results: int,
    keep_turns: int,
    target_fraction: float | None,
    summary_size: int,
) -> None:
    assert validate_history(messages, allow_pending_tool_use=True) == []
    snapshot = copy.deepcopy(messages)
    before = estimate_tokens(messages)
    n_turns = sum(1 for m in messages[1:] if m["role"] == "assistant")

    cleared = clear_tool_results(messages, keep_last=keep_results)
    _check(cleared, messages, snapshot)

    target = None if target_fraction is None else int(before * target_fraction)
    dropped = drop_oldest(messages, target_tokens=target, keep_last_turns=keep_turns)
    _check(dropped, messages, snapshot)
    pending = messages[-1]["role"] == "assistant" and any(
        b["type"] == "tool_use" for b in messages[-1]["content"]
    )
    keep_turns_effective = max(keep_turns, 1) if pending else keep_turns
    can_drop = n_turns > keep_turns_effective and (target is None or before > target)
    assert dropped.changed == can_drop

    summarizer = RecordingSummarizer("summary " * summary_size)
    summed = summarize(messages, summarizer, keep_last_turns=keep_turns)
    _check(summed, messages, snapshot)
    if n_turns > keep_turns_effective:
        (older,) = summarizer.calls
        cut = len(older)
        assert older == messages[:cut]
        assert cut == len(messages) or messages[cut]["role"] == "assistant"
        assert sum(1 for m in messages[cut:] if m["role"] == "assistant") == keep_turns_effective
        assert validate_history(older) == []
        assert_valid(summary_request_messages(older))
    else:
        assert summarizer.calls == [] and not summed.changed

    # the chain, each step fed the previous step's output
    current = messages
    for name in DEFAULT_CHAIN:
        if name == "summarize":
            step = summarize(current, RecordingSummarizer("short summary"), keep_last_turns=keep_turns)
        else:
            step = STRATEGIES[name](current)
        assert validate_history(step.messages, allow_pending_tool_use=True) == []
        assert first_request_kept(step, current)
        current = step.messages
    assert messages == snapshot


# ---------------------------------------------------------------------------
# Scale
# ---------------------------------------------------------------------------


def long_history(turns: int) -> list[dict]:
    messages = [user("Start the long job.")]
    for i in range(turns):
        messages.append(assistant(text(f"step {i}"), tool_use(f"toolu_{i}", "run", step=i)))
        messages.append(user([tool_result(f"toolu_{i}", f"step {i} output " + "y" * 200)]))
    return messages


def test_strategies_handle_ten_thousand_turns() -> None:
    """Every strategy and the meter work on a 10,000-turn history; their speed is measured by
    bench/compaction.py (time per turn at 1,000 and 10,000 turns), not asserted here."""
    history = long_history(10_000)
    cleared = clear_tool_results(history)
    dropped = drop_oldest(history, target_tokens=estimate_tokens(history) // 10)
    summed = summarize(history, lambda older: "summary of the long job", keep_last_turns=2)
    assert cleared.changed and dropped.changed and summed.changed
    assert len(summed.messages) == 5
    assert dropped.tokens_after <= estimate_tokens(history) // 10
    assert validate_history(dropped.messages) == []

    meter = ContextMeter()
    for message in history:
        meter.appended(message)
    assert meter.tokens == sum(estimate_tokens(m) for m in history)


@pytest.mark.parametrize("value", [
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "caf\u00e9 \"q\" \\ \n"}]},
    [1, 2.5, -0.0, 1e300, float("nan"), float("inf"), None, True, False, "\U0001f600", "\x00\x1f"],
    {1: "int key", 2.5: "float key", None: "null key", False: "bool key"},
    "a bare string", 42, [], {},
])
def test_compact_json_writes_what_json_dumps_writes(value):
    """The meter's encoder (json.dumps's C encoder, made once) gives the same text as json.dumps."""
    from agentlab.core.compaction import compact_json, json_default
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=json_default)
    assert compact_json(value) == expected


def test_compact_json_reports_a_value_that_holds_itself_as_json_dumps_does():
    from agentlab.core.compaction import compact_json, estimate_tokens

    loop: list = ["x"]
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        compact_json(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        estimate_tokens({"content": loop})


def test_compact_json_encodes_sdk_models_through_json_default():
    from anthropic.types import TextBlock

    from agentlab.core.compaction import compact_json, json_default
    value = {"content": [TextBlock(type="text", text="hi")]}
    assert compact_json(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=json_default)
