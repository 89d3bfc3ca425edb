"""The shared exercise mechanism: a stub is "not solved yet", a wrong answer raises, a right one passes."""

from __future__ import annotations

import pytest

from agentlab.exercises import Verdict, exercise, hint, lesson_module, show_solution


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
