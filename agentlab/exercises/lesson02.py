"""Lesson 02, max_tokens: the recovery policy for a reply cut off by the output limit.

The learner writes ``on_max_tokens(message, escalations, continuations) -> str`` for a reply whose stop_reason
is ``max_tokens``, answering one of ``"escalate"``, ``"continue"``, ``"give_up"``, ``"run_tools"``.
``escalations`` counts the run's resends with a higher max_tokens so far, ``continuations`` the
continuations in a row (``LoopState.escalations`` and ``LoopState.continuations_in_a_row``, with the limits
of ``Limits``):

- a complete ``tool_use`` block earlier in the content, and the last block is not a cut one: run it;
- the last block is a ``tool_use`` block: it was cut off; escalate while an escalation is left (a
  continuation would build on a broken tool call), else give up;
- otherwise (text was cut): escalate while an escalation is left, then continue while fewer than
  ``MAX_CONTINUATIONS`` continuations were made in a row, then give up.

``check_on_max_tokens`` holds the cases; the tests compare the same cases with agentlab's ``decide()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.transitions import Limits
from . import exercise

Message = dict[str, Any]
MAX_ESCALATIONS = Limits().max_escalations      # 1: resends with a higher max_tokens per run
MAX_CONTINUATIONS = Limits().max_continuations  # 3: MAX_OUTPUT_TOKENS_RECOVERY_LIMIT in the article

ACTIONS = ("escalate", "continue", "give_up", "run_tools")


def _cut(*blocks: dict[str, Any]) -> Message:
    return {"type": "message", "role": "assistant", "content": list(blocks), "stop_reason": "max_tokens"}


TEXT = {"type": "text", "text": "TCP congestion control has four"}
TOOL = {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {"expression": "(17 * 2"}}
DONE_TOOL = {"type": "tool_use", "id": "toolu_2", "name": "calculator", "input": {"expression": "2 + 2"}}

# (case, reply, escalations so far, continuations in a row, expected action)
CASES: tuple[tuple[str, Message, int, int, str], ...] = (
    ("text cut, first time", _cut(TEXT), 0, 0, "escalate"),
    ("text cut again after the escalation", _cut(TEXT), 1, 0, "continue"),
    ("text cut, 2 continuations in a row", _cut(TEXT), 1, 2, "continue"),
    ("text cut, 3 continuations in a row", _cut(TEXT), 1, 3, "give_up"),
    ("a tool_use block cut off", _cut(TEXT, TOOL), 0, 0, "escalate"),
    ("a tool_use block cut off, after the escalation", _cut(TOOL), 1, 0, "give_up"),
    ("a tool_use block cut off, after a continuation", _cut(TOOL), 1, 1, "give_up"),
    ("a complete tool_use, then text cut", _cut(DONE_TOOL, TEXT), 0, 0, "run_tools"),
    ("a complete tool_use, then text cut, late", _cut(DONE_TOOL, TEXT), 1, 3, "run_tools"),
)


@exercise("lesson02", "on_max_tokens")
def check_on_max_tokens(on_max_tokens: Callable[[Message, int, int], str]) -> str:
    """Raise AssertionError listing every case where ``on_max_tokens`` picks the wrong recovery."""
    wrong = []
    for case, message, escalations, continuations, expected in CASES:
        try:
            got = on_max_tokens(message, escalations, continuations)
        except Exception as exc:
            wrong.append(f"- {case}: expected {expected!r}, but it raised {type(exc).__name__}: {exc}")
            continue
        if got != expected:
            blocks = ", ".join(b["type"] for b in message["content"])
            wrong.append(f"- {case} [{blocks}; escalations={escalations}, continuations={continuations}]: "
                         f"expected {expected!r}, got {got!r}")
    assert not wrong, (f"{len(wrong)} of {len(CASES)} cases are wrong (answers are one of {', '.join(ACTIONS)}; "
                       f"at most {MAX_ESCALATIONS} escalation, {MAX_CONTINUATIONS} continuations in a row):\n"
                       + "\n".join(wrong))
    return (f"All {len(CASES)} cases pass: escalate at most {MAX_ESCALATIONS} time, continue at most "
            f"{MAX_CONTINUATIONS} times in a row, never continue a cut tool call.")


def recovery_table(names: list[str]):
    """Per scenario: the requests sent, the max_tokens of each, the branch after each, and the result."""
    import pandas as pd

    from ..lab import scenario_loop

    rows = []
    for name in names:
        loop = scenario_loop(name)
        result = loop.run()
        sizes = [str(e.data["max_tokens"]) for e in loop.trace if e.kind == "request"]
        branches = [e.data["branch"] for e in loop.trace if e.kind == "transition"]
        rows.append({"scenario": name, "max_tokens per call": " → ".join(sizes),
                     "branches": " → ".join(branches), "result": result.subtype})
    return pd.DataFrame(rows).set_index("scenario")


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    Look at the last block first: a tool_use there was cut off, and a cut tool call cannot be continued; it
    can only be sent again with a higher max_tokens ("escalate") while escalations < MAX_ESCALATIONS, else
    "give_up". A complete tool_use earlier in the content is an ordinary tool call ("run_tools"). Cut text:
    "escalate" while escalations < MAX_ESCALATIONS, then "continue" while continuations < MAX_CONTINUATIONS,
    then "give_up".
"""


def on_max_tokens(message, escalations, continuations):
    blocks = message["content"]
    if blocks and blocks[-1]["type"] == "tool_use":
        return "escalate" if escalations < MAX_ESCALATIONS else "give_up"
    if any(block["type"] == "tool_use" for block in blocks):
        return "run_tools"
    if escalations < MAX_ESCALATIONS:
        return "escalate"
    return "continue" if continuations < MAX_CONTINUATIONS else "give_up"


SOLUTION = on_max_tokens
