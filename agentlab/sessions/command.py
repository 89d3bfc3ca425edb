"""Claude Code's own session files: list them, and record example ones against ``agentlab serve``.

``list_sessions(DIR)`` finds the transcripts under ``~/.claude/projects`` (or DIR), newest first, and reads
each (as a stream) for a one-line summary: project, date, calls, how it ended. ``agentlab sessions`` prints it.

``record_transcripts(version)`` runs an installed Claude Code version (``make claude-code``) on the scenarios
in ``SESSION_SCENARIOS`` through ``observe``'s runner, each in a fresh HOME, and keeps the transcripts it wrote,
with what differs from one machine to the next (the temporary folder, the interpreter, the checkout) replaced
by placeholders. ``make record`` calls ``agentlab sessions --record``: the transcripts of every installed
version are parsed again, and anything the parser does not understand fails the check, so a Claude Code release
that changes the file format is noticed. ``--record --update`` writes them into ``data/sessions``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlab.backend.scenario import Scenario, load_scenario
from agentlab.core.errors import ConfigError
from agentlab import __version__
from agentlab.core.events import ApiError, Request, ResultEvent, Response, Start, TransitionEvent
from agentlab.core.paths import data_dir, write_output
from agentlab.core.text import printable
from agentlab.core.trace import Trace, redact
from agentlab.observatory.observe import (
    ClientOutcome, installed_claude_versions, machine_replacements, observe_scenario, resolve_client)
from agentlab.sessions.transcript import Session, TranscriptError, detect_kind, read_session, read_sessions, table_lines
from agentlab.sessions.trace import session_to_trace

SESSIONS_DIR = data_dir() / "sessions"
# the scenarios whose Claude Code transcripts are kept: each shows one way a turn ends
SESSION_SCENARIOS = ("tool_use", "max_tokens_give_up", "pause_turn", "refusal", "api_errors", "api_error_fatal",
                     "context_window_exceeded", "context_window_full", "prompt_too_long", "stop_hook", "subagent")
# scenarios only the transcripts need (a sub-agent): kept here, not in data/scenarios, which every client runs
SESSION_ONLY_SCENARIOS = SESSIONS_DIR / "scenarios"
LIST_LIMIT = 200   # `agentlab sessions` reads at most this many transcripts (the newest), and says so


def default_projects_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude") / "projects"


# -- listing -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SessionLine:
    path: Path
    project: str
    date: str
    calls: int
    ended: str
    partial: bool


def transcript_files(root: Path) -> list[Path]:
    """The ``*.jsonl`` files under ``root``, newest (last written) first; sub-agent files are left to their
    session (they are read with it)."""
    found: list[tuple[float, Path]] = []
    for path in root.rglob("*.jsonl"):
        if "subagents" in path.parts:
            continue
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return [p for _, p in sorted(found, key=lambda item: (-item[0], str(item[1])))]


def list_sessions(root: str | Path | None = None, *, limit: int = LIST_LIMIT) -> tuple[list[SessionLine], int]:
    """One line per transcript under ``root`` (default ``~/.claude/projects``), newest first, at most ``limit``;
    and how many transcripts there are in all."""
    base = Path(root) if root is not None else default_projects_dir()
    if not base.exists():
        raise ConfigError(f"{base}: no such folder (Claude Code keeps its sessions in ~/.claude/projects)")
    if not base.is_dir():
        raise ConfigError(f"{base}: is a file; `agentlab sessions` takes a folder (`agentlab replay` reads a file)")
    files = transcript_files(base)
    lines = []
    for path in files[:limit]:
        try:
            session = read_session(path)
        except TranscriptError as exc:
            lines.append(SessionLine(path, _project(path, base), "-", 0, f"not read: {exc.reason}", True))
            continue
        lines.append(SessionLine(path, session.project or _project(path, base), session.started[:16].replace("T", " ")
                                 or "-", len(session.calls), session.ending, session.partial))
    return lines, len(files)


def _project(path: Path, base: Path) -> str:
    rel = path.relative_to(base)
    return rel.parts[0] if len(rel.parts) > 1 else base.name


# -- recording example transcripts ---------------------------------------------------------------------------

def _scrub_text(text: str, replacements: list[tuple[str, str]]) -> str:
    for old, new in replacements:
        if old:
            text = text.replace(json.dumps(old, ensure_ascii=False)[1:-1], new)
            text = text.replace(re.sub(r"[^A-Za-z0-9]", "-", old), new)  # the project folder's name for a path
    return re.sub(r"http://127\.0\.0\.1:\d+", "<server>", text)


def _keep_transcripts(home: Path, replacements: list[tuple[str, str]]) -> dict[str, str]:
    """Every transcript Claude Code wrote under ``home``, by its path below the project folder, scrubbed."""
    projects = home / ".claude" / "projects"
    kept: dict[str, str] = {}
    for path in sorted(projects.rglob("*.jsonl")) if projects.is_dir() else []:
        rel = path.relative_to(projects)
        name = "/".join(rel.parts[1:])
        kept[name] = _scrub_text(path.read_text(encoding="utf-8"), replacements)
    return kept


def _keeping(run: Callable[..., ClientOutcome], kept: dict[str, str]) -> Callable[..., ClientOutcome]:
    """The Claude Code runner, keeping the transcripts it wrote in its temporary HOME before that is removed."""
    def runner(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
        outcome = run(scenario, base_url, workdir, timeout)
        kept.update(_keep_transcripts(workdir / "home", machine_replacements(workdir)))
        return outcome
    return runner


def record_transcripts(version: str, scenarios: Iterable[str] = SESSION_SCENARIOS, *,
                       progress: Callable[[str, dict[str, str]], None] | None = None) -> dict[str, dict[str, str]]:
    """Run Claude Code ``version`` on each scenario; ``{scenario: {file name: scrubbed JSONL}}``."""
    client = resolve_client(f"claude-code@{version}")
    found: dict[str, dict[str, str]] = {}
    for name in scenarios:
        kept: dict[str, str] = {}
        own = SESSION_ONLY_SCENARIOS / f"{name}.yaml"
        scenario = load_scenario(own if own.exists() else name)
        observe_scenario("claude-code", scenario, version=version, runner=_keeping(client.runner, kept))
        found[name] = kept
        if progress is not None:
            progress(name, kept)
    return found


def fixture_paths(version: str, scenario: str, names: Iterable[str], root: Path = SESSIONS_DIR) -> dict[str, Path]:
    """Where each transcript of a scenario is kept: the main session as ``<scenario>.jsonl``, the others
    (sub-agents) beside it under ``<scenario>/``."""
    base = root / "claude-code" / version
    out: dict[str, Path] = {}
    for name in names:
        out[name] = base / f"{scenario}.jsonl" if "/" not in name else base / scenario / name.split("/", 1)[1]
    return out


def write_fixtures(version: str, found: dict[str, dict[str, str]], root: Path = SESSIONS_DIR) -> list[Path]:
    """Each scenario's transcripts written where ``fixture_paths`` keeps them; the paths written."""
    written = []
    for scenario, files in found.items():
        for name, path in fixture_paths(version, scenario, files, root).items():
            _write_whole(path, files[name])
            written.append(path)
    return written


def _write_whole(path: Path, text: str) -> None:
    """``text`` written to ``path`` (its folder made) whole or not at all: a failed write keeps the file before."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_output(path, text, "sessions --record")


def check_sessions(found: dict[str, dict[str, str]]) -> list[str]:
    """What a fresh set of transcripts shows that the parser does not understand, one line each (empty: none)."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="agentlab-sessions-") as tmp:
        for scenario, files in found.items():
            mains = [n for n in files if "/" not in n]
            if not mains:
                problems.append(f"{scenario}: Claude Code wrote no transcript")
                continue
            folder = Path(tmp) / scenario
            for name, text in files.items():
                _write_whole(folder / name, text)
            for name in mains:
                try:
                    session = read_session(folder / name)
                except TranscriptError as exc:
                    problems.append(f"{scenario}: {exc}")
                    continue
                problems += [f"{scenario}: {note}" for note in session.not_understood_notes()]
                if not session.calls and not session.events:
                    problems.append(f"{scenario}: neither a model call nor an event found")
    return problems


def _shape(session: Session) -> str:
    """What a format change would alter: the rows of the calls, the sub-agents' calls, the events between."""
    events = " ".join(e.name for e in session.events if e.name not in ("prompt", "hook", "notice"))
    return (f"{len(session.calls)} call(s) (rows {' '.join(c.row for c in session.calls) or '-'}), "
            f"{len(session.sidechain_calls)} sub-agent call(s), events: {events or '-'}")


def compare_with_fixtures(version: str, found: dict[str, dict[str, str]], root: Path = SESSIONS_DIR) -> list[str]:
    """Where fresh transcripts read differently from the committed ones (calls, rows, events), one line each:
    a format change that leaves every entry known (say, replies no longer written) shows here."""
    lines = []
    with tempfile.TemporaryDirectory(prefix="agentlab-sessions-") as tmp:
        fresh_root = Path(tmp)
        write_fixtures(version, found, fresh_root)
        for scenario in found:
            committed = root / "claude-code" / version / f"{scenario}.jsonl"
            fresh = fresh_root / "claude-code" / version / f"{scenario}.jsonl"
            if not committed.exists() or not fresh.exists():
                continue
            now, before = _shape(read_session(fresh)), _shape(read_session(committed))
            if now != before:
                lines.append(f"{scenario}: now {now}; committed {before}")
    return lines


def record_main(update: bool = False, versions: Iterable[str] | None = None,
                out: Callable[[str], None] = print) -> int:
    """``agentlab sessions --record [--update]``: 0 when every installed version's transcripts parse whole."""
    versions = list(versions or installed_claude_versions())
    if not versions:
        out("sessions --record: no Claude Code installed under tool/claude-code (make claude-code); nothing checked")
        return 0
    failed = False
    for version in versions:
        def progress(name: str, kept: dict[str, str], v: str = version) -> None:
            out(f"claude-code {v} {name:26s} {len(kept)} transcript file(s)")

        found = record_transcripts(version, progress=progress)
        problems = check_sessions(found)
        for line in problems:
            out(f"NOT UNDERSTOOD claude-code {version} {line}")
        differing = [] if update else compare_with_fixtures(version, found)
        for line in differing:
            out(f"DIFFERS claude-code {version} {line}")
        failed = failed or bool(problems) or bool(differing)
        if update:
            for path in write_fixtures(version, found):
                out(f"wrote {path}")
    return 1 if failed else 0


def iter_fixtures(root: Path = SESSIONS_DIR) -> Iterator[Path]:
    """The committed example transcripts (main sessions only)."""
    yield from sorted(root.glob("*/*/*.jsonl"))


def read_fixture(version: str, scenario: str, root: Path = SESSIONS_DIR) -> Session:
    return read_session(root / "claude-code" / version / f"{scenario}.jsonl")


# -- `agentlab replay PATH` ----------------------------------------------------------------------------------

def _secrets() -> tuple[str, ...]:
    return tuple(v for v in (os.environ.get("ANTHROPIC_API_KEY"), os.environ.get("ANTHROPIC_AUTH_TOKEN")) if v)


def trace_summary(trace: Trace, kind: str, path: Path) -> dict[str, Any]:
    """The ``--json`` shape for an agentlab trace or a behaviour record (what ``Session.to_json`` gives for a
    transcript): the client, its version, one entry per model reply (``calls``) and per failed request
    (``failed_calls``: the HTTP status and error, and what was done next), the compactions, errors, hook blocks.
    An agentlab trace does not say which agentlab wrote it: ``version`` is None and ``read_by`` names the agentlab
    that read it."""
    start = next((e.payload for e in trace if isinstance(e.payload, Start)), None)
    extra = dict(start.extra) if start is not None else {}
    result = next((e.payload for e in trace if isinstance(e.payload, ResultEvent)), None)
    decided: dict[int, list[TransitionEvent]] = {}
    sent: dict[int, Request] = {}
    for e in trace:
        if isinstance(e.payload, TransitionEvent):
            decided.setdefault(e.call, []).append(e.payload)
        elif isinstance(e.payload, Request):
            sent[e.call] = e.payload
    calls, failed = [], []
    for e in trace:
        p, after = e.payload, _decision(decided.get(e.call))
        if isinstance(p, Response):
            calls.append({"n": e.call, "model": p.model, "stop_reason": p.stop_reason, "usage": dict(p.usage),
                          "cost_usd": p.cost_usd, **after, "purpose": p.purpose,
                          "estimated": bool(p.extra.get("estimated"))})
        elif isinstance(p, ApiError):
            request = sent.get(e.call)
            failed.append({"n": e.call, "model": request.model if request else None, "status": p.status,
                           "error": p.error_type, "message": p.message, **after, "purpose": p.purpose})
    return {
        "client": extra.get("client") or "agentlab", "version": extra.get("version"), "kind": kind,
        "read_by": f"agentlab {__version__}", "model": start.model if start else None,
        "scenario": extra.get("scenario"), "prompt": start.prompt if start else None,
        "paths": [str(path)], "partial": result is None, "ending": result.subtype if result else "no result (cut?)",
        "calls": calls, "failed_calls": failed,
        "compactions": [{"after_call": e.call, **e.data} for e in trace.of_kind("compaction")],
        "api_errors": [{"after_call": e.call, **e.data} for e in trace.of_kind("api_error")],
        "hook_blocks": [{"after_call": e.call, **e.data} for e in trace.of_kind("hook")
                        if e.data.get("decision") == "block"],
        "cost_usd": result.cost_usd if result else None, "not_understood": {}, "notes": [],
    }


def _decision(found: list[TransitionEvent] | None) -> dict[str, Any]:
    """The branch taken after a call (the last transition on it), its row and the transition's type."""
    last = found[-1] if found else None
    return {"branch": last.branch if last else None, "row": last.row if last else None,
            "next": last.type if last else None}


def source_line(summary: dict[str, Any]) -> str:
    """Where a replayed run comes from, in words: an agentlab trace (the file, its model and prompt, the agentlab
    that read it) or a behaviour record (the client, its version, the scenario)."""
    model = f" · {summary['model']}" if summary.get("model") else ""
    if summary["kind"] == "agentlab-trace":
        prompt = summary.get("prompt") or ""
        prompt = f" · prompt {prompt if len(prompt) <= 60 else prompt[:59] + '…'!r}" if prompt else ""
        return f"agentlab trace {Path(summary['paths'][0]).name} (read by {summary['read_by']}){model}{prompt}"
    return (f"{summary['client']} {summary.get('version') or '(version not recorded)'} · behaviour record of "
            f"scenario {summary.get('scenario') or '?'}{model}")


def _call_count(summary: dict[str, Any]) -> str:
    failed = len(summary.get("failed_calls") or [])
    total = len(summary["calls"]) + failed
    return f"{total} call(s)" + (f", {failed} failed" if failed else "")


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    out = [f"{source_line(summary)} · {_call_count(summary)} · ended: {summary['ending']}"]
    out.append(f"{'call':>4}  {'model':20} {'stop_reason':30} {'row':>3}  {'input':>7} {'output':>7} "
               f"{'cache r':>7} {'cache w':>7} {'cost':>9}  next")
    rows = [(c["n"], _reply_line(c)) for c in summary["calls"]]
    rows += [(c["n"], _failed_line(c)) for c in summary.get("failed_calls") or []]
    out += [line for _, line in sorted(rows, key=lambda row: row[0])]
    if any(c.get("estimated") for c in summary["calls"]):
        out.append("token counts estimated from the record (without the client's system prompt and tools)")
    if summary["cost_usd"] is not None:
        out.append(f"total ${summary['cost_usd']:.4f}")
    return out


def _reply_line(c: dict[str, Any]) -> str:
    u = c["usage"]
    cost = "—" if c.get("estimated") else "no price" if c["cost_usd"] is None else f"${c['cost_usd']:.4f}"
    return (f"{c['n']:>4}  {str(c['model'])[:20]:20} {str(c['stop_reason'])[:30]:30} {c['row'] or '—':>3}  "
            f"{u.get('input_tokens', 0):>7} {u.get('output_tokens', 0):>7} "
            f"{u.get('cache_read_input_tokens', 0):>7} {u.get('cache_creation_input_tokens', 0):>7} "
            f"{cost:>9}  {c['branch']} ({c['next']})")


def _failed_line(c: dict[str, Any]) -> str:
    """A request that got no reply: its HTTP status and error where the stop_reason would be, no tokens."""
    error = f"HTTP {c['status']} {c['error'] or ''}".strip() if c["status"] else (c["error"] or "no reply")
    return (f"{c['n']:>4}  {str(c['model'])[:20]:20} {error[:30]:30} {c['row'] or '—':>3}  {'—':>7} {'—':>7} "
            f"{'—':>7} {'—':>7} {'—':>9}  {c['branch']} ({c['next']})")


def load_any(paths: list[str]) -> tuple[Session | None, Trace, dict[str, Any]]:
    """A transcript (several files: one session resumed), an agentlab trace or a record: its session (for a
    transcript), its trace, and its summary. TranscriptError when nothing can be read."""
    from agentlab.observatory.replay import load_record, record_to_trace

    first = Path(paths[0])
    kind = detect_kind(first)
    if kind == "claude-code":
        session = read_sessions(paths)
        return session, session_to_trace(session, secrets=_secrets()), session.to_json()
    if len(paths) > 1:
        raise TranscriptError(paths[1], f"only Claude Code transcripts are read together; {first} is an "
                                        f"{kind.replace('-', ' ')}")
    if kind == "observed-record":
        try:
            trace = record_to_trace(load_record(first))
        except (KeyError, TypeError, ValueError) as exc:
            raise TranscriptError(first, f"a behaviour record that cannot be replayed: {exc}") from None
    else:
        try:
            trace = Trace.load(first)
        except (OSError, ValueError, RecursionError) as exc:
            raise TranscriptError(first, str(exc).removeprefix(f"{first}: ")) from None
    return None, trace, trace_summary(trace, kind, first)


def _table(session: Session | None, summary: dict[str, Any]) -> list[str]:
    return table_lines(session) if session is not None else _summary_lines(summary)


def replay_lines(*paths: str | Path) -> list[str]:
    """What ``agentlab replay PATH...`` prints: a transcript, an agentlab trace or a behaviour record, one line
    per model call (a failed one too) under a line saying where the run comes from."""
    session, _trace, summary = load_any([str(p) for p in paths])
    return [redact(printable(line, newlines=False), _secrets()) for line in _table(session, summary)]


def replay_main(args: Any, *, plot: Callable[..., Any] | None = None, out: Callable[[str], None] = print) -> int:
    """``agentlab replay PATH... [--json] [--plot FILE.png]``: 0 when read (partial results are marked), 2 when
    nothing could be read."""
    if args.plot:
        check_plot_target(Path(args.plot))
    session, trace, summary = load_any(args.paths)
    secrets = _secrets()
    if args.json:
        out(redact(json.dumps(summary, ensure_ascii=False, default=str), secrets))
    else:
        for line in _table(session, summary):
            out(redact(printable(line, newlines=False), secrets))
    if args.plot and plot is not None:
        ending = str(summary["ending"])
        ending = ending if len(ending) <= 50 else ending[:49] + "…"
        source = f"Claude Code {session.version or ''}".strip() if session is not None else \
            source_line(summary).split(" · ")[0]
        try:
            plot(trace, save=args.plot, title=printable(f"{source}: {_call_count(summary)}, ended: {ending}",
                                                        newlines=False))
        except OSError as exc:
            raise ConfigError(f"--plot {args.plot}: cannot be written: {exc.strerror or exc}") from None
        if not args.json:
            out(f"plot written to {args.plot}")
    return 0


def check_plot_target(path: Path) -> None:
    """``--plot FILE.png`` checked before anything is read or printed: a .png name, in a folder that exists, and
    not itself a folder. ConfigError naming what is wrong."""
    if path.suffix.lower() != ".png":
        raise ConfigError(f"--plot {path}: give a .png file name")
    if path.is_dir():
        raise ConfigError(f"--plot {path}: is a folder; give a file name ending in .png")
    folder = path.parent
    if not folder.exists():
        raise ConfigError(f"--plot {path}: no such folder {folder}")
    if not folder.is_dir():
        raise ConfigError(f"--plot {path}: {folder} is not a folder")


def sessions_main(args: Any, out: Callable[[str], None] = print) -> int:
    """``agentlab sessions [DIR]``: one line per session, newest first."""
    if args.record:
        return record_main(update=args.update, out=out)
    if args.update:
        raise ConfigError("--update goes with --record (it writes the transcripts --record collects)")
    lines, total = list_sessions(args.dir, limit=args.limit)
    if not total:
        out(f"no session transcript (*.jsonl) under {args.dir or default_projects_dir()}")
        return 0
    base = Path(args.dir) if args.dir else default_projects_dir()
    out(f"{'date':16}  {'calls':>5}  {'project':32}  {'ended':44}  file")
    for line in lines:
        project = _one_line(line.project)
        project = project if len(project) <= 32 else "…" + project[-31:]
        ended = _one_line(line.ended)
        ended = ended if len(ended) <= 44 else ended[:43] + "…"
        out(redact(f"{_one_line(line.date):16}  {line.calls:>5}  {project:32}  {ended:44}  "
                   f"{_one_line(str(line.path.relative_to(base)))}", _secrets()))
    if total > len(lines):
        out(f"({total - len(lines)} older session(s) not shown: --limit N shows more)")
    return 0


def _one_line(text: str) -> str:
    """A name or a text from the file system or a transcript, on one line: a newline, a carriage return or an
    escape sequence in it is shown in caret notation (``^J``), so it can neither split a row nor forge one."""
    return printable(text, newlines=False)


def example_sessions(root: Path = SESSIONS_DIR) -> list[dict[str, Any]]:
    """One row per committed transcript: version, scenario, the stop_reasons of its calls, what came between
    them, how it ended and what it cost (the lesson's table of the two Claude Code versions)."""
    rows = []
    for path in iter_fixtures(root):
        s = read_session(path)
        rows.append({"scenario": path.stem, "version": path.parent.name, "calls": len(s.calls),
                     "stop_reasons": " ".join(str(c.stop_reason) for c in s.calls) or "-",
                     "rows": " ".join(c.row for c in s.calls) or "-",
                     "retried errors": len(s.of("retry_error")), "compactions": len(s.of("compaction")),
                     "hook blocks": len(s.of("hook_block")), "ended": s.ending.split(":")[0],
                     "cost $": None if s.cost_usd is None else round(s.cost_usd, 4)})
    return rows
