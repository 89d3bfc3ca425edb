"""The careful-loop rules of ``agentlab grade``, one at a time, on request lists built by hand: each rule holds
on a careful exchange and fails, with a reason naming the request, on each way of getting its branch wrong.
Also: the rule names in docs/conformance.md are the rule names in the code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agentlab.grading.command import (
    MAX_CONTINUATIONS,
    MAX_STOP_BLOCKS,
    RULE_NAMES,
    RULES,
    grade_record,
    observed_reports,
    record_from_requests,
)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "conformance.md"
M = "claude-sonnet-4-6"


# -- building requests by hand ---------------------------------------------------------------------------------

def body(*messages: dict[str, Any], max_tokens: int = 1024, model: str = M) -> dict[str, Any]:
    return {"model": model, "max_tokens": max_tokens, "messages": list(messages)}


def user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content[0] if len(content) == 1 and isinstance(content[0], str)
            else list(content)}


def asst(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def use(tid: str, name: str = "calculator") -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": {}}


def result(tid: str, content: str = "42") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": content}


def msg(stop: str, *blocks: str) -> dict[str, Any]:
    return {"status": 200, "stop_reason": stop, "blocks": list(blocks)}


def err(status: int, kind: str, message: str = "") -> dict[str, Any]:
    return {"status": status, "error": kind, "message": message or kind}


def grade(pairs: list[tuple[dict[str, Any], dict[str, Any]]], rule: str, scenario: str = "no_such_scenario", *,
          times: list[float] | None = None, steps: list[int | None] | None = None,
          result: dict[str, Any] | None = None):
    requests = [{"body": b, "reply": r, "step": steps[i] if steps else None} for i, (b, r) in enumerate(pairs)]
    record = record_from_requests(requests, scenario, times=times, result=result)
    return grade_record(record).check(rule)


def held(check) -> bool:
    assert check is not None, "the rule did not apply"
    return check.status == "pass"


P = user("Do the thing.")


def fails(check, pattern: str) -> None:
    assert check is not None, "the rule did not apply"
    assert check.status == "fail", f"expected a failure, got {check.status}: {check.why}"
    assert re.search(pattern, check.why), check.why


def differs(check, pattern: str, behaviour: str) -> None:
    """A policy difference (not a failure): the message, and the behaviour the summary lists once."""
    assert check is not None, "the rule did not apply"
    assert check.status == "policy", f"expected a policy difference, got {check.status}: {check.why}"
    assert re.search(pattern, check.why), check.why
    assert re.search(behaviour, check.policy), check.policy


# -- row 0: transient errors, overload fallback, fatal errors -----------------------------------------------------

def _retries(n_errors: int, ok_after: bool = True) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    pairs = [(body(P), err(529, "overloaded_error")) for _ in range(n_errors)]
    if ok_after:
        pairs.append((body(P), msg("end_turn", "text")))
    return pairs


def test_retry_with_backoff_holds_for_three_paused_retries():
    check = grade(_retries(3), "retry_with_backoff", times=[0, 0.5, 1.5, 3.5])
    assert held(check) and "waits 0.5 s, 1.0 s, 2.0 s" in check.why


def test_retry_with_backoff_differs_when_the_client_gives_up_after_two_retries():
    differs(grade(_retries(3, ok_after=False), "retry_with_backoff"), r"request 3 got 529 .* after 2 retries",
            r"^gives up on a transient error after 2 retries \(the reference loop: at least 3\)$")


def test_retry_with_backoff_fails_when_the_client_never_retries():
    fails(grade(_retries(1, ok_after=False), "retry_with_backoff"), r"request 1 got 529 .* without a retry")


def test_retry_with_backoff_may_give_up_after_three_retries():
    assert held(grade(_retries(4, ok_after=False), "retry_with_backoff"))


def test_retry_with_backoff_fails_on_a_retry_without_a_pause():
    fails(grade(_retries(1), "retry_with_backoff", times=[0, 0.01]), r"request 2 came 0\.01 s later")


def test_retry_with_backoff_reads_retry_after_from_the_scenario():
    # api_errors: step 1 is a 429 with retry-after 2
    pairs = [(body(P), err(529, "overloaded_error")), (body(P), err(429, "rate_limit_error")),
             (body(P), msg("end_turn", "text"))]
    fails(grade(pairs, "retry_with_backoff", "api_errors", times=[0, 0.6, 1.2], steps=[0, 1, 3]),
          r"retry-after 2 s")
    assert held(grade(pairs, "retry_with_backoff", "api_errors", times=[0, 0.6, 2.7], steps=[0, 1, 3]))


def test_retry_with_backoff_fails_when_the_conversation_changes_instead():
    pairs = [(body(P), err(500, "api_error")), (body(P, asst(text("?")), user("again")), msg("end_turn", "text"))]
    fails(grade(pairs, "retry_with_backoff"), r"request 2 .* instead of sending the same messages again")


def test_fallback_after_overload():
    pairs = _retries(3, ok_after=False) + [(body(P, model="claude-haiku-4-5"), msg("end_turn", "text"))]
    assert held(grade(pairs, "fallback_after_overload", "overloaded_fallback"))
    differs(grade(_retries(4), "fallback_after_overload", "overloaded_fallback"), r"request 4 still went to",
            r"keeps the overloaded model after 3 529s")
    differs(grade(_retries(3, ok_after=False), "fallback_after_overload", "overloaded_fallback"),
            r"the run ended instead of switching", r"ends after 3 529s in a row without switching")
    early = _retries(2, ok_after=False) + [(body(P, model="claude-haiku-4-5"), msg("end_turn", "text"))]
    differs(grade(early, "fallback_after_overload", "overloaded_fallback"), r"after 2 529s in a row, request 3 went",
            r"switches to the fallback model after 2 529s")
    assert grade(_retries(3), "fallback_after_overload") is None  # no fallback model set: not judged


def test_a_switch_to_the_fallback_model_is_not_a_retry():
    # overloaded_fallback: three 529s, then the fallback model answers. The switch comes at once (no pause): that
    # is fallback_after_overload's business, not a resend that should have waited
    pairs = _retries(3, ok_after=False) + [(body(P, model="claude-haiku-4-5"), msg("end_turn", "text"))]
    times = [0, 0.7, 1.9, 2.05]
    check = grade(pairs, "retry_with_backoff", "overloaded_fallback", times=times)
    assert held(check), check.why
    assert "2 transient errors, each sent again" in check.why
    assert "request 4 switched to the fallback model" in check.why
    assert held(grade(pairs, "fallback_after_overload", "overloaded_fallback", times=times))
    # the resends before the switch are still judged on their pauses
    fails(grade(pairs, "retry_with_backoff", "overloaded_fallback", times=[0, 0.01, 1.2, 1.3]),
          r"request 2 came 0\.01 s later")
    # another model than the configured fallback (or any model with none configured) is not a retry
    other = _retries(1, ok_after=False) + [(body(P, model="claude-opus-4-1"), msg("end_turn", "text"))]
    fails(grade(other, "retry_with_backoff", "overloaded_fallback", times=[0, 1]),
          r"request 2 went to claude-opus-4-1 instead of claude-sonnet-4-6")
    fails(grade(other, "retry_with_backoff", times=[0, 1]), r"only a configured fallback model may take over")
    # the fallback model's request may carry what the first model had in its system prompt as a user message
    # (Claude Code on claude-opus-5-5 falling back to claude-haiku-4-5): not a resend, so not judged on its messages
    moved = _retries(3, ok_after=False) + [(body(P, user("<system-reminder> the agent types"),
                                                 model="claude-haiku-4-5"), msg("end_turn", "text"))]
    assert held(grade(moved, "retry_with_backoff", "overloaded_fallback", times=times))
    # on the same model, a request with another user message is still no retry
    nudged = _retries(1, ok_after=False) + [(body(P, user("please try again")), msg("end_turn", "text"))]
    fails(grade(nudged, "retry_with_backoff", times=[0, 1]), r"request 2 added a user message instead of sending")


def test_the_recorded_fallback_runs_pass_both_overload_rules():
    reports = {r.client: r for r in observed_reports(clients=["claude-code"])}
    assert set(reports) == {"claude-code 2.1.197", "claude-code 2.1.332"}
    for report in reports.values():
        grade_ = report.grade("overloaded_fallback")
        assert grade_.check("retry_with_backoff").status == "pass", grade_.check("retry_with_backoff").why
        assert grade_.check("fallback_after_overload").status == "pass"


def test_no_retry_on_fatal():
    assert held(grade([(body(P), err(401, "authentication_error"))], "no_retry_on_fatal"))
    fails(grade([(body(P), err(401, "authentication_error")), (body(P), err(401, "authentication_error"))],
                "no_retry_on_fatal"), r"request 2 sent the same messages to the same model again")


# -- rows 0b and 4: compaction --------------------------------------------------------------------------------

LONG = [P, asst(use("t1")), user(result("t1", "a long file")), asst(use("t2")), user(result("t2"))]
SHORT = [user("Summary: a long file was read."), asst(use("t2")), user(result("t2"))]
TOO_LONG = err(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum")


def test_bounded_compaction_holds_when_the_history_is_compacted():
    assert held(grade([(body(*LONG), TOO_LONG), (body(*SHORT), msg("end_turn", "text"))], "bounded_compaction"))
    pairs = [(body(*LONG), msg("model_context_window_exceeded", "text")), (body(*SHORT), msg("end_turn", "text"))]
    assert held(grade(pairs, "bounded_compaction"))


def test_bounded_compaction_fails_on_a_resend_or_on_giving_up_at_once():
    fails(grade([(body(*LONG), TOO_LONG), (body(*LONG), TOO_LONG)], "bounded_compaction"),
          r"request 2 sent the same history again")
    fails(grade([(body(*LONG), TOO_LONG)], "bounded_compaction"), r"ended without compacting")
    pairs = [(body(*LONG), msg("model_context_window_exceeded", "text")),
             (body(*LONG, asst(text("partial")), user("Please continue.")), msg("end_turn", "text"))]
    fails(grade(pairs, "bounded_compaction"), r"request 2 asked the model to continue instead of compacting")


def test_bounded_compaction_differs_after_more_compactions_in_a_row_than_the_reference_loop():
    histories = [LONG] + [[user(f"Summary {k}."), asst(use("t2")), user(result("t2"))] for k in range(5)]
    pairs = [(body(*h), TOO_LONG) for h in histories]
    differs(grade(pairs, "bounded_compaction"), r"compaction number 4 in a row", r"compacts more than 3 times")
    assert held(grade(pairs[:3], "bounded_compaction"))  # gave up after two that did not fit


def test_bounded_compaction_is_not_judged_when_the_prompt_alone_is_too_long():
    check = grade([(body(P), TOO_LONG)], "bounded_compaction")
    assert check is not None and check.status == "not_reached" and "nothing to compact" in check.why


def test_a_role_system_item_beside_the_prompt_is_not_history_to_compact():
    # Claude Code on claude-opus-5-5 sends a role: system item among the messages of its first request: read as
    # the system prompt (records.diff_requests), it is no turn, so the prompt alone is still all there is
    system = {"role": "system", "content": "You are an interactive agent. Environment: ..."}
    check = grade([(body(P, system), TOO_LONG)], "bounded_compaction")
    assert check is not None and check.status == "not_reached" and "nothing to compact" in check.why
    # a history of turns beside it is still judged: giving up at once fails
    fails(grade([(body(*LONG, system), TOO_LONG)], "bounded_compaction"), r"ended without compacting")


# -- row 1: a tool call cut off by max_tokens --------------------------------------------------------------------

def test_escalate_cut_tool_call():
    cut = msg("max_tokens", "text", "tool_use")
    assert held(grade([(body(P, max_tokens=64), cut), (body(P, max_tokens=64000), msg("tool_use", "tool_use"))],
                      "escalate_cut_tool_call"))
    fails(grade([(body(P), cut), (body(P, asst(use("t1")), user(result("t1", "error"))), msg("end_turn", "text"))],
                "escalate_cut_tool_call"), r"request 2 ran the cut-off call")
    fails(grade([(body(P), cut)], "escalate_cut_tool_call"), r"the run ended there")
    fails(grade([(body(P), cut), (body(P), cut)], "escalate_cut_tool_call"), r"max_tokens 1024 → 1024")


# -- row 2: tool results ----------------------------------------------------------------------------------------

TWO = asst(text("Both."), use("t1"), use("t2", "get_weather"))


def test_tool_result_pairing_holds_for_one_message_of_results_whatever_the_label():
    pairs = [(body(P), msg("end_turn", "text", "tool_use", "tool_use")),
             (body(P, TWO, user(result("t1"), result("t2"))), msg("end_turn", "text"))]
    check = grade(pairs, "tool_result_pairing")
    assert held(check) and "2 tool calls answered (also under the label end_turn)" in check.why


@pytest.mark.parametrize("results, pattern", [
    ((result("t1"),), r"no result for t2"),
    ((result("t1"), result("t2"), result("t2")), r"t2 answered more than once"),
    ((result("t1"), result("t3")), r"no result for t2; results for unknown ids t3"),
    ((result("t1"), result("t2"), text("Here you go.")), r"share their message with text"),
])
def test_tool_result_pairing_fails_on_wrong_results(results, pattern):
    pairs = [(body(P), msg("tool_use", "text", "tool_use", "tool_use")),
             (body(P, TWO, user(*results)), msg("end_turn", "text"))]
    fails(grade(pairs, "tool_result_pairing"), pattern)


def test_tool_result_pairing_fails_when_results_are_split_or_missing():
    pairs = [(body(P), msg("tool_use", "text", "tool_use", "tool_use")),
             (body(P, TWO, user(result("t1")), asst(text("and")), user(result("t2"))), msg("end_turn", "text"))]
    fails(grade(pairs, "tool_result_pairing"), r"no result for t2|split")
    fails(grade([(body(P), msg("end_turn", "tool_use"))], "tool_result_pairing"),
          r"request 1's reply asked for 1 tool call \(labelled end_turn\); the run ended without")


# -- row 3: max_tokens -------------------------------------------------------------------------------------------

CUT = msg("max_tokens", "text")


def _continuations(k: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    history = [P]
    pairs = [(body(*history, max_tokens=100), CUT)]
    for i in range(k):
        history = [*history, asst(text(f"part {i}")), user("Output token limit hit. Continue.")]
        pairs.append((body(*history, max_tokens=100), CUT))
    return pairs


def test_bounded_max_tokens_recovery_holds_for_escalation_then_continuations():
    pairs = [(body(P, max_tokens=100), CUT)] + [(b | {"max_tokens": 64000}, r) for b, r in _continuations(3)]
    check = grade(pairs, "bounded_max_tokens_recovery")
    assert held(check) and "1 escalation and 3 continuations; then gave up" in check.why
    assert held(grade(_continuations(3), "bounded_max_tokens_recovery"))  # three continuations, no raise


def test_bounded_max_tokens_recovery_fails_on_each_wrong_move():
    fails(grade([(body(P), CUT)], "bounded_max_tokens_recovery"), r"ended after 0 escalations and 0 continuations")
    differs(grade(_continuations(1), "bounded_max_tokens_recovery"), r"ended after 0 escalations and 1 continuation",
            r"gives up on a cut-off reply after 1 recovery \(the reference loop: at least 3\)")
    fails(grade([(body(P), CUT), (body(P), CUT)], "bounded_max_tokens_recovery"), r"at the same max_tokens")
    fails(grade([(body(P), CUT), (body(P, user("continue")), msg("end_turn", "text"))],
                "bounded_max_tokens_recovery"), r"without sending back the partial answer")
    differs(grade(_continuations(MAX_CONTINUATIONS + 1), "bounded_max_tokens_recovery"),
            rf"for the {MAX_CONTINUATIONS + 1}th time in a row", r"asks to continue more than 3 times")


CEILING = err(400, "invalid_request_error", "max_tokens: 64000 > 4096, which is the maximum allowed")


def test_clamp_max_tokens():
    assert held(grade([(body(P, max_tokens=64000), CEILING), (body(P, max_tokens=4096), msg("end_turn", "text"))],
                      "clamp_max_tokens"))
    fails(grade([(body(P, max_tokens=64000), CEILING)], "clamp_max_tokens"), r"the run ended")
    fails(grade([(body(P, max_tokens=64000), CEILING), (body(P, max_tokens=8192), msg("end_turn", "text"))],
                "clamp_max_tokens"), r"max_tokens 8192")
    # a request already within the ceiling that still gets the error is not the client's doing
    assert grade([(body(P, max_tokens=4096), CEILING)], "clamp_max_tokens") is None


# -- rows 5 to 11 -------------------------------------------------------------------------------------------------

def _refused(token: str | None = "tok", recommended: str | None = None) -> dict[str, Any]:
    return {**msg("refusal"), "stop_details": {"type": "refusal", "fallback_credit_token": token,
                                               "fallback_has_prefill_claim": False if token else None,
                                               "recommended_model": recommended}}


def test_credit_token_retry():
    fallback = dict(body(P, model="claude-opus-4-8"), fallback_credit_token="tok")
    assert held(grade([(body(P), _refused()), (fallback, msg("end_turn", "text"))], "credit_token_retry"))
    fails(grade([(body(P), _refused()), ({**fallback, "messages": [P, user("Please.")]}, msg("end_turn", "text"))],
                "credit_token_retry"), r"request 2 echoes the credit token of request 1's refusal but added a user")
    fails(grade([(body(P), _refused()), ({**fallback, "model": M}, msg("end_turn", "text"))], "credit_token_retry"),
          r"to claude-sonnet-4-6, the model that refused")


def test_stop_after_chain_refusal():
    chain = dict(body(P, model="claude-opus-5-5"), fallbacks="default")
    assert held(grade([(chain, _refused(None))], "stop_after_chain_refusal"))
    assert held(grade([(chain, _refused(None, "claude-opus-4-8")), (body(P, model="claude-opus-4-8"),
                                                                       msg("end_turn", "text"))],
                      "stop_after_chain_refusal"))
    fails(grade([(chain, _refused(None)), (body(P, model="claude-opus-4-8"), msg("end_turn", "text"))],
                "stop_after_chain_refusal"), r"request 1 named fallbacks \(default\) and was refused")


def test_keep_fallback_block():
    hop = {"type": "fallback", "from": {"model": "claude-opus-5-5"}, "to": {"model": "claude-opus-4-8"}}
    served = {"status": 200, "stop_reason": "tool_use", "content": [hop, use("t1")]}
    assert held(grade([(body(P), served), (body(P, asst(hop, use("t1")), user(result("t1"))),
                                           msg("end_turn", "text"))], "keep_fallback_block"))
    fails(grade([(body(P), served), (body(P, asst(use("t1")), user(result("t1"))), msg("end_turn", "text"))],
                "keep_fallback_block"), r"request 2 sent request 1's answer back without its fallback block")


def test_compaction_block_unchanged():
    block = {"type": "compaction", "content": "Summary.", "signature": "sig", "encrypted_content": "opaque"}
    paused = {"status": 200, "stop_reason": "compaction", "content": [block]}
    assert held(grade([(body(P), paused), (body(P, asst(block)), msg("end_turn", "text"))],
                      "compaction_block_unchanged"))
    fails(grade([(body(P), paused), (body(P, asst({**block, "signature": "forged"})), msg("end_turn", "text"))],
                "compaction_block_unchanged"), r"request 2 sent request 1's compaction block back changed")


def test_no_resend_after_refusal():
    rule = "no_resend_after_refusal"
    assert held(grade([(body(P), msg("refusal"))], rule))
    assert held(grade([(body(P), msg("refusal")), (body(P, model="claude-haiku-4-5"), msg("end_turn", "text"))], rule))
    fails(grade([(body(P), msg("refusal")), (body(P), msg("refusal"))], rule),
          rf"request 2 sent the same messages again to {M}, the model that refused, with the turn that triggered "
          r"the refusal left as it was \(the context not reset\)")


def test_a_note_after_the_refused_turn_or_merged_into_it_is_no_reset():
    """"You must reset the conversation context before continuing. You can remove or rephrase the turn that
    triggered the refusal" ("Handle streaming refusals"): a note after that turn, or in it, keeps it as it was."""
    rule, refused = "no_resend_after_refusal", (body(P), msg("refusal"))
    appended = body(P, asst(text("(refused)")), user("Please try again."))
    fails(grade([refused, (appended, msg("refusal"))], rule), r"request 2 added a user message to .*not reset")
    merged = body(user(text("Do the thing."), text("<system-reminder>A safety classifier stopped that reply.")))
    fails(grade([refused, (merged, msg("refusal"))], rule), r"the turn that triggered the refusal left as it was")


def test_the_same_model_after_a_reset_context_passes():
    """The refused turn rephrased, or the history cleared and started again, then the same model: a reset."""
    rule, refused = "no_resend_after_refusal", (body(P), msg("refusal"))
    rephrased = body(user("Describe the general idea, without specifics."))
    check = grade([refused, (rephrased, msg("end_turn", "text"))], rule)
    assert held(check) and check.why == (f"after the refusal, request 2 asked {M} again with 1 message of the "
                                         "refused request removed or rewritten (the context reset)"), check.why
    earlier = [P, asst(text("Done.")), user("And the next thing?")]
    cleared = body(user("Start over: what is the next thing?"))
    assert held(grade([(body(*earlier), msg("refusal")), (cleared, msg("end_turn", "text"))], rule))


PAUSED = [text("Let me search for that."),
          {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
           "input": {"query": "AI news this week"}}]


def test_pause_turn_resume():
    paused = msg("pause_turn", "text", "server_tool_use")
    assert held(grade([(body(P), paused), (body(P, asst(*PAUSED)), msg("end_turn", "text"))], "pause_turn_resume",
                      "pause_turn", steps=[0, 1]))
    fails(grade([(body(P), paused)], "pause_turn_resume"), r"the run ended there")
    fails(grade([(body(P), paused), (body(P, asst(*PAUSED), user("continue")), msg("end_turn", "text"))],
                "pause_turn_resume"), r"added a user message after the paused content")
    fails(grade([(body(P), paused), (body(P, asst(PAUSED[0])), msg("end_turn", "text"))], "pause_turn_resume"),
          r"sent back \[text\] instead of the paused content \[text, server_tool_use\]")
    changed = [text("Searching."), PAUSED[1]]
    fails(grade([(body(P), paused), (body(P, asst(*changed)), msg("end_turn", "text"))], "pause_turn_resume",
                "pause_turn", steps=[0, 1]), r"changed the paused content")


def test_stop_when_done():
    assert held(grade([(body(P), msg("stop_sequence", "text"))], "stop_when_done"))
    again = body(P, asst(text("x")), user("go on"))
    fails(grade([(body(P), msg("tool_use", "text")), (again, msg("end_turn", "text"))], "stop_when_done"),
          r"request 1 got a final answer \(tool_use \[text\]\); request 2 added a user")
    # a client that sends nothing more but does not end either: the answer did not end the run
    hung = grade([(body(P), msg("end_turn", "text"))], "stop_when_done", result={"timed_out": True, "timeout_s": 5})
    fails(hung, r"request 1 got a final answer \(end_turn \[text\]\); .* still running at the timeout")


def test_nudge_empty_turn():
    first = (body(P), msg("tool_use", "tool_use"))
    after = body(P, asst(use("t1")), user(result("t1")))
    nudged = body(P, asst(use("t1")), user(result("t1")), user("Please continue."))
    empty = msg("end_turn")
    check = grade([first, (after, empty), (nudged, msg("end_turn", "text"))], "nudge_empty_turn")
    assert held(check) and "'Please continue.'" in check.why
    fails(grade([first, (after, empty)], "nudge_empty_turn"), r"the run ended with no answer")
    fails(grade([first, (after, empty), (after, empty)], "nudge_empty_turn"), r"a bare resend")
    twice = body(P, asst(use("t1")), user(result("t1")), user("Please continue."), user("Please continue!"))
    fails(grade([first, (after, empty), (nudged, empty), (twice, msg("end_turn", "text"))], "nudge_empty_turn"),
          r"nudges a second time")


def test_stop_at_max_turns():
    # max_turns: 3 in that scenario
    loop = [(body(P, *[user(f"r{k}")] * k), msg("tool_use", "tool_use")) for k in range(4)]
    assert held(grade(loop[:3], "stop_at_max_turns", "max_turns"))
    fails(grade(loop, "stop_at_max_turns", "max_turns"), r"4 model calls returned a message; the limit is max_turns 3")


def _hook_run(blocks: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    history = [P]
    pairs = [(body(*history), msg("end_turn", "text"))]
    for k in range(blocks):
        history = [*history, asst(text(f"Done {k}.")), user("Stop hook feedback: Not done yet.")]
        pairs.append((body(*history), msg("end_turn", "text")))
    return pairs


def test_stop_hook_feedback():
    # stop_hook_cap: a hook that always blocks
    check = grade(_hook_run(MAX_STOP_BLOCKS), "stop_hook_feedback", "stop_hook_cap")
    assert held(check) and "8 times, the cap" in check.why
    fails(grade(_hook_run(0), "stop_hook_feedback", "stop_hook_cap"), r"its reason was sent back 0 times")
    differs(grade(_hook_run(MAX_STOP_BLOCKS + 1), "stop_hook_feedback", "stop_hook_cap"),
            r"sent back 9 times, then the run ended; the reference loop stops after 8",
            r"stops feeding back a Stop hook that always blocks after 9 times")
    differs(grade(_hook_run(3), "stop_hook_feedback", "stop_hook_cap"), r"sent back 3 times",
            r"after 3 times \(the reference loop: after 8\)")
    # a record keeps 160 characters of a text: a message that names the Stop hook counts as its feedback
    named = [(body(P), msg("end_turn", "text")),
             (body(P, asst(text("Done.")), user("<system-reminder> Stop hook blocking error from command: \"...")),
              msg("end_turn", "text"))]
    assert held(grade(named, "stop_hook_feedback", "stop_hook"))
    other = _hook_run(0) + [(body(P, asst(text("Done.")), user("Anything else?")), msg("end_turn", "text"))]
    fails(grade(other, "stop_hook_feedback", "stop_hook_cap"), r"request 2 added a user message without the hook")


def test_sends_the_prompt():
    assert held(grade([(body(user("What is the capital of France?")), msg("end_turn", "text"))], "sends_the_prompt",
                      "end_turn"))
    fails(grade([(body(user("Hello.")), msg("end_turn", "text"))], "sends_the_prompt", "end_turn"),
          r"request 1 does not carry the scenario's prompt \('What is the capital of France\?'\)")
    fails(grade([], "sends_the_prompt", "end_turn", result={"raised": "ValueError"}),
          r"no request reached the server \(raised ValueError\)")


def test_ends_on_its_own():
    assert held(grade([(body(P), msg("end_turn", "text"))], "ends_on_its_own"))
    fails(grade([(body(P), msg("end_turn", "text"))], "ends_on_its_own", result={"timed_out": True, "timeout_s": 5}),
          r"did not end within 5 s; stopped after 1 request")


def test_ends_cleanly():
    final = [(body(P), msg("end_turn", "text"))]
    assert grade(final, "ends_cleanly") is None  # ended well: nothing to judge
    fails(grade(final, "ends_cleanly", result={"raised": "ValueError", "text": "no"}),
          r"request 1 got end_turn \[text\], a final answer; the loop raised ValueError \(no\)")
    fails(grade(final, "ends_cleanly", result={"exit_code": 1}), r"the command exited with status 1")
    fatal = [(body(P), err(401, "authentication_error"))]
    check = grade(fatal, "ends_cleanly", result={"raised": "AuthenticationError"})
    assert held(check) and "which no retry can fix" in check.why
    fails(grade(fatal, "ends_cleanly", result={"raised": "KeyError", "text": "'id'"}),
          r"a KeyError is a bug in the loop's own code")
    fails(grade(fatal, "ends_cleanly", result={"exit_code": 1, "stderr": "Traceback ...\nTypeError: x is None"}),
          r"a TypeError is a bug")
    refused = record_from_requests([{"body": body(P), "kind": "invalid_request",  # the validator's 400, not scripted
                                     "reply": err(400, "invalid_request_error", "messages.1: empty")}],
                                   result={"raised": "BadRequestError"})
    fails(grade_record(refused).check("ends_cleanly"), r"\(messages.1: empty\), which the scenario did not send")
    assert held(grade([(body(P), msg("refusal"))], "ends_cleanly", result={"exit_code": 1}))


def test_every_rule_has_a_failing_case_here():
    source = Path(__file__).read_text(encoding="utf-8")
    missing = [name for name in RULE_NAMES if not re.search(rf'fails\(grade\([^;]*?"{name}"', source, re.S)]
    assert not missing, f"rules with no failing case in this file: {missing}"


# -- the rules and their documentation --------------------------------------------------------------------------

def test_docs_list_the_rules_of_the_code_in_the_same_order():
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## 6. Grade it"):]
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE)
    assert documented == list(RULE_NAMES)
    assert len({r.name for r in RULES}) == len(RULES)


def test_the_recorded_clients_report_cards():
    reports = {r.client.split()[0]: r for r in observed_reports()}
    assert reports["agentlab"].passed, reports["agentlab"].failed
    claude = reports["claude-code"].failed
    # Claude Code searches with its own WebSearch tool, never the API's web_search: the live API could not have
    # paused a search it was not offered, so its pause_turn record is not reached, not a failure
    assert "pause_turn" not in claude
    paused = reports["claude-code"].grade("pause_turn")
    assert paused.mark == "–" and "web_search, which the request does not offer" in paused.not_reached[0]
    assert claude["incomplete_tool_use"] == ["escalate_cut_tool_call"]
    runner = reports["tool-runner"].failed
    assert runner["max_tokens_give_up"] == ["bounded_max_tokens_recovery"]
    assert runner["mislabel_end_turn"] == ["tool_result_pairing"]
