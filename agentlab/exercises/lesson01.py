"""Lesson 01, content not label: which blocks of a reply the client must run, whatever the stop_reason says.

The learner writes ``tools_to_run(message) -> list[str]``: the ids of the ``tool_use`` blocks in a Messages API
reply (a dict), in order. ``check_tools_to_run`` feeds it replies whose label and content disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import exercise

Message = dict[str, Any]


def _msg(stop_reason: str | None, *blocks: dict[str, Any]) -> Message:
    return {"type": "message", "role": "assistant", "content": list(blocks), "stop_reason": stop_reason}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _use(tool_id: str, name: str = "get_weather", kind: str = "tool_use") -> dict[str, Any]:
    return {"type": kind, "id": tool_id, "name": name, "input": {"location": "Oslo"}}


# (case, reply, the ids the client must run)
CASES: tuple[tuple[str, Message, list[str]], ...] = (
    ("end_turn with text", _msg("end_turn", _text("Paris.")), []),
    ("tool_use with one block", _msg("tool_use", _text("Checking."), _use("toolu_1")), ["toolu_1"]),
    ("two blocks, in order", _msg("tool_use", _use("toolu_b"), _use("toolu_a")), ["toolu_b", "toolu_a"]),
    ("a tool_use block labelled end_turn", _msg("end_turn", _use("toolu_x")), ["toolu_x"]),
    ("labelled tool_use, but only text", _msg("tool_use", _text("I would call a tool.")), []),
    ("labelled tool_use, empty content", _msg("tool_use"), []),
    ("a server tool (the API runs it, not you)",
     _msg("pause_turn", _use("srvtoolu_1", "web_search", kind="server_tool_use")), []),
    ("a server tool and a client tool",
     _msg("tool_use", _use("srvtoolu_2", "web_search", kind="server_tool_use"), _use("toolu_2")), ["toolu_2"]),
    ("no stop_reason at all", _msg(None, _use("toolu_n")), ["toolu_n"]),
    ("thinking first, then a tool", _msg("tool_use", {"type": "thinking", "thinking": "hm", "signature": "s"},
                                         _use("toolu_t")), ["toolu_t"]),
)


@exercise("lesson01", "tools_to_run")
def check_tools_to_run(tools_to_run: Callable[[Message], list[str]]) -> str:
    """Raise AssertionError naming every case where ``tools_to_run`` disagrees with the content of the reply."""
    wrong = []
    for case, message, expected in CASES:
        try:
            got = tools_to_run(message)
        except Exception as exc:
            wrong.append(f"- {case}: expected {expected}, but it raised {type(exc).__name__}: {exc}")
            continue
        if not isinstance(got, list) or got != expected:
            wrong.append(f"- {case} (stop_reason {message['stop_reason']!r}): expected {expected}, got {got!r}")
    assert not wrong, (
        f"{len(wrong)} of {len(CASES)} cases are wrong (look at the content blocks, not at stop_reason; only "
        "'tool_use' blocks are yours to run):\n" + "\n".join(wrong))
    return f"All {len(CASES)} cases pass: you dispatch on the content, not on the label."


def label_vs_content(names: list[str]):
    """For each scenario, what its first reply is labelled, what it holds, and which branch agentlab took."""
    import pandas as pd

    from ..lab import scenario_loop

    rows = []
    for name in names:
        loop = scenario_loop(name)
        result = loop.run()
        first = next(e for e in loop.trace if e.kind == "response")
        branch = next(e for e in loop.trace if e.kind == "transition")
        rows.append({"scenario": name, "stop_reason": first.data["stop_reason"],
                     "content": first.data["blocks"] or "(empty)",
                     "branch": f"row {branch.data['row']} {branch.data['branch']}",
                     "calls": result.requests, "result": result.subtype})
    return pd.DataFrame(rows).set_index("scenario")


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    Ignore message["stop_reason"] entirely. Walk message["content"] in order and keep block["id"] for every
    block whose "type" is exactly "tool_use" ("server_tool_use" blocks are run by the API, and text or
    thinking blocks are not calls).
"""


def tools_to_run(message):
    return [block["id"] for block in message["content"] if block["type"] == "tool_use"]


SOLUTION = tools_to_run
