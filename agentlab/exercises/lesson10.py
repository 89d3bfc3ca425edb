"""Lesson 10, the whole decision: helpers for the notebook and the check of its exercise.

The exercise: write ``my_decide(message, after_tool_results)``, the branch name agentlab's ``decide()``
picks for one model response, at the start of a run (nothing escalated or recovered yet). ``message`` is a
dict with ``stop_reason`` and ``content`` (a list of block dicts); ``after_tool_results`` says whether the
last message sent was the user message holding tool results. The check compares it with ``decide()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend.scenario import scenario_names
from ..core.transitions import DEFAULT_MODEL, ROWS, Limits, LoopState, decide
from ..lab import scenario_loop
from .lesson06 import observed, show_result
from . import exercise

__all__ = ["branch_coverage", "check_my_decide", "decision_table", "differences", "observed", "show_result",
           "show_table", "tour_path"]


def show_table(frame: Any) -> None:
    """Print a small DataFrame as left-aligned text columns (no truncated cells, no index)."""
    columns = [str(c) for c in frame.columns]
    cells = [[str(v) for v in row] for row in frame.itertuples(index=False)]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    last = len(columns) - 1
    for row in [columns] + cells:
        print("  ".join(v if i == last else v.ljust(widths[i]) for i, v in enumerate(row)).rstrip())


def decision_table():
    """agentlab.core.transitions.ROWS as a DataFrame: row, branch, what happens."""
    import pandas as pd

    return pd.DataFrame(ROWS, columns=["row", "branch", "what happens"])


def branch_coverage():
    """For every branch of ROWS, the shipped scenarios whose run takes it (one run of each scenario)."""
    import pandas as pd

    seen: dict[str, list[str]] = {branch: [] for _, branch, _ in ROWS}
    for name in scenario_names():
        loop = scenario_loop(name)
        loop.run()
        for branch in dict.fromkeys(e.data["branch"] for e in loop.trace.of_kind("transition")):
            seen.setdefault(branch, []).append(name)
    rows = [(row, branch, len(seen[branch]), ", ".join(seen[branch][:3]) + (", …" if len(seen[branch]) > 3 else ""))
            for row, branch, _ in ROWS]
    return pd.DataFrame(rows, columns=["row", "branch", "scenarios", "for example"])


def differences(client: str = "claude-code"):
    """Per branch scenario and recorded version of ``client``: what it did, and whether that differs from
    agentlab's record of the same scenario."""
    import pandas as pd

    from ..observatory.compare import comparison_table

    table = comparison_table()
    columns = [c for c in table.columns if str(c).startswith(client + " ")]
    rows = [{"row": r["row"], "scenario": r["scenario"], "version": c.split(" ", 1)[1], "what it did": r[c],
             "differs": "yes" if c in str(r["differing"]).split(", ") else ""}
            for _, r in table.iterrows() for c in columns]
    return pd.DataFrame(rows, columns=["row", "scenario", "version", "what it did", "differs"])


def tour_path(loop: Any) -> list[str]:
    """The branches a finished loop took, in order, with repeats of the same branch in a row folded."""
    path: list[str] = []
    for event in loop.trace.of_kind("transition"):
        label = f"{event.data['row']}:{event.data['branch']}"
        if not path or path[-1] != label:
            path.append(label)
    return path


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool(name: str = "calculator") -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_x", "name": name, "input": {"expression": "2 + 2"}}


_SEARCH = {"type": "server_tool_use", "id": "srvtoolu_x", "name": "web_search", "input": {"query": "news"}}

# (what the case is, the message, after_tool_results)
CASES: tuple[tuple[str, dict[str, Any], bool], ...] = (
    ("end_turn with text", {"stop_reason": "end_turn", "content": [_text("Done.")]}, False),
    ("tool_use with a tool_use block", {"stop_reason": "tool_use", "content": [_text("Let me add."), _tool()]},
     False),
    ("end_turn label but a tool_use block in the content",
     {"stop_reason": "end_turn", "content": [_tool()]}, False),
    ("tool_use label but only text in the content",
     {"stop_reason": "tool_use", "content": [_text("I will use the calculator.")]}, False),
    ("max_tokens on text, the first time", {"stop_reason": "max_tokens", "content": [_text("A long ans")]}, False),
    ("max_tokens with the last block a cut-off tool_use",
     {"stop_reason": "max_tokens", "content": [_text("Let me add."), _tool()]}, False),
    ("max_tokens after a complete tool_use block, cut in later text",
     {"stop_reason": "max_tokens", "content": [_tool(), _text("While that runs, let me expl")]}, False),
    ("model_context_window_exceeded on text",
     {"stop_reason": "model_context_window_exceeded", "content": [_text("Partial")]}, False),
    ("refusal with text", {"stop_reason": "refusal", "content": [_text("I can't help with that.")]}, False),
    ("refusal even though a tool_use block came first",
     {"stop_reason": "refusal", "content": [_tool("read_file")]}, False),
    ("pause_turn during a server-side search",
     {"stop_reason": "pause_turn", "content": [_text("Searching."), _SEARCH]}, False),
    ("stop_sequence on text", {"stop_reason": "stop_sequence", "stop_sequence": "END",
                               "content": [_text("Here it is")]}, False),
    ("empty end_turn right after tool results", {"stop_reason": "end_turn", "content": []}, True),
    ("empty end_turn that does not follow tool results", {"stop_reason": "end_turn", "content": []}, False),
    ("end_turn with text after tool results", {"stop_reason": "end_turn", "content": [_text("It is 4.")]}, True),
    ("a stop_reason from the future", {"stop_reason": "something_new", "content": [_text("Hi")]}, False),
    ("no stop_reason at all", {"stop_reason": None, "content": [_text("Hi")]}, False),
)


def expected_branch(message: dict[str, Any], after_tool_results: bool) -> str:
    state = LoopState(model=DEFAULT_MODEL, max_tokens=1024, after_tool_results=after_tool_results)
    return decide(message, state, Limits()).branch


@exercise("lesson10", "my_decide")
def check_my_decide(my_decide: Callable[[dict[str, Any], bool], str]) -> str:
    """Raise AssertionError with a clear message unless ``my_decide`` agrees with decide() on every case."""
    import copy

    for what, message, after in CASES:
        expected = expected_branch(message, after)
        try:
            got = my_decide(copy.deepcopy(message), after)
        except Exception as exc:  # noqa: BLE001 - turned into a readable failure
            raise AssertionError(f"{what}: my_decide raised {type(exc).__name__}: {exc}") from exc
        if got != expected:
            raise AssertionError(
                f"{what} (stop_reason={message['stop_reason']!r}, blocks="
                f"{[b['type'] for b in message['content']]}, after_tool_results={after}): "
                f"my_decide returned {got!r}, decide() takes {expected!r}")
    return f"my_decide: correct on all {len(CASES)} cases; it takes the same branch as agentlab's decide()."


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    Order matters. refusal first; then max_tokens with a tool_use as the LAST block (incomplete_tool_use);
    then any tool_use block in the content, whatever the label (tool_use); then max_tokens,
    model_context_window_exceeded and pause_turn by their label; an empty end_turn right after tool results
    is empty_nudge; stop_sequence; everything else is complete.
"""


def my_decide(message, after_tool_results):
    """The branch decide() takes for this response at the start of a run."""
    reason, kinds = message["stop_reason"], [b["type"] for b in message["content"]]
    if reason == "refusal":
        return "refusal"
    if reason == "max_tokens" and kinds[-1:] == ["tool_use"]:
        return "incomplete_tool_use"
    if "tool_use" in kinds:
        return "tool_use"
    by_reason = {"max_tokens": "max_tokens_escalate", "model_context_window_exceeded": "context_compact",
                 "pause_turn": "pause_turn"}
    if reason in by_reason:
        return by_reason[reason]
    if reason == "end_turn" and not kinds and after_tool_results:
        return "empty_nudge"
    return "stop_sequence" if reason == "stop_sequence" else "complete"


SOLUTION = my_decide
