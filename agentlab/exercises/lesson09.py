"""Lesson 09, hooks: helpers for the notebook and the check of its exercise.

The exercise: write a Stop hook, a Python callable ``hook(payload) -> dict | None``, that asks the model
to double-check its work once. It blocks the first attempt to finish and lets the second one through,
using the ``stop_hook_active`` field of the payload, so that it can never trap the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..hooks import Hooks
from ..lab import scenario_loop
from ..paths import project_dir
from ..scenario import Scenario, parse_scenario
from .lesson06 import observed, show_result
from . import exercise

__all__ = ["REPO", "check_stop_once_hook", "observed", "show_result", "stubborn_scenario"]

# The folder holding data/hooks/: the repository in a checkout, the package folder in an installed wheel.
REPO = project_dir()


def stubborn_scenario(answers: int = 10) -> Scenario:
    """A model that says it is done every time it is asked (``answers`` times)."""
    steps = [{"content": [{"type": "text", "text": f"Done (answer {i})."}], "stop_reason": "end_turn"}
             for i in range(1, answers + 1)]
    return parse_scenario({"name": "stubborn", "description": "a model that always says it is done",
                           "prompt": "Tidy up the notes file.", "steps": steps}, "stubborn")


def _blocks(answer: Any) -> bool:
    return isinstance(answer, dict) and answer.get("decision") == "block"


def _ask(hook: Callable[[dict], Any], active: bool) -> Any:
    payload = {"session_id": "check", "transcript_path": None, "cwd": str(REPO), "hook_event_name": "Stop",
               "stop_hook_active": active, "last_assistant_message": "Done."}
    try:
        return hook(payload)
    except Exception as exc:  # noqa: BLE001 - turned into a readable failure
        raise AssertionError(f"the hook raised {type(exc).__name__}: {exc} (payload stop_hook_active={active})") \
            from exc


@exercise("lesson09", "check_once")
def check_stop_once_hook(hook: Callable[[dict], Any]) -> str:
    """Raise AssertionError with a clear message unless ``hook`` blocks exactly once, using stop_hook_active."""
    first = _ask(hook, False)
    if not _blocks(first):
        raise AssertionError(
            f"with stop_hook_active false the hook returned {first!r}; it should block the first attempt to "
            "finish: return {'decision': 'block', 'reason': '...'}")
    if not str(first.get("reason") or "").strip():
        raise AssertionError("the block has no reason; the reason is the only thing the model reads, so say "
                             "what it should do")
    hooks = Hooks(cwd=str(REPO))
    hooks.on("Stop", hook)
    loop = scenario_loop(stubborn_scenario(), hooks=hooks)
    result = loop.run()
    if result.subtype != "success" or result.stop_hook_blocks != 1:
        raise AssertionError(
            f"on a model that always says it is done, the run ended with {result.subtype} after "
            f"{result.stop_hook_blocks} Stop-hook block(s) and {result.requests} requests; expected success "
            "after 1 block and 2 requests. When stop_hook_active is true the loop is already continuing "
            "because of a Stop hook: return None (or {}) then, or the hook blocks until the loop's cap ends "
            "the run")
    feedback = [m for m in loop.messages if m["role"] == "user" and "Stop hook feedback" in str(m["content"])]
    if len(feedback) != 1 or str(first["reason"]).strip() not in str(feedback[0]["content"]):
        raise AssertionError("the hook's reason did not reach the model as the Stop hook feedback message")
    return "stop-once hook: correct. It blocked once, the model got the reason, and the second stop went through."


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    Two cases: if payload["stop_hook_active"] is true, the loop is already continuing because of a block, so
    return None and let the run end; otherwise return {"decision": "block", "reason": "..."} with a reason
    that tells the model what to do.
"""


def check_once(payload):
    """Stop hook: ask for one more look, then let the run end."""
    if payload["stop_hook_active"]:
        return None
    return {"decision": "block", "reason": "Double-check your work before finishing."}


SOLUTION = check_once
