"""Lesson 08, max_turns: helpers for the notebook and the check of its exercise.

The exercise: write a scenario (a dict, in the notebook) in which the model keeps calling ``run_tests``
and never finishes, and set ``max_turns`` so that the breaker stops the run after exactly 4 model calls.
"""

from __future__ import annotations

from typing import Any

from ..backend.scenario import parse_scenario
from ..core.errors import ScenarioError
from ..lab import scenario_loop
from .lesson06 import observed, show_result
from . import exercise

__all__ = ["check_runaway_scenario", "observed", "show_result", "turns_table"]

WANTED_REQUESTS = 4


def turns_table(loop: Any) -> None:
    """Print, for every model call of a finished loop, its stop_reason (or HTTP error) and the branches taken."""
    branches: dict[int, list[str]] = {}
    for event in loop.trace.of_kind("transition"):
        branches.setdefault(event.call, []).append(event.data.get("branch", ""))
    outcome = {e.call: f"HTTP {e.data.get('status')}" for e in loop.trace.of_kind("api_error")}
    outcome.update({e.call: str(e.data.get("stop_reason")) for e in loop.trace.of_kind("response")})
    print(f"{'call':>4}  {'answer':<12} branches")
    for call in sorted(outcome):
        print(f"{call:>4}  {outcome[call]:<12} {' -> '.join(branches.get(call, []))}")


@exercise("lesson08", "runaway",
          "add max_turns and the steps in runaway and return the scenario (replace the `raise NotImplementedError`"
          " line)")
def check_runaway_scenario(runaway: Any) -> str:
    """Raise AssertionError with a clear message unless the scenario ``runaway()`` returns (or ``runaway``
    itself, a dict) is a runaway loop stopped after 4 calls."""
    spec = runaway() if callable(runaway) else runaway
    if not isinstance(spec, dict):
        raise AssertionError(f"write the scenario as a dict (like the YAML files), got {type(spec).__name__}")
    try:
        scenario = parse_scenario(spec, "exercise 08")
    except ScenarioError as exc:
        raise AssertionError(f"the scenario does not load: {exc}") from None
    if scenario.tools != "demo":
        raise AssertionError("the model calls run_tests, so the scenario needs tools: demo")
    if scenario.max_turns is None:
        raise AssertionError("set max_turns: without it nothing stops a model that never finishes")
    loop = scenario_loop(scenario)
    result = loop.run()
    tools = [e.data.get("name") for e in loop.trace.of_kind("tool")]
    if result.subtype != "error_max_turns":
        why = ""
        said = loop.engine.failures if loop.engine is not None else []
        if said:
            why = f" The scripted model said: {said[0]}."
        raise AssertionError(
            f"the run ended with {result.subtype} after {result.requests} request(s), not error_max_turns.{why} "
            "Give the model at least as many tool_use steps as max_turns, so that the breaker (not the end of "
            "the script, not a final answer) ends the run")
    if result.requests != WANTED_REQUESTS:
        raise AssertionError(
            f"the breaker stopped the run after {result.requests} model call(s); it should stop it after "
            f"exactly {WANTED_REQUESTS}. max_turns counts model calls: set it to {WANTED_REQUESTS}")
    if len(tools) != WANTED_REQUESTS or any(name != "run_tests" for name in tools):
        raise AssertionError(
            f"every call should ask for run_tests (a model stuck re-running the failing tests); the tools "
            f"that ran were {tools}")
    return (f"runaway scenario: correct. {result.requests} calls, every one asked for run_tests, "
            f"and the run ended with {result.subtype}.")


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    Add "max_turns": 4, and give the script more tool_use steps than that (five copies of the run_tests step
    will do): the script must never run out and the model must never answer, so that only the breaker can
    end the run.
"""


def runaway():
    run_tests_again = {"content": [{"type": "tool_use", "name": "run_tests", "input": {}}], "stop_reason": "tool_use"}
    return {
        "description": "a model that re-runs the failing tests forever",
        "prompt": "Make the tests pass.",
        "tools": "demo",
        "max_turns": 4,
        "steps": [run_tests_again] * 5,     # more answers than turns: only the breaker can end it
    }


SOLUTION = runaway
