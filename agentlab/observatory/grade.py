"""``agentlab grade``: a report card for any agent loop, in any language.

For each scenario a fresh :class:`~agentlab.backend.serve.ScenarioServer` answers; the agent runs once against it
(a command, with the scenario's prompt appended as its last argument and ``ANTHROPIC_BASE_URL`` /
``ANTHROPIC_API_KEY`` set, or a Python function given an ``anthropic.Anthropic`` client); what it sent is
turned into the observatory's behaviour record (:func:`agentlab.observatory.records.build_record`), and the record is
judged against the careful-loop rules of docs/conformance.md.

The rules are pure functions of a record (the requests the client sent, what each was answered, when it
arrived) and of its scenario, so the same grader judges a live run and a committed record in
``data/observed``. Each rule belongs to one branch of the decision table and applies only where its
branch was reached (a ``pause_turn`` reply for ``pause_turn_resume``, a transient error for
``retry_with_backoff``, ...); where it applies it holds (✓) or fails (✗), always with the reason, naming
the requests. ``RULES`` lists them in the order of the decision table; docs/conformance.md describes the
same rules under the same names.

The rules are in :mod:`~agentlab.observatory.grade_rules`, the serving of the scenarios to a client in
:mod:`~agentlab.observatory.grade_serving`, the report cards in :mod:`~agentlab.observatory.grade_report`;
this module is the command line (:func:`grade_main`) and names all of them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..backend.scenario import load_scenario
from ..core.errors import ConfigError
from .grade_report import (  # noqa: F401  (re-exported: agentlab.observatory.grade keeps every name)
    Report,
    ScenarioGrade,
    grade_record,
    grade_records,
    observed_reports,
    server_tool_notes,
)
from .grade_rules import (  # noqa: F401  (re-exported: agentlab.observatory.grade keeps every name)
    MAX_COMPACTIONS,
    MAX_CONTINUATIONS,
    MAX_PAUSE_RESUMES,
    MAX_STOP_BLOCKS,
    MIN_BACKOFF_S,
    MIN_RECOVERIES,
    MIN_RETRIES,
    OVERLOADS_BEFORE_FALLBACK,
    RECOVERY_STOPS,
    RETRY_AFTER_SLACK,
    RULES,
    RULE_NAMES,
    TRANSIENT_STATUSES,
    UNIVERSAL,
    Check,
    Rule,
    Run,
    Status,
    bounded_compaction,
    bounded_max_tokens_recovery,
    clamp_max_tokens,
    ending,
    ends_on_its_own,
    escalate_cut_tool_call,
    fallback_after_overload,
    no_resend_after_refusal,
    no_retry_on_fatal,
    nudge_empty_turn,
    pause_turn_resume,
    plural,
    record_from_requests,
    retry_with_backoff,
    sends_the_prompt,
    stop_at_max_turns,
    stop_hook_feedback,
    stop_when_done,
    tool_result_pairing,
)
from .grade_serving import (  # noqa: F401  (re-exported: agentlab.observatory.grade keeps every name)
    DEFAULT_TIMEOUT,
    GRADE_KEY,
    KILL_GRACE_S,
    MAX_TIMEOUT_S,
    LoopFn,
    check_timeout,
    command_runner,
    function_runner,
    grade_command,
    grade_function,
    gradeable_scenarios,
    needs_settings,
    parse_command,
)

# -- the command line -----------------------------------------------------------------------------------------

def grade_main(args: Any, *, heatmap: Callable[[list[Report]], Any] | None = None) -> int:
    """``agentlab grade``: exit 0 when every rule holds, 1 when any fails (2 for bad usage, via ConfigError).

    ``heatmap(reports)`` draws the figure ``--heatmap`` saves (the CLI passes ``agentlab.ui.plots.grade_heatmap``).
    """
    import sys

    if not (args.agent_command or args.observed is not None or args.load):
        raise ConfigError("nothing to grade: give --command \"CMD ARGS\" (your agent; the prompt is appended), "
                          "--observed [CLIENT ...] (the committed records) or --load REPORT.json")
    if args.scenarios and not args.agent_command:
        raise ConfigError("scenario names go with --command (records are graded on the scenarios they hold)")
    if args.jobs < 1:
        raise ConfigError(f"--jobs: expected at least 1, got {args.jobs}")
    if args.agent_command:
        check_timeout(args.timeout)  # before the banner and before anything runs
    reports: list[Report] = observed_reports(clients=args.observed or None) if args.observed is not None else []
    for path in args.load or []:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--load {path}: cannot read a saved report: {exc}") from None
        items = data.get("reports") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise ConfigError(f"--load {path}: not a report saved with --save (no 'reports' list)")
        reports += [Report.from_dict(item) for item in items]
    if args.agent_command:
        argv = parse_command(args.agent_command)
        names = list(args.scenarios) if args.scenarios else gradeable_scenarios()
        for name in names:
            load_scenario(name)
        print(f"agentlab grade: {len(names)} scenario(s), each against a fresh server; "
              f"timeout {args.timeout:g} s", file=sys.stderr, flush=True)
        started = time.perf_counter()
        reports.append(grade_command(argv, names, timeout=args.timeout, jobs=args.jobs,
                                     label=args.label or args.agent_command))
        print(f"agentlab grade: done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    for k, report in enumerate(reports):
        if k:
            print()
        print(report.text())
    if args.save:
        Path(args.save).write_text(json.dumps({"reports": [r.to_dict() for r in reports]}, indent=1,
                                              ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"\nsaved: {args.save}")
    if args.heatmap:
        if heatmap is None:
            raise ConfigError("--heatmap: no figure maker was given to grade_main")
        fig = heatmap(reports)
        fig.savefig(args.heatmap, dpi=110, bbox_inches="tight")
        print(f"heatmap: {args.heatmap}")
    passed = all(r.passed for r in reports)
    if args.json:
        print(json.dumps({"verdict": "pass" if passed else "fail",
                          "scenarios": [s for r in reports for s in r.to_dict()["scenarios"]]}, ensure_ascii=False))
    return 0 if passed else 1
