"""The checks of lessons 06-10: the notebooks' solutions pass, and wrong answers fail with a clear message."""

from __future__ import annotations

import pytest

from agentlab.exercises import lesson06, lesson07, lesson09, lesson10
from agentlab.exercises.lesson06 import check_finish_turn
from agentlab.exercises.lesson07 import check_retry_delay
from agentlab.exercises.lesson08 import check_runaway_scenario
from agentlab.exercises.lesson09 import check_stop_once_hook
from agentlab.exercises.lesson10 import check_my_decide

# --- lesson 06: finish a paused turn -------------------------------------------------------------------------


finish_turn = lesson06.SOLUTION


def finish_turn_separate_messages(call_model, messages, max_continuations=3):
    """Each paused piece as its own assistant message: the same turn, also accepted."""
    response = call_model(messages)
    for _ in range(max_continuations):
        if response["stop_reason"] != "pause_turn":
            break
        messages = messages + [{"role": "assistant", "content": response["content"]}]
        response = call_model(messages)
    return response


def nudging(call_model, messages, max_continuations=3):
    response = call_model(messages)
    for _ in range(max_continuations):
        if response["stop_reason"] != "pause_turn":
            break
        messages = messages + [{"role": "assistant", "content": response["content"]},
                               {"role": "user", "content": "Please continue."}]
        response = call_model(messages)
    return response


def unbounded(call_model, messages, max_continuations=3):
    response, turn = call_model(messages), []
    while response["stop_reason"] == "pause_turn":
        turn = turn + response["content"]
        response = call_model(messages + [{"role": "assistant", "content": turn}])
    return response


def text_only(call_model, messages, max_continuations=3):
    response, turn = call_model(messages), []
    for _ in range(max_continuations):
        if response["stop_reason"] != "pause_turn":
            break
        turn = turn + [b for b in response["content"] if b["type"] == "text"]
        response = call_model(messages + [{"role": "assistant", "content": turn}])
    return response


def latest_only(call_model, messages, max_continuations=3):
    response = call_model(messages)
    for _ in range(max_continuations):
        if response["stop_reason"] != "pause_turn":
            break
        response = call_model(messages + [{"role": "assistant", "content": response["content"]}])
    return response


def mutating(call_model, messages, max_continuations=3):
    response = call_model(messages)
    for _ in range(max_continuations):
        if response["stop_reason"] != "pause_turn":
            break
        messages.append({"role": "assistant", "content": response["content"]})
        response = call_model(messages)
    return response


@pytest.mark.parametrize("solution", [finish_turn, finish_turn_separate_messages])
def test_lesson06_solutions_pass(solution, capsys):
    check_finish_turn(solution)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(("wrong", "message"), [
    (lambda call_model, messages, max_continuations=3: call_model(messages), "paused twice and then finished"),
    (nudging, "added a user message"),
    (unbounded, "still did not stop"),
    (text_only, "keep the server_tool_use block"),
    (latest_only, "only the latest paused content"),
    (mutating, "changed the caller's list"),
])
def test_lesson06_wrong_answers_fail(wrong, message):
    with pytest.raises(AssertionError, match=message):
        check_finish_turn(wrong)


# --- lesson 07: how long to wait ------------------------------------------------------------------------------

TRANSIENT = {408, 409, 429, 500, 502, 503, 504, 529}


retry_delay = lesson07.SOLUTION


def test_lesson07_solution_passes(capsys):
    check_retry_delay(retry_delay)
    assert "504 cases" in capsys.readouterr().out


def _ignores_header(status, attempt, retry_after=None, should_retry=None):
    return retry_delay(status, attempt, retry_after, None)


def _retries_everything(status, attempt, retry_after=None, should_retry=None):
    return retry_delay(408, attempt, retry_after, should_retry)


def _uncapped_retry_after(status, attempt, retry_after=None, should_retry=None):
    delay = retry_delay(status, attempt, None, should_retry)
    return retry_after if delay is not None and retry_after is not None else delay


def _uncapped_backoff(status, attempt, retry_after=None, should_retry=None):
    delay = retry_delay(status, attempt, retry_after, should_retry)
    return 0.5 * 2 ** (attempt - 1) if delay is not None and retry_after is None else delay


def _no_connection_errors(status, attempt, retry_after=None, should_retry=None):
    return None if status is None else retry_delay(status, attempt, retry_after, should_retry)


def _backoff_from_attempt_zero(status, attempt, retry_after=None, should_retry=None):
    """Counts attempts from 0: the first retry waits 1 s."""
    delay = retry_delay(status, attempt, retry_after, should_retry)
    return min(0.5 * 2 ** attempt, 32.0) if delay is not None and retry_after is None else delay


def _ignores_retry_after(status, attempt, retry_after=None, should_retry=None):
    return retry_delay(status, attempt, None, should_retry)


@pytest.mark.parametrize(("wrong", "message"), [
    (_backoff_from_attempt_zero, r"returned 1\.0, expected 0\.5: exponential backoff: 0\.5 s before the first retry"),
    (_ignores_retry_after, r"retry_after=2\.0.*returned 0\.5, expected 2\.0: the server said how long to wait"),
    (_ignores_header, "x-should-retry: false"),
    (_retries_everything, "is not transient"),
    (_uncapped_retry_after, "capped at 60"),
    (_uncapped_backoff, "at most 32"),
    (_no_connection_errors, r"retry_delay\(None, 1"),
    (lambda *args, **kwargs: 1 / 0, "raised ZeroDivisionError"),
])
def test_lesson07_wrong_answers_fail(wrong, message):
    with pytest.raises(AssertionError, match=message):
        check_retry_delay(wrong)


# --- lesson 08: a runaway you can stop ------------------------------------------------------------------------

RUN_TESTS = {"content": [{"type": "tool_use", "name": "run_tests", "input": {}}], "stop_reason": "tool_use"}
RUNAWAY = {"description": "a model that re-runs the failing tests forever", "prompt": "Make the tests pass.",
           "tools": "demo", "max_turns": 4, "steps": [RUN_TESTS] * 5}


def test_lesson08_solution_passes(capsys):
    check_runaway_scenario(RUNAWAY)
    assert "error_max_turns" in capsys.readouterr().out


@pytest.mark.parametrize(("change", "message"), [
    ({"max_turns": 6}, "ended with success after 6 request.*script .* is used up"),
    ({"max_turns": 5}, "after exactly 4"),
    ({"max_turns": 3}, "after exactly 4"),
    ({"max_turns": None}, "set max_turns"),
    ({"tools": "none"}, "needs tools: demo"),
    ({"steps": [RUN_TESTS] * 3 + [{"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}]},
     "ended with success"),
    ({"steps": [{"content": [{"type": "tool_use", "name": "get_weather", "input": {"location": "Oslo"}}],
                 "stop_reason": "tool_use"}] * 4}, "should ask for run_tests"),
    ({"max_turn": 4}, "does not load"),
])
def test_lesson08_wrong_answers_fail(change, message):
    with pytest.raises(AssertionError, match=message):
        check_runaway_scenario({**RUNAWAY, **change})


def test_lesson08_not_a_dict():
    with pytest.raises(AssertionError, match="as a dict"):
        check_runaway_scenario("max_turns: 4")


# --- lesson 09: a Stop hook that asks once --------------------------------------------------------------------


check_once = lesson09.SOLUTION


def test_lesson09_solution_passes(capsys):
    check_stop_once_hook(check_once)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(("wrong", "message"), [
    (lambda payload: {"decision": "block", "reason": "Not yet."},
     r"ended with error_during_execution after \d+ Stop-hook block"),
    (lambda payload: None, "should block the first attempt"),
    (lambda payload: None if payload["stop_hook_active"] else {"decision": "block"}, "has no reason"),
    (lambda payload: payload["missing"], "raised KeyError"),
])
def test_lesson09_wrong_answers_fail(wrong, message):
    with pytest.raises(AssertionError, match=message):
        check_stop_once_hook(wrong)


# --- lesson 10: assemble the decision -------------------------------------------------------------------------


my_decide = lesson10.SOLUTION


def test_lesson10_solution_passes(capsys):
    check_my_decide(my_decide)
    assert "17 cases" in capsys.readouterr().out


def _trusts_the_label(message, after_tool_results):
    return "tool_use" if message["stop_reason"] == "tool_use" else "complete"


def _tools_before_refusal(message, after_tool_results):
    if any(b["type"] == "tool_use" for b in message["content"]) and message["stop_reason"] != "max_tokens":
        return "tool_use"
    return my_decide(message, after_tool_results)


def _runs_cut_tool(message, after_tool_results):
    if message["stop_reason"] == "max_tokens" and message["content"][-1:] and \
            message["content"][-1]["type"] == "tool_use":
        return "tool_use"
    return my_decide(message, after_tool_results)


def _nudges_every_empty_turn(message, after_tool_results):
    return my_decide(message, True)


@pytest.mark.parametrize(("wrong", "message"), [
    (_trusts_the_label, "end_turn label but a tool_use block"),
    (_tools_before_refusal, "refusal even though a tool_use block came first"),
    (_runs_cut_tool, "the last block a cut-off tool_use"),
    (_nudges_every_empty_turn, "empty end_turn that does not follow tool results"),
])
def test_lesson10_wrong_answers_fail(wrong, message):
    with pytest.raises(AssertionError, match=message):
        check_my_decide(wrong)
