"""What ``agentlab grade`` writes for machines: the JSON report (``--json``, ``--save``; read back by ``--load``),
JUnit XML (``--junit``) and the baseline of known failures (``--write-baseline``, ``--baseline``).

The JSON report is one document, described by the JSON Schema ``schemas/grade-report.schema.json`` shipped
in the package (:data:`SCHEMA_PATH`); ``schema_version`` changes only when a field changes meaning or goes away.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from agentlab.core.errors import ConfigError
from agentlab.core.extras import DISTRIBUTION
from agentlab.core.paths import write_output
from agentlab.core.text import printable
from agentlab.grading.report import Report, ScenarioGrade
from agentlab.grading.verdict import MARKS, Verdict, rule_message, rule_verdict, run_verdict

# 2: a rule's status may be "policy", a scenario's verdict "policy" or "not_reached" (never "pass" for a scenario
# whose branch was not reached), a report's and the run's "policy"; each report has "policy" (the mode, and each
# difference once); a not-reached scenario keeps the verdicts of the rules that were reached
SCHEMA_VERSION = 2
SCHEMA_PATH = Path(__file__).with_name("schemas") / "grade-report.schema.json"
BASELINE_VERSION = 1

Key = tuple[str, str]  # (scenario, rule)


def agentlab_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


# -- the baseline of known failures -----------------------------------------------------------------------------

@dataclass
class BaselineCheck:
    """Today's failures against a baseline: ``accepted`` (known), ``new`` (not in it: the run fails) and
    ``now_pass`` (in it, graded today and no longer failing: the baseline can shrink)."""

    path: str
    accepted: list[Key] = field(default_factory=list)
    new: list[Key] = field(default_factory=list)
    now_pass: list[Key] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.new

    def text(self) -> str:
        lines = [f"baseline {self.path}: {len(self.accepted)} known failure(s) accepted, {len(self.new)} new"]
        if self.new:
            lines.append("  new failures: " + _keys(self.new))
        if self.now_pass:
            lines.append("  in the baseline but no longer failing (remove them from it): " + _keys(self.now_pass))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def listed(keys: list[Key]) -> list[dict[str, str]]:
            return [{"scenario": s, "rule": r} for s, r in keys]

        return {"path": self.path, "passed": self.passed, "accepted": listed(self.accepted), "new": listed(self.new),
                "now_pass": listed(self.now_pass)}


def _keys(keys: list[Key]) -> str:
    return "; ".join(f"{s}: {r}" for s, r in keys)


def failures(reports: Sequence[Report]) -> dict[Key, str]:
    """Every failed rule of the reports (its verdict, under the report's --policy), with its message."""
    return {(g.scenario, c.rule): rule_message(c, g.policy) for r in reports for g in r.grades for c in g.checks
            if rule_verdict(c, g.policy) == "fail"}


def split_by_baseline(grade: ScenarioGrade, known: set[Key]) -> tuple[list[str], list[str]]:
    """A scenario's failed rules as ``(new, accepted)``: not in the baseline, and in it."""
    return ([rule for rule in grade.failed if (grade.scenario, rule) not in known],
            [rule for rule in grade.failed if (grade.scenario, rule) in known])


def write_baseline(path: str | Path, reports: Sequence[Report]) -> int:
    """Record today's failures as the known ones; returns how many."""
    found = failures(reports)
    by_scenario: dict[str, dict[str, str]] = {}
    for (scenario, rule), why in sorted(found.items()):
        by_scenario.setdefault(scenario, {})[rule] = why
    data = {"baseline_version": BASELINE_VERSION, "agentlab_version": agentlab_version(),
            "commands": [r.command for r in reports if r.command is not None], "failures": by_scenario}
    write_output(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n", "--write-baseline")
    return len(found)


def read_baseline(path: str | Path) -> set[Key]:
    """The known failures of a baseline file: ``failures`` maps each scenario to its rules (a list, or a map
    of rule to the message it failed with)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--baseline {path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"--baseline {path}: not JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"--baseline {path}: nested too deeply to be a baseline written by --write-baseline"
                          ) from None
    found = data.get("failures") if isinstance(data, dict) else None
    if not isinstance(found, dict) or not all(isinstance(v, dict | list) for v in found.values()):
        raise ConfigError(f"--baseline {path}: not a baseline written by --write-baseline "
                          "(expected {\"failures\": {scenario: [rule, ...]}})")
    return {(str(scenario), str(rule)) for scenario, rules in found.items() for rule in rules}


def check_baseline(path: str | Path, known: set[Key], reports: Sequence[Report]) -> BaselineCheck:
    found = failures(reports)
    graded = {g.scenario for r in reports for g in r.grades}
    return BaselineCheck(str(path), accepted=sorted(k for k in found if k in known),
                         new=sorted(k for k in found if k not in known),
                         now_pass=sorted(k for k in known if k not in found and k[0] in graded))


# -- the JSON report ---------------------------------------------------------------------------------------------

def overall_verdict(reports: Sequence[Report], baseline: BaselineCheck | None = None) -> Verdict:
    """The run's verdict (:func:`~agentlab.grading.verdict.run_verdict`): the reports', or with a
    baseline fail only on a failure it does not hold; nothing graded fails."""
    return run_verdict([r.verdict for r in reports], None if baseline is None else baseline.passed)


def overall_passed(reports: Sequence[Report], baseline: BaselineCheck | None = None) -> bool:
    """Whether the run exits 0: its verdict is not fail (a policy difference passes unless --policy strict)."""
    return bool(reports) and overall_verdict(reports, baseline) != "fail"


def document(reports: Sequence[Report], baseline: BaselineCheck | None = None) -> dict[str, Any]:
    """The JSON report: the schema's version, agentlab's, the verdict, and every report in full."""
    verdict = overall_verdict(reports, baseline) if reports else "fail"
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "agentlab_version": agentlab_version(),
                           "verdict": verdict, "reports": [r.to_dict() for r in reports]}
    if baseline is not None:
        out["baseline"] = baseline.to_dict()
    return out


def load_document(path: str | Path) -> list[Report]:
    """The reports of a saved JSON report (``--save`` or ``--json``; also the earlier format without a version)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"--load {path}: cannot read a saved report: {getattr(exc, 'strerror', None) or exc}"
                          ) from None
    items = data.get("reports") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"--load {path}: not a report saved with --save or --json (no 'reports' list)")
    version = data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ConfigError(f"--load {path}: schema_version {version!r}; this agentlab reads {SCHEMA_VERSION} and "
                          "earlier")
    reports = []
    for k, item in enumerate(items):
        try:
            if not isinstance(item, dict):
                raise TypeError(f"expected an object, got {type(item).__name__}")
            reports.append(Report.from_dict(item))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"--load {path}: reports[{k}] is malformed: {type(exc).__name__}: {exc}"[:300]) from None
    return reports


# -- JUnit XML ---------------------------------------------------------------------------------------------------

def junit_xml(reports: Sequence[Report], baseline: BaselineCheck | None = None) -> str:
    """JUnit XML: a test suite per report, a test case per scenario × rule (``classname`` the scenario, ``name``
    the rule); a failed rule is a failure with its message, a rule whose branch was not reached is skipped, and
    so is a failure the baseline accepts (its message says so); a policy difference passes, its message in the
    case's system-out (under --policy strict it is a failure). Messages are shown printable (XML 1.0 holds no
    control characters)."""
    known = set(baseline.accepted) if baseline is not None else set()
    root = ET.Element("testsuites", name="agentlab grade")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for report in reports:
        suite = ET.SubElement(root, "testsuite", name=report.client)
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        time_s = 0.0
        for grade in report.grades:
            results = grade.rule_results()
            share = (grade.duration_s or 0.0) / max(1, len(results))
            time_s += grade.duration_s or 0.0
            for result in results:
                case = ET.SubElement(suite, "testcase", classname=grade.scenario, name=result["rule"],
                                     time=f"{share:.3f}")
                counts["tests"] += 1
                message = printable(result["message"], newlines=False)
                if result["status"] == "fail" and (grade.scenario, result["rule"]) in known:
                    ET.SubElement(case, "skipped", message=f"known failure (baseline): {message}")
                    counts["skipped"] += 1
                elif result["status"] == "fail":
                    failure = ET.SubElement(case, "failure", message=message, type=result["rule"])
                    failure.text = _failure_text(grade, message)
                    counts["failures"] += 1
                elif result["status"] == "not_reached":
                    ET.SubElement(case, "skipped", message=message)
                    counts["skipped"] += 1
                elif result["status"] == "policy":
                    ET.SubElement(case, "system-out").text = f"{MARKS['policy']} {message}"
        suite.set("time", f"{time_s:.3f}")
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("errors", "0")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _failure_text(grade: Any, message: str) -> str:
    lines = [message, f"scenario {grade.scenario}: {grade.requests} request(s), {printable(grade.ending)}"]
    lines += [f"note: {printable(n)}" for n in grade.notes]
    if grade.stderr and (grade.requests == 0 or grade.exit_code not in (0, None)):
        lines.append("stderr: " + printable(grade.stderr))
    return "\n".join(lines)


def write_text(path: str | Path, text: str, option: str) -> None:
    """A report file written whole or not at all (:func:`~agentlab.core.paths.write_output`): a write that fails
    leaves the last good report in place."""
    write_output(path, text, option)
