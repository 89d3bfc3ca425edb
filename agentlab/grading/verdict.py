"""Every verdict of ``agentlab grade``, decided here and nowhere else: a rule's on one run, a scenario's, a report's,
the run's; read by the text report, the JSON report, JUnit XML, the baseline, the pytest plugin and the heatmap.

Four verdicts, one spelling each (the JSON's and the code's; the text report shows the mark):

========================  ====  =====================================================================
``pass``                  ✓     the rule holds where its branch was reached
``fail``                  ✗     it does not: the message names the requests and what a careful loop does
``policy``                ≠     it differs from the reference loop's choice where careful loops may differ (how
                                many retries before giving up, when to switch to a fallback model, a Stop
                                hook's cap, how many recoveries or compactions): reported once per behaviour,
                                not a failure unless ``--policy strict``
``not_reached``           –     the run never reached the rule's branch, or the record cannot say
========================  ====  =====================================================================

A rule reached keeps its verdict wherever the scenario stands: a scenario whose own branch was not reached
(the live API could not have sent its scripted reply to what the client asked) still shows, and counts, every
rule that some reply of the run did reach. A scenario's verdict is the worst of its rules (fail, then policy);
with none failing or differing it is ``not_reached`` when its own branch was not reached or no rule but the
universal ones judged it, else ``pass``. A scenario without any check fails (a grade shows its work).

One behaviour is counted once: how a run ended with an error is judged by ``ends_cleanly`` only when no other
rule failed or differed on the run (else the ending is that rule's: its message says how the run ended, and so
does the scenario's line); a policy difference is listed once in the summary with the scenarios it was seen in.

``--policy`` (:data:`POLICY_MODES`) says what a policy difference counts as: ``report`` (the default) shows it
as ≠ and leaves the exit status alone, ``strict`` counts it as a failure (exit 1, a JUnit failure, a failing
pytest test, an entry of a baseline), ``ignore`` counts it as a pass (its message kept, saying so).

This module imports nothing of agentlab: the rules (:mod:`~agentlab.grading.rules`) make
:class:`Check` values, everything else reads them through the functions here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

Verdict = Literal["pass", "fail", "policy", "not_reached"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
PolicyMode = Literal["report", "strict", "ignore"]
POLICY_MODES: tuple[PolicyMode, ...] = get_args(PolicyMode)
DEFAULT_POLICY: PolicyMode = "report"

MARKS: dict[Verdict, str] = {"pass": "✓", "fail": "✗", "policy": "≠", "not_reached": "–"}
WORDS: dict[Verdict, str] = {"pass": "pass", "fail": "fail",
                             "policy": "policy: differs from the reference loop's choice", "not_reached": "not reached"}
POLICY_WORDS = WORDS["policy"]
UNIVERSAL = ("sends_the_prompt", "ends_on_its_own", "ends_cleanly")  # judged on every run: no branch of their own
ENDING_RULE = "ends_cleanly"


@dataclass(frozen=True)
class Check:
    """One rule on one run, as the rule found it: ``status`` with the reason ``why``; for ``policy``, the
    behaviour in words that are the same on every scenario it is seen in (``policy``: the summary lists it
    once)."""

    rule: str
    status: Verdict
    why: str
    policy: str = ""

    def __post_init__(self) -> None:
        if self.status not in VERDICTS:
            raise ValueError(f"rule {self.rule}: status {self.status!r} is not one of {', '.join(VERDICTS)}")
        if self.status == "policy" and not self.policy:
            raise ValueError(f"rule {self.rule}: a policy difference names its behaviour (policy=...)")

    @property
    def mark(self) -> str:
        return MARKS[self.status]


def check_policy_mode(mode: str) -> PolicyMode:
    """``--policy``: one of :data:`POLICY_MODES` (ValueError naming them otherwise)."""
    if mode not in POLICY_MODES:
        raise ValueError(f"--policy: expected one of {', '.join(POLICY_MODES)}, got {mode!r}")
    return mode  # type: ignore[return-value]


# -- a rule ----------------------------------------------------------------------------------------------------

def rule_verdict(check: Check, mode: PolicyMode = DEFAULT_POLICY) -> Verdict:
    """The verdict of one check under ``--policy mode``."""
    if check.status != "policy":
        return check.status
    return {"report": "policy", "strict": "fail", "ignore": "pass"}[mode]  # type: ignore[return-value]


def rule_message(check: Check, mode: PolicyMode = DEFAULT_POLICY) -> str:
    """The check's message; a policy difference says what it is, and under strict or ignore what it counts as."""
    if check.status != "policy":
        return check.why
    counted = {"report": "", "strict": " (counted as a failure: --policy strict)",
               "ignore": " (counted as a pass: --policy ignore)"}[mode]
    return f"{POLICY_WORDS}{counted}: {check.why}"


def counted_once(checks: Sequence[Check]) -> list[Check]:
    """The checks of one run with each behaviour counted once: when another rule already failed or differed, the
    ending is that rule's (its message says how the run ended), and the ending rule's check is left out."""
    others = any(c.status in ("fail", "policy") for c in checks if c.rule != ENDING_RULE)
    return [c for c in checks if not (others and c.rule == ENDING_RULE)]


# -- a scenario ------------------------------------------------------------------------------------------------

def judged(checks: Iterable[Check]) -> bool:
    """Whether a rule of some branch (not only the universal ones) reached the run."""
    return any(c.status != "not_reached" and c.rule not in UNIVERSAL for c in checks)


def scenario_verdict(checks: Sequence[Check], *, branch_reached: bool = True,
                     mode: PolicyMode = DEFAULT_POLICY) -> Verdict:
    """The worst verdict of the checks (fail, then policy); else ``not_reached`` when the scenario's own branch was
    not reached or no branch rule judged the run, else ``pass``. No checks at all: ``fail``."""
    if not checks:
        return "fail"
    verdicts = {rule_verdict(c, mode) for c in checks}
    for worst in ("fail", "policy"):
        if worst in verdicts:
            return worst  # type: ignore[return-value]
    return "pass" if branch_reached and judged(checks) else "not_reached"


def report_verdict(verdicts: Sequence[Verdict]) -> Verdict:
    """A report's (or the run's) verdict from its scenarios': ``fail`` when any fails or nothing was graded,
    ``policy`` when none fails and some differ, else ``pass`` (scenarios not reached do not fail it)."""
    if not verdicts or "fail" in verdicts:
        return "fail"
    return "policy" if "policy" in verdicts else "pass"


def passes(verdict: Verdict) -> bool:
    """Whether a report's or a run's verdict leaves the exit status at 0 (a policy difference does, unless
    ``--policy strict`` made it a failure)."""
    return verdict != "fail"


def counts(verdicts: Iterable[Verdict]) -> dict[Verdict, int]:
    """How many of each verdict, every verdict present (0 where none)."""
    out: dict[Verdict, int] = dict.fromkeys(VERDICTS, 0)
    for v in verdicts:
        out[v] += 1
    return out


def counts_text(verdicts: Iterable[Verdict]) -> str:
    """"12 pass, 3 fail, 2 policy, 1 not reached": pass and fail always, policy and not reached where any."""
    n = counts(verdicts)
    parts = [f"{n['pass']} pass", f"{n['fail']} fail"]
    parts += [f"{n['policy']} policy"] if n["policy"] else []
    parts += [f"{n['not_reached']} not reached"] if n["not_reached"] else []
    return ", ".join(parts)


# -- one behaviour, once -----------------------------------------------------------------------------------------

def policy_groups(graded: Iterable[tuple[str, Sequence[Check]]]) -> list[tuple[str, str, list[str]]]:
    """``(rule, behaviour, [scenarios])`` for each policy difference, once however many scenarios show it, in
    the order first seen; ``graded`` is ``(scenario, checks)`` per scenario."""
    groups: dict[tuple[str, str], list[str]] = {}
    for scenario, checks in graded:
        for c in checks:
            if c.status == "policy":
                seen = groups.setdefault((c.rule, c.policy), [])
                if scenario not in seen:
                    seen.append(scenario)
    return [(rule, behaviour, scenarios) for (rule, behaviour), scenarios in groups.items()]


def cell(checks: Iterable[Check], mode: PolicyMode = DEFAULT_POLICY) -> tuple[int, int, int, int]:
    """One rule over a client's scenarios (a heatmap cell): ``(passed, failed, policy, reached)``, counting every
    scenario where the rule was reached, whether or not the scenario's own branch was."""
    verdicts = [rule_verdict(c, mode) for c in checks if c.status != "not_reached"]
    return (verdicts.count("pass"), verdicts.count("fail"), verdicts.count("policy"), len(verdicts))


# -- the JSON form of a rule's verdict ----------------------------------------------------------------------------

def rule_result(check: Check, mode: PolicyMode = DEFAULT_POLICY) -> dict[str, str]:
    """A check in the grade report's JSON: ``rule``, ``status`` (its verdict under ``mode``), ``message``, and for a
    policy difference ``policy``, the behaviour (so that a report loaded under another ``--policy`` reads it
    again as a policy difference)."""
    out = {"rule": check.rule, "status": rule_verdict(check, mode), "message": rule_message(check, mode)}
    if check.status == "policy":
        out["policy"] = check.policy
    return out


_SAID_POLICY = re.compile("^" + re.escape(POLICY_WORDS) + r"(?: \(counted as a (?:failure|pass): --policy \w+\))?: ")
LEGACY_SKIP = "skip"  # a check's status in reports saved before schema 2, read as not_reached


def check_from_result(item: dict[str, object]) -> Check:
    """A check of a saved report (:func:`rule_result`'s form, or an earlier report's ``skip``)."""
    status = str(item.get("status"))
    message = str(item.get("message") or item.get("why") or "")
    if item.get("policy"):
        why = _SAID_POLICY.sub("", message, count=1)
        return Check(str(item["rule"]), "policy", why, str(item["policy"]))
    if status == LEGACY_SKIP:
        status = "not_reached"
    if status not in VERDICTS or status == "policy":
        raise ValueError(f"rule {item.get('rule')}: status {status!r} is not one of pass, fail, not_reached "
                         "(a policy difference names its behaviour in 'policy')")
    return Check(str(item["rule"]), status, message)  # type: ignore[arg-type]


def run_verdict(report_verdicts: Sequence[Verdict], baseline_passed: bool | None = None) -> Verdict:
    """The run's verdict: the reports' (:func:`report_verdict`); with a baseline, ``fail`` only on a failure it
    does not hold (its accepted failures pass)."""
    if baseline_passed is None:
        return report_verdict(report_verdicts)
    if not baseline_passed:
        return "fail"
    return "policy" if "policy" in report_verdicts else "pass"
