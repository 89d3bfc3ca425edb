"""The exercise of lesson 11: the solution passes its check, wrong answers fail with a clear message."""

from __future__ import annotations

import pytest

from agentlab.exercises.lesson11 import (
    ANSWERS,
    SOLUTION,
    built_cases,
    check_after_max_tokens,
    contrast,
    max_tokens_cases,
    show_requests,
    what_each_client_did,
)


def test_the_solution_passes_and_the_tally_says_what_each_client_did(capsys):
    assert check_after_max_tokens(SOLUTION).solved
    out = capsys.readouterr().out
    assert out.startswith(f"after_max_tokens: correct on all {len(max_tokens_cases())} max_tokens replies in the "
                          f"records and the {len(built_cases())} built cases")
    what_each_client_did()
    tally = {line[:22].strip(): line[22:] for line in capsys.readouterr().out.splitlines()}
    assert "escalate" not in tally["claude-code 2.1.197"] and "continue" in tally["claude-code 2.1.197"]
    assert tally["agentlab 0.1.0"].startswith("escalate ×")


def _what_the_article_expects_first(diff):
    if diff is None:
        return "stop"
    return "escalate"


def test_always_escalating_fails_and_says_where():
    with pytest.raises(AssertionError, match=r"^claude-code 2\.1\.197 · incomplete_tool_use · after the max_tokens "
                                             r"reply to request 1 \(request 2\): you said 'escalate', the record says "
                                             r"'run_tools'\. The diff: same_messages=False"):
        check_after_max_tokens(_what_the_article_expects_first)


def test_the_cases_cover_every_answer():
    cases = max_tokens_cases()
    assert {c["expected"] for c in cases} == set(ANSWERS)
    assert all(c["diff"] is None for c in cases if c["expected"] == "stop")


solution = SOLUTION


def never_escalates(diff):
    if diff is None:
        return "stop"
    return "run_tools" if diff["tool_results"] else "continue"


def ignores_tools(diff):
    if diff is None:
        return "stop"
    return "escalate" if diff["same_messages"] else "continue"


def no_request_is_continue(diff):
    """A run that ended on max_tokens read as a continuation."""
    if diff is None:
        return "continue"
    return solution(diff)


def crashes_on_none(diff):
    return solution(diff) if diff["same_messages"] is not None else "stop"


def keyed_on_user_text(diff):
    """No user text added read as an escalation: the records alone do not separate it from the solution."""
    if diff is None:
        return "stop"
    if diff["tool_results"]:
        return "run_tools"
    return "continue" if diff["injected_user_texts"] else "escalate"


def keyed_on_max_tokens(diff):
    """A raised max_tokens read as an escalation, whatever the messages did."""
    if diff is None:
        return "stop"
    if (diff["changed"] or {}).get("max_tokens"):
        return "escalate"
    return "run_tools" if diff["tool_results"] else "continue"


def bad_word(diff):
    return "continuation" if diff else "stop"


def test_a_solution_written_here_passes(capsys):
    check_after_max_tokens(solution)
    assert "correct on all" in capsys.readouterr().out


@pytest.mark.parametrize("wrong,message", [
    (never_escalates, r"^agentlab 0\.1\.0 · .*you said 'continue', the record says 'escalate'\. The diff: "
                      r"same_messages=True, max_tokens \d+ → 64000"),
    (ignores_tools, r"you said 'continue', the record says 'run_tools'\. The diff: .*1 tool_result\(s\)"),
    (no_request_is_continue, r"you said 'continue', the record says 'stop'\. The diff: no request followed"),
    (crashes_on_none, r"after_max_tokens raised TypeError: .*no request followed the max_tokens reply"),
    (keyed_on_user_text, r"^built \(not recorded\) · continue_by_prefill · .*you said 'escalate', the record says "
                         r"'continue'\. The diff: same_messages=False, max_tokens unchanged, 0 tool_result\(s\), "
                         r"no user text added"),
    (keyed_on_max_tokens, r"^built \(not recorded\) · continue_with_more_room · .*you said 'escalate', the record "
                          r"says 'continue'\. The diff: same_messages=False, max_tokens 100 → 4096"),
    (bad_word, r"returned 'continuation'; return one of escalate, continue, run_tools, stop"),
])
def test_wrong_answers_fail_with_a_clear_message(wrong, message):
    with pytest.raises(AssertionError, match=message):
        check_after_max_tokens(wrong)


def test_the_lesson_helpers_print_the_records(capsys):
    show_requests("claude-code/2.1.197/max_tokens_give_up")
    contrast("pause_turn")
    out = capsys.readouterr().out
    # the 2.1.197 record: its continuation text is plain (2.1.332 wraps the same text in a system-reminder tag)
    assert "continuation  → max_tokens [text]  adds 'Output token limit hit" in out
    # the recorded CLI never offers web_search: the scripted model answers end_turn, the run ends success
    assert "claude-code 2.1.197: 1 request; success" in out
    assert "claude-code 2.1.332: 1 request; success" in out
    assert "agentlab 0.1.0: 2 requests: resume; success" in out
