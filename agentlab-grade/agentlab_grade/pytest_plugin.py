"""The pytest plugin of ``agentlab grade`` (agentlab-grade registers it as ``pytest11``: loaded by every pytest run
once agentlab-grade is installed; the workbench alone registers no plugin).

    pytest --agentlab-grade "python my_agent.py" [--agentlab-scenarios a,b] [--agentlab-baseline FILE]

collects one test per scenario (``agentlab-grade::pause_turn``, ...), its outcome the scenario's verdict as
``agentlab grade`` decides it (agentlab.grading.verdict): ``fail`` fails the test, with each failed rule
named and its message; ``policy`` (a difference from the reference loop's choice) passes with an
:class:`AgentlabPolicyWarning` naming it, and is listed once in the summary (``--agentlab-policy strict``: it
fails; ``ignore``: it passes quietly); ``not_reached`` skips it; with a baseline (``agentlab grade
--write-baseline FILE``), a scenario whose failures are all in it is an expected failure (xfail). The command
runs once per scenario, as ``agentlab grade --command`` runs it (the prompt where ``{prompt}`` stands, else last;
``AGENTLAB_*`` variables; no ``ANTHROPIC_*`` or ``CLAUDE*`` ones).
Given no test paths, only the scenarios are collected; with paths, the tests there run too. pytest's own
``--junitxml`` reports them.

Without ``--agentlab-grade`` it only adds the options and imports nothing of agentlab (whose package imports the
SDK): its imports of agentlab are inside the functions that grade, and ``agentlab_grade/__init__.py`` loads its
re-exports on first use.
"""

from __future__ import annotations

from typing import Any

import pytest

SUITE = "agentlab-grade"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentlab", "agentlab grade: the careful-loop rules, one test per scenario")
    group.addoption("--agentlab-grade", metavar="CMD", default=None,
                    help="grade this agent command (as agentlab grade --command CMD): one test per scenario")
    group.addoption("--agentlab-scenarios", metavar="A,B", default=None,
                    help="the scenarios to grade, comma-separated (default: every one a client can be graded on "
                         "from its prompt alone)")
    group.addoption("--agentlab-baseline", metavar="FILE", default=None,
                    help="known failures (agentlab grade --write-baseline FILE): a scenario whose failures are "
                         "all in it is an expected failure")
    group.addoption("--agentlab-timeout", metavar="SECONDS", type=float, default=60.0,
                    help="seconds per scenario (default 60)")
    group.addoption("--agentlab-jobs", metavar="N", type=int, default=4,
                    help="scenarios run at the same time (default 4)")
    group.addoption("--agentlab-keep", metavar="DIR", default=None,
                    help="keep per scenario the requests and replies, the record, stdout, stderr and exit status")
    group.addoption("--agentlab-policy", choices=["report", "strict", "ignore"], default="report",
                    help="a difference from the reference loop's choice: report (default: a warning), strict (a "
                         "failure) or ignore (a pass), as agentlab grade --policy")
    group.addoption("--agentlab-pass-env", metavar="NAME", action="append", default=None,
                    help="give the command this ANTHROPIC_* or CLAUDE* variable anyway (repeat for several)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("agentlab_grade", None):
        config.pluginmanager.register(GradeSession(config), "agentlab-grade-session")


class GradeFailure(Exception):
    """A scenario's rules failed: the message names each rule and why."""


class AgentlabPolicyWarning(UserWarning):
    """A scenario differs from the reference loop's choice (not a failure unless --agentlab-policy strict)."""


class GradeSession:
    """The grading of one pytest run: the options checked at start, the command graded once (at the first
    test), a test per scenario."""

    def __init__(self, config: pytest.Config) -> None:
        from agentlab.core.errors import AgentlabError
        from agentlab.grading.command import (
            check_pass_env,
            check_timeout,
            gradeable_scenarios,
            load_scenario,
            parse_command,
            read_baseline,
        )

        self.config = config
        opt = config.getoption
        try:
            self.argv = parse_command(opt("agentlab_grade"))
            check_timeout(opt("agentlab_timeout"))
            if opt("agentlab_jobs") < 1:
                raise AgentlabError(f"--agentlab-jobs: expected at least 1, got {opt('agentlab_jobs')}")
            self.pass_env = check_pass_env(opt("agentlab_pass_env") or [])
            names = [n.strip() for n in (opt("agentlab_scenarios") or "").split(",") if n.strip()]
            self.names = names or gradeable_scenarios()
            for name in self.names:
                load_scenario(name)
            path = opt("agentlab_baseline")
            self.baseline_path = path
            self.known = read_baseline(path) if path else set()
        except AgentlabError as exc:
            raise pytest.UsageError(f"--agentlab-grade: {exc}") from None
        self._report: Any = None
        self.selected: list[str] = []  # the scenarios whose tests were selected (-k, a node id)

    def grade(self, name: str) -> Any:
        """The grade of one scenario. The command is graded on every selected scenario at once, --agentlab-jobs
        at a time, at the first test; under pytest-xdist (a worker runs only some of the tests) each test
        grades its own scenario."""
        from agentlab.grading.command import Report, grade_command

        opt = self.config.getoption
        worker = hasattr(self.config, "workerinput")
        if self._report is None:
            self._report = Report(str(opt("agentlab_grade")))
        if worker and all(g.scenario != name for g in self._report.grades):
            one = grade_command(self.argv, [name], timeout=opt("agentlab_timeout"), jobs=1,
                                pass_env=self.pass_env, keep=opt("agentlab_keep"))
            self._report.grades += one.grades
            self._report.command, self._report.passed_env = one.command, one.passed_env
        elif not worker and not self._report.grades:
            self._report = grade_command(self.argv, self.selected or self.names, timeout=opt("agentlab_timeout"),
                                         jobs=opt("agentlab_jobs"), pass_env=self.pass_env,
                                         keep=opt("agentlab_keep"))
        return self._report.under(opt("agentlab_policy")).grade(name)

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Any, config: pytest.Config) -> bool | None:
        """No test paths given: only the scenarios are collected (the test files are not even imported)."""
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            return True
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        suite = GradeSuite.from_parent(session, name=SUITE, nodeid=SUITE)
        suite.grading = self
        items[:0] = suite.collect()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected = [item.name for item in session.items if isinstance(item, GradeItem)]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self._report is None or not self._report.grades:
            return
        from agentlab.grading.command import STRIPPED_ENV, check_baseline

        write = terminalreporter.write_line
        terminalreporter.section("agentlab grade")
        passed = f"; passed with --agentlab-pass-env: {', '.join(self.pass_env)}" if self.pass_env else ""
        write(f"{self._report.client}: the command ran without the {' and '.join(STRIPPED_ENV)} variables{passed}")
        from agentlab.grading.command import POLICY_WORDS, policy_groups

        groups = policy_groups((g.scenario, g.checks) for g in self._report.grades)
        if groups and self._report.policy != "ignore":
            write(f"{POLICY_WORDS}, each behaviour once (--agentlab-policy {self._report.policy}):")
            for rule, behaviour, scenarios in groups:
                write(f"    ≠ {rule}: {behaviour} — {', '.join(scenarios)}")
        if self.baseline_path:
            write(check_baseline(self.baseline_path, self.known, [self._report]).text())


class GradeSuite(pytest.Collector):
    grading: GradeSession

    def collect(self) -> list[pytest.Item]:
        return [GradeItem.from_parent(self, name=name) for name in self.grading.names]


class GradeItem(pytest.Item):
    """One scenario of the graded command."""

    def runtest(self) -> None:
        grading: GradeSession = self.parent.grading  # type: ignore[union-attr]
        from agentlab.grading.command import split_by_baseline

        grade = grading.grade(self.name)
        new, accepted = split_by_baseline(grade, grading.known)
        if new:
            raise GradeFailure(self._failure_text(grade, new))
        if accepted:
            pytest.xfail(f"known failure(s) in the baseline: {', '.join(accepted)}")
        if grade.verdict == "policy":
            import warnings

            warnings.warn(AgentlabPolicyWarning(self._policy_text(grade)), stacklevel=1)
        elif grade.verdict == "not_reached":
            reasons = grade.not_reached or grade.notes or ["no rule of the scenario's branch could judge the run"]
            reached = [c.rule for c in grade.checks if c.status != "not_reached"]
            held = f"; the rules reached hold: {', '.join(reached)}" if reached else ""
            pytest.skip(f"not reached: {grade.ending}, {grade.requests} request(s); {'; '.join(reasons)}{held}")

    def _policy_text(self, grade: Any) -> str:
        from agentlab.core.text import printable
        from agentlab.grading.command import POLICY_WORDS

        return f"{self.name}: {POLICY_WORDS}: " + "; ".join(
            f"{c.rule}: {printable(c.why, newlines=False)}" for c in grade.checks if c.rule in grade.differs)

    def _failure_text(self, grade: Any, new: list[str]) -> str:
        from agentlab.grading.command import nothing_sent

        from agentlab.core.text import printable

        results = {r["rule"]: r["message"] for r in grade.rule_results()}
        lines = [f"{self.name}: {', '.join(new)} failed ({grade.requests} request(s), {printable(grade.ending)})"]
        lines += [f"    ✗ {rule}: {printable(results[rule], newlines=False)}" for rule in new]
        lines += [f"    note: {printable(n, newlines=False)}" for n in grade.notes]
        if grade.requests == 0:
            lines += nothing_sent(grade)
        return "\n".join(lines)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, GradeFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"agentlab grade: {self.name}"
