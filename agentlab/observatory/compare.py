"""The comparison table: for each branch, what the article claims, what the API docs advise, what each
observed client did (from ``data/observed``), and what agentlab does, with the differences marked.

``comparison_table()`` returns a pandas DataFrame, one row per scenario that exercises a branch (scenarios
without a ``row``, such as the tour, are left out). Client cells are short descriptions derived from the
behaviour records (``agentlab.observatory.observe``). Every cell with a *signature* (the action labels after the first
request, and whether the run ended in error) is compared with agentlab's: ``differs`` says whether any
differs, ``differing`` names the columns. The article and docs cells come from ``data/observed/claims.yaml``;
only claims precise enough to carry actions take part in the comparison.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from agentlab.backend.scenario import Scenario, list_scenarios
from agentlab.core.errors import ConfigError
from agentlab.core.extras import require
from agentlab.core.paths import load_yaml
if TYPE_CHECKING:
    import pandas as pd

from agentlab.observatory.records import (  # noqa: F401  (describe: the lessons read it here)
    OBSERVED_DIR,
    describe,
    load_records,
    outcome,
    overflowed,
    version_key,
)

CLAIMS_PATH = OBSERVED_DIR / "claims.yaml"
# columns: the article, the API docs, the clients people use (Claude Code by version, then the frameworks,
# then the SDKs' own tool runners), agentlab last
CLIENT_ORDER = ("claude-code", "pydantic-ai", "langchain", "openai-agents", "strands", "vercel-ai", "anthropic-ts",
                "tool-runner", "agentlab")
Signature = tuple[tuple[str, ...], str]


def load_claims(path: str | Path | None = None) -> dict[str, Any]:
    path = Path(path) if path else CLAIMS_PATH
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
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

def signature(record: dict[str, Any]) -> Signature | None:
    """The action labels after the first request and the outcome; None when the run cannot be compared
    (its first request already overflowed the scenario's window)."""
    if overflowed(record):
        return None
    return tuple(record["summary"]["actions"]), outcome(record)



def comparison_columns(records: dict[tuple[str, str], dict[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    def order(key: tuple[str, str]) -> tuple:
        client, version = key
        rank = CLIENT_ORDER.index(client) if client in CLIENT_ORDER else len(CLIENT_ORDER) - 1
        return rank, client, version_key(version)

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
    columns = comparison_columns(records)
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
    return require("pandas", "comparison_table()").DataFrame(rows)


def clients_table(observed: str | Path | None = None, claims: str | Path | None = None) -> pd.DataFrame:
    """One row per recorded client and version: what it is, the one command that re-records it, how many
    scenarios are recorded, and the notes from claims.yaml's ``clients`` section (for Claude Code: the
    Claude Agent SDK, which runs the same CLI)."""
    about = load_claims(claims).get("clients") or {}
    rows = []
    for client, version in comparison_columns(load_records(observed)):
        info = about.get(client) or {}
        spec = f"{client}@{version}" if client == "claude-code" else client
        rows.append({"client": info.get("label", client), "version": version,
                     "records": len(load_records(observed)[(client, version)]),
                     "reproduce": f"agentlab observe {spec}", "how": info.get("how", ""),
                     "note": info.get("note", "")})
    columns = ["client", "version", "records", "reproduce", "how", "note"]
    return require("pandas", "clients_table()").DataFrame(rows, columns=columns)


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
    return require("pandas", "explained_differences()").DataFrame(rows, columns=["scenario", "differing", "why"])


def difference_mask(table: pd.DataFrame) -> pd.DataFrame:
    """True for each cell whose column is listed in its row's ``differing``."""
    mask = require("pandas", "difference_mask()").DataFrame(False, index=table.index, columns=table.columns)
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
            text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
            css = ' class="differs"' if mask.loc[i, column] else ""
            cells.append(f"<td{css}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"{STYLE}\n<table class=\"agentlab-compare\">\n<thead><tr>{head}</tr></thead>\n<tbody>\n"
            + "\n".join(body) + "\n</tbody>\n</table>\n")


# -- what the lessons say about the recorded clients ---------------------------------------------------------

def recorded(scenarios: str | list[str], extra: tuple[str, ...] = (), observed: str | Path | None = None
             ) -> pd.DataFrame:
    """What every recorded client did on ``scenarios``: one row per client and version found under
    ``data/observed`` (whatever clients are there), one column per scenario, each cell :func:`describe` of
    the record ("not recorded" where there is none). ``extra`` adds fields of the client's own result to
    each cell (``("num_turns",)``). The lessons print this instead of typing what a client did."""
    import pandas as pd

    names = [scenarios] if isinstance(scenarios, str) else list(scenarios)
    records = load_records(observed)
    rows = []
    for key in comparison_columns(records):
        row: dict[str, Any] = {"client": f"{key[0]} {key[1]}"}
        for name in names:
            record = records[key].get(name)
            cell = describe(record) if record else "not recorded"
            if record:
                result = record.get("result") or {}
                cell += "".join(f"; {field} {result.get(field)}" for field in extra if field in result)
            row[name] = cell
        rows.append(row)
    return pd.DataFrame(rows, columns=["client", *names]).set_index("client")


def recorded_clients(observed: str | Path | None = None) -> str:
    """The recorded clients and versions in one line, e.g. "agentlab 0.1.0, claude-code 2.1.197, ..."."""
    return ", ".join(f"{client} {version}" for client, version in comparison_columns(load_records(observed)))


LESSON_CLAIMS_PATH = OBSERVED_DIR / "lesson_claims.yaml"


def _at(value: Any, path: str) -> Any:
    """``value`` followed along a dotted path ("result.subtype", "requests.1.appended.text")."""
    for part in path.split("."):
        if isinstance(value, list) and part.lstrip("-").isdigit():
            value = value[int(part)] if -len(value) <= int(part) < len(value) else None
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def _holds(record: dict[str, Any], check: dict[str, Any]) -> str | None:
    """None when ``check`` holds for ``record``, else what the record has instead."""
    got = _at(record, check["path"])
    if "equals" in check and got != check["equals"]:
        return f"{check['path']} is {got!r}, not {check['equals']!r}"
    if "contains" in check and str(check["contains"]) not in json.dumps(got, ensure_ascii=False):
        return f"{check['path']} does not contain {check['contains']!r} (it is {str(got)[:120]!r})"
    if "lacks" in check and str(check["lacks"]) in json.dumps(got, ensure_ascii=False):
        return f"{check['path']} contains {check['lacks']!r}"
    return None


def load_lesson_claims(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The claims the lessons make about recorded clients (``data/observed/lesson_claims.yaml``)."""
    path = Path(path) if path else LESSON_CLAIMS_PATH
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the lesson claims: {exc}") from None
    claims = (data or {}).get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, list):
        raise ConfigError(f"{path}: expected a mapping with a 'claims' list")
    return claims


def _transcript(client: str, version: str, scenario: str) -> dict[str, Any] | None:
    """The committed transcript ``data/sessions/<client>/<version>/<scenario>.jsonl`` as ``agentlab replay
    --json`` reads it, or None when there is none."""
    from agentlab.core.paths import data_dir
    from agentlab.sessions.transcript import read_session

    path = data_dir() / "sessions" / client / version / f"{scenario}.jsonl"
    return read_session(path).to_json() if path.is_file() else None


def lesson_claim_failures(claims: list[dict[str, Any]], observed: str | Path | None = None) -> list[str]:
    """Each check of each claim that the records contradict (or that names a record that does not exist).
    A check with ``source: transcript`` is checked against the committed transcript of that client, version and
    scenario (``data/sessions``) instead of its behaviour record."""
    records = load_records(observed)
    failures = []
    for claim in claims:
        for check in claim.get("holds") or []:
            versions = check["version"] if isinstance(check["version"], list) else [check["version"]]
            scenarios = check["scenario"] if isinstance(check["scenario"], list) else [check["scenario"]]
            for version in versions:
                for scenario in scenarios:
                    if check.get("source") == "transcript":
                        record = _transcript(check["client"], str(version), scenario)
                    else:
                        record = records.get((check["client"], str(version)), {}).get(scenario)
                    where = f"{claim['notebook']}: {claim['text'][:60]!r}: {check['client']} {version} {scenario}"
                    why = "no such record" if record is None else _holds(record, check)
                    if why:
                        failures.append(f"{where}: {why}")
    return failures


def print_recorded(scenarios: str | list[str], extra: tuple[str, ...] = (), observed: str | Path | None = None
                   ) -> None:
    """:func:`recorded`, printed whole: for each scenario, one line per recorded client and version."""
    table = recorded(scenarios, extra, observed)
    width = max((len(str(client)) for client in table.index), default=0) + 2
    for name in table.columns:
        print(name)
        for client, cell in table[name].items():
            print("  " + str(client).ljust(width) + cell)
