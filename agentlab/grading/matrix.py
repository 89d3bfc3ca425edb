"""The client matrix: the comparison table's cells and the clients table, with what each record says about its
run's reach and options.

``branch_reached(record)`` says whether a run reached the branch its scenario is for (a rule of the scenario's
row of the decision table judged it, ✓ or ✗, not –); ``options(records)`` what a client's records state in their
``settings`` about the options that decide a branch (retries, server tools, extended thinking).
``clients_matrix()`` is ``compare.clients_table()`` with both per client; ``comparison_matrix()`` is
``compare.comparison_table()`` with each cell whose run never reached its branch marked so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from agentlab.observatory.compare import clients_table, comparison_columns, comparison_table
from agentlab.grading.command import RULES, grade_record
from agentlab.observatory.observe import load_records

NOT_REACHED = "branch not reached"


def branch_reached(record: dict[str, Any]) -> bool:
    """Whether the run reached the branch its scenario is for: a rule of that branch (the scenario's row of the
    decision table) judged it, ✓ or ✗, not –. Not reached: the client stopped before it, or never got the reply
    the branch is about. A scenario without a row (the tour) is reached when any branch rule judged it."""
    row = str(record.get("row") or "")
    rules = {r.name for r in RULES if row in (part.strip() for part in r.row.split(","))}
    grade = grade_record(record)
    if not rules:
        return grade.judged
    return any(c.rule in rules and c.status != "not_reached" for c in grade.checks)


def options(records: list[dict[str, Any]]) -> str:
    """The options that decide a branch, as a client's records state them in ``settings``: retries, server
    tools (or native tools) offered, extended thinking; "not stated" where no record says."""
    settings = [r.get("settings") or {} for r in records]
    retries = sorted({str(s["max_retries"]) for s in settings if s.get("max_retries") is not None}
                     | {str((s.get("env") or {})["CLAUDE_CODE_MAX_RETRIES"]) for s in settings
                        if "CLAUDE_CODE_MAX_RETRIES" in (s.get("env") or {})})
    tools = sorted({str(t) for s in settings for t in (s.get("server_tools") or s.get("native_tools") or [])})
    tools_stated = any("server_tools" in s or "native_tools" in s for s in settings)
    thinking_stated = any("thinking" in s for s in settings)
    return "; ".join([
        f"retries {', '.join(retries)}" if retries else "retries not stated",
        f"server tools: {', '.join(tools)}" if tools else "no server tools" if tools_stated else
        "server tools not stated",
        "thinking where the scenario enables it" if any(s.get("thinking") for s in settings) else
        "no thinking" if thinking_stated else "thinking not stated"])


def clients_matrix(observed: str | Path | None = None, claims: str | Path | None = None) -> pd.DataFrame:
    """``clients_table()`` with two more columns per client and version: ``options`` (:func:`options`) and
    ``reached``, how many of its records reached the branch of their scenario."""
    table = clients_table(observed, claims)
    records = load_records(observed)
    runs = [list(records[key].values()) for key in comparison_columns(records)]  # the table's row order
    table.insert(4, "options", [options(r) for r in runs])
    table.insert(5, "reached", [sum(branch_reached(x) for x in r) for r in runs])
    return table


def comparison_matrix(observed: str | Path | None = None, claims: str | Path | None = None) -> pd.DataFrame:
    """``comparison_table()`` with ``(branch not reached)`` after each client cell whose run never reached the
    branch of its scenario (a run whose first request already overflowed says so in its cell already)."""
    table = comparison_table(observed, claims)
    records = load_records(observed)
    for client, version in comparison_columns(records):
        label = f"{client} {version}"
        for i, name in table["scenario"].items():
            record = records[(client, version)].get(name)
            cell = str(table.at[i, label])
            if record and not branch_reached(record) and not cell.startswith("not comparable"):
                table.at[i, label] = f"{cell} ({NOT_REACHED})"
    return table
