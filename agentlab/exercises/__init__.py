"""The lessons' exercises, how they are checked, and their solutions on demand.

Every lesson's exercise follows one convention:

- The lesson's exercise cell defines a function whose body raises ``NotImplementedError`` (the stub). The
  learner replaces that line with an answer.
- The check cell calls ``check_<name>(answer)`` from ``agentlab.exercises.lessonNN``. Each check is wrapped
  by :func:`exercise`, so it ends in one of three ways:

  * the answer is still the stub (it raises ``NotImplementedError``): the check prints
    ``Not solved yet: …what to do…`` and does **not** raise, so Run All carries on and never shows a pass;
  * the answer is wrong: a :class:`WrongAnswer` (an ``AssertionError``) naming the case, what was expected,
    what came back and the rule it breaks; in a notebook it shows as that message alone, without the
    checker's frames (``_render_traceback_``, which IPython reads in place of a traceback);
  * the answer is right: the check prints its pass line.

  The check returns a :class:`Verdict` (``solved``, ``message``) for code that wants the outcome.
- The solution is shown only on demand: ``show_solution("lesson00")`` prints its source, ``hint("lesson00")``
  a hint. No notebook cell defines the answer. Each ``lessonNN`` module holds its solution as ``SOLUTION``
  and its hint as ``HINT``.

Writing a check for a new lesson::

    from . import exercise

    HINT = "..."

    @exercise("lesson14", "my_function")
    def check_my_function(my_function):
        ...                     # raise AssertionError(f"case {case!r}: expected {want!r}, got {got!r}: <rule>")
        return "All 5 cases pass: ..."

    def my_function(...):       # the solution, shown by show_solution("lesson14")
        ...

    SOLUTION = my_function
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeVar

from ..core.errors import ConfigError

__all__ = ["NotSolvedYet", "Verdict", "WrongAnswer", "exercise", "hint", "lesson_module", "show_solution",
           "solution_source"]

Check = TypeVar("Check", bound=Callable[..., Any])


class NotSolvedYet(BaseException):
    """Raised in place of the stub's ``NotImplementedError`` while a check runs.

    It derives from ``BaseException`` so that a check's own ``except Exception`` (which turns a crashing answer
    into a readable wrong case) lets it through to :func:`exercise`, which reports "Not solved yet".
    """


class WrongAnswer(AssertionError):
    """A check's verdict on a wrong answer: its message names the case, what was expected, what came back and
    the rule it breaks.

    In a notebook it shows as that message only: IPython prints what ``_render_traceback_`` returns in place
    of a traceback, and the checker's own frames say nothing about the learner's answer. Elsewhere (pytest, a
    script) it is an ``AssertionError`` like any other.
    """

    def _render_traceback_(self) -> list[str]:
        first, *rest = str(self).splitlines() or [""]
        return [f"{_RED}Wrong answer{_RESET}: {first}", *rest]


_RED, _RESET = "\x1b[0;31m", "\x1b[0m"   # IPython's colour for an error's name


@dataclass(frozen=True)
class Verdict:
    """How a check ended: ``"solved"`` (the pass line) or ``"not solved"`` (the stub is still there)."""

    status: Literal["solved", "not solved"]
    message: str

    @property
    def solved(self) -> bool:
        return self.status == "solved"

    def __str__(self) -> str:
        return self.message

    def _ipython_display_(self) -> None:
        """Show nothing more in a notebook: the check has already printed its message."""


def _guard(answer: Any) -> Any:
    """The answer, with a ``NotImplementedError`` from it turned into :class:`NotSolvedYet`."""
    if not callable(answer) or isinstance(answer, type):
        return answer

    @functools.wraps(answer)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return answer(*args, **kwargs)
        except NotImplementedError as exc:
            raise NotSolvedYet(str(exc)) from None

    return guarded


def not_solved_message(lesson: str, name: str, todo: str | None = None) -> str:
    """The text a check prints while ``name`` is still the stub."""
    todo = todo or f"write the body of {name} in the exercise cell above (replace the `raise NotImplementedError` line)"
    return (f"Not solved yet: {name} still raises NotImplementedError. To do: {todo}, run that cell, then this one "
            f"again. For a hint: hint({lesson!r}); for a solution: show_solution({lesson!r}).")


def exercise(lesson: str, name: str, todo: str | None = None) -> Callable[[Check], Check]:
    """Wrap a lesson's check: the stub prints "Not solved yet", a wrong answer raises, a right one prints a pass.

    The wrapped check receives the answer guarded (see :class:`NotSolvedYet`); it returns its pass line, and
    raises ``AssertionError`` naming case, expected, got and rule when the answer is wrong, which reaches the
    caller as a :class:`WrongAnswer` with the same message.
    """
    lesson = _lesson_name(lesson)

    def wrap(check: Check) -> Check:
        @functools.wraps(check)
        def run(answer: Any, *args: Any, **kwargs: Any) -> Verdict:
            try:
                message = check(_guard(answer), *args, **kwargs)
            except WrongAnswer:
                raise
            except AssertionError as exc:
                raise WrongAnswer(str(exc)) from None   # the message is the whole verdict; no checker frames
            except NotSolvedYet:
                verdict = Verdict("not solved", not_solved_message(lesson, name, todo))
            else:
                if not isinstance(message, str) or not message:
                    raise TypeError(f"{check.__qualname__} must return its pass line, got {message!r}")
                verdict = Verdict("solved", message)
            print(verdict.message)
            return verdict

        run.lesson = lesson  # type: ignore[attr-defined]
        run.answer_name = name  # type: ignore[attr-defined]
        return run  # type: ignore[return-value]

    return wrap


def _lesson_name(lesson: str | int) -> str:
    if isinstance(lesson, int) and not isinstance(lesson, bool):
        return f"lesson{lesson:02d}"
    text = str(lesson).strip()
    match = re.fullmatch(r"(?:lesson)?_?(\d{1,2})(?:_\w*)?", text)
    if not match:
        first, last = _lesson_range()
        raise ConfigError(f"unknown lesson {lesson!r}: write it as {first!r} … {last!r} (or the number)")
    return f"lesson{int(match.group(1)):02d}"


def _lesson_range() -> tuple[str, str]:
    """The first and the last lesson that has an exercise module here, e.g. ``("lesson00", "lesson13")``."""
    names = sorted(p.stem for p in Path(__file__).parent.glob("lesson[0-9][0-9].py"))
    return (names[0], names[-1]) if names else ("lesson00", "lesson00")


def lesson_module(lesson: str | int) -> ModuleType:
    """``agentlab.exercises.lessonNN`` for ``"lessonNN"``, ``"NN"`` or ``NN``."""
    name = _lesson_name(lesson)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise ConfigError(f"there is no exercise for {lesson!r} (no module agentlab.exercises.{name})") from None


def solution_source(lesson: str | int) -> str:
    """The source of a lesson's solution (``SOLUTION`` in its module), as text."""
    module = lesson_module(lesson)
    solution = getattr(module, "SOLUTION", None)
    if solution is None:
        raise ValueError(f"{module.__name__} has no SOLUTION")
    return inspect.getsource(solution).rstrip() + "\n"


def show_solution(lesson: str | int, file: Any = None) -> None:
    """Print a solution of the lesson's exercise: copy it into the exercise cell, or compare it with yours."""
    name = _lesson_name(lesson)
    out = file or sys.stdout
    print(f"# A solution for {name} (one of several that pass the check):\n", file=out)
    print(solution_source(name), file=out, end="")


def hint(lesson: str | int, file: Any = None) -> None:
    """Print a hint for the lesson's exercise, a step short of the solution."""
    module = lesson_module(lesson)
    text = getattr(module, "HINT", None)
    if not text:
        raise ValueError(f"{module.__name__} has no HINT")
    print(f"Hint: {inspect.cleandoc(text)}", file=file or sys.stdout)
