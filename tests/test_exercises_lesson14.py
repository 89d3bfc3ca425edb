"""Lesson 14's exercise: the solution passes, wrong answers fail naming the case, the stub is "not solved yet"."""

from __future__ import annotations

import re

import pytest

from agentlab.exercises import lesson14
from agentlab.exercises.lesson14 import check_count_calls


def test_the_solution_passes(capsys):
    check_count_calls(lesson14.SOLUTION)
    out = capsys.readouterr().out
    assert out.startswith("Right: 28 cases pass") and "Not solved" not in out


def test_the_stub_is_not_solved_yet_and_does_not_raise(capsys):
    def count_calls(entries):
        raise NotImplementedError("count the replies")

    check_count_calls(count_calls)
    assert capsys.readouterr().out.startswith("Not solved yet: count_calls")


def every_assistant_entry(entries):
    return sum(1 for e in entries if e.get("type") == "assistant")


def by_message_id_with_errors(entries):
    return len({e["message"]["id"] for e in entries if e.get("type") == "assistant" and not e.get("isSidechain")})


def with_sidechains(entries):
    return len({(e["message"]["id"], e.get("requestId")) for e in entries
                if e.get("type") == "assistant" and not e.get("isApiErrorMessage")})


def crashes_on_entries_without_message(entries):
    return len({(e["message"]["id"], e["requestId"]) for e in entries if not e.get("isApiErrorMessage")
                and not e.get("isSidechain")})


@pytest.mark.parametrize("wrong, case", [
    (every_assistant_entry, "one streamed reply: text and tool_use as two entries"),
    (by_message_id_with_errors, "an API error is not a reply"),
    (with_sidechains, "a sub-agent's reply is not the main thread's"),
    (crashes_on_entries_without_message, "one reply, one entry"),
])
def test_wrong_answers_fail_naming_the_case_and_the_rule(wrong, case):
    with pytest.raises(AssertionError, match=re.escape(f"case {case!r}")) as raised:
        check_count_calls(wrong)
    assert "one call per distinct (message id, request id)" in str(raised.value)
