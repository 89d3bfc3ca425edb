"""The shared exercise mechanism: a stub is "not solved yet", a wrong answer raises, a right one passes."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentlab.exercises import Verdict, exercise, hint, lesson_module, show_solution

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# lesson -> (the name the learner defines, its check)
LESSONS = {
    "lesson00": ("naive_loop", "check_naive_loop"),
    "lesson01": ("tools_to_run", "check_tools_to_run"),
    "lesson02": ("on_max_tokens", "check_on_max_tokens"),
    "lesson03": ("drop_middle", "check_drop_middle"),
    "lesson04": ("on_refusal", "check_on_refusal"),
    "lesson05": ("my_scenario", "check_stop_scenario"),
    "lesson06": ("finish_turn", "check_finish_turn"),
    "lesson07": ("retry_delay", "check_retry_delay"),
    "lesson08": ("runaway", "check_runaway_scenario"),
    "lesson09": ("check_once", "check_stop_once_hook"),
    "lesson10": ("my_decide", "check_my_decide"),
    "lesson11": ("after_max_tokens", "check_after_max_tokens"),
    "lesson13": ("cost_of_call", "check_cost_of_call"),
    "lesson14": ("count_calls", "check_count_calls"),
}


@exercise("lesson99", "double")
def check_double(double):
    """A toy check in the lessons' style."""
    for case, n in (("zero", 0), ("three", 3)):
        try:
            got = double(n)
        except Exception as exc:  # the lessons' checks report a crash as a wrong case
            raise AssertionError(f"case {case!r}: double({n}) raised {type(exc).__name__}: {exc}") from exc
        assert got == 2 * n, f"case {case!r}: expected {2 * n}, got {got!r}: double returns twice its input"
    return "All 2 cases pass: double doubles."


def stub(n):
    raise NotImplementedError("your code here")


def test_the_stub_is_not_solved_yet_and_nothing_raises(capsys):
    verdict = check_double(stub)
    out = capsys.readouterr().out
    assert isinstance(verdict, Verdict) and not verdict.solved and verdict.status == "not solved"
    assert out.startswith("Not solved yet: double still raises NotImplementedError")
    assert "hint('lesson99')" in out and "show_solution('lesson99')" in out
    assert "pass" not in out


def test_a_stub_reached_through_the_check_s_own_except_is_still_not_solved(capsys):
    # check_double catches Exception; NotImplementedError must not be reported as a wrong case
    def half_done(n):
        if n == 0:
            return 0
        raise NotImplementedError

    assert check_double(half_done).status == "not solved"


@pytest.mark.parametrize(("wrong", "message"), [
    (lambda n: n + n + 1, r"case 'zero': expected 0, got 1: double returns twice its input"),
    (lambda n: 0, r"case 'three': expected 6, got 0"),
    (lambda n: 1 / 0, r"case 'zero': double\(0\) raised ZeroDivisionError"),
])
def test_a_wrong_answer_raises_an_assertion_naming_case_expected_got(wrong, message, capsys):
    with pytest.raises(AssertionError, match=message):
        check_double(wrong)
    assert "Not solved yet" not in capsys.readouterr().out


def test_the_right_answer_prints_the_pass_line(capsys):
    verdict = check_double(lambda n: 2 * n)
    assert verdict.solved and verdict.message == "All 2 cases pass: double doubles."
    assert capsys.readouterr().out == "All 2 cases pass: double doubles.\n"


def test_a_check_must_return_its_pass_line():
    @exercise("lesson99", "f")
    def check_silent(f):
        f()

    with pytest.raises(TypeError, match="must return its pass line"):
        check_silent(lambda: None)


def test_unknown_lessons_are_named():
    with pytest.raises(ValueError, match="no exercise for 'lesson99'"):
        lesson_module("lesson99")
    with pytest.raises(ValueError, match="unknown lesson 'loop'") as raised:
        hint("loop")
    # the range it names is the lessons that exist, first to last
    modules = sorted(p.stem for p in Path(lesson_module("lesson00").__file__).parent.glob("lesson[0-9][0-9].py"))
    assert f"write it as {modules[0]!r} … {modules[-1]!r} (or the number)" in str(raised.value)
    assert modules[-1] >= "lesson13"
    with pytest.raises(ValueError, match="no exercise"):
        show_solution(98)


# --- every lesson's exercise ------------------------------------------------------------------------------------

@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_the_solution_passes(lesson: str, capsys) -> None:
    name, check = LESSONS[lesson]
    module = lesson_module(lesson)
    assert module.SOLUTION.__name__ == name
    verdict = getattr(module, check)(module.SOLUTION)
    assert verdict.solved
    assert capsys.readouterr().out == verdict.message + "\n"


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_a_stub_is_not_solved_yet(lesson: str, capsys) -> None:
    name, check = LESSONS[lesson]

    def stub(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("your code here")

    verdict = getattr(lesson_module(lesson), check)(stub)
    assert verdict.status == "not solved"
    out = capsys.readouterr().out
    assert out.startswith(f"Not solved yet: {name} still raises NotImplementedError")
    assert "pass" not in out and "correct" not in out


def _notebook_cells(lesson: str) -> list[dict[str, Any]]:
    (path,) = NOTEBOOKS.glob(f"{lesson[-2:]}_*.ipynb")
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def notebook_namespace(cells: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The names a learner has when the exercise cell runs with its stub replaced: what the notebook's code
    cells above it import and define at top level (imports, functions, classes; nothing that runs a
    scenario), and the exercise cell itself minus the stub of ``name``. The module's own names are NOT in it,
    so a solution that needs an import the notebook lacks fails here as it would in the notebook."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        is_exercise = "exercise" in cell.get("metadata", {}).get("tags", [])
        if is_exercise:  # everything in the exercise cell but the stub (e.g. lesson 02's constants import)
            body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name == name)]
        else:
            body = [n for n in tree.body if isinstance(n, keep)]
        exec(compile(ast.Module(body=body, type_ignores=[]), "notebook cell", "exec", dont_inherit=True), namespace)
        if is_exercise:
            assert name not in namespace, f"the exercise cell defines {name} outside its stub"
            return namespace
    raise AssertionError(f"no code cell tagged 'exercise' defines {name}")


def test_the_notebook_namespace_lacks_what_the_notebook_does_not_import() -> None:
    # the failure the namespace exists to catch: an annotation naming Any, which no lesson imports
    namespace = notebook_namespace(_notebook_cells("lesson13"), "cost_of_call")
    with pytest.raises(NameError, match="'Any'"):
        exec(compile("def cost_of_call(usage: dict[str, Any], price): ...", "cell", "exec", dont_inherit=True),
             namespace)
    # lesson 13 opens with its exercise: no cell above it, so no name but the builtins
    assert set(namespace) == {"__name__", "__builtins__"}, sorted(namespace)


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_show_solution_prints_source_that_passes_in_the_notebook_and_hint_stops_short_of_it(
        lesson: str, capsys) -> None:
    name, check = LESSONS[lesson]
    module = lesson_module(lesson)
    show_solution(lesson)
    shown = capsys.readouterr().out
    assert shown.startswith(f"# A solution for {lesson}") and f"def {name}(" in shown
    # the learner pastes the printed text over the stub: run it among the notebook's names, not the module's
    namespace = notebook_namespace(_notebook_cells(lesson), name)
    # dont_inherit: this file's `from __future__ import annotations` must not hide an annotation's NameError
    exec(compile(shown, f"show_solution({lesson!r})", "exec", dont_inherit=True), namespace)
    assert getattr(module, check)(namespace[name]).solved
    capsys.readouterr()
    hint(lesson)
    said = capsys.readouterr().out
    assert said.startswith("Hint: ") and f"def {name}(" not in said and len(said) > 80
    show_solution(int(lesson[-2:]))
    assert capsys.readouterr().out == shown


def test_lesson12_s_printed_solution_runs_in_the_notebook(capsys) -> None:
    # lesson 12 grades a whole loop (tests/test_exercises_lesson12.py); here: its printed text runs among the
    # notebook's names and passes on a few scenarios
    show_solution("lesson12")
    shown = capsys.readouterr().out
    namespace = notebook_namespace(_notebook_cells("lesson12"), "agent_loop")
    exec(compile(shown, "show_solution('lesson12')", "exec", dont_inherit=True), namespace)
    verdict = lesson_module("lesson12").check_agent_loop(
        namespace["agent_loop"], scenarios=["pause_turn", "max_tokens_give_up", "end_turn"])
    assert verdict.solved, verdict.message


def test_every_lesson_with_a_solution_is_checked_here() -> None:
    modules = sorted(p.stem for p in (Path(lesson_module("lesson00").__file__).parent).glob("lesson[0-9][0-9].py"))
    assert modules == sorted([*LESSONS, "lesson12"])
    assert all(re.fullmatch(r"lesson\d\d", m) for m in modules)
