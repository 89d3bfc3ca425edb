"""Lesson 03, the context window: a compaction strategy of your own, and what it forgets.

The learner writes ``drop_middle(messages, keep_last) -> list``: keep the first request and the last
``keep_last`` turns, drop every turn in between. A turn starts at an assistant message and runs up to the next
one, so a ``tool_use`` never loses its ``tool_result``. ``check_drop_middle`` runs it on scripted histories and
checks the result is a valid history, equal to the expected one, and that the input was left alone.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from ..core.compaction import estimate_tokens, facts_kept, validate_history
from . import exercise

Message = dict[str, Any]

FACTS = {"door code": "4711", "deploy day": "Tuesday"}


def _use(tool_id: str, name: str, **tool_input: Any) -> Message:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}]}


def _result(tool_id: str, text: str) -> Message:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": text}]}


# The history of a run just before its context overflowed: the request, then three tool turns.
HISTORY: list[Message] = [
    {"role": "user", "content": "Read notes.txt, check the weather in Oslo and Lima, and tell me the door code."},
    _use("toolu_read", "read_file", path="notes.txt"),
    _result("toolu_read", "Project notes\n\nThe door code is 4711.\nDeploys happen on Tuesdays."),
    _use("toolu_oslo", "get_weather", location="Oslo"),
    _result("toolu_oslo", "Weather in Oslo: 11°C, clear skies"),
    _use("toolu_lima", "get_weather", location="Lima"),
    _result("toolu_lima", "Weather in Lima: -8°C, heavy snow"),
]

# After an empty reply the loop drops it and sends a nudge: here the middle turn holds three messages.
WITH_NUDGE: list[Message] = [
    {"role": "user", "content": "What is 12 * 12? Then check Oslo's weather and run the tests."},
    _use("toolu_calc", "calculator", expression="12 * 12"),
    _result("toolu_calc", "144"),
    _use("toolu_weather", "get_weather", location="Oslo"),
    _result("toolu_weather", "Weather in Oslo: 11°C, clear skies"),
    {"role": "user", "content": "Please continue."},
    _use("toolu_tests", "run_tests"),
    _result("toolu_tests", "3 passed"),
]

# (case, history, keep_last, indices of the messages to keep)
CASES: tuple[tuple[str, list[Message], int, list[int]], ...] = (
    ("three tool turns, keep 1", HISTORY, 1, [0, 5, 6]),
    ("three tool turns, keep 2", HISTORY, 2, [0, 3, 4, 5, 6]),
    ("three tool turns, keep 0", HISTORY, 0, [0]),
    ("keep more turns than there are", HISTORY, 5, [0, 1, 2, 3, 4, 5, 6]),
    ("a turn ending with a nudge, keep 2", WITH_NUDGE, 2, [0, 3, 4, 5, 6, 7]),
    ("a turn ending with a nudge, keep 1", WITH_NUDGE, 1, [0, 6, 7]),
)


def _show(value: Any, width: int = 400) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


@exercise("lesson03", "drop_middle")
def check_drop_middle(drop_middle: Callable[[list[Message], int], list[Message]]) -> str:
    """Raise AssertionError with the first case where ``drop_middle`` breaks the history or keeps the wrong turns."""
    for case, history, keep_last, keep in CASES:
        original = copy.deepcopy(history)
        given = copy.deepcopy(history)
        got = drop_middle(given, keep_last)
        assert given == original, f"case {case!r}: drop_middle changed its input; build a new list instead"
        assert isinstance(got, list), f"case {case!r}: expected a list of messages, got {type(got).__name__}"
        problems = validate_history(got)
        assert not problems, (f"case {case!r} (keep_last={keep_last}): the result is not a valid history, the API "
                              f"would answer 400:\n  " + "\n  ".join(problems) + f"\nresult: {_show(got)}")
        expected = [history[i] for i in keep]
        assert got == expected, (
            f"case {case!r} (keep_last={keep_last}): expected messages {keep} of the history:\n  {_show(expected)}\n"
            f"got:\n  {_show(got)}")
    return f"All {len(CASES)} cases pass: whole turns dropped, every tool_use still has its tool_result."


def forgotten(strategy_output: list[Message], facts: dict[str, str] = FACTS) -> dict[str, Any]:
    """Size and planted facts of a compacted history, next to the original HISTORY."""
    kept = facts_kept(strategy_output, facts)
    return {"tokens": f"{estimate_tokens(HISTORY)} -> {estimate_tokens(strategy_output)}",
            "messages": f"{len(HISTORY)} -> {len(strategy_output)}",
            "facts kept": [name for name, ok in kept.items() if ok],
            "facts forgotten": [name for name, ok in kept.items() if not ok]}


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    Find the index of every assistant message: each one starts a turn. Keep messages[0], then everything from
    the start of the keep_last-th turn from the end. If there are no more than keep_last turns, keep
    everything; with keep_last == 0 only messages[0] stays. Build a new list (slicing does).
"""


def drop_middle(messages, keep_last):
    starts = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if keep_last >= len(starts):
        return list(messages)
    cut = starts[len(starts) - keep_last] if keep_last else len(messages)
    return [messages[0]] + messages[cut:]


SOLUTION = drop_middle


# -- server-side compaction beside the client's, on one run -----------------------------------------------------

SIDES = "server_compaction"   # two facts planted: the door code in a tool result, the desk room in the prompt


def _server_side(trigger: int) -> dict[str, Any]:
    """The run with the ``compact_20260112`` edit (the docs page "Compaction"): once the prompt reaches ``trigger``
    input tokens the server summarises the conversation, pauses (``stop_reason: "compaction"``), and the loop
    sends the compaction block back unchanged. The summarising call is billed in ``usage.iterations``."""
    from ..backend.scenario import load_scenario
    from ..backend.scripted import ScenarioEngine
    from ..core.tools import demo_tools
    from ..lab import demo_tool_runner, scripted_client

    scenario = load_scenario(SIDES)
    client, run_tool, tools = scripted_client(ScenarioEngine(scenario)), demo_tool_runner(), demo_tools().schemas()
    edit = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": trigger},
                       "pause_after_compaction": True}]}
    messages: list[Any] = [{"role": "user", "content": scenario.prompt}]
    requests = tokens_in = tokens_out = 0
    while True:
        reply = client.beta.messages.create(model=scenario.model, max_tokens=1024, tools=tools, messages=messages,
                                            betas=["compact-2026-01-12"], context_management=edit)
        requests += 1
        parts = [reply.usage, *[i for i in reply.usage.iterations or [] if i.type == "compaction"]]
        tokens_in += sum(p.input_tokens for p in parts)
        tokens_out += sum(p.output_tokens for p in parts)
        messages.append({"role": "assistant", "content": reply.content})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if reply.stop_reason == "compaction":
            continue
        if not uses:
            answer = "".join(b.text for b in reply.content if b.type == "text")
            return {"requests": requests, "input_tokens": tokens_in, "output_tokens": tokens_out, "answer": answer}
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": run_tool(u.name, u.input)} for u in uses]})


def _client_side(strategy: str, window: int, threshold: float) -> dict[str, Any]:
    """The same run on agentlab's loop, which compacts by itself once the history passes ``threshold`` of a
    ``window``-token context window (no prompt caching, so the tokens compare with the server's run)."""
    from ..lab import scenario_loop

    result = scenario_loop(SIDES, compaction=strategy, context_window=window, compact_threshold=threshold,
                           cache=False).run()
    return {"requests": result.requests, "input_tokens": result.usage["input_tokens"],
            "output_tokens": result.usage["output_tokens"], "answer": result.result}


def compaction_sides(trigger: int = 1500, window: int = 3000, threshold: float = 0.5):
    """``server_compaction`` run four ways: with no compaction, with the server's (the ``compact_20260112`` edit,
    at ``trigger`` input tokens) and with the client's ``summarize`` and ``clear_tool_results`` (at ``threshold``
    of a ``window``-token window): requests, tokens in and out (the server's summarising call included), each
    planted fact kept or not, and the answer. A pandas DataFrame."""
    from ..backend.scenario import load_scenario
    from ..core.extras import require

    pd = require("pandas", "compaction_sides()")
    facts = load_scenario(SIDES).facts
    rows = [{"compaction": "none (a window it never fills)", **_client_side("auto", 1_000_000, 0.9)},
            {"compaction": "server: compact_20260112", **_server_side(trigger)},
            {"compaction": "client: summarize", **_client_side("summarize", window, threshold)},
            {"compaction": "client: clear_tool_results", **_client_side("clear_tool_results", window, threshold)}]
    for row in rows:
        for name, value in facts.items():
            row[f"kept {name}"] = value in row["answer"]
    columns = ["compaction", "requests", "input_tokens", "output_tokens", *[f"kept {n}" for n in facts], "answer"]
    return pd.DataFrame(rows, columns=columns).set_index("compaction")
