"""Lesson 05, stop_sequence: write a scenario in which the model stops on one of the loop's stop sequences.

The learner writes a scenario as a dict (the same shape as a YAML file in ``data/scenarios``).
``check_stop_scenario`` loads it with ``parse_scenario``, runs it with ``stop_sequences=SEQUENCES`` through the
real SDK client, and checks that the reply stopped on ``"STOP"`` the way the API reports it.
"""

from __future__ import annotations

from typing import Any

from ..errors import ScenarioError
from . import exercise

SEQUENCES = ["END", "STOP"]
WANTED = "STOP"


def run_with_sequences(raw: dict[str, Any], sequences: list[str] = SEQUENCES):
    """Parse a scenario dict and run it with ``stop_sequences``; returns the finished loop."""
    from ..lab import scenario_loop
    from ..scenario import parse_scenario

    loop = scenario_loop(parse_scenario(raw, "the scenario in this notebook"), stop_sequences=list(sequences))
    loop.run()
    return loop


@exercise("lesson05", "my_scenario",
          "make my_scenario return the scenario dict (replace the `raise NotImplementedError` line)")
def check_stop_scenario(my_scenario: Any) -> str:
    """Raise AssertionError saying what is missing when the scenario ``my_scenario()`` returns (or ``my_scenario``
    itself, a dict) does not stop on "STOP" as the API would."""
    raw = my_scenario() if callable(my_scenario) else my_scenario
    assert isinstance(raw, dict), f"write the scenario as a dict, got {type(raw).__name__}"
    try:
        loop = run_with_sequences(raw)
    except ScenarioError as exc:
        raise AssertionError(f"the scenario does not load: {exc}") from None
    responses = loop.trace.of_kind("response")
    assert responses, "the run got no reply at all; give the scenario one step with content"
    first = responses[0].data
    assert first["stop_reason"] == "stop_sequence", (
        f"the first reply should have stop_reason 'stop_sequence', got {first['stop_reason']!r}")
    assert first["stop_sequence"] == WANTED, (
        f"the reply should say which sequence matched: stop_sequence {WANTED!r} (one of {SEQUENCES}, the list the "
        f"loop sends), got {first['stop_sequence']!r}")
    text = "".join(b.get("text", "") for b in first["content"] if b.get("type") == "text")
    assert text.strip(), "give the reply some text: the words the model wrote before it reached the sequence"
    assert WANTED not in text, (
        f"the text contains {WANTED!r}, but the API never includes the matched stop sequence in the content; "
        f"got {text!r}")
    branch = next(e.data["branch"] for e in loop.trace.of_kind("transition"))
    assert branch == "stop_sequence", f"agentlab should take row 7 'stop_sequence', it took {branch!r}"
    assert not loop.engine.failures, "the scenario's expectations failed: " + "; ".join(loop.engine.failures)
    result = loop.result
    assert result is not None and result.subtype == "success" and result.requests == 1, (
        f"the run should end in one request with success, got {result.subtype if result else None!r} after "
        f"{result.requests if result else 0} request(s); one step is enough")
    return f"Your scenario stops on {WANTED!r}; agentlab recorded it and completed the turn."


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    One step is enough: {"content": [{"type": "text", "text": ...}], "stop_reason": "stop_sequence",
    "stop_sequence": "STOP"}. The text is what the model wrote BEFORE it reached the sequence: the API leaves
    the matched sequence itself out of the content.
"""


def my_scenario():
    return {
        "description": "the model lists three fruits and stops at STOP",
        "prompt": "Name three fruits, then write STOP.",
        "steps": [{"content": [{"type": "text", "text": "Apple, pear, plum. "}],
                   "stop_reason": "stop_sequence", "stop_sequence": "STOP"}],
    }


SOLUTION = my_scenario
