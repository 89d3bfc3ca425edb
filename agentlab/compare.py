"""The comparison table: for each branch, what the article claims, what the API docs advise, what each
observed client did (from ``data/observed``), and what agentlab does, with the differences marked.

``comparison_table()`` returns a pandas DataFrame, one row per scenario that exercises a branch (scenarios
without a ``row``, such as the tour, are left out). Client cells are short descriptions derived from the
behaviour records (``agentlab.observe``). Every cell with a *signature* (the action labels after the first
request, and whether the run ended in error) is compared with agentlab's: ``differs`` says whether any
differs, ``differing`` names the columns. The article and docs cells come from ``data/observed/claims.yaml``;
only claims precise enough to carry actions take part in the comparison.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from .errors import ConfigError
from .observe import OBSERVED_DIR, load_records
from .scenario import Scenario, list_scenarios

CLAIMS_PATH = OBSERVED_DIR / "claims.yaml"
# columns: the article, the API docs, the clients people use (Claude Code by version, then the frameworks,
# then the SDK's own tool runner), agentlab last
CLIENT_ORDER = ("claude-code", "pydantic-ai", "langchain", "tool-runner", "agentlab")
Signature = tuple[tuple[str, ...], str]


def load_claims(path: str | Path | None = None) -> dict[str, Any]:
    path = Path(path) if path else CLAIMS_PATH
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the claims: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
        raise ConfigError(f"{path}: expected a mapping with 'sources', 'rows' and 'scenarios'")
    return data


def claim_for(claims: dict[str, Any], source: str, scenario: Scenario) -> dict[str, Any] | None:
    """The claim of ``source`` for ``scenario``: its own entry, else its row's; always a dict with ``text``."""
    entry = (claims.get("scenarios") or {}).get(scenario.name, {}).get(source)
    if entry is None:
        entry = (claims.get("rows") or {}).get(str(scenario.row), {}).get(source)
    if entry is None:
        return None
    return {"text": entry} if isinstance(entry, str) else dict(entry)


def claim_signature(claim: dict[str, Any] | None) -> Signature | None:
    if not claim or "actions" not in claim:
        return None
    return tuple(claim["actions"]), str(claim.get("outcome", "ok"))


# -- records --------------------------------------------------------------------------------------------------

def outcome(record: dict[str, Any]) -> str:
    """``error`` when the run ended in error as the client reported it (is_error, a raised error, a non-zero
    exit, a timeout), else ``ok``."""
    result = record.get("result") or {}
    failed = (bool(result.get("is_error")) or bool(result.get("raised")) or bool(result.get("timed_out"))
              or result.get("exit_code") not in (0, None))
    return "error" if failed else "ok"


def overflowed(record: dict[str, Any]) -> bool:
    """The client's first request was already over the scenario's context window: the run says nothing about
    the branch the scenario is for (Claude Code's own system prompt and tools are ~29k tokens)."""
    requests = record.get("requests") or []
    return bool(requests) and requests[0].get("kind") == "prompt_too_long"


def signature(record: dict[str, Any]) -> Signature | None:
    """The action labels after the first request and the outcome; None when the run cannot be compared
    (its first request already overflowed the scenario's window)."""
    if overflowed(record):
        return None
    return tuple(record["summary"]["actions"]), outcome(record)


def _compress(actions: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(actions):
        j = i
        while j < len(actions) and actions[j] == actions[i]:
            j += 1
        out.append(actions[i] + (f" ×{j - i}" if j - i > 1 else ""))
        i = j
    return ", ".join(out)


def describe(record: dict[str, Any]) -> str:
    """A short description of a behaviour record, e.g. "4 requests: continuation ×3; no max_tokens raise;
    success, is_error (exit 1)"."""
    summary, result = record["summary"], record.get("result") or {}
    if overflowed(record):
        first = record["requests"][0]
        window = re.search(r"> (\d+) maximum", first.get("error", ""))
        size = f"{first['tokens']:,}" if isinstance(first.get("tokens"), int) else "?"
        return (f"not comparable: its first request (~{size} tokens of its own system prompt and tools) is "
                f"already over the {int(window.group(1)):,}-token window" if window else
                f"not comparable: its first request (~{size} tokens) is already over the window")
    n = summary["requests"]
    parts = [f"{n} request{'s' if n != 1 else ''}" + (f": {_compress(summary['actions'])}"
                                                      if summary["actions"] else "")]
    max_tokens = [m for m in summary["max_tokens"] if isinstance(m, int)]
    if summary["max_tokens_raised"]:
        parts.append("max_tokens " + "→".join(str(m) for m in max_tokens))
    elif str(record.get("row")) in ("1", "3"):
        parts.append("no max_tokens raise")
    if len(summary["models"]) > 1:
        parts.append("model " + "→".join(str(m) for m in summary["models"]))
    if summary.get("beyond_script"):
        parts.append(f"{summary['beyond_script']} beyond the script")
    if result.get("timed_out"):
        ending = "timed out"
    elif result.get("raised"):
        status = f" {result['status']}" if result.get("status") else ""
        ending = f"raised {result['raised']}{status}"
    elif result.get("subtype"):
        ending = result["subtype"] + (", is_error" if result.get("is_error") and result["subtype"] == "success"
                                      else "")
    else:
        ending = f"stop_reason {result.get('stop_reason')}"
    if result.get("exit_code") not in (None, 0):
        ending += f" (exit {result['exit_code']})"
    parts.append(ending)
    return "; ".join(parts)


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in version.replace("-", ".").split("."))


def _columns(records: dict[tuple[str, str], dict[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    def order(key: tuple[str, str]) -> tuple:
        client, version = key
        rank = CLIENT_ORDER.index(client) if client in CLIENT_ORDER else len(CLIENT_ORDER) - 1
        return rank, client, _version_key(version)

    return sorted(records, key=order)


def _row_key(row: str) -> tuple[int, str]:
    digits = "".join(ch for ch in row if ch.isdigit())
    return (int(digits) if digits else 99, row)


# -- the table ------------------------------------------------------------------------------------------------

def comparison_table(observed: str | Path | None = None, claims: str | Path | None = None,
                     scenarios: list[Scenario] | None = None) -> pd.DataFrame:
    """One row per branch scenario; columns: row, scenario, the article, the API docs, each observed client
    with its version, agentlab, ``differs`` and ``differing``."""
    claim_data = load_claims(claims)
    sources = claim_data["sources"]
    records = load_records(observed)
    columns = _columns(records)
    agentlab_keys = [k for k in columns if k[0] == "agentlab"]
    baseline_key = agentlab_keys[-1] if agentlab_keys else None
    chosen = [sc for sc in (scenarios if scenarios is not None else list_scenarios()) if sc.row]
    chosen.sort(key=lambda sc: (_row_key(str(sc.row)), sc.name))
    rows: list[dict[str, Any]] = []
    for sc in chosen:
        row: dict[str, Any] = {"row": str(sc.row), "scenario": sc.name}
        signatures: dict[str, Signature | None] = {}
        for source, info in sources.items():
            label = info.get("label", source)
            claim = claim_for(claim_data, source, sc)
            row[label] = claim["text"] if claim else "—"
            signatures[label] = claim_signature(claim)
        for key in columns:
            label = f"{key[0]} {key[1]}"
            record = records[key].get(sc.name)
            row[label] = describe(record) if record else "not recorded"
            signatures[label] = signature(record) if record else None
        if baseline_key is None:
            label = "agentlab"
            row[label] = f"expected: {sc.expect.subtype}" if sc.expect else "not recorded"
            signatures[label] = None
        base_label = f"{baseline_key[0]} {baseline_key[1]}" if baseline_key else "agentlab"
        base = signatures.get(base_label)
        differing = [label for label, sig in signatures.items()
                     if label != base_label and base is not None and sig is not None and sig != base]
        row["differs"] = bool(differing) if base is not None else None
        row["differing"] = ", ".join(differing)
        rows.append(row)
    return pd.DataFrame(rows)


def clients_table(observed: str | Path | None = None, claims: str | Path | None = None) -> pd.DataFrame:
    """One row per recorded client and version: what it is, the one command that re-records it, how many
    scenarios are recorded, and the notes from claims.yaml's ``clients`` section (for Claude Code: the
    Claude Agent SDK, which runs the same CLI)."""
    about = load_claims(claims).get("clients") or {}
    rows = []
    for client, version in _columns(load_records(observed)):
        info = about.get(client) or {}
        spec = f"{client}@{version}" if client == "claude-code" else client
        rows.append({"client": info.get("label", client), "version": version,
                     "records": len(load_records(observed)[(client, version)]),
                     "reproduce": f"agentlab observe {spec}", "how": info.get("how", ""),
                     "note": info.get("note", "")})
    return pd.DataFrame(rows, columns=["client", "version", "records", "reproduce", "how", "note"])


def explained_differences(table: pd.DataFrame | None = None, claims: str | Path | None = None) -> pd.DataFrame:
    """The differences claims.yaml explains (``explained``: scenario → why), next to the table's ``differing``
    columns for that scenario. Every explained scenario must be a row of the table."""
    table = comparison_table(claims=claims) if table is None else table
    explained = load_claims(claims).get("explained") or {}
    by_name = table.set_index("scenario")
    rows = []
    for name, text in explained.items():
        if name not in by_name.index:
            raise ConfigError(f"claims.yaml: explained: {name!r} is not a branch scenario of the table")
        rows.append({"scenario": name, "differing": by_name.loc[name, "differing"], "why": " ".join(str(text).split())})
    return pd.DataFrame(rows, columns=["scenario", "differing", "why"])


def difference_mask(table: pd.DataFrame) -> pd.DataFrame:
    """True for each cell whose column is listed in its row's ``differing``."""
    mask = pd.DataFrame(False, index=table.index, columns=table.columns)
    for i, differing in table["differing"].items():
        for label in filter(None, (d.strip() for d in str(differing).split(","))):
            if label in mask.columns:
                mask.loc[i, label] = True
    return mask


STYLE = """<style>
table.agentlab-compare {border-collapse: collapse; font-size: 0.85em}
table.agentlab-compare th, table.agentlab-compare td {border: 1px solid #ccc; padding: 3px 6px;
  text-align: left; vertical-align: top}
table.agentlab-compare td.differs {background: #ffe3c2}
</style>"""


def comparison_html(table: pd.DataFrame | None = None, **kwargs: Any) -> str:
    """The table as deterministic HTML; cells that differ from agentlab have the class ``differs``."""
    table = comparison_table(**kwargs) if table is None else table
    mask = difference_mask(table)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    body = []
    for i, row in table.iterrows():
        cells = []
        for column in table.columns:
            value = row[column]
            text = "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)
            css = ' class="differs"' if mask.loc[i, column] else ""
            cells.append(f"<td{css}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"{STYLE}\n<table class=\"agentlab-compare\">\n<thead><tr>{head}</tr></thead>\n<tbody>\n"
            + "\n".join(body) + "\n</tbody>\n</table>\n")
