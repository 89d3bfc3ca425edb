"""The report card of ``agentlab grade``: a record judged against every rule (:class:`ScenarioGrade`), a
client's grades (:class:`Report`: its table, its text, saved and loaded as JSON), and the report cards of
the committed records (:func:`observed_reports`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backend.scenario import Scenario, load_scenario
from ..core.errors import AgentlabError, ConfigError
from .grade_rules import RULES, UNIVERSAL, Check, Run, ending, plural


# -- grading --------------------------------------------------------------------------------------------------

@dataclass
class ScenarioGrade:
    """The checks of every rule that applies to one run of one scenario."""

    scenario: str
    checks: list[Check]
    requests: int = 0
    ending: str = ""
    record: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # what was judged; not saved
    notes: list[str] = field(default_factory=list)  # what the server saw that bears on the grade (server tools)

    @property
    def failed(self) -> list[str]:
        return [c.rule for c in self.checks if c.status == "fail"]

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    @property
    def judged(self) -> bool:
        """Whether any branch rule could judge the run (not only ``ends_on_its_own``, not only skips)."""
        return any(c.status != "skip" and c.rule not in UNIVERSAL for c in self.checks)

    @property
    def mark(self) -> str:
        return "✗" if self.failed else "✓" if self.judged else "–"

    def check(self, rule: str) -> Check | None:
        return next((c for c in self.checks if c.rule == rule), None)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.scenario, "verdict": self.verdict, "failed": self.failed,
               "why": {c.rule: c.why for c in self.checks if c.status == "fail"},
               "requests": self.requests, "ending": self.ending}
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def grade_record(record: dict[str, Any], scenario: Scenario | str | None = None) -> ScenarioGrade:
    """Judge one behaviour record against every rule: a pure function of the record and its scenario
    (loaded by name when not given; None when it no longer exists)."""
    if scenario is None or isinstance(scenario, str):
        name = scenario or record.get("scenario")
        try:
            scenario = load_scenario(str(name)) if name else None
        except AgentlabError:
            scenario = None
    run = Run(record, scenario)
    checks = [c for rule in RULES if (c := rule.check(run)) is not None]
    return ScenarioGrade(str(record.get("scenario")), checks, len(run.requests), ending(record), record,
                         server_tool_notes(record, scenario))


def server_tool_notes(record: dict[str, Any], scenario: Scenario | None) -> list[str]:
    """Where the scenario's scripted model uses a server tool (web search) that the client never offered in
    ``tools`` (``build_record`` notes it): the live API would not have answered with its blocks, so what the run
    shows of that branch is the scripted server's, and the report says so."""
    if scenario is None or not scenario.server_tools:
        return []
    from .records import SERVER_TOOLS_NOT_OFFERED

    return [str(n) for n in record.get("notes") or [] if SERVER_TOOLS_NOT_OFFERED in str(n)]


@dataclass
class Report:
    """A client's report card: one :class:`ScenarioGrade` per scenario."""

    client: str
    grades: list[ScenarioGrade] = field(default_factory=list)
    subject: Any = field(default=None, repr=False, compare=False)  # what was graded (a function), not saved

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.grades)

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    def grade(self, scenario: str) -> ScenarioGrade:
        """The grade of one scenario (KeyError naming the graded ones when it was not graded)."""
        for g in self.grades:
            if g.scenario == scenario:
                return g
        raise KeyError(f"{scenario!r} was not graded; graded: {', '.join(g.scenario for g in self.grades)}")

    @property
    def failed(self) -> dict[str, list[str]]:
        """``{scenario: [failed rules]}`` for the scenarios that failed."""
        return {g.scenario: g.failed for g in self.grades if g.failed}

    def table(self, why: bool = False):
        """A pandas DataFrame, one row per scenario, one column per rule that applied somewhere: ✓, ✗, – or
        empty (the rule did not apply); with ``why=True`` the reasons instead of the marks."""
        import pandas as pd

        used = [r.name for r in RULES if any(g.check(r.name) for g in self.grades)]
        rows = []
        for g in self.grades:
            row: dict[str, Any] = {"scenario": g.scenario, "verdict": g.mark}
            for name in used:
                c = g.check(name)
                row[name] = "" if c is None else (c.why if why else c.mark)
            rows.append(row)
        return pd.DataFrame(rows, columns=["scenario", "verdict", *used]).set_index("scenario")

    def to_dict(self) -> dict[str, Any]:
        return {"client": self.client, "verdict": self.verdict,
                "scenarios": [{"client": self.client, **g.to_dict()} for g in self.grades],
                "checks": {g.scenario: [{"rule": c.rule, "status": c.status, "why": c.why} for c in g.checks]
                           for g in self.grades}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        grades = []
        for item in data.get("scenarios") or []:
            name = item["name"]
            checks = [Check(c["rule"], c["status"], c["why"]) for c in (data.get("checks") or {}).get(name, [])]
            grades.append(ScenarioGrade(name, checks, int(item.get("requests") or 0), str(item.get("ending") or ""),
                                        notes=[str(n) for n in item.get("notes") or []]))
        return cls(str(data.get("client")), grades)

    def text(self) -> str:
        """The report as the CLI prints it: per scenario its verdict and ending, then each rule with ✓/✗ and why."""
        n_pass = sum(1 for g in self.grades if g.passed)
        lines = [f"{self.client}: {plural(len(self.grades), 'scenario')}, {n_pass} pass, "
                 f"{len(self.grades) - n_pass} fail", ""]
        width = max([len(g.scenario) for g in self.grades] + [8])
        rule_width = max(len(c.rule) for g in self.grades for c in g.checks) if any(
            g.checks for g in self.grades) else 10
        for g in self.grades:
            how = f"{plural(g.requests, 'request')}, {g.ending}" if g.ending else ""
            lines.append(f"{g.mark} {g.scenario:<{width}}  {how}".rstrip())
            for c in g.checks:
                if c.rule in ("ends_on_its_own", "sends_the_prompt") and c.status == "pass":
                    continue  # the scenario's line says how it ended and how many requests it sent
                lines.append(f"    {c.mark} {c.rule:<{rule_width}}  {c.why}")
            lines += [f"    note: {n}" for n in g.notes]
        lines.append("")
        if self.passed:
            lines.append(f"every rule holds ({sum(len(g.checks) for g in self.grades)} checks)")
        else:
            lines.append("fails: " + "; ".join(f"{s}: {', '.join(rules)}" for s, rules in self.failed.items()))
        return "\n".join(lines)


def grade_records(records: Iterable[dict[str, Any]], client: str | None = None,
                  scenarios: dict[str, Scenario | None] | None = None) -> Report:
    """A report card from behaviour records (one per scenario), e.g. a client's committed records.
    ``scenarios`` caches the loaded scenarios by name across calls."""
    records = list(records)
    label = client or (f"{records[0].get('client')} {records[0].get('version')}" if records else "no records")
    cache = scenarios if scenarios is not None else {}
    grades = []
    for record in sorted(records, key=lambda r: str(r.get("scenario"))):
        name = str(record.get("scenario"))
        if name not in cache:
            try:
                cache[name] = load_scenario(name)
            except AgentlabError:
                cache[name] = None
        grades.append(grade_record(record, cache[name]) if cache[name] is not None else
                      ScenarioGrade(name, [c for rule in RULES if (c := rule.check(Run(record, None))) is not None],
                                    len(record.get("requests") or []), ending(record)))
    return Report(label, grades)


def observed_reports(observed: str | Path | None = None,
                     clients: Sequence[str] | None = None) -> list[Report]:
    """The report cards of the committed records (``data/observed``): one per client and version, in the
    comparison table's column order. ``clients`` picks some: "claude-code" (every version) or
    "claude-code 2.1.197"."""
    from .compare import comparison_columns
    from .records import load_records

    found = load_records(observed)
    reports = []
    loaded: dict[str, Scenario | None] = {}
    for key in comparison_columns(found):
        label = f"{key[0]} {key[1]}"
        if clients and not any(c in (key[0], label, f"{key[0]}@{key[1]}") for c in clients):
            continue
        reports.append(grade_records(found[key].values(), label, loaded))
    if clients:
        known = {k[0] for k in found} | {f"{k[0]} {k[1]}" for k in found} | {f"{k[0]}@{k[1]}" for k in found}
        unknown = [c for c in clients if c not in known]
        if unknown:
            raise ConfigError(f"--observed: no records for {', '.join(unknown)}; recorded: "
                              f"{', '.join(sorted(f'{k[0]}@{k[1]}' for k in found))}")
    return reports


