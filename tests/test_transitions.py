"""The decision table, one branch at a time, on the pure functions of agentlab.core.transitions.

Messages are plain dicts shaped like the API's Message ({"content": [...], "stop_reason": ...}); failed
calls are Failure values. Nothing here calls a model, a tool or a hook.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from agentlab.core.transitions import (
    CONTINUATION_TEXT,
    MAX_TURNS_MARKER,
    NUDGE_TEXT,
    ROW_OF,
    ROWS,
    STOP_HOOK_FEEDBACK,
    Clamp,
    Compact,
    Complete,
    ContinueTruncated,
    End,
    Escalate,
    Failure,
    HookBlocked,
    Limits,
    LoopState,
    Nudge,
    Resume,
    Retry,
    RetryOnModel,
    RunTools,
    after_stop_hooks,
    check_turns,
    decide,
    note_success,
)

MODEL = "claude-sonnet-4-6"
FALLBACK = "claude-haiku-4-5"
LIMITS = Limits()
STATE = LoopState(model=MODEL, max_tokens=1024)


def text(t: str = "Hello.") -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool_use(uid: str = "toolu_1", name: str = "calculator", tool_input: dict | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": uid, "name": name,
            "input": {"expression": "1 + 1"} if tool_input is None else tool_input}


def server_tool_use(uid: str = "srvtoolu_1") -> dict[str, Any]:
    return {"type": "server_tool_use", "id": uid, "name": "web_search", "input": {"query": "news"}}


def msg(*blocks: dict[str, Any], stop_reason: str | None = "end_turn", **extra: Any) -> dict[str, Any]:
    return {"content": list(blocks), "stop_reason": stop_reason, **extra}


def failure(status: int | None, message: str = "boom", error_type: str = "api_error", **kw: Any) -> Failure:
    return Failure(status=status, error_type=error_type, message=message, **kw)


PROMPT_TOO_LONG = "prompt is too long: 250000 tokens > 200000 maximum"


# --- row 2: content first, both mislabels --------------------------------------------------------------

def test_tool_use_blocks_run_tools():
    uses = (tool_use("toolu_a"), tool_use("toolu_b", "get_weather", {"location": "Oslo"}))
    t = decide(msg(text("Let me check."), *uses, stop_reason="tool_use"), STATE, LIMITS)
    assert isinstance(t, RunTools)
    assert t.branch == "tool_use" and t.row == "2" and not t.terminal
    assert t.tool_uses == uses


def test_mislabel_tool_use_block_under_end_turn_still_runs_the_tool():
    t = decide(msg(tool_use(), stop_reason="end_turn"), STATE, LIMITS)
    assert isinstance(t, RunTools)
    assert [u["id"] for u in t.tool_uses] == ["toolu_1"]
    assert "end_turn" in t.reason


def test_mislabel_tool_use_label_without_block_completes():
    t = decide(msg(text("Sunny, no need for a tool."), stop_reason="tool_use"), STATE, LIMITS)
    assert isinstance(t, Complete)
    assert t.branch == "complete" and t.row == "11"
    assert not t.terminal  # the Stop hooks still get their say


def test_server_tool_use_alone_is_not_a_client_tool_call():
    t = decide(msg(text("Searched."), server_tool_use(), stop_reason="end_turn"), STATE, LIMITS)
    assert isinstance(t, Complete)


# --- row 1: incomplete tool_use on max_tokens ------------------------------------------------------------

def test_incomplete_tool_use_escalates_max_tokens():
    t = decide(msg(text("I'll use the calculator."), tool_use(tool_input={}), stop_reason="max_tokens"),
               STATE, LIMITS)
    assert isinstance(t, Escalate)
    assert t.branch == "incomplete_tool_use" and t.row == "1"
    assert t.max_tokens == LIMITS.escalated_max_tokens > STATE.max_tokens


def test_incomplete_tool_use_gives_up_once_the_escalation_is_used():
    m = msg(tool_use(tool_input={}), stop_reason="max_tokens")
    end = decide(m, replace(STATE, max_tokens=64_000, escalations=1), LIMITS)
    assert isinstance(end, End) and end.terminal
    assert end.branch == "max_tokens_give_up" and end.subtype == "error_max_output_tokens"
    assert "1 escalation used of 1" in end.message


def test_incomplete_tool_use_escalates_again_when_the_limit_allows_up_to_the_ceiling():
    m = msg(tool_use(tool_input={}), stop_reason="max_tokens")
    two = replace(LIMITS, max_escalations=2)
    second = decide(m, replace(STATE, max_tokens=64_000, escalations=1), two)
    assert isinstance(second, Escalate) and second.max_tokens == LIMITS.max_tokens_ceiling
    end = decide(m, replace(STATE, max_tokens=LIMITS.max_tokens_ceiling, escalations=1), two)
    assert isinstance(end, End) and "cannot be raised above 128000" in end.message


def test_incomplete_tool_use_is_never_continued():
    # continuations do not count against a cut tool call, and never replace its escalation
    state = replace(STATE, continuations_in_a_row=LIMITS.max_continuations)
    t = decide(msg(tool_use(tool_input={}), stop_reason="max_tokens"), state, LIMITS)
    assert isinstance(t, Escalate)
    t = decide(msg(tool_use(tool_input={}), stop_reason="max_tokens"), STATE, replace(LIMITS, max_escalations=0))
    assert isinstance(t, End) and t.subtype == "error_max_output_tokens"


def test_complete_tool_use_before_trailing_text_on_max_tokens_runs_the_tool():
    # The tool_use block is whole (text came after it), so row 2 applies, not row 1.
    t = decide(msg(tool_use(), text("and then"), stop_reason="max_tokens"), STATE, LIMITS)
    assert isinstance(t, RunTools)


# --- row 3: max_tokens escalate -> continue -> give up ------------------------------------------------

def test_max_tokens_first_escalates():
    t = decide(msg(text("TCP congestion control has four"), stop_reason="max_tokens"), STATE, LIMITS)
    assert isinstance(t, Escalate)
    assert t.branch == "max_tokens_escalate" and t.row == "3"
    assert t.max_tokens == LIMITS.escalated_max_tokens


def test_max_tokens_after_escalation_continues():
    state = replace(STATE, max_tokens=64_000, escalations=1)
    t = decide(msg(text("partial"), stop_reason="max_tokens"), state, LIMITS)
    assert isinstance(t, ContinueTruncated)
    assert t.branch == "max_tokens_continue" and t.text == CONTINUATION_TEXT
    assert "continue" in t.text.lower()


@pytest.mark.parametrize("continuations", [0, 1, 2])
def test_max_tokens_continues_below_the_limit(continuations):
    state = replace(STATE, escalations=1, continuations_in_a_row=continuations)
    assert isinstance(decide(msg(text("x"), stop_reason="max_tokens"), state, LIMITS), ContinueTruncated)


def test_max_tokens_gives_up_at_the_limit():
    state = replace(STATE, max_tokens=64_000, escalations=1, continuations_in_a_row=3)
    t = decide(msg(text("x"), stop_reason="max_tokens"), state, LIMITS)
    assert isinstance(t, End) and t.terminal
    assert t.branch == "max_tokens_give_up" and t.subtype == "error_max_output_tokens"
    assert t.message == ("The response hit max_tokens (64000) again after 1 escalation and 3 continuations; "
                         "the limit is 3 continuations in a row.")
    assert LIMITS.max_continuations == 3  # MAX_OUTPUT_TOKENS_RECOVERY_LIMIT
    assert LIMITS.max_escalations == 1


def test_max_tokens_without_escalation_goes_straight_to_continuation():
    t = decide(msg(text("x"), stop_reason="max_tokens"), STATE, replace(LIMITS, max_escalations=0))
    assert isinstance(t, ContinueTruncated)


def test_max_tokens_already_at_the_escalated_size_continues():
    state = replace(STATE, max_tokens=LIMITS.escalated_max_tokens)
    assert isinstance(decide(msg(text("x"), stop_reason="max_tokens"), state, LIMITS), ContinueTruncated)


def test_max_tokens_with_empty_content_is_still_a_max_tokens_recovery():
    assert isinstance(decide(msg(stop_reason="max_tokens"), STATE, LIMITS), Escalate)


def test_max_tokens_above_the_models_ceiling_is_clamped():
    # A 400 naming the model's output ceiling: resend with that ceiling instead of ending the run.
    state = replace(STATE, max_tokens=64_000, escalations=1)
    t = decide(failure(400, "max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens "
                       "for claude-haiku", "invalid_request_error"), state, LIMITS)
    assert isinstance(t, Clamp)
    assert t.branch == "max_tokens_clamp" and t.max_tokens == 32_000 < state.max_tokens


def test_max_tokens_ceiling_400_that_cannot_lower_max_tokens_ends():
    t = decide(failure(400, "max_tokens: 64000 > 128000", "invalid_request_error"), STATE, LIMITS)
    assert isinstance(t, End) and t.subtype == "error_api"


# --- row 4: context window ---------------------------------------------------------------------------

def test_context_window_exceeded_compacts():
    t = decide(msg(text("Cairo is next"), stop_reason="model_context_window_exceeded"), STATE, LIMITS)
    assert isinstance(t, Compact)
    assert t.branch == "context_compact" and t.row == "4" and t.trigger == "context_window"


@pytest.mark.parametrize("done", [1, 2])
def test_context_window_exceeded_compacts_again_below_the_bound(done):
    state = replace(STATE, consecutive_compactions=done)
    assert isinstance(decide(msg(stop_reason="model_context_window_exceeded"), state, LIMITS), Compact)


def test_context_window_exceeded_gives_up_at_the_bound():
    state = replace(STATE, consecutive_compactions=LIMITS.max_compactions)
    t = decide(msg(text("x"), stop_reason="model_context_window_exceeded"), state, LIMITS)
    assert isinstance(t, End)
    assert t.branch == "context_give_up" and t.subtype == "error_context_window"


def test_context_window_cutting_a_tool_use_compacts_rather_than_running_it():
    t = decide(msg(tool_use(tool_input={}), stop_reason="model_context_window_exceeded"), STATE, LIMITS)
    assert isinstance(t, Compact)


# --- row 0b: 400 prompt is too long ------------------------------------------------------------------

@pytest.mark.parametrize("message", [PROMPT_TOO_LONG, "Prompt is too long: 210000 tokens > 200000 maximum"])
def test_prompt_too_long_compacts(message):
    t = decide(failure(400, message, "invalid_request_error"), STATE, LIMITS)
    assert isinstance(t, Compact)
    assert t.branch == "prompt_too_long" and t.row == "0b" and t.trigger == "prompt_too_long"


def test_prompt_too_long_gives_up_at_the_compaction_bound():
    state = replace(STATE, consecutive_compactions=LIMITS.max_compactions)
    t = decide(failure(400, PROMPT_TOO_LONG, "invalid_request_error"), state, LIMITS)
    assert isinstance(t, End)
    assert t.branch == "context_give_up" and t.subtype == "error_context_window"


def test_other_400_is_not_compacted():
    t = decide(failure(400, "messages: roles must alternate", "invalid_request_error"), STATE, LIMITS)
    assert isinstance(t, End) and t.subtype == "error_api"


# --- row 5: refusal -------------------------------------------------------------------------------------

def test_refusal_ends_with_an_explanation():
    details = {"type": "refusal", "category": "cyber", "explanation": "Could enable cyber harm."}
    t = decide(msg(stop_reason="refusal", stop_details=details), STATE, LIMITS)
    assert isinstance(t, End) and t.terminal
    assert t.branch == "refusal" and t.row == "5" and t.subtype == "error_refusal"
    assert "cyber" in t.message and "Could enable cyber harm." in t.message
    assert "another model" in t.message  # suggests another model rather than resending


def test_refusal_without_details_still_explains():
    t = decide(msg(text("I can't help with that."), stop_reason="refusal"), STATE, LIMITS)
    assert isinstance(t, End) and t.subtype == "error_refusal" and "refusal" in t.message


def test_refusal_wins_over_tool_use_blocks():
    t = decide(msg(tool_use(), stop_reason="refusal"), STATE, LIMITS)
    assert isinstance(t, End) and t.subtype == "error_refusal"


def test_refusal_fallback_retries_once_on_the_other_model():
    limits = replace(LIMITS, refusal_fallback_model=FALLBACK)
    t = decide(msg(stop_reason="refusal"), STATE, limits)
    assert isinstance(t, RetryOnModel)
    assert t.branch == "refusal_fallback" and t.model == FALLBACK and t.model != STATE.model


def test_refusal_fallback_is_used_only_once():
    limits = replace(LIMITS, refusal_fallback_model=FALLBACK)
    state = replace(STATE, model=FALLBACK, refusal_fallback_used=True)
    t = decide(msg(stop_reason="refusal"), state, limits)
    assert isinstance(t, End) and t.subtype == "error_refusal"


def test_refusal_fallback_never_resends_to_the_same_model():
    limits = replace(LIMITS, refusal_fallback_model=MODEL)
    assert isinstance(decide(msg(stop_reason="refusal"), STATE, limits), End)


def _recommending(model: str | None) -> dict[str, Any]:
    return {"type": "refusal", "category": "cyber", "explanation": "e", "fallback_credit_token": None,
            "fallback_has_prefill_claim": None, "recommended_model": model}


def test_refusal_fallback_recommended_retries_on_the_refusals_recommended_model():
    limits = replace(LIMITS, refusal_fallback_model="recommended")
    t = decide(msg(stop_reason="refusal", stop_details=_recommending(FALLBACK)), STATE, limits)
    assert isinstance(t, RetryOnModel) and t.model == FALLBACK and t.branch == "refusal_fallback"
    # used once: a second refusal, even one that recommends again, ends the run
    used = replace(STATE, model=FALLBACK, refusal_fallback_used=True)
    again = decide(msg(stop_reason="refusal", stop_details=_recommending("claude-other")), used, limits)
    assert isinstance(again, End) and again.subtype == "error_refusal" and "recommended" not in again.message


@pytest.mark.parametrize(("details", "said"), [
    (_recommending(None), "name no recommended_model."),
    (None, "name no recommended_model."),
    (_recommending(MODEL), "name no recommended_model other than the model that refused."),
])
def test_refusal_fallback_recommended_without_a_recommended_model_ends_saying_so(details, said):
    limits = replace(LIMITS, refusal_fallback_model="recommended")
    t = decide(msg(stop_reason="refusal", stop_details=details), STATE, limits)
    assert isinstance(t, End) and t.subtype == "error_refusal" and t.message.endswith(said)
    assert t.message.startswith("The model declined to continue (stop_reason: refusal)")


# --- row 6: pause_turn (and the beta "compaction" stop reason) --------------------------------------------

@pytest.mark.parametrize("stop_reason", ["pause_turn", "compaction"])
def test_pause_turn_resumes(stop_reason):
    t = decide(msg(text("Searching."), server_tool_use(), stop_reason=stop_reason), STATE, LIMITS)
    assert isinstance(t, Resume)
    assert t.branch == "pause_turn" and t.row == "6" and not t.terminal


def test_pause_turn_gives_up_after_the_bound():
    below = replace(STATE, pauses_in_a_row=LIMITS.max_pause_continuations - 1)
    assert isinstance(decide(msg(server_tool_use(), stop_reason="pause_turn"), below, LIMITS), Resume)
    at = replace(STATE, pauses_in_a_row=LIMITS.max_pause_continuations)
    t = decide(msg(server_tool_use(), stop_reason="pause_turn"), at, LIMITS)
    assert isinstance(t, End)
    assert t.branch == "pause_give_up" and t.subtype == "error_during_execution"


def test_pause_turn_with_a_client_tool_use_runs_the_tool():
    t = decide(msg(tool_use(), stop_reason="pause_turn"), STATE, LIMITS)
    assert isinstance(t, RunTools)


# --- row 7: stop_sequence ------------------------------------------------------------------------------

def test_stop_sequence_records_the_sequence_and_completes():
    t = decide(msg(text("one two three "), stop_reason="stop_sequence", stop_sequence="END"), STATE, LIMITS)
    assert isinstance(t, Complete)
    assert t.branch == "stop_sequence" and t.row == "7" and t.stop_sequence == "END"
    assert "END" in t.reason


def test_stop_sequence_falls_through_to_the_content_check():
    t = decide(msg(tool_use(), stop_reason="stop_sequence", stop_sequence="END"), STATE, LIMITS)
    assert isinstance(t, RunTools)


# --- row 8: empty end_turn right after tool results ------------------------------------------------------

@pytest.mark.parametrize("content", [[], [text("")], [text("   \n")]], ids=["no-blocks", "empty-text", "blank"])
def test_empty_end_turn_after_tool_results_nudges(content):
    state = replace(STATE, after_tool_results=True)
    t = decide({"content": content, "stop_reason": "end_turn"}, state, LIMITS)
    assert isinstance(t, Nudge)
    assert t.branch == "empty_nudge" and t.row == "8" and t.text == NUDGE_TEXT


def test_empty_end_turn_not_after_tool_results_does_not_nudge():
    t = decide(msg(stop_reason="end_turn"), replace(STATE, after_tool_results=False), LIMITS)
    assert isinstance(t, Complete) and t.branch == "complete"


def test_empty_end_turn_nudges_only_once():
    state = replace(STATE, after_tool_results=True, nudges=1)
    assert isinstance(decide(msg(stop_reason="end_turn"), state, LIMITS), Complete)


def test_non_empty_end_turn_after_tool_results_completes():
    state = replace(STATE, after_tool_results=True)
    assert isinstance(decide(msg(text("12 * 12 = 144."), stop_reason="end_turn"), state, LIMITS), Complete)


# --- unknown and missing stop reasons ---------------------------------------------------------------------

@pytest.mark.parametrize("stop_reason", ["something_new", None, ""])
def test_unknown_or_missing_stop_reason_falls_back_to_the_content_check(stop_reason):
    t = decide(msg(text("Hello there."), stop_reason=stop_reason), STATE, LIMITS)
    assert isinstance(t, Complete) and t.branch == "complete"
    with_tool = decide(msg(tool_use(), stop_reason=stop_reason), STATE, LIMITS)
    assert isinstance(with_tool, RunTools)


def test_unknown_stop_reason_is_named_in_the_reason():
    t = decide(msg(text("x"), stop_reason="something_new"), STATE, LIMITS)
    assert "something_new" in t.reason


def test_message_without_content_key_is_handled():
    assert isinstance(decide({"stop_reason": None}, STATE, LIMITS), Complete)


# --- row 0: API errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529, None])
def test_transient_errors_are_retried(status):
    t = decide(failure(status), STATE, LIMITS)
    assert isinstance(t, Retry)
    assert t.branch == "api_retry" and t.row == "0" and t.switch_model is None
    assert t.delay == LIMITS.backoff_base


def test_connection_error_is_named():
    t = decide(failure(None, "Connection error.", "connection_error"), STATE, LIMITS)
    assert isinstance(t, Retry) and "connection" in t.reason


def test_backoff_doubles_and_is_capped():
    limits = replace(LIMITS, max_api_retries=20, backoff_base=0.5, backoff_cap=32.0)
    delays = [decide(failure(500), replace(STATE, api_attempts=n), limits).delay for n in range(9)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 32.0, 32.0]


def test_backoff_cap_is_a_limit():
    limits = replace(LIMITS, backoff_cap=3.0, max_api_retries=20)
    delays = [decide(failure(429), replace(STATE, api_attempts=n), limits).delay for n in range(5)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(("retry_after", "expected"), [(7.0, 7.0), (0.0, 0.0), (3600.0, 60.0)])
def test_retry_after_is_honoured_and_capped(retry_after, expected):
    limits = replace(LIMITS, retry_after_cap=60.0, max_api_retries=20)
    t = decide(failure(429, retry_after=retry_after), replace(STATE, api_attempts=3), limits)
    assert isinstance(t, Retry) and t.delay == expected


def test_should_retry_false_is_obeyed():
    t = decide(failure(529, "Overloaded", "overloaded_error", should_retry=False), STATE, LIMITS)
    assert isinstance(t, End) and t.subtype == "error_api"
    assert "not to retry" in t.reason


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_non_transient_4xx_ends_without_retry(status):
    t = decide(failure(status, "nope", "invalid_request_error"), STATE, LIMITS)
    assert isinstance(t, End) and t.terminal
    assert t.branch == "api_error" and t.subtype == "error_api"
    assert t.details["status"] == status


def test_retries_are_capped():
    state = replace(STATE, api_attempts=LIMITS.max_api_retries)
    t = decide(failure(500), state, LIMITS)
    assert isinstance(t, End) and t.subtype == "error_api"
    below = replace(STATE, api_attempts=LIMITS.max_api_retries - 1)
    assert isinstance(decide(failure(500), below, LIMITS), Retry)


def test_fallback_after_three_consecutive_overloads():
    limits = replace(LIMITS, fallback_model=FALLBACK)
    overloaded = failure(529, "Overloaded", "overloaded_error")
    for seen in range(limits.overloads_before_fallback - 1):
        t = decide(overloaded, replace(STATE, api_attempts=seen, consecutive_overloads=seen), limits)
        assert isinstance(t, Retry) and t.switch_model is None, seen
    third = decide(overloaded, replace(STATE, api_attempts=2, consecutive_overloads=2), limits)
    assert isinstance(third, Retry)
    assert third.branch == "api_fallback" and third.switch_model == FALLBACK


def test_no_fallback_without_a_fallback_model():
    limits = replace(LIMITS, max_api_retries=20)
    t = decide(failure(529), replace(STATE, api_attempts=5, consecutive_overloads=5), limits)
    assert isinstance(t, Retry) and t.branch == "api_retry" and t.switch_model is None


def test_no_second_fallback():
    limits = replace(LIMITS, fallback_model=FALLBACK, max_api_retries=20)
    state = replace(STATE, model=FALLBACK, fallback_used=True, api_attempts=4, consecutive_overloads=3)
    t = decide(failure(529), state, limits)
    assert isinstance(t, Retry) and t.switch_model is None


def test_other_errors_do_not_trigger_the_fallback():
    limits = replace(LIMITS, fallback_model=FALLBACK, max_api_retries=20)
    t = decide(failure(500), replace(STATE, api_attempts=4, consecutive_overloads=2), limits)
    assert isinstance(t, Retry) and t.switch_model is None


def test_note_success_resets_the_failure_counters():
    state = replace(STATE, num_turns=2, api_attempts=3, consecutive_overloads=2)
    after = note_success(state)
    assert (after.num_turns, after.api_attempts, after.consecutive_overloads) == (3, 0, 0)


# --- row 9: max_turns -------------------------------------------------------------------------------------

def test_max_turns_gate():
    limits = replace(LIMITS, max_turns=3)
    assert check_turns(replace(STATE, num_turns=2), limits) is None
    t = check_turns(replace(STATE, num_turns=3), limits)
    assert isinstance(t, End) and t.terminal
    assert t.branch == "max_turns" and t.row == "9" and t.subtype == "error_max_turns"
    assert MAX_TURNS_MARKER == "[max_turns_reached]"


def test_no_max_turns_means_no_gate():
    assert check_turns(replace(STATE, num_turns=10_000), LIMITS) is None


# --- row 10: Stop hooks ------------------------------------------------------------------------------------

def test_stop_hook_not_blocking_lets_the_completion_stand():
    assert after_stop_hooks(False, None, STATE, LIMITS) is None


def test_stop_hook_block_feeds_the_reason_back():
    t = after_stop_hooks(True, "Run the tests first.", STATE, LIMITS)
    assert isinstance(t, HookBlocked) and not t.terminal
    assert t.branch == "stop_hook_block" and t.row == "10"
    assert "Run the tests first." in t.feedback


def test_stop_hook_block_without_reason_still_gives_feedback():
    t = after_stop_hooks(True, None, STATE, LIMITS)
    assert isinstance(t, HookBlocked) and t.feedback.strip()


def test_stop_hook_block_cap_of_eight():
    # As Claude Code does: 8 blocks are fed back to the model; the next block ends the run.
    cap = LIMITS.stop_hook_block_cap
    assert cap == 8
    for blocks in range(cap):
        t = after_stop_hooks(True, "again", replace(STATE, stop_hook_blocks=blocks), LIMITS)
        assert isinstance(t, HookBlocked), blocks
    t = after_stop_hooks(True, "again", replace(STATE, stop_hook_blocks=cap), LIMITS)
    assert isinstance(t, End)
    assert t.branch == "stop_hook_cap" and t.subtype == "error_during_execution"


def test_stop_hook_cap_is_a_limit():
    limits = replace(LIMITS, stop_hook_block_cap=2)
    assert isinstance(after_stop_hooks(True, "r", replace(STATE, stop_hook_blocks=1), limits), HookBlocked)
    assert isinstance(after_stop_hooks(True, "r", replace(STATE, stop_hook_blocks=2), limits), End)


# --- row 11 -----------------------------------------------------------------------------------------------

def test_plain_end_turn_completes():
    t = decide(msg(text("The capital of France is Paris.")), STATE, LIMITS)
    assert isinstance(t, Complete) and t.branch == "complete" and t.row == "11"


# --- the table and purity ----------------------------------------------------------------------------------

def test_every_branch_has_a_row():
    branches = [branch for _, branch, _ in ROWS]
    assert len(branches) == len(set(branches))
    assert set(ROW_OF) == set(branches)


PURE_CASES: list[tuple[Any, LoopState, Limits]] = [
    (msg(text("x"), tool_use(), stop_reason="tool_use"), STATE, LIMITS),
    (msg(tool_use(), stop_reason="end_turn"), STATE, LIMITS),
    (msg(text("x"), tool_use(tool_input={}), stop_reason="max_tokens"), STATE, LIMITS),
    (msg(text("x"), stop_reason="max_tokens"), STATE, LIMITS),
    (msg(text("x"), stop_reason="max_tokens"), replace(STATE, escalations=1), LIMITS),
    (msg(stop_reason="model_context_window_exceeded"), STATE, LIMITS),
    (msg(stop_reason="refusal", stop_details={"category": "cyber", "explanation": "e"}), STATE,
     replace(LIMITS, refusal_fallback_model=FALLBACK)),
    (msg(server_tool_use(), stop_reason="pause_turn"), STATE, LIMITS),
    (msg(text("x"), stop_reason="stop_sequence", stop_sequence="END"), STATE, LIMITS),
    (msg(stop_reason="end_turn"), replace(STATE, after_tool_results=True), LIMITS),
    (msg(text("x"), stop_reason="weird"), STATE, LIMITS),
    (failure(529, "Overloaded"), replace(STATE, consecutive_overloads=2), replace(LIMITS, fallback_model=FALLBACK)),
    (failure(429, retry_after=3.0), STATE, LIMITS),
    (failure(400, PROMPT_TOO_LONG), STATE, LIMITS),
    (failure(401), STATE, LIMITS),
]


@pytest.mark.parametrize("outcome, state, limits", PURE_CASES)
def test_decide_is_pure(outcome, state, limits):
    before = copy.deepcopy((outcome, state, limits))
    first = decide(outcome, state, limits)
    second = decide(outcome, state, limits)
    assert first == second
    assert (outcome, state, limits) == before


def test_gates_are_pure():
    state = replace(STATE, num_turns=3, stop_hook_blocks=7)
    limits = replace(LIMITS, max_turns=3)
    before = copy.deepcopy((state, limits))
    gate = check_turns(state, limits)
    verdict = after_stop_hooks(True, "r", state, limits)
    assert isinstance(gate, End) and gate.branch == "max_turns" and gate.subtype == "error_max_turns"
    assert isinstance(verdict, HookBlocked) and verdict.feedback == STOP_HOOK_FEEDBACK.format(reason="r")
    assert check_turns(state, limits) == gate and after_stop_hooks(True, "r", state, limits) == verdict
    assert (state, limits) == before


def test_all_decide_branches_are_reachable():
    """Every branch of ROWS is produced by some input (decide, check_turns, after_stop_hooks or the loop)."""
    seen = {decide(o, s, lim).branch for o, s, lim in PURE_CASES}
    seen |= {
        decide(msg(text("x"), stop_reason="max_tokens"), replace(STATE, escalations=1, continuations_in_a_row=3),
               LIMITS).branch,
        decide(msg(stop_reason="model_context_window_exceeded"), replace(STATE, consecutive_compactions=3),
               LIMITS).branch,
        decide(msg(stop_reason="refusal"), STATE, LIMITS).branch,
        decide(msg(stop_reason="pause_turn"), replace(STATE, pauses_in_a_row=5), LIMITS).branch,
        decide(failure(500), STATE, LIMITS).branch,
        decide(failure(400, "max_tokens: 64000 > 8192"), replace(STATE, max_tokens=64_000), LIMITS).branch,
        check_turns(replace(STATE, num_turns=1), replace(LIMITS, max_turns=1)).branch,
        after_stop_hooks(True, "r", STATE, LIMITS).branch,
        after_stop_hooks(True, "r", replace(STATE, stop_hook_blocks=LIMITS.stop_hook_block_cap), LIMITS).branch,
    }
    loop_only = {"hook_stop"}  # a hook's continue: false, applied by the loop
    assert {branch for _, branch, _ in ROWS} - loop_only <= seen


# --- the choices around decide(): ends caused by effects, and compaction -----------------------------------

def test_the_ends_an_effect_causes_are_made_here_not_in_the_loop():
    from agentlab.core.transitions import context_give_up, prompt_hook_stop, stop_hook_said_stop, tool_hook_stop

    assert (prompt_hook_stop("no").branch, prompt_hook_stop("no").subtype) == ("hook_stop", "error_during_execution")
    assert tool_hook_stop("enough").message == "Stopped by a hook: enough"
    said = stop_hook_said_stop("all done")
    assert (said.branch, said.subtype, said.message) == ("hook_stop", "success", "all done")
    assert stop_hook_said_stop(None).message == ""
    gave_up = context_give_up("nothing to shrink")
    assert (gave_up.branch, gave_up.subtype, gave_up.reason) == ("context_give_up", "error_context_window",
                                                                 "nothing to shrink")


def test_a_completion_that_stands_is_recorded_once():
    from agentlab.core.transitions import Complete, completion_stands

    assert completion_stands(Complete("complete", "end_turn with no tool_use")) is None
    after_sequence = completion_stands(Complete("stop_sequence", "matched"))
    assert after_sequence is not None and after_sequence.branch == "complete"
    assert completion_stands(None) is not None


def test_compaction_targets_and_when_to_stop_come_from_the_limits():
    from agentlab.core.transitions import compaction_enough, compaction_target, fit_ratio

    assert fit_ratio("prompt is too long: 250000 tokens > 200000 maximum") == 0.8
    assert fit_ratio("no numbers") == 0.5
    # reactive: at most half of the history (or what the server said fits), less a 10% margin
    assert compaction_target("prompt_too_long", 10_000, "prompt is too long: 400 tokens > 100 maximum", LIMITS) \
        == int(10_000 * 0.25 * 0.9)
    assert compaction_target("context_window", 10_000, "", LIMITS) == 4500
    assert compaction_target("context_window", 10_000, "", replace(LIMITS, reactive_shrink=0.3)) == 2700
    proactive = replace(LIMITS, context_window=100_000, compact_threshold=0.5)
    assert compaction_target("proactive", 99_999, "", proactive) == 30_000
    assert compaction_enough("context_window", 4500, 4500, 0, LIMITS)
    assert not compaction_enough("context_window", 4501, 4500, 0, LIMITS)
    assert compaction_enough("proactive", 0, 30_000, 45_000, proactive)       # 0.9 of the threshold
    assert not compaction_enough("proactive", 0, 30_000, 45_001, proactive)


def test_proactive_compaction_is_due_past_the_threshold_only():
    from agentlab.core.transitions import proactive_compaction_due

    limits = replace(LIMITS, context_window=1000, compact_threshold=0.5)
    assert proactive_compaction_due(501, 3, -1, limits)
    assert not proactive_compaction_due(500, 3, -1, limits)
    assert not proactive_compaction_due(900, 2, -1, limits)          # too short a history to compact
    assert not proactive_compaction_due(900, 3, 3, limits)           # nothing new since it found nothing to do
    assert not proactive_compaction_due(10**6, 9, -1, LIMITS)        # no threshold: never


@pytest.mark.parametrize("name", ["reactive_shrink", "compact_margin", "proactive_target", "proactive_enough"])
def test_a_compaction_share_outside_zero_to_one_is_refused(name):
    from agentlab.core.errors import ConfigError

    with pytest.raises(ConfigError, match=f"Limits.{name} must be a share above 0 and at most 1"):
        Limits(**{name: 1.5})


def test_the_retry_jitter_is_a_bound_of_the_limits():
    from agentlab.core.errors import ConfigError

    assert Limits().backoff_jitter == 0.25
    with pytest.raises(ConfigError, match="Limits.backoff_jitter must be a finite share of the delay"):
        Limits(backoff_jitter=-1)


def test_state_updates_make_a_new_state_and_refuse_unknown_fields():
    """The state updates copy the state (the old one is unchanged, as with dataclasses.replace) and a name
    that is not a field is a TypeError, not a silently added attribute."""
    from agentlab.core.transitions import _evolve, note_request, note_success

    state = LoopState(model="m", max_tokens=100)
    after = note_success(note_request(state), {"stop_reason": "tool_use", "stop_sequence": None})
    assert (state.requests, state.num_turns, state.stop_reason) == (0, 0, None)
    assert after == replace(state, requests=1, num_turns=1, stop_reason="tool_use")
    with pytest.raises(TypeError, match="unexpected keyword argument 'turns'"):
        _evolve(state, turns=1)
