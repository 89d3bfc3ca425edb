"""The report card of ``agentlab grade``: a record judged against every rule (:class:`ScenarioGrade`), a
client's grades (:class:`Report`: its table, its text, saved and loaded as JSON), and the report cards of
the committed records (:func:`observed_reports`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlab.backend.scenario import Scenario, load_scenario
from agentlab.core.errors import AgentlabError, ConfigError
from agentlab.core.extras import require
from agentlab.core.text import printable
from agentlab.grading.rules import RULES, SERVER_FAULTS, Check, Run, ending, plural
from agentlab.grading.verdict import (
    DEFAULT_POLICY,
    MARKS,
    POLICY_WORDS,
    PolicyMode,
    Verdict,
    check_from_result,
    counted_once,
    counts_text,
    judged,
    passes,
    policy_groups,
    report_verdict,
    rule_result,
    rule_verdict,
    scenario_verdict,
)

STRIPPED_ENV = ("ANTHROPIC_*", "CLAUDE*")  # removed from a graded command's environment (grade_serving)


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
    exit_code: int | None = None      # the command's (None: a function, or stopped at the timeout)
    duration_s: float | None = None   # the run's wall time
    stderr: str = ""                  # the last lines the command wrote to stderr
    # why the scenario's own branch was not reached (a tool or thinking the client never offered or enabled, so
    # the live API could not have sent the scripted reply): the rules some reply of the run reached still count
    not_reached: list[str] = field(default_factory=list)
    beyond_script: int = 0  # model requests sent after the script was used up
    side_requests: list[str] = field(default_factory=list)  # beside the loop: "1 title request", ...
    policy: PolicyMode = DEFAULT_POLICY  # what a policy difference counts as (--policy)

    @property
    def verdict(self) -> Verdict:
        """pass, fail, policy or not_reached (:func:`~agentlab.grading.verdict.scenario_verdict`)."""
        return scenario_verdict(self.checks, branch_reached=not self.not_reached, mode=self.policy)

    def rules_with(self, verdict: Verdict) -> list[str]:
        """The rules whose verdict on this run is ``verdict``."""
        return [c.rule for c in self.checks if rule_verdict(c, self.policy) == verdict]

    @property
    def failed(self) -> list[str]:
        return self.rules_with("fail")

    @property
    def differs(self) -> list[str]:
        """The rules where the run differs from the reference loop's choice (policy)."""
        return self.rules_with("policy")

    @property
    def passed(self) -> bool:
        """Whether the scenario leaves the exit status at 0: it has checks and none fails (a policy difference
        or a branch not reached does not fail it)."""
        return passes(self.verdict)

    @property
    def judged(self) -> bool:
        """Whether any branch rule could judge the run (not only the universal rules, not only not_reached)."""
        return judged(self.checks)

    @property
    def mark(self) -> str:
        return MARKS[self.verdict]

    @property
    def reached(self) -> bool:
        """Whether the run reached the scenario's own branch: not when the live API could not have sent the
        scripted reply (:attr:`not_reached`), nor when no branch rule could judge the run and none failed."""
        return not self.not_reached and (self.judged or self.verdict == "fail")

    def check(self, rule: str) -> Check | None:
        return next((c for c in self.checks if c.rule == rule), None)

    def rule_results(self) -> list[dict[str, str]]:
        """Every rule, in the order of the decision table, as the JSON holds it
        (:func:`~agentlab.grading.verdict.rule_result`); a rule that judged nothing is ``not_reached``
        with the reason (the run never reached its branch)."""
        checks = {c.rule: c for c in reversed(self.checks)}  # the first check of a rule, as check() finds it
        out = [rule_result(c, self.policy) if (c := checks.pop(r.name, None)) is not None else
               {"rule": r.name, "status": "not_reached", "message": _NEVER_REACHED[r.name]} for r in RULES]
        return out + [rule_result(c, self.policy) for c in self.checks if checks.pop(c.rule, None) is not None]

    def to_dict(self) -> dict[str, Any]:
        """The scenario in the grade report's JSON (the schema: grade-report.schema.json)."""
        return {"name": self.scenario, "verdict": self.verdict, "reached": self.reached, "failed": self.failed,
                "policy": self.differs,
                "requests": self.requests, "ending": self.ending, "exit_code": self.exit_code,
                "duration_s": self.duration_s, "stderr": self.stderr, "notes": list(self.notes),
                "not_reached": list(self.not_reached), "beyond_script": self.beyond_script,
                "side_requests": list(self.side_requests), "rules": self.rule_results()}

    @classmethod
    def from_dict(cls, item: dict[str, Any], legacy_checks: list[dict[str, Any]] | None = None) -> ScenarioGrade:
        """A scenario of a saved report: ``rules`` (this format) or a report's ``checks`` (the earlier one)."""
        if legacy_checks is not None:
            checks = [check_from_result(c) for c in legacy_checks]
        else:
            # a rule not reached is kept when the grade said why; one that judged nothing is not a check
            checks = [check_from_result(r) for r in item.get("rules") or []
                      if not (r.get("status") == "not_reached" and str(r.get("message")).startswith(NEVER_REACHED))]
        checks += _saved_failures(item, checks)
        duration = item.get("duration_s")
        return cls(str(item["name"]), checks, int(item.get("requests") or 0), str(item.get("ending") or ""),
                   notes=[str(n) for n in item.get("notes") or []], exit_code=item.get("exit_code"),
                   duration_s=float(duration) if isinstance(duration, int | float) else None,
                   stderr=str(item.get("stderr") or ""),
                   not_reached=[str(n) for n in item.get("not_reached") or []],
                   beyond_script=int(item.get("beyond_script") or 0),
                   side_requests=[str(n) for n in item.get("side_requests") or []])


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
    checks = judge(run)
    unreached = not_reached(record, scenario)  # the scenario's own branch; every rule a reply reached still counts
    notes = [] if unreached else server_tool_notes(record, scenario)  # a server tool not offered: not reached
    notes += [f"request {r.n} was answered, but the live API refuses it: {r.api_would_refuse}"
              for r in run.requests if r.api_would_refuse]
    beyond = sum(1 for r in run.requests if r.kind == "unexpected")
    return ScenarioGrade(str(run.record.scenario), checks, len(run.requests), ending(run.record), record, notes,
                         exit_code=run.result.exit_code, duration_s=run.record.timing.wall_s,
                         stderr=str(run.result.stderr or ""), not_reached=unreached, beyond_script=beyond,
                         side_requests=side_requests(record))


def judge(run: Run) -> list[Check]:
    """Every rule on one run, each behaviour counted once (:func:`~agentlab.grading.verdict.counted_once`)."""
    return counted_once([c for rule in RULES if (c := rule.check(run)) is not None])


def side_requests(record: dict[str, Any]) -> list[str]:
    """The record's side requests (answered beside the loop, no step used up), counted by kind and model."""
    counts: dict[tuple[str, str], int] = {}
    for item in record.get("side_requests") or []:
        key = (str(item.get("what")), str(item.get("model")))
        counts[key] = counts.get(key, 0) + 1
    probes = [p for p in record.get("probes") or [] if "count_tokens" in str(p)]
    out = [f"{plural(n, what + ' request')} on {model}" for (what, model), n in counts.items()]
    return out + (["token counting (POST /v1/messages/count_tokens)"] if probes else [])


def not_reached(record: dict[str, Any], scenario: Scenario | None) -> list[str]:
    """Why the scenario's branch was not reached, each reason once: what the server could not send as scripted
    (a request's ``not_reached``), and, in records made before the server said so, the note that the client
    never offered a server tool the scripted model uses."""
    out: list[str] = []
    for r in record.get("requests") or []:
        for reason in r.get("not_reached") or []:
            if reason not in out:
                out.append(str(reason))
    if not out:
        out = server_tool_notes(record, scenario)
    return out + server_faults(record)


def server_faults(record: dict[str, Any] | None) -> list[str]:
    """Where grade's own server failed (a scenario whose numbers disagree with the request, the server raising):
    from that request on no reply was the live API's, so the scenario is not judged there and never passes; the
    rules a reply before it reached keep their verdicts."""
    if not record:
        return []
    faults = record.get("server_errors") or [
        {"n": r.get("n"), "kind": r.get("kind"), "message": r.get("error", "")}
        for r in record.get("requests") or [] if r.get("kind") in SERVER_FAULTS]
    return [f"request {f.get('n')}: grade's own server failed ({f.get('kind')}: "
            f"{' '.join(str(f.get('message') or 'no message').split())[:300]}); nothing after it is judged, "
            "and the scenario does not pass" for f in faults[:1]]


def server_tool_notes(record: dict[str, Any], scenario: Scenario | None) -> list[str]:
    """Where the scenario's scripted model uses a server tool (web search) that the client never offered in
    ``tools`` (``build_record`` notes it): the live API would not have answered with its blocks, so what the run
    shows of that branch is the scripted server's, and the report says so."""
    if scenario is None or not scenario.server_tools:
        return []
    from agentlab.observatory.records import SERVER_TOOLS_NOT_OFFERED

    return [str(n) for n in record.get("notes") or [] if SERVER_TOOLS_NOT_OFFERED in str(n)]


@dataclass
class Report:
    """A client's report card: one :class:`ScenarioGrade` per scenario."""

    client: str
    grades: list[ScenarioGrade] = field(default_factory=list)
    subject: Any = field(default=None, repr=False, compare=False)  # what was graded (a function), not saved
    command: list[str] | None = None  # the command that was graded (with {prompt} where the prompt went)
    passed_env: list[str] = field(default_factory=list)  # variables given to it despite the stripping (--pass-env)
    policy: PolicyMode = DEFAULT_POLICY  # what a policy difference counts as (--policy); under() sets it

    def under(self, mode: PolicyMode) -> Report:
        """The report with a policy difference counted as ``mode`` says (its grades too); returns itself."""
        self.policy = mode
        for g in self.grades:
            g.policy = mode
        return self

    @property
    def verdict(self) -> Verdict:
        """fail when a scenario fails or nothing was graded, policy when one differs, else pass."""
        return report_verdict([g.verdict for g in self.grades])

    @property
    def passed(self) -> bool:
        """Whether the report leaves the exit status at 0: something was graded and nothing fails."""
        return passes(self.verdict)

    def grade(self, scenario: str) -> ScenarioGrade:
        """The grade of one scenario (KeyError naming the graded ones when it was not graded)."""
        for g in self.grades:
            if g.scenario == scenario:
                return g
        raise KeyError(f"{scenario!r} was not graded; graded: {', '.join(g.scenario for g in self.grades)}")

    @property
    def failed(self) -> dict[str, list[str]]:
        """``{scenario: [failed rules]}`` for the scenarios that failed (``[NO_CHECKS]`` for one without checks)."""
        return {g.scenario: g.failed or [NO_CHECKS] for g in self.grades if g.verdict == "fail"}

    def failed_rules(self) -> list[tuple[str, list[str], bool]]:
        """Each failed rule once: ``(rule, [scenarios], policy)``, the rules that fail outright first, then those
        failing as a policy difference counted as a failure (--policy strict), each group in the table's order."""
        where: dict[str, list[str]] = {}
        as_policy: set[str] = set()
        for g in self.grades:
            for c in g.checks:
                if rule_verdict(c, self.policy) == "fail":
                    where.setdefault(c.rule, []).append(g.scenario)
                    if c.status == "policy":
                        as_policy.add(c.rule)
        order = [r.name for r in RULES]
        ranked = sorted(where, key=lambda rule: (rule in as_policy, order.index(rule) if rule in order else len(order)))
        return [(rule, where[rule], rule in as_policy) for rule in ranked]

    def failure_lines(self) -> list[str]:
        """The report's headline when something fails: each failed rule on a line of its own, with where."""
        rules, unshown = self.failed_rules(), self.unshown_failures()
        if not rules and not unshown:
            return []
        lines = [f"fails {plural(len(rules), 'rule')} in {plural(len(self.failed), 'scenario')} (the details per "
                 "scenario follow):"]
        for rule, scenarios, policy in rules:
            why = f" ({POLICY_WORDS}, counted as a failure: --policy strict)" if policy else ""
            lines.append(f"    {MARKS['fail']} {rule}: {', '.join(scenarios)}{why}")
        if unshown:
            lines.append(f"    {MARKS['fail']} {NO_CHECKS}: {', '.join(unshown)}")
        return lines

    def unshown_failures(self) -> list[str]:
        """The scenarios that fail with no failed rule to show for it (a saved verdict without its checks)."""
        return [scenario for scenario, rules in self.failed.items() if rules == [NO_CHECKS]]

    def policy_groups(self) -> list[tuple[str, str, list[str]]]:
        """Each policy difference once: ``(rule, behaviour, [scenarios])``."""
        return policy_groups((g.scenario, g.checks) for g in self.grades)

    def table(self, why: bool = False):
        """A pandas DataFrame, one row per scenario, one column per rule that applied somewhere: its mark (✓, ✗,
        ≠, –) or empty (the rule did not apply); with ``why=True`` the messages instead of the marks."""
        pd = require("pandas", "Report.table()")

        used = [r.name for r in RULES if any(g.check(r.name) for g in self.grades)]
        rows = []
        for g in self.grades:
            row: dict[str, Any] = {"scenario": g.scenario, "verdict": g.mark}
            for name in used:
                c = g.check(name)
                row[name] = "" if c is None else (rule_result(c, self.policy)["message"] if why else
                                                  MARKS[rule_verdict(c, self.policy)])
            rows.append(row)
        return pd.DataFrame(rows, columns=["scenario", "verdict", *used]).set_index("scenario")

    def to_dict(self) -> dict[str, Any]:
        """The report in the grade report's JSON (grade_output.document wraps the reports with the version)."""
        environment = None
        if self.command is not None:
            environment = {"removed": list(STRIPPED_ENV), "passed": list(self.passed_env)}
        differences = [{"rule": rule, "behaviour": behaviour, "scenarios": scenarios}
                       for rule, behaviour, scenarios in self.policy_groups()]
        return {"client": self.client, "verdict": self.verdict, "command": self.command,
                "environment": environment, "policy": {"mode": self.policy, "differences": differences},
                "scenarios": [g.to_dict() for g in self.grades]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """A report saved with --save or --json (or in the earlier format, with a ``checks`` map). It is judged
        on the checks it holds: a rule a saved scenario names as failed stays failed though its check is missing,
        and a scenario without checks does not pass."""
        legacy = data.get("checks") if isinstance(data.get("checks"), dict) else None
        grades = [ScenarioGrade.from_dict(item, None if legacy is None else legacy.get(item["name"], []))
                  for item in data.get("scenarios") or []]
        command = data.get("command")
        env = data.get("environment") or {}
        return cls(str(data.get("client")), grades, command=list(command) if isinstance(command, list) else None,
                   passed_env=[str(n) for n in env.get("passed") or []])

    def text(self) -> str:
        """The report as the CLI prints it: its counts; what fails, a rule a line (the rules that fail outright
        first); per scenario its verdict and ending, then each rule with its mark and message; then a line naming
        what fails, and each policy difference once. Text from the client or the server is shown
        printable (:func:`agentlab.core.text.printable`)."""
        lines = [f"{printable(self.client, newlines=False)}: {plural(len(self.grades), 'scenario')}, "
                 f"{counts_text(g.verdict for g in self.grades)}"]
        if self.command is not None:
            passed = f" (passed with --pass-env: {', '.join(self.passed_env)})" if self.passed_env else ""
            lines.append(f"environment: the command ran without the {' and '.join(STRIPPED_ENV)} variables{passed}; "
                         "grade set ANTHROPIC_BASE_URL, a dummy ANTHROPIC_API_KEY and the AGENTLAB_* variables")
        headline = self.failure_lines()
        lines += [*headline, ""] if headline else [""]
        width = max([len(g.scenario) for g in self.grades] + [8])
        rule_width = max(len(c.rule) for g in self.grades for c in g.checks) if any(
            g.checks for g in self.grades) else 10
        for g in self.grades:
            lines += self._scenario_lines(g, width, rule_width)
        lines.append("")
        lines += self._summary()
        return "\n".join(lines)

    def _scenario_lines(self, g: ScenarioGrade, width: int, rule_width: int) -> list[str]:
        how = f"{plural(g.requests, 'request')}, {printable(g.ending, newlines=False)}" if g.ending else ""
        if g.beyond_script:
            how += f" ({g.beyond_script} beyond the end of the script)"
        lines = [f"{g.mark} {g.scenario:<{width}}  {how}".rstrip()]
        lines += [f"    not reached: {printable(n, newlines=False)}" for n in g.not_reached]
        if g.side_requests:
            lines.append(f"    side requests (answered without using a step): {'; '.join(g.side_requests)}")
        for c in g.checks:
            if c.rule in ("ends_on_its_own", "sends_the_prompt") and c.status == "pass":
                continue  # the scenario's line says how it ended and how many requests it sent
            result = rule_result(c, self.policy)
            lines.append(f"    {MARKS[result['status']]} {c.rule:<{rule_width}}  "  # type: ignore[index]
                         f"{printable(result['message'], newlines=False)}")
        lines += [f"    note: {printable(n, newlines=False)}" for n in g.notes]
        if g.requests == 0 and self.command is not None:
            lines += nothing_sent(g)
        return lines

    def _summary(self) -> list[str]:
        if not self.grades:
            return ["nothing graded: a report without scenarios does not pass"]
        lines = []
        if self.failed:
            named = [rule for rule, _, _ in self.failed_rules()] + ([NO_CHECKS] if self.unshown_failures() else [])
            lines.append(f"fails {plural(len(self.failed_rules()), 'rule')} in {plural(len(self.failed), 'scenario')}"
                         f": {', '.join(named)} (each with where, at the top)")
        groups = self.policy_groups()
        if groups and self.policy != "ignore":
            counted = "counted as failures: --policy strict" if self.policy == "strict" else \
                "not failures; --policy strict counts them as failures"
            lines.append(f"{POLICY_WORDS} ({plural(len(groups), 'behaviour')}, each listed once; {counted}):")
            lines += [f"    {MARKS['policy']} {rule}: {behaviour} — {', '.join(scenarios)}"
                      for rule, behaviour, scenarios in groups]
        checks = sum(len(g.checks) for g in self.grades)
        unreached = [g.scenario for g in self.grades if g.verdict == "not_reached"]
        faults = [g.scenario for g in self.grades if server_faults(g.record)]
        if faults:
            lines.append(f"grade's own server failed in {', '.join(faults)}: not a verdict on the client; "
                         "please report it with the record (agentlab grade --out)")
        where = f"; not reached: {', '.join(unreached)} (each line says why)" if unreached else ""
        if self.verdict == "pass" and len(unreached) == len(self.grades):
            lines.append(f"no scenario passed: none reached its own branch, and no rule failed{where}")
        elif self.verdict == "pass":
            lines.append(f"every rule holds{' where reached' if unreached else ''} ({plural(checks, 'check')}){where}")
        elif self.verdict == "policy":
            lines.append(f"no rule fails ({plural(checks, 'check')}); the differences above are the reference "
                         f"loop's choices{where}")
        return lines


def nothing_sent(grade: ScenarioGrade) -> list[str]:
    """What the report says under a scenario where no request reached the server: the command's stderr and
    what to check."""
    lines = ["    no request reached the server. Check that the command reads ANTHROPIC_BASE_URL, and that the "
             "prompt reaches it: it is the last argument, or where {prompt} stands in --command, and in "
             "$AGENTLAB_PROMPT (an option taking several values swallows a trailing prompt: end the options with "
             "--, or place {prompt})"]
    if grade.stderr:
        lines.append("    stderr: " + printable(grade.stderr).replace("\n", "\n            "))
    else:
        lines.append("    stderr: (empty)")
    return lines


NEVER_REACHED = "the run never reached this branch"
_NEVER_REACHED = {r.name: f"{NEVER_REACHED} ({r.branch})" for r in RULES}
NO_CHECKS = "no checks (nothing shows that it passed)"


def _saved_failures(item: dict[str, Any], checks: list[Check]) -> list[Check]:
    """The rules a saved scenario names as failed (``failed``, ``why``) that its checks do not hold as failed."""
    failing = {c.rule for c in checks if c.status in ("fail", "policy")}  # a policy rule saved as failed (strict)
    saved_why = item.get("why")
    why: dict[str, Any] = saved_why if isinstance(saved_why, dict) else {}
    saved_failed = item.get("failed")
    named = [*(saved_failed if isinstance(saved_failed, list) else []), *why]
    added = [Check(str(rule), "fail", str(why.get(rule) or "failed in the saved report, which holds no check "
                                           "for it")) for rule in dict.fromkeys(map(str, named)) if rule not in failing]
    if item.get("verdict") == "fail" and not failing and not added and checks:
        added.append(Check("saved_verdict", "fail", f"the saved report says {item.get('verdict')!r}, not 'pass', "
                                                    "and holds no failed check saying why"))
    return added


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
                      ScenarioGrade(name, judge(Run(record, None)), len(record.get("requests") or []), ending(record)))
    return Report(label, grades)


def observed_reports(observed: str | Path | None = None,
                     clients: Sequence[str] | None = None) -> list[Report]:
    """The report cards of the committed records (``data/observed``): one per client and version, in the
    comparison table's column order. ``clients`` picks some: "claude-code" (every version) or
    "claude-code 2.1.197"."""
    from agentlab.observatory.compare import comparison_columns
    from agentlab.observatory.records import load_records

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


