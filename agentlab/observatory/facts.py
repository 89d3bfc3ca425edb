"""What compaction costs, in facts: which strategy kept which planted fact, and each compaction in numbers.

A scenario can plant facts early in a conversation (``facts: {door code: "4711"}``) and ask about them at
the end. :func:`compare_strategies` runs it once per compaction strategy and returns one row per
strategy: how often it compacted and by how much, how the run ended, and for every fact whether it is
still in the final history (:func:`agentlab.core.compaction.facts_kept`) and whether the final answer names
it. :func:`compaction_frame` turns the compaction events of one run into a table ready to plot::

    from agentlab.observatory.facts import compaction_frame, compare_strategies

    compare_strategies("door_code")
    compaction_frame(run_trace)      # a Trace, a list of Events, an AgentLoop or trace.to_frame()
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from agentlab.backend.scenario import Scenario, load_scenario
from agentlab.core.compaction import facts_kept
from agentlab.core.events import CompactionEvent, Payload, Request, payload_from_data
from agentlab.core.extras import require
from agentlab.core.trace import Event, Trace, frame_rows

__all__ = ["COMPACTION_COLUMNS", "DEFAULT_STRATEGIES", "compaction_frame", "compare_strategies", "fact_column"]

DEFAULT_STRATEGIES: tuple[str, ...] = ("clear_tool_results", "drop_oldest", "summarize", "auto")

#: Columns of :func:`compaction_frame`, in order.
COMPACTION_COLUMNS: tuple[str, ...] = (
    "seq", "call", "trigger", "strategy", "tokens_before", "tokens_after", "tokens_saved",
    "messages_before", "messages_after", "removed_count", "removed", "context_window",
    "request_tokens_before", "request_tokens_after",
)


def fact_column(prefix: str, name: str) -> str:
    """The column name for a fact: ``fact_column("kept", "door code") == "kept_door_code"``."""
    slug = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower() or "fact"
    return f"{prefix}_{slug}"


def compare_strategies(
    scenario: str | Scenario = "door_code",
    strategies: Iterable[str] = DEFAULT_STRATEGIES,
    *,
    facts: Mapping[str, str] | None = None,
    **overrides: Any,
):
    """Run ``scenario`` once per compaction strategy; one row per strategy, as a pandas DataFrame.

    Columns: ``strategy``; ``subtype``, ``num_turns``, ``requests`` and ``stop_reason`` of the result;
    ``compactions``; ``strategies_used``, ``tokens_before`` and ``tokens_after`` (one entry per compaction,
    in order; the estimates of the message history, as in the compaction events); ``tokens_saved`` (their
    total); ``answer`` (the final text); ``script_failures`` (requests the scenario did not expect; 0 for
    a run that went as scripted); then for each planted fact ``kept_<fact>`` (still in the final history)
    and ``answered_<fact>`` (named in the final answer). ``facts`` defaults to the scenario's own;
    ``overrides`` go to :func:`agentlab.lab.scenario_loop` (e.g. ``context_window=``).
    """
    pd = require("pandas", "the compaction facts")

    from agentlab.lab import scenario_loop

    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    planted = dict(sc.facts if facts is None else facts)
    rows = []
    for strategy in strategies:
        loop = scenario_loop(sc, compaction=strategy, **overrides)
        result = loop.run()
        events = [e.payload for e in loop.trace.events if isinstance(e.payload, CompactionEvent)]
        before = [e.tokens_before for e in events]
        after = [e.tokens_after for e in events]
        answer = result.result or ""
        row: dict[str, Any] = {
            "strategy": strategy,
            "subtype": result.subtype,
            "num_turns": result.num_turns,
            "requests": result.requests,
            "stop_reason": result.stop_reason,
            "compactions": result.compactions,
            "strategies_used": [e.strategy for e in events],
            "tokens_before": before,
            "tokens_after": after,
            "tokens_saved": sum(before) - sum(after),
            "answer": answer,
            "script_failures": len(loop.engine.failures) if loop.engine is not None else 0,
        }
        kept = facts_kept(result.messages, planted)
        for name, value in planted.items():
            row[fact_column("kept", name)] = kept[name]
            row[fact_column("answered", name)] = str(value) in answer
        rows.append(row)
    return pd.DataFrame(rows)


def _events(source: Any) -> list[Event] | None:
    """The events of a Trace, an AgentLoop (its trace) or a list of Events; None for anything else."""
    trace = getattr(source, "trace", None)
    if isinstance(trace, Trace):
        source = trace
    if isinstance(source, Trace):
        return list(source.events)
    if isinstance(source, (list, tuple)) and all(isinstance(e, Event) for e in source):
        return list(source)
    return None


def _rows_from_frame(frame: Any) -> list[tuple[int, str, int, dict[str, Any]]]:
    """(seq, kind, call, payload) for each row of a ``Trace.to_frame()`` DataFrame."""
    out = []
    for position, row in enumerate(frame_rows(frame)):
        data = row.get("data")
        if not isinstance(data, dict):
            data = {k: v for k, v in row.items() if k not in ("seq", "kind", "call", "wall_ms", "data")}
        seq = row.get("seq")
        out.append((int(seq) if seq is not None else position, str(row.get("kind")), int(row.get("call") or 0),
                    data))
    return out


def compaction_frame(trace_or_frame: Any):
    """One row per compaction event, with the columns in :data:`COMPACTION_COLUMNS`.

    Accepts a :class:`~agentlab.core.trace.Trace`, an ``AgentLoop``, a list of Events, or the DataFrame of
    ``Trace.to_frame()``. ``tokens_before``/``tokens_after`` and the message counts are those of the
    compaction event (estimates of the message history alone); ``request_tokens_before`` is the context
    estimate of the last model request before the compaction (for a reactive compaction, the one that
    did not fit) and ``request_tokens_after`` that of the next one, both counting system prompt and tools
    as the loop does; either is missing (``<NA>``) when there is no such request. ``removed`` is the list of
    what the strategy removed, ``removed_count`` its length.
    """
    pd = require("pandas", "the compaction facts")

    events = _events(trace_or_frame)
    if events is not None:
        rows: list[tuple[int, int, Payload]] = [(e.seq, e.call, e.payload) for e in events]
    elif isinstance(trace_or_frame, pd.DataFrame):
        rows = [(seq, call, payload_from_data(kind, data)) for seq, kind, call, data in _rows_from_frame(trace_or_frame)
                if kind in ("request", "compaction")]
    else:
        raise TypeError("compaction_frame() takes a Trace, an AgentLoop, a list of Events or Trace.to_frame(), "
                        f"not {type(trace_or_frame).__name__}")

    out = []
    last_request: int | None = None
    waiting: list[dict[str, Any]] = []  # compaction rows still looking for the next request
    for seq, call, payload in rows:
        if isinstance(payload, Request) and payload.purpose == "turn":
            last_request = int(payload.context_tokens)
            for row in waiting:
                row["request_tokens_after"] = last_request
            waiting = []
        elif isinstance(payload, CompactionEvent):
            removed = list(payload.removed or [])
            before, after = payload.tokens_before, payload.tokens_after
            row = {
                "seq": seq, "call": call, "trigger": payload.trigger, "strategy": payload.strategy,
                "tokens_before": before, "tokens_after": after, "tokens_saved": before - after,
                "messages_before": payload.messages_before, "messages_after": payload.messages_after,
                "removed_count": len(removed), "removed": removed, "context_window": payload.context_window,
                "request_tokens_before": last_request, "request_tokens_after": None,
            }
            out.append(row)
            waiting.append(row)
    frame = pd.DataFrame(out, columns=list(COMPACTION_COLUMNS))
    for column in ("request_tokens_before", "request_tokens_after"):
        frame[column] = frame[column].astype("Int64")
    return frame
