"""The exercise of lesson 11: the notebook's solution passes its check, wrong answers fail with a clear message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentlab.exercises.lesson11 import (
    ANSWERS,
    check_after_max_tokens,
    contrast,
    max_tokens_cases,
    show_requests,
)

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "11_real_claude_code.ipynb"


def _notebook_answer(*tags: str):
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    namespace: dict[str, Any] = {}
    for tag in tags:
        sources = ["".join(c["source"]) for c in cells if tag in c.get("metadata", {}).get("tags", [])]
        assert len(sources) == 1, f"expected one cell tagged {tag!r}, found {len(sources)}"
        exec(compile(sources[0], f"11_real_claude_code:{tag}", "exec"), namespace)
    return namespace["after_max_tokens"]


def test_the_solution_cell_is_hidden():
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    (solution,) = [c for c in cells if "solution" in c.get("metadata", {}).get("tags", [])]
    assert solution["metadata"]["jupyter"]["source_hidden"] is True


def test_the_notebook_solution_passes(capsys):
    check_after_max_tokens(_notebook_answer("exercise", "solution"))
    out = capsys.readouterr().out
    assert out.startswith(f"after_max_tokens: correct on all {len(max_tokens_cases())} max_tokens replies")
    assert "claude-code 2.1.197" in out and "escalate" not in out.split("claude-code 2.1.197")[1].splitlines()[0]


def test_the_stub_fails_and_says_where():
    with pytest.raises(AssertionError, match=r"^claude-code 2\.1\.197 · incomplete_tool_use · after the max_tokens "
                                             r"reply to request 1 \(request 2\): you said 'escalate', the record says "
                                             r"'run_tools'\. The diff: same_messages=False"):
        check_after_max_tokens(_notebook_answer("exercise"))


def test_the_cases_cover_every_answer():
    cases = max_tokens_cases()
    assert {c["expected"] for c in cases} == set(ANSWERS)
    assert all(c["diff"] is None for c in cases if c["expected"] == "stop")


def solution(diff):
    if diff is None:
        return "stop"
    if diff["tool_results"]:
        return "run_tools"
    if diff["same_messages"]:
        return "escalate"
    return "continue"


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
    (bad_word, r"returned 'continuation'; return one of escalate, continue, run_tools, stop"),
])
def test_wrong_answers_fail_with_a_clear_message(wrong, message):
    with pytest.raises(AssertionError, match=message):
        check_after_max_tokens(wrong)


def test_the_lesson_helpers_print_the_records(capsys):
    show_requests("max_tokens_give_up")
    contrast("pause_turn")
    out = capsys.readouterr().out
    assert "continuation  → max_tokens [text]  adds 'Output token limit hit" in out
    assert "claude-code 2.1.197: 1 request; error_during_execution (exit 1)" in out
    assert "agentlab 0.1.0: 2 requests: resume; success" in out
