"""The shared exercise mechanism: a stub is "not solved yet", a wrong answer raises, a right one passes."""

from __future__ import annotations

import pytest

from typing import Any

from agentlab.exercises import Verdict, exercise, hint, lesson_module, show_solution

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
    with pytest.raises(ValueError, match="unknown lesson 'loop'"):
        hint("loop")
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


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_show_solution_prints_source_that_passes_and_hint_stops_short_of_it(lesson: str, capsys) -> None:
    name, check = LESSONS[lesson]
    module = lesson_module(lesson)
    show_solution(lesson)
    shown = capsys.readouterr().out
    assert shown.startswith(f"# A solution for {lesson}") and f"def {name}(" in shown
    namespace: dict[str, Any] = vars(module).copy()  # a solution may use the lesson's constants (LIMIT)
    del namespace[name]
    exec(compile(shown, f"show_solution({lesson!r})", "exec"), namespace)
    assert getattr(module, check)(namespace[name]).solved
    capsys.readouterr()
    hint(lesson)
    said = capsys.readouterr().out
    assert said.startswith("Hint: ") and f"def {name}(" not in said and len(said) > 80
    show_solution(int(lesson[-2:]))
    assert capsys.readouterr().out == shown
