"""Lesson 12, your own loop, graded: helpers for the notebook and the check of its exercise.

The exercise: write ``agent_loop(client, prompt, tools, run_tool)``, a complete agent loop on the raw
``anthropic`` SDK (nothing from agentlab inside): ``client`` is an ``anthropic.Anthropic`` pointed at a
scenario's server, ``tools`` the demo tools' definitions (and the scenario's server tools, such as web
search), ``run_tool(name, input) -> str`` runs one; it returns the final answer's text, or raises when it
gives up. The check grades it with ``agentlab grade``'s
rules on every scenario a client can be graded on from its prompt alone. The notebook starts from the
naive loop (:data:`STUB`); the solution (``SOLUTION``, this module's :func:`agent_loop`) is shown on
demand.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ..grading.command import RULES, Report, grade_function, gradeable_scenarios, observed_reports
from ..grading.verdict import PolicyMode, counts_text, rule_result
from . import Verdict, WrongAnswer

# The lesson teaches the reference loop's choices (at least 3 retries and 3 recoveries, at most 3 compactions
# and continuations in a row, ...) as rules: every report card of the lesson counts a difference from them as a
# failure, as `agentlab grade --policy strict` does. All its counts come from the reports in this mode.
POLICY: PolicyMode = "strict"

__all__ = ["HINT", "POLICY", "SOLUTION", "STUB", "card_summary", "check_agent_loop", "failed_beyond", "grade_loop",
           "naive_loop", "recorded_clients", "report_cards", "side_by_side"]

STUB = '''\
def agent_loop(client, prompt, tools, run_tool, model="claude-opus-5-5"):
    """Run the conversation to its end; return the final answer's text."""
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = client.messages.create(model=model, max_tokens=1024, tools=tools, messages=messages)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            return "".join(block.text for block in reply.content if block.type == "text")
        results = [{"type": "tool_result", "tool_use_id": block.id, "content": run_tool(block.name, block.input)}
                   for block in reply.content if block.type == "tool_use"]
        messages.append({"role": "user", "content": results})
'''

_namespace: dict[str, Any] = {}
exec(compile(STUB, "<lesson12 stub>", "exec"), _namespace)
naive_loop: Callable[..., str] = _namespace["agent_loop"]
naive_loop.__doc__ = "The notebook's starting point: stop as soon as stop_reason is not 'tool_use'."

HINT = """\
Work down the report card one failed rule at a time; each names the request where your loop went wrong.
- Decide on the content, not the label: run every tool_use block, even under end_turn.
- max_tokens: if the last block is a cut-off tool_use, resend the same messages with max_tokens=64000
  (the SDK refuses so large a max_tokens without streaming: use client.messages.stream(...) and
  get_final_message(), or pass timeout=).
  On text: raise max_tokens once, then append the partial answer and a user message asking to continue,
  up to 3 times; then give up (raise).
- pause_turn: append reply.content unchanged as the assistant message and call again (no user message).
- An empty end_turn right after tool results: one "Please continue." user message.
- anthropic.BadRequestError "prompt is too long", or stop_reason model_context_window_exceeded: ask for a
  summary of the conversation, start again from the prompt plus the summary; at most 3 times.
- anthropic.BadRequestError "max_tokens: 64000 > 4096": resend with max_tokens=4096.
- Transient errors: client.with_options(max_retries=5) lets the SDK retry 429/5xx/529 with backoff and
  retry-after; it never retries a 401.
- refusal: stop (raise with stop_details); never send the request to that model again.
"""


def agent_loop(client, prompt, tools, run_tool, model="claude-opus-5-5"):
    """A complete agent loop on the raw anthropic SDK: every branch of the decision table."""
    import re

    import anthropic

    client = client.with_options(max_retries=5)   # 429 / 5xx / 529: backoff, retry-after; never a 401
    messages = [{"role": "user", "content": prompt}]
    max_tokens, escalated = 1024, False
    continuations = compactions = pauses = 0
    nudged = False
    partial = ""

    def add_assistant(content):
        if content and messages[-1]["role"] == "assistant":      # a resumed answer joins the paused one
            messages[-1] = {"role": "assistant", "content": [*messages[-1]["content"], *content]}
        elif content:
            messages.append({"role": "assistant", "content": list(content)})

    def call(history, limit):
        # streamed: the SDK refuses a large max_tokens without streaming (or an explicit timeout)
        with client.messages.stream(model=model, max_tokens=limit, tools=tools, messages=history) as stream:
            return stream.get_final_message()

    def compact():
        ask = {"role": "user", "content": "Write a summary of this conversation so far, with every fact "
                                          "needed to finish the task. Answer in text only."}
        summary = call([*messages, ask], 4096)
        text = "".join(b.text for b in summary.content if b.type == "text")
        return [{"role": "user", "content": f"{prompt}\n\nWhat happened so far:\n{text}"}]

    while True:
        try:
            reply = call(messages, max_tokens)
        except anthropic.BadRequestError as exc:
            ceiling = re.search(r"max_tokens: \d+ > (\d+)", str(exc))
            if ceiling and max_tokens > int(ceiling.group(1)):
                max_tokens = int(ceiling.group(1))            # the model's limit: send again within it
                continue
            if "prompt is too long" in str(exc) and compactions < 3:
                messages, compactions = compact(), compactions + 1
                continue
            raise
        stop, content = reply.stop_reason, list(reply.content)
        text = "".join(b.text for b in content if b.type == "text")
        if stop == "max_tokens" and content and content[-1].type == "tool_use":
            if escalated:
                raise RuntimeError("max_tokens: a tool call was cut off even at the higher limit")
            max_tokens, escalated = 64000, True                # same messages, room for the whole call
            continue
        uses = [b for b in content if b.type == "tool_use"]
        if uses:                                               # the content decides, whatever the label
            add_assistant(content)
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": run_tool(u.name, u.input)} for u in uses]})
            compactions = 0
            continue
        if stop == "max_tokens":
            if not escalated:
                max_tokens, escalated = 64000, True
                continue
            if continuations == 3:
                raise RuntimeError(f"max_tokens: gave up after 3 continuations; partial answer: {partial + text}")
            continuations += 1
            partial += text
            add_assistant(content)
            messages.append({"role": "user", "content": "Output token limit hit. Continue exactly where you stopped."})
            continue
        if stop == "model_context_window_exceeded":
            if compactions == 3:
                raise RuntimeError("context window: still too long after 3 compactions")
            messages, compactions = compact(), compactions + 1
            continue
        if stop == "refusal":
            details = getattr(reply, "stop_details", None)
            raise RuntimeError(f"the model refused ({details}); not sent again")
        if stop in ("pause_turn", "compaction"):
            if pauses == 5:
                raise RuntimeError("pause_turn: the server tool did not finish after 5 continuations")
            pauses += 1
            add_assistant(content)                             # unchanged, and nothing after it
            continue
        after_results = messages[-1]["role"] == "user" and isinstance(messages[-1]["content"], list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in messages[-1]["content"])
        if stop == "end_turn" and not content and after_results and not nudged:
            nudged = True
            messages.append({"role": "user", "content": "Please continue."})
            continue
        return partial + text


SOLUTION = agent_loop


# -- grading ---------------------------------------------------------------------------------------------------

def grade_loop(fn: Callable[..., Any], scenarios: Sequence[str] | None = None, *, timeout: float = 30.0) -> Report:
    """Grade an agent loop ``fn(client, prompt, tools, run_tool)`` on ``scenarios`` (default: every scenario
    a client can be graded on from its prompt alone), each against a fresh server, under the lesson's
    :data:`POLICY`."""
    return grade_function(fn, scenarios, timeout=timeout,
                          label=f"your {getattr(fn, '__name__', 'loop')}").under(POLICY)


def _code_key(code: Any) -> tuple:
    consts = tuple(_code_key(c) if inspect.iscode(c) else c for c in code.co_consts)
    return code.co_code, consts, code.co_names, code.co_varnames


def _is_stub(fn: Callable[..., Any]) -> bool:
    return callable(fn) and hasattr(fn, "__code__") and _code_key(fn.__code__) == _code_key(naive_loop.__code__)


def check_agent_loop(agent_loop: Callable[..., Any], report: Report | None = None,
                     scenarios: Sequence[str] | None = None, *, timeout: float = 30.0) -> Verdict:
    """Grade ``agent_loop`` (or read ``report``, when it is ``grade_loop``'s report of this very function on
    the default scenarios). The untouched naive loop: "Not solved yet", naming the rules it fails (no
    exception). Any other loop that fails a rule: :class:`WrongAnswer` naming the scenario, the rule, what a
    careful loop does and what yours did. Every rule holding: the pass line. A difference from the reference
    loop's choice fails (:data:`POLICY`), whatever mode ``report`` was made in."""
    reusable = report is not None and report.subject is agent_loop and scenarios is None and \
        [g.scenario for g in report.grades] == gradeable_scenarios()
    report = report.under(POLICY) if reusable and report is not None else \
        grade_loop(agent_loop, scenarios, timeout=timeout)
    failed = report.failed
    checks = sum(len(g.checks) for g in report.grades)
    unreached = [g.scenario for g in report.grades if g.verdict == "not_reached"]
    if not failed and unreached:
        return _say(Verdict("solved", (
            f"agent_loop: every rule holds on the {len(report.grades) - len(unreached)} of {len(report.grades)} "
            f"scenarios it reached ({checks} checks); not reached: {', '.join(unreached)} (the report card says "
            "why). Your loop handles every branch it reached.")))
    if not failed:
        return _say(Verdict("solved", f"agent_loop: every rule holds on all {len(report.grades)} scenarios "
                                      f"({checks} checks). Your loop handles every branch the scenarios reach."))
    rules = sorted({rule for names in failed.values() for rule in names}, key=[r.name for r in RULES].index)
    if _is_stub(agent_loop) or all(g.ending.startswith("raised NotImplementedError") for g in report.grades):
        return _say(Verdict("not solved", (
            f"Not solved yet: the naive loop fails {len(rules)} rules in {len(failed)} of {len(report.grades)} "
            "scenarios — one a line, with where:\n" + "\n".join(report.failure_lines()[1:]) + "\n"
            "Rewrite agent_loop so that each branch is handled (the report card above says how each scenario went "
            "wrong), then run its cell, the grading cell and this one again. For a hint: hint(\"lesson12\"); for a "
            "solution: show_solution(\"lesson12\").")))
    failing = report.failed_rules()          # the rules that fail outright first, a policy difference last
    name, where, _ = failing[0]
    scenario = where[0]
    check = report.grade(scenario).check(name)
    rule = next(r for r in RULES if r.name == name)
    assert check is not None
    more = "" if len(failing) == 1 and len(where) == 1 else "\n" + "\n".join(report.failure_lines())
    raise WrongAnswer(f"{scenario} · rule {rule.name} (row {rule.row}): a careful loop {rule.statement}; "
                      f"yours: {rule_result(check, POLICY)['message']}{more}")


def _say(verdict: Verdict) -> Verdict:
    print(verdict.message)
    return verdict


# -- the recorded clients --------------------------------------------------------------------------------------

def report_cards(clients: Sequence[str] | None = None) -> list[Report]:
    """The report cards of the committed records (data/observed), one per client and version, under the
    lesson's :data:`POLICY`."""
    return [report.under(POLICY) for report in observed_reports(clients=clients)]


def recorded_clients(reports: Sequence[Report]) -> str:
    """"N report cards of M clients: a 1.0, b 2.0 and 2.1, ..." — the clients and versions of ``reports``."""
    versions: dict[str, list[str]] = {}
    for report in reports:
        name, _, version = report.client.rpartition(" ")
        versions.setdefault(name or version, []).append(version if name else "")
    listing = "; ".join(f"{name} {' and '.join(v for v in found if v)}".strip() for name, found in versions.items())
    return f"{len(reports)} report cards of {len(versions)} clients: {listing}"


def side_by_side(reports: Sequence[Report]):
    """One row per scenario, one column per report: ✓, ✗ with the failed rules, or – when no branch rule
    could judge the run."""
    import pandas as pd

    names = sorted({g.scenario for r in reports for g in r.grades})
    rows = []
    for name in names:
        row: dict[str, Any] = {"scenario": name}
        for report in reports:
            grade = next((g for g in report.grades if g.scenario == name), None)
            row[report.client] = "" if grade is None else \
                "✗ " + ", ".join(grade.failed) if grade.failed else grade.mark
        rows.append(row)
    return pd.DataFrame(rows).set_index("scenario")


def failed_beyond(report: Report, base: Report) -> dict[str, list[str]]:
    """``{scenario: [rules]}``: the checks that fail in ``report`` and not in ``base`` (e.g. a newer version
    against an older one)."""
    before = base.failed
    out: dict[str, list[str]] = {}
    for scenario, rules in report.failed.items():
        extra = [rule for rule in rules if rule not in before.get(scenario, [])]
        if extra:
            out[scenario] = extra
    return out


def card_summary(reports: Sequence[Report]) -> None:
    """Per report card: its scenarios counted by verdict (the words and numbers of its report's own first line),
    the scenarios not reached (–), and each failed rule with the scenarios it failed on; a later version of the
    same client also lists what fails in it and not in the version before it."""
    rank = [r.name for r in RULES]
    previous: dict[str, Report] = {}
    for k, report in enumerate(reports):
        line = f"{report.client}: {len(report.grades)} scenarios, {counts_text(g.verdict for g in report.grades)}"
        unreached = [g.scenario for g in report.grades if g.verdict == "not_reached"]
        if unreached:
            line += f"; not reached (–): {', '.join(unreached)}"
        print(("\n" if k else "") + line)
        by_rule: dict[str, list[str]] = {}
        for scenario, rules in report.failed.items():
            for rule in rules:
                by_rule.setdefault(rule, []).append(scenario)
        for rule in sorted(by_rule, key=rank.index):
            print(f"    ✗ {rule}: {', '.join(by_rule[rule])}")
        family = report.client.split(" ")[0]
        if family in previous:
            base = previous[family]
            extra = failed_beyond(report, base)
            listed = "; ".join(f"{s} ({', '.join(r)})" for s, r in extra.items()) or "nothing"
            print(f"    fails beyond {base.client}: {listed}")
        previous[family] = report
