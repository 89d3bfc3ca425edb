"""Lesson 07, API errors: helpers for the notebook and the check of its exercise.

The exercise: write ``retry_delay(status, attempt, retry_after=None, should_retry=None)``, the seconds to
wait before sending a failed request again, or ``None`` when it must not be retried. The check compares
it with what agentlab's own ``decide()`` does on the same failures (without jitter and without a
fallback model).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.transitions import DEFAULT_MODEL, Failure, Limits, LoopState, Retry, decide
from .lesson06 import observed, show_result
from . import exercise

__all__ = ["check_retry_delay", "expected_delay", "observed", "sdk_backoff", "show_result"]

STATUSES = (None, 400, 401, 403, 404, 408, 409, 413, 429, 500, 502, 503, 504, 529)
# The policy the exercise states, pinned here so that a change of agentlab's defaults cannot move the answer.
EXERCISE_LIMITS = Limits(max_api_retries=10, backoff_base=0.5, backoff_cap=32.0, retry_after_cap=60.0)


def expected_delay(status: int | None, attempt: int, retry_after: float | None = None,
                   should_retry: bool | None = None, limits: Limits | None = None) -> float | None:
    """What agentlab's decide() answers: the delay before jitter, or None when the request is not retried."""
    failure = Failure(status, "error", "scripted failure", retry_after, should_retry)
    state = LoopState(model=DEFAULT_MODEL, max_tokens=1024, api_attempts=attempt - 1)
    transition = decide(failure, state, limits or Limits())
    return transition.delay if isinstance(transition, Retry) else None


def sdk_backoff(retries: int, initial: float = 0.5, cap: float = 8.0) -> list[float]:
    """The Python SDK's waits before each of its own retries, before jitter (0.5 s doubling, capped at 8 s)."""
    return [min(initial * 2 ** n, cap) for n in range(retries)]


def _call(fn: Callable[..., Any], status: int | None, attempt: int, retry_after: float | None,
          should_retry: bool | None) -> Any:
    try:
        return fn(status, attempt, retry_after=retry_after, should_retry=should_retry)
    except Exception as exc:  # noqa: BLE001 - turned into a readable failure
        raise AssertionError(
            f"retry_delay({status!r}, {attempt}, retry_after={retry_after!r}, should_retry={should_retry!r}) "
            f"raised {type(exc).__name__}: {exc}") from exc


def _hint(status: int | None, retry_after: float | None, should_retry: bool | None, expected: Any,
          got: Any) -> str:
    if should_retry is False:
        return "the server sent x-should-retry: false, which always wins: do not retry"
    if expected is None:
        return f"HTTP {status} is not transient: retrying the same request cannot fix it"
    if status is None and got is None:
        return "status None is a connection error or timeout: retry it like a 5xx"
    if retry_after is not None:
        return "the server said how long to wait (retry-after): use it, capped at 60 s"
    return "exponential backoff: 0.5 s before the first retry, doubling each attempt, at most 32 s"


@exercise("lesson07", "retry_delay")
def check_retry_delay(retry_delay: Callable[..., Any]) -> str:
    """Raise AssertionError with a clear message unless ``retry_delay`` matches agentlab's retry policy."""
    cases = [(status, attempt, ra, sr)
             for status in STATUSES
             for attempt in (1, 2, 3, 4, 6, 8)
             for ra in (None, 2.0, 120.0)
             for sr in (None, False)]
    for status, attempt, retry_after, should_retry in cases:
        expected = expected_delay(status, attempt, retry_after, should_retry, EXERCISE_LIMITS)
        got = _call(retry_delay, status, attempt, retry_after, should_retry)
        same = (got is None and expected is None) or (
            got is not None and expected is not None and isinstance(got, int | float)
            and abs(float(got) - expected) < 1e-9)
        if not same:
            raise AssertionError(
                f"retry_delay({status!r}, {attempt}, retry_after={retry_after!r}, should_retry={should_retry!r}) "
                f"returned {got!r}, expected {expected!r}: {_hint(status, retry_after, should_retry, expected, got)}")
    return f"retry_delay: correct on all {len(cases)} cases; it agrees with agentlab's decide()."


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    Apply the four rules in order and return at the first that applies: should_retry is False → None; a
    status that is not None and not in TRANSIENT → None; retry_after given → min(retry_after, 60.0);
    otherwise min(0.5 * 2 ** (attempt - 1), 32.0).
"""

TRANSIENT = {408, 409, 429, 500, 502, 503, 504, 529}


def retry_delay(status, attempt, retry_after=None, should_retry=None):
    """Seconds to wait before retry number `attempt`, or None: do not retry."""
    if should_retry is False:
        return None
    if status is not None and status not in TRANSIENT:
        return None
    if retry_after is not None:
        return min(retry_after, 60.0)
    return min(0.5 * 2 ** (attempt - 1), 32.0)


SOLUTION = retry_delay
