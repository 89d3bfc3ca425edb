"""A wrong answer, as a learner sees it in a notebook: the check's message (case, expected, got, rule) and
nothing of the checker's code. Run in a real kernel (nbclient and ipykernel), as JupyterLab runs a cell."""

from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient

from agentlab.exercises import WrongAnswer, exercise
from agentlab.exercises.lesson14 import check_count_calls
from tests.preloaded_kernel import kernel_for

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def run(pytestconfig):
    def cells(*sources: str) -> list[dict]:
        """The outputs of the last of ``sources``, each run as a cell of one notebook in a new kernel."""
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        NotebookClient(nb, kernel_name=kernel_for(pytestconfig), timeout=120, allow_errors=True).execute()
        return nb.cells[-1].outputs
    return cells


@pytest.mark.parametrize("cells", [
    ("from agentlab.exercises.lesson14 import check_count_calls", "check_count_calls(lambda entries: 7)"),
    ("from agentlab.exercises.lesson12 import check_agent_loop",
     "def agent_loop(client, prompt, tools, run_tool, model=None):\n    return 'no call at all'",
     "check_agent_loop(agent_loop, scenarios=['end_turn'])"),
], ids=["lesson14", "lesson12"])
def test_a_wrong_answer_shows_its_message_and_no_checker_frames(run, cells):
    (error,) = [o for o in run(*cells) if o["output_type"] == "error"]
    assert error["ename"] == "WrongAnswer"
    shown = ANSI.sub("", "\n".join(error["traceback"]))
    assert shown.startswith("Wrong answer: ") and error["evalue"] in shown
    assert "Traceback" not in shown and "File " not in shown and "agentlab/exercises" not in shown
    assert len(shown.splitlines()) == len(error["evalue"].splitlines())


def test_other_errors_keep_their_traceback(run):
    (error,) = [o for o in run("def f():\n    raise ValueError('mine')", "f()") if o["output_type"] == "error"]
    assert error["ename"] == "ValueError" and "f()" in ANSI.sub("", "\n".join(error["traceback"]))


def test_a_check_raises_wrong_answer_an_assertion_error_with_its_message():
    with pytest.raises(WrongAnswer, match=r"^case 'one reply, one entry': expected 1 call\(s\), got 7: one call ") \
            as caught:
        check_count_calls(lambda entries: 7)
    assert isinstance(caught.value, AssertionError) and caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_a_checks_own_wrong_answer_passes_through_unchanged():
    mine = WrongAnswer("case 1: expected 2, got 3: the rule")

    @exercise("lesson14", "f")
    def check(f):
        raise mine

    with pytest.raises(WrongAnswer) as caught:
        check(lambda: None)
    assert caught.value is mine
