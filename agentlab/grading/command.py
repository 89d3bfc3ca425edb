"""``agentlab grade``: a report card for any agent loop, in any language.

For each scenario a fresh :class:`~agentlab.backend.serve.ScenarioServer` answers; the agent runs once against it
(a command, with the scenario's prompt where ``{prompt}`` stands or appended as its last argument, and
``ANTHROPIC_BASE_URL``, a dummy ``ANTHROPIC_API_KEY`` and the ``AGENTLAB_*`` variables set, or a Python function
given an ``anthropic.Anthropic`` client); what it sent is
turned into the observatory's behaviour record (:func:`agentlab.observatory.records.build_record`), and the record is
judged against the careful-loop rules of docs/conformance.md.

The rules are pure functions of a record (the requests the client sent, what each was answered, when it
arrived) and of its scenario, so the same grader judges a live run and a committed record in
``data/observed``. Each rule belongs to one branch of the decision table and applies only where its
branch was reached (a ``pause_turn`` reply for ``pause_turn_resume``, a transient error for
``retry_with_backoff``, ...); where it applies it holds (✓) or fails (✗), always with the reason, naming
the requests. ``RULES`` lists them in the order of the decision table; docs/conformance.md describes the
same rules under the same names.

Every verdict (pass, fail, policy, not_reached: a rule's, a scenario's, a report's, the run's) is decided in
:mod:`~agentlab.grading.verdict`, which every output reads. The rules are in
:mod:`~agentlab.grading.rules`, the serving of the scenarios to a client in
:mod:`~agentlab.grading.serving`, the report cards in :mod:`~agentlab.grading.report`, what
is written for machines (the JSON report and its schema, JUnit XML, the baseline) in
:mod:`~agentlab.grading.output`; this module is the command line (:func:`grade_main`) and names all
of them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentlab.backend.scenario import load_scenario
from agentlab.core.errors import ConfigError
from agentlab.core.guard import check_outputs
from agentlab.core.text import json_text
from agentlab.core.paths import observed_dir, write_output
from agentlab.grading.output import (  # noqa: F401  (re-exported: agentlab.grading.command keeps every name)
    SCHEMA_PATH,
    SCHEMA_VERSION,
    BaselineCheck,
    check_baseline,
    overall_passed,
    overall_verdict,
    split_by_baseline,
    document,
    junit_xml,
    load_document,
    read_baseline,
    write_baseline,
    write_text,
)
from agentlab.grading.report import (  # noqa: F401  (re-exported: agentlab.grading.command keeps every name)
    Report,
    ScenarioGrade,
    grade_record,
    grade_records,
    STRIPPED_ENV,
    nothing_sent,
    observed_reports,
    server_tool_notes,
)
from agentlab.grading.rules import (  # noqa: F401  (re-exported: agentlab.grading.command keeps every name)
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
    ends_cleanly,
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
from agentlab.grading.verdict import (  # noqa: F401  (re-exported: agentlab.grading.command keeps every name)
    DEFAULT_POLICY,
    MARKS,
    POLICY_MODES,
    POLICY_WORDS,
    VERDICTS,
    PolicyMode,
    Verdict,
    check_policy_mode,
    policy_groups,
    rule_verdict,
    scenario_verdict,
)
from agentlab.grading.serving import (  # noqa: F401  (re-exported: agentlab.grading.command keeps every name)
    COMMAND_ENV,
    DEFAULT_JOBS,
    DEFAULT_TIMEOUT,
    GRADE_KEY,
    PROMPT,
    KILL_GRACE_S,
    MAX_ARGUMENT_BYTES,
    MAX_TIMEOUT_S,
    LoopFn,
    check_pass_env,
    check_prompt_argument,
    check_suffix,
    check_timeout,
    command_argv,
    command_env,
    command_runner,
    function_runner,
    grade_command,
    grade_function,
    gradeable_scenarios,
    grading_engine,
    needs_settings,
    parse_command,
)

# -- the command line -----------------------------------------------------------------------------------------

def grade_main(args: Any, *, heatmap: Callable[[list[Report]], Any] | None = None) -> int:
    """``agentlab grade``: exit 0 when every rule holds (with --baseline: every failure is a known one), 1 when
    any fails, 2 for bad usage (via ConfigError).

    ``heatmap(reports)`` draws the figure ``--heatmap`` saves (the CLI passes agentlab-grade's
    ``agentlab_grade.heatmap.grade_heatmap``).
    """
    mode = _policy_mode(args)
    _check_usage(args)
    known = read_baseline(args.baseline) if args.baseline else None  # a bad baseline fails before anything runs
    reports: list[Report] = observed_reports(clients=args.observed or None) if args.observed is not None else []
    for path in args.load or []:
        reports += load_document(path)
    if not args.agent_command and args.scenarios:
        reports = _only(reports, args.scenarios)
    if args.agent_command:
        reports.append(_grade_the_command(args))
    reports = [report.under(mode) for report in reports]
    checked = check_baseline(args.baseline, known, reports) if known is not None else None
    _write_outputs(args, reports, checked, heatmap)
    return 0 if overall_passed(reports, checked) else 1


def _only(reports: list[Report], names: list[str]) -> list[Report]:
    """Scenario names without --command: only those scenarios of the records and loaded reports, in the order
    given (a name no report holds is an error naming the ones they do)."""
    held = {g.scenario for r in reports for g in r.grades}
    unknown = [n for n in names if n not in held]
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not in the reports graded here; they hold "
                          f"{', '.join(sorted(held)) or 'no scenario'}")
    for report in reports:
        report.grades = [g for n in names for g in report.grades if g.scenario == n]
    return [r for r in reports if r.grades]


def _policy_mode(args: Any) -> PolicyMode:
    try:
        return check_policy_mode(getattr(args, "policy", None) or DEFAULT_POLICY)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_usage(args: Any) -> None:
    if not (args.agent_command or args.observed is not None or args.load):
        raise ConfigError("nothing to grade: give --command \"CMD ARGS\" (your agent; the prompt is appended, or "
                          "put where {prompt} stands), --observed [CLIENT ...] (the committed records) or "
                          "--load REPORT.json")
    if args.jobs < 1:
        raise ConfigError(f"--jobs: expected at least 1, got {args.jobs}")
    if (args.baseline or args.write_baseline or args.keep) and not args.agent_command:
        option = "--baseline" if args.baseline else "--write-baseline" if args.write_baseline else "--keep"
        raise ConfigError(f"{option} goes with --command (it is about the command graded now)")
    if args.keep:
        if Path(args.keep).exists() and not Path(args.keep).is_dir():
            raise ConfigError(f"--keep {args.keep}: is a file; --keep takes a folder")
        try:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--keep {args.keep}: cannot create the folder: {exc.strerror or exc}") from None
    if args.agent_command:
        check_timeout(args.timeout)  # before the banner and before anything runs
        check_pass_env(args.pass_env or [])
        check_suffix(args.base_url_suffix or "")
        names = list(args.scenarios) if args.scenarios else gradeable_scenarios()
        loaded = [load_scenario(name) for name in names]
        for sc in loaded:
            check_prompt_argument(sc)
        _check_outputs(args, [sc.source for sc in loaded])
    else:
        _check_outputs(args, [])


OUTPUTS = ("--save", "--junit", "--write-baseline", "--heatmap")


def _check_outputs(args: Any, scenario_files: list[str | None]) -> None:
    """Each file grade writes, before anything runs: not a folder, in a folder that exists, in a format it can
    be written in, written once, and none of the files this run reads (a graded scenario, a report given to
    --load, a committed record)."""
    outputs = {option: getattr(args, option[2:].replace("-", "_")) for option in OUTPUTS}
    for option, path in outputs.items():
        if not path:
            continue
        try:
            os.stat(path)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:  # a name too long, a NUL byte
            raise ConfigError(f"{option} {path}: cannot write there: {getattr(exc, 'strerror', None) or exc}"
                              ) from None
        if os.path.isdir(path):
            raise ConfigError(f"{option} {path}: is a folder; give a file name")
        if not os.path.isdir(Path(path).parent):
            raise ConfigError(f"{option} {path}: the folder {Path(path).parent} does not exist")
    if args.save and Path(args.save).suffix.lower() not in (".json", ""):
        raise ConfigError(f"--save {args.save}: a report is saved as JSON; give a name ending in .json")
    if args.heatmap:
        _check_image_format(args.heatmap)
    records = sorted(observed_dir().glob("*/*/*.json")) if args.observed is not None else []
    check_outputs(outputs, {"a scenario file": [s for s in scenario_files if s],
                            "a report given to --load": args.load, "a committed record": records})


def _check_image_format(path: str) -> None:
    from matplotlib.backend_bases import FigureCanvasBase  # --heatmap needs the lab extra (the CLI checks it)

    kinds = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in kinds:
        raise ConfigError(f"--heatmap {path}: unknown image format {suffix!r}; give a name ending in one of "
                          + ", ".join(f".{s}" for s in sorted(kinds)))


def _grade_the_command(args: Any) -> Report:
    import sys

    argv = parse_command(args.agent_command)
    names = list(args.scenarios) if args.scenarios else gradeable_scenarios()
    for name in names:
        load_scenario(name)
    print(f"agentlab grade: {len(names)} scenario(s), each against a fresh server, {args.jobs} at a time; "
          f"timeout {args.timeout:g} s", file=sys.stderr, flush=True)
    started = time.perf_counter()
    report = grade_command(argv, names, timeout=args.timeout, jobs=args.jobs, label=args.label or args.agent_command,
                           pass_env=args.pass_env or [], keep=args.keep,
                           base_url_suffix=args.base_url_suffix or "")
    print(f"agentlab grade: done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return report


def _write_outputs(args: Any, reports: list[Report], checked: BaselineCheck | None,
                   heatmap: Callable[[list[Report]], Any] | None) -> None:
    """The text report (on stderr with --json, whose document is then all of stdout), then the files."""
    import sys

    text = "\n\n".join(report.text() for report in reports)
    if checked is not None:
        text += "\n\n" + checked.text()
    print(text, file=sys.stderr if args.json else sys.stdout, flush=True)
    doc = document(reports, checked)
    notes: list[str] = []
    if args.save:
        write_text(args.save, json.dumps(doc, indent=1, ensure_ascii=False) + "\n", "--save")
        notes.append(f"saved: {args.save}")
    if args.junit:
        write_text(args.junit, junit_xml(reports, checked), "--junit")
        notes.append(f"junit: {args.junit}")
    if args.write_baseline:
        count = write_baseline(args.write_baseline, reports)
        notes.append(f"baseline: {args.write_baseline} ({count} known failure(s))")
    if args.keep:
        notes.append(f"kept: {args.keep} (per scenario: exchanges.jsonl, record.json, stdout.txt, stderr.txt, "
                     "exit.json)")
    if args.heatmap:
        if heatmap is None:
            raise ConfigError("--heatmap: no figure maker was given to grade_main")
        _save_figure(heatmap(reports), args.heatmap)
        notes.append(f"heatmap: {args.heatmap}")
    if not reports:
        notes.append("nothing graded: the reports hold no client; a report must show its work to pass")
    if notes:
        print("\n" + "\n".join(notes), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(json_text(doc), flush=True)


def _save_figure(fig: Any, path: str) -> None:
    """--heatmap: the figure drawn in the format its name ends in, then written whole (write_output)."""
    import io

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=Path(path).suffix.lower().lstrip("."), dpi=110, bbox_inches="tight")
    except ValueError as exc:
        raise ConfigError(f"--heatmap {path}: cannot draw the figure: {exc}") from None
    write_output(path, buffer.getvalue(), "--heatmap")
