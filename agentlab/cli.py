"""The ``agentlab`` command: run the loop (offline on a scenario, or against any Messages API server),
list scenarios, serve a scenario over HTTP, observe other clients.

Exit status: 0 for a ``success`` result, 1 for any error result, 2 for bad usage or bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from .core.errors import AgentlabError, ConfigError
from .core.paths import write_output

if TYPE_CHECKING:
    from .lab import LabLoop



def _flag_number(text: str, parse: Callable[[str], Any], what: str, within: Callable[[Any], bool], bound: str,
                 shown: Callable[[str, Any], str] = lambda text, value: str(value)) -> Any:
    """A numeric flag's value, or argparse's one-line error: ``expected WHAT, got 'x'`` for text that is not a
    number, ``expected BOUND, got N`` for a number out of range."""
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not within(value):
        raise argparse.ArgumentTypeError(f"expected {bound}, got {shown(text, value)}")
    return value


def _positive(text: str) -> int:
    return _flag_number(text, int, "a whole number", lambda n: n >= 1, "a number of at least 1")


def _tokens(text: str) -> int:
    """--max-tokens, --thinking: a whole number of tokens from 1 to MAX_TOKENS_BOUND."""
    from .core.transitions import MAX_TOKENS_BOUND

    value = _positive(text)
    if value > MAX_TOKENS_BOUND:
        shown = text if len(text) <= 30 else f"a number of {len(text)} digits"
        raise argparse.ArgumentTypeError(f"expected at most {MAX_TOKENS_BOUND:,} tokens, got {shown}")
    return value


def _budget(text: str) -> int:
    """--thinking: budget_tokens, at least the API's minimum of 1,024 (the loop keeps it below max_tokens)."""
    value = _tokens(text)
    if value < 1024:
        raise argparse.ArgumentTypeError(f"expected a budget of at least 1024 tokens (the API's minimum), got {value}")
    return value


def _fraction(text: str) -> float:
    return _flag_number(text, float, "a number between 0 and 1", lambda x: 0 < x <= 1, "a number between 0 and 1")


def _seconds(text: str) -> float:  # the range also refuses nan and inf
    return _flag_number(text, float, "a number of seconds", lambda x: 0 < x <= 86_400,
                        "seconds above 0 and at most 86400", lambda text, value: text)


def _jobs(text: str) -> int:  # each job is a server and a run of the command: more than the machine can hold is a typo
    return _flag_number(text, int, "a whole number", lambda n: 1 <= n <= 64, "1 to 64 jobs")


def _retries(text: str) -> int:
    return _flag_number(text, int, "a whole number", lambda n: 0 <= n <= 100, "0 to 100 retries")


ECHO_LIMIT = 120  # a value the user typed is echoed whole up to this many characters, shortened beyond


def echoed(message: str, typed: list[str]) -> str:
    """``message`` with each value of ``typed`` (the command line's tokens, and the values of ``--flag=value``)
    longer than ECHO_LIMIT shortened wherever the message echoes it: its start, "…", its end (a path's file
    name) and its length. Every error the command prints goes through here."""
    values = {token.split("=", 1)[1] if token.startswith("--") and "=" in token else token for token in typed}
    for value in sorted((v for v in values if len(v) > ECHO_LIMIT), key=len, reverse=True):
        short = f"{value[:60]}…{value[-30:]} ({len(value)} characters)"
        message = message.replace(value, short).replace(repr(value)[1:-1], short)
    return message


class _Parser(argparse.ArgumentParser):
    """A usage error is one short line naming the option, with where to read more (not the whole usage first):
    ``agentlab run: --timeout: expected seconds above 0 and at most 86400, got 0 (see `agentlab run --help`)``."""

    _typed: list[str] = []

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._typed = [str(a) for a in (sys.argv[1:] if args is None else args)]
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        message = message.removeprefix("argument ")  # argparse's "argument --timeout: ...": the flag is enough
        self.exit(2, echoed(f"{self.prog}: {message} (see `{self.prog} --help`)", self._typed) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="agentlab", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the agent loop and print its trace or result")
    run.add_argument("scenario", nargs="?", help="a scenario name (see `agentlab scenarios`) or a file path")
    run.add_argument("--prompt", help="the user request (default: the scenario's prompt)")
    run.add_argument("--system", help="a system prompt")
    run.add_argument("--base-url", help="any server that speaks the Messages API (key from ANTHROPIC_API_KEY)")
    run.add_argument("--model", help="model name (default: the scenario's, else $ANTHROPIC_MODEL)")
    run.add_argument("--fallback-model", help="switch to this model after repeated 529 overloaded errors")
    run.add_argument("--refusal-fallback-model",
                     help="retry a refusal once on this model, echoing the refusal's credit token ('recommended': "
                          "the model its stop_details recommends)")
    run.add_argument("--fallbacks", metavar="MODELS",
                     help="ask the API to retry a refusal itself (server-side fallbacks, beta): comma-separated "
                          "models in order, or 'default'")
    run.add_argument("--server-compaction", metavar="EDITS",
                     help="let the API compact and edit the context (beta context_management): comma-separated "
                          "edits from compact, clear_tool_uses, clear_thinking; or 'on_demand' for the "
                          "compaction={type: summarize} request at each of the loop's compactions")
    run.add_argument("--compaction-trigger", type=_positive, metavar="TOKENS",
                     help="input tokens at which the compact edit compacts (default: the API's, 150000)")
    run.add_argument("--max-turns", type=_positive, help="at most N model calls that return a message")
    run.add_argument("--max-tokens", type=_tokens, help="max_tokens of each request")
    run.add_argument("--max-retries", type=_retries,
                     help="retries of a failed call (429/529/5xx/connection/cut stream; 0-100, default 5)")
    run.add_argument("--timeout", type=_seconds,
                     help="seconds a call may take in all, from sending the request to the last byte, streaming "
                          "or not (and so every wait in it), before it fails and is retried (default 600); after "
                          "30 s without data the wait is said on stderr")
    run.add_argument("--stop-sequence", action="append", dest="stop_sequences",
                     help="a custom stop sequence (repeat for several)")
    run.add_argument("--tools", choices=["demo", "none"], help="send and run the demo tools")
    run.add_argument("--stream", action="store_true",
                     help="stream every request (requests with a large max_tokens stream anyway, as the SDK requires)")
    run.add_argument("--thinking", type=_budget, metavar="BUDGET",
                     help="extended thinking with this budget_tokens (at least 1024, below max_tokens)")
    run.add_argument("--web-search", action="store_true",
                     help="offer the API's web search server tool (web_search_20250305): a long search can pause "
                          "the turn (pause_turn), and the loop resumes it")
    run.add_argument("--no-cache", dest="cache", action="store_false",
                     help="send no cache_control breakpoints (prompt caching is on by default)")
    run.add_argument("--settings", help="a Claude Code settings JSON file with hooks")
    run.add_argument("--compaction", help="compaction strategy: auto, clear_tool_results, drop_oldest, summarize")
    run.add_argument("--context-window", type=_positive,
                     help="context window in tokens (default: the model's, data/models.yaml)")
    run.add_argument("--compact-threshold", type=_fraction,
                     help="compact before a call once the context is this full (0-1)")
    run.add_argument("--count-tokens", action="store_true",
                     help="measure the context with the API's count_tokens endpoint before each call")
    run.add_argument("--trace", help="write the event trace to this JSONL file, event by event")
    run.add_argument("--json", action="store_true", help="print the result as one JSON object on the last line")

    scenarios = sub.add_parser("scenarios", help="list the scenarios, one short line each")
    scenarios.add_argument("--long", action="store_true", help="add each scenario's whole description")

    serve = sub.add_parser("serve", help="serve a scenario as a Messages API on 127.0.0.1")
    serve.add_argument("scenario")
    serve.add_argument("--port", type=int, default=0, help="port (default: a free one, printed)")
    serve.add_argument("--record", help="append every request to this JSONL file")
    serve.add_argument("--mode", choices=["strict", "grade"], default="strict",
                       help="strict (default): a request the script does not expect gets a 400 naming why; grade: "
                            "served exactly as `agentlab grade` serves it (never a 400 for an unexpected request: "
                            "the grade judges it), to reproduce a grade by hand")
    serve.add_argument("--allow-host", action="append", metavar="NAME",
                       help="also answer requests addressed to this host name (default: only 127.0.0.1, "
                            "localhost and ::1; repeat for several)")

    observe = sub.add_parser("observe", help="run a client against each scenario and record what it does")
    observe.add_argument("client", nargs="?", help="agentlab, tool-runner, claude-code[@VERSION], pydantic-ai, "
                         "langchain, openai-agents, strands, vercel-ai or anthropic-ts (--list describes them)")
    observe.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    observe.add_argument("--out", help="folder for the behaviour records (default: data/observed)")
    observe.add_argument("--check", action="store_true",
                         help="record into a temporary folder and compare with the committed records instead of "
                              "writing them; exit 1 when any differs")
    observe.add_argument("--list", action="store_true", help="list the clients and exit")
    observe.add_argument("--skip-missing", action="store_true",
                         help="a client that is not installed here is skipped with the reason (exit 0)")
    grade = sub.add_parser("grade", help="grade an agent (any command) or recorded clients on the careful-loop rules",
                           description="Serve each scenario, run the agent against it, judge the requests it sent "
                                       "against the careful-loop rules of docs/conformance.md (the verdicts: "
                                       "docs/grade.md). Exit 0 when no rule fails, 1 when any fails, 2 for bad usage.")
    grade.add_argument("scenarios", nargs="*", help="scenario names (default: every scenario a client can be "
                                                     "graded on from its prompt alone); without --command, the "
                                                     "scenarios of --observed and --load to show (put them first)")
    grade.add_argument("--command", dest="agent_command",
                       help="the agent: \"CMD ARGS\"; the scenario's prompt goes where {prompt} stands, else it is "
                            "appended as the last argument; ANTHROPIC_BASE_URL, a dummy ANTHROPIC_API_KEY and "
                            "AGENTLAB_PROMPT, AGENTLAB_SCENARIO, AGENTLAB_MODEL, AGENTLAB_MAX_TOKENS, "
                            "AGENTLAB_SERVER_TOOLS are set; every other ANTHROPIC_* and CLAUDE* variable is removed")
    grade.add_argument("--pass-env", action="append", metavar="NAME",
                       help="give the command this variable from the environment although it is an ANTHROPIC_* or "
                            "CLAUDE* one (repeat for several)")
    grade.add_argument("--timeout", type=_seconds, default=60.0,
                       help="seconds per scenario; a command still running then is stopped (its process group "
                            "killed) and graded as such (default 60)")
    grade.add_argument("--base-url-suffix", default="", metavar="SUFFIX",
                       help="appended to the server's URL in ANTHROPIC_BASE_URL, for clients that expect a base URL "
                            "ending in /v1 (the Vercel AI SDK): --base-url-suffix /v1")
    grade.add_argument("--jobs", type=_jobs, default=4,
                       help="scenarios run at the same time, each with its own server and its own run of the "
                            "command (1-64, default 4; 1 for a command that cannot run twice at once)")
    grade.add_argument("--label", help="the name of the graded client in reports (default: the command)")
    grade.add_argument("--observed", nargs="*", metavar="CLIENT",
                       help="also grade the committed records of these clients (client or client@version; "
                            "none named: all)")
    grade.add_argument("--load", action="append", metavar="REPORT.json",
                       help="add a report saved with --save (or printed by --json)")
    grade.add_argument("--save", metavar="REPORT.json",
                       help="save the JSON report (the --json document), to combine reports later (--load)")
    grade.add_argument("--junit", metavar="FILE.xml",
                       help="write JUnit XML: a test case per scenario and rule (failed rule: failure with its "
                            "message; branch not reached: skipped)")
    grade.add_argument("--write-baseline", metavar="FILE.json",
                       help="record today's failures as the known ones (commit it; then --baseline FILE)")
    grade.add_argument("--baseline", metavar="FILE.json",
                       help="accept the failures recorded with --write-baseline: exit 0 when every failure is in "
                            "it, 1 on a new one; the report names the entries that no longer fail")
    grade.add_argument("--keep", metavar="DIR",
                       help="keep per scenario, in DIR/SCENARIO/: the requests and replies as the server saw them "
                            "(exchanges.jsonl), the behaviour record (record.json), stdout.txt, stderr.txt and "
                            "exit.json")
    grade.add_argument("--heatmap", metavar="FILE.png", help="draw the reports as a heatmap, clients × branches")
    grade.add_argument("--policy", choices=["report", "strict", "ignore"], default="report",
                       help="what a difference from the reference loop's choice (retries before giving up, when to "
                            "switch to a fallback model, a Stop hook's cap, ...) counts as: report (default: shown "
                            "as ≠ policy, listed once, exit status unchanged), strict (a failure), ignore (a pass)")
    grade.add_argument("--json", action="store_true",
                       help="print the JSON report on stdout, as one document (the text report goes to stderr); "
                            "its JSON Schema is agentlab/grading/schemas/grade-report.schema.json")
    _add_replay_parsers(sub)
    return parser


def _add_replay_parsers(sub: Any) -> None:
    replay = sub.add_parser("replay", help="a Claude Code session, an agentlab trace or a behaviour record, call by "
                                           "call: stop_reason, decision-table row, tokens, cost, what came next")
    replay.add_argument("paths", nargs="+", metavar="PATH",
                        help="a Claude Code transcript (~/.claude/projects/<project>/<session>.jsonl; several: one "
                             "session resumed or forked, each call counted once), a --trace file or a "
                             "data/observed record")
    replay.add_argument("--json", action="store_true",
                        help="print one JSON object: client, version, calls, compactions, api_errors, hook_blocks, "
                             "cost_usd, ...")
    replay.add_argument("--plot", metavar="FILE.png", help="draw the session's overview into this PNG")
    sessions = sub.add_parser("sessions", help="list the Claude Code sessions under ~/.claude/projects (or DIR), "
                                               "newest first: date, calls, project, how each ended")
    sessions.add_argument("dir", nargs="?", help="a folder of transcripts (default ~/.claude/projects)")
    sessions.add_argument("--limit", type=_positive, default=200, help="read at most the N newest (default 200)")
    sessions.add_argument("--record", action="store_true",
                          help="run each installed Claude Code (tool/claude-code) on the example scenarios and check "
                               "that its transcripts parse whole (exit 1 on anything not understood)")
    sessions.add_argument("--update", action="store_true", help="with --record: write them into data/sessions")


def main(argv: list[str] | None = None) -> int:
    """The command; on a terminal, what it prints is printable-only (a model's or a hook's escape sequences are
    shown as ``cat -v`` shows them; the trace keeps the real text)."""
    from .core.guard import terminal_safe

    for stream in (sys.stdout, sys.stderr):  # a lone surrogate from a model or a hook is shown escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    with terminal_safe():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    tokens = list(sys.argv[1:] if argv is None else argv)
    bad = _not_utf8(tokens)
    if bad is not None:
        print(echoed(f"agentlab: {bad}", tokens), file=sys.stderr)
        return 2
    args = parser.parse_args(tokens)
    try:
        if args.command == "scenarios":
            return _scenarios(long=args.long)
        if args.command == "run":
            return _run(args)
        if args.command == "serve":
            from .backend.serve import serve_main

            if args.mode == "grade":
                from .grading.command import grading_engine

                return serve_main(args, engine=grading_engine(args.scenario))
            return serve_main(args)
        if args.command == "observe":
            from .observatory.observe import observe_main

            return observe_main(args)
        if args.command == "grade":
            from .grading.command import grade_main

            return grade_main(args, heatmap=_heatmap_maker() if args.heatmap else None)
        if args.command in ("replay", "sessions"):
            return _replay_or_sessions(args)
    except AgentlabError as exc:
        print(echoed(f"agentlab: {exc}", tokens), file=sys.stderr)
        return 2
    except OSError as exc:  # a path given that the system refuses (a name too long) where no check named it first
        if exc.filename is None:
            raise
        print(echoed(f"agentlab: {exc.filename}: {exc.strerror or exc}", tokens), file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        cancelled = getattr(exc, "cancelled", None)  # ToolsCancelled: the tool calls that had not finished
        print("agentlab: interrupted" + (f"; {exc}" if cancelled else ""), file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command!r}")
    return 2


@contextlib.contextmanager
def _extra_for(flag: str) -> Iterator[None]:
    """Imports that ``flag`` needs from an extra: one that is not installed is a one-line ConfigError naming
    the flag and the extra, before anything runs."""
    from .core.extras import MissingExtra

    try:
        yield
    except MissingExtra as exc:
        raise ConfigError(f"{flag}: {exc}") from None


def _heatmap_maker():
    """``grade --heatmap``: the figure maker (agentlab_grade.heatmap, in the agentlab-grade distribution), or a
    clear error before anything runs when agentlab-grade or matplotlib (its heatmap extra) is not installed."""
    try:
        with _extra_for("--heatmap"):
            from agentlab_grade.heatmap import grade_heatmap
    except ModuleNotFoundError as exc:
        if exc.name != "agentlab_grade":
            raise
        raise ConfigError("--heatmap: the grade heatmap comes with agentlab-grade: "
                          "pip install 'agentlab-grade[heatmap]'") from None
    return grade_heatmap


def _replay_or_sessions(args: argparse.Namespace) -> int:
    from .sessions.command import replay_main, sessions_main

    if args.command == "sessions":
        return sessions_main(args)
    if not getattr(args, "plot", None):
        return replay_main(args, plot=None)
    with _extra_for("--plot"):
        from .ui.plots import session_overview, to_png

    def plot(trace: Any, *, save: str, **options: Any) -> Any:  # drawn, then written as every output is
        fig = session_overview(trace, **options)
        write_output(save, to_png(fig), "--plot")
        return fig

    return replay_main(args, plot=plot)


def _not_utf8(tokens: list[str]) -> str | None:
    """The first command-line argument that was not valid UTF-8 (Python keeps such bytes as lone surrogates),
    named by its option; None when all are text."""
    from .core.trace import LONE_SURROGATE

    for i, token in enumerate(tokens):
        found = LONE_SURROGATE.search(token)
        if found is None:
            continue
        at = found.start()
        if token.startswith("--") and "=" in token:
            name = token.split("=", 1)[0]
            at -= len(name) + 1
        elif i > 0 and tokens[i - 1].startswith("-") and not LONE_SURROGATE.search(tokens[i - 1]):
            name = tokens[i - 1]
        else:
            name = f"argument {i + 1}"
        code = ord(found.group())
        byte = f"byte {code - 0xDC00:#04x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        return f"{name}: not valid UTF-8 text ({byte} at character {at + 1}); give it as UTF-8"
    return None


SCENARIO_LINE_WIDTH = 80  # `agentlab scenarios`: one line each, at most this wide (a terminal's width)
SCENARIO_NAME_COLUMN = 24  # the name column's widest; a longer name overflows it on its own line only

# words a shortened description must not end on: they leave a phrase open ("… with a fallback")
_OPEN_WORDS = frozenset(
    "a an the of with and or but nor to by in on at for from into onto over under about that which who whose "
    "after before than then until while when if as so is are was be been its their his her this these those "
    "some several every each any no not one two three".split())


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.search(r"(?<=[.!?])\s+(?=[A-Z(\"'`])", text)
    return text[: match.start()] if match else text


def _clause_ends(text: str) -> list[int]:
    """Where a clause of ``text`` ends, outside parentheses: before ``,;:`` and before an opening parenthesis."""
    ends, depth = [], 0
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0 and i:
                ends.append(i)
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0 and ch in ",;:" and text[i + 1:i + 2] in (" ", ""):
            ends.append(i)
    return ends


def short_description(text: str, width: int) -> str:
    """The first sentence of ``text`` in at most ``width`` characters. Cut, it ends at a clause (a comma,
    colon or semicolon outside parentheses) if one keeps most of the room, else at a word that closes a phrase
    (never inside parentheses, never on "the", "with", "a model's", ...), followed by " …"."""
    text = _first_sentence(text)
    if len(text) <= width:
        return text
    room = width - 2  # for " …"
    clauses = [end for end in _clause_ends(text) if len(text[:end].rstrip(" ,;:")) <= room]
    if clauses and max(clauses) >= 0.6 * room:
        return text[: max(clauses)].rstrip(" ,;:") + " …"
    cut = text[: room + 1]
    cut = cut[: cut.rfind(" ")] if " " in cut and not text[room:room + 1].isspace() else cut[:room]
    opened = cut.rfind("(")
    if opened > cut.rfind(")"):  # do not end inside a parenthesis: cut before it
        cut = cut[:opened]
    words = cut.split()
    while len(words) > 1 and (words[-1].lower().strip(",;:") in _OPEN_WORDS or words[-1].endswith("'s")):
        words.pop()
    return " ".join(words).rstrip(" ,;:") + " …"


def _scenarios(long: bool = False) -> int:
    """One short line per scenario (name, row, the description's first sentence, shortened to fit
    SCENARIO_LINE_WIDTH; a name longer than SCENARIO_NAME_COLUMN pushes its own line's row and description
    right, so one long name does not narrow every description); with ``long``, the whole description
    wrapped under it. Broken scenario files are skipped with a message (exit 2)."""
    from .backend.scenario import scan_scenarios

    loaded, broken = scan_scenarios()
    out = _Output()
    name_width = min(max((len(sc.name) for sc in loaded), default=0), SCENARIO_NAME_COLUMN)
    for sc in loaded:
        row = f"row {sc.row}" if sc.row else "mixed"
        head = f"{sc.name:{name_width}s}  {row:6s}  "
        if long:
            out.line(head.rstrip())
            out.line(textwrap.fill(" ".join(sc.description.split()), SCENARIO_LINE_WIDTH, initial_indent="    ",
                                   subsequent_indent="    ", break_on_hyphens=False, break_long_words=False))
            continue
        out.line(head + short_description(sc.description, SCENARIO_LINE_WIDTH - len(head)))
    for exc in broken:
        print(f"agentlab: skipped a broken scenario: {exc}", file=sys.stderr)
    return 2 if broken else 0


class _Output:
    """stdout that a closed pipe (``agentlab run tour | head -1``) silences instead of ending the run."""

    def __init__(self) -> None:
        self.closed = False

    def line(self, text: str = "") -> None:
        if self.closed:
            return
        try:
            print(text, flush=True)
        except BrokenPipeError:
            self.closed = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's own flush at exit stays quiet
            os.close(devnull)


def _run(args: argparse.Namespace) -> int:
    """Read and check every input first; only then is the trace file written (and an old one replaced)."""
    import shutil
    import tempfile

    from .backend.scenario import load_scenario
    from .lab import build_hooks

    key = os.environ.get("ANTHROPIC_API_KEY") or ""
    if args.base_url:
        _check_base_url(args.base_url)
    elif args.scenario is None and os.environ.get("ANTHROPIC_BASE_URL"):  # the SDK takes it from there
        _check_base_url(os.environ["ANTHROPIC_BASE_URL"], "ANTHROPIC_BASE_URL")
    if args.scenario is None and not args.base_url and not key:
        raise ConfigError("no scenario, no --base-url and no ANTHROPIC_API_KEY: nothing to run against. "
                          "Give a scenario name (see `agentlab scenarios`), --base-url URL, or set the key.")
    sc = load_scenario(args.scenario) if args.scenario else None
    inputs: dict[str, Any] = {"the scenario file": sc.source if sc is not None and sc.source else None,
                              "the --settings file": args.settings, "a sandbox file": _sandbox_files()}
    if args.settings:
        # reads and checks the settings file now (HookConfigError names the field)
        hooks = build_hooks(args.settings)
        inputs["a hook script"] = hooks.script_paths() if hooks is not None else []
    scratch = None
    trace_path = args.trace
    if trace_path is not None:
        _check_trace_path(trace_path, inputs)
    elif args.settings:
        # hooks are promised a transcript_path, as Claude Code always sends one; it is removed after the run
        scratch = tempfile.mkdtemp(prefix="agentlab-")
        trace_path = os.path.join(scratch, "transcript.jsonl")
    try:
        return _run_checked(args, key, sc, trace_path)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _run_checked(args: argparse.Namespace, key: str, sc: Any, trace_path: str | None) -> int:
    from .core.guard import redact, redact_value
    from .core.trace import Trace
    from .lab import RunSetup

    out = _Output()
    setup = RunSetup.from_flags(args, scenario=sc)
    trace = Trace(trace_path, secrets=(key,), warn=False)  # said below, in the exit status too
    trace.subscribe(_say_waiting)  # on stderr, with --json too
    if not args.json:
        trace.subscribe(_printer(out))
    loop = setup.loop(trace=trace)
    try:
        trace.open()  # under its lock: another run writing the same file is refused here, before anything runs
    except OSError as exc:
        raise ConfigError(f"--trace {trace_path}: cannot open it for writing: {exc.strerror or exc}") from None
    try:
        result = loop.run()
    except KeyboardInterrupt:
        if loop.hooks is not None:
            loop.hooks.kill_running()
        raise
    finally:
        trace.close()
    secrets = (key,)
    used_up = _script_used_up(loop)
    if used_up:  # the answer is the scripted backend's complaint, not a model's: an error of the scenario
        result = dataclasses.replace(result, subtype="error_during_execution", is_error=True)
    if args.json:
        out.line(json.dumps(redact_value({**result.to_dict(), **({"errors": used_up} if used_up else {})}, secrets),
                            sort_keys=True))
    else:
        from .core.cost import format_cost

        usage = result.usage
        out.line(f"\n{result.subtype}: {result.num_turns} turn(s), {result.requests} request(s), "
                 f"stop_reason {result.stop_reason}, usage in/out {usage['input_tokens']}/{usage['output_tokens']}, "
                 f"cache read/write {usage.get('cache_read_input_tokens', 0)}/"
                 f"{usage.get('cache_creation_input_tokens', 0)}, "
                 f"{_cost_words(format_cost(result.cost_usd, result.unpriced_models), result.cost_usd, sc, args)}")
        if result.result:
            out.line(redact(result.result, secrets))
    for problem in used_up:
        print(f"agentlab: {problem} The run is an error of the scenario, not a success.", file=sys.stderr)
    if trace.write_error is not None:
        print(f"agentlab: --trace {trace_path}: {trace.write_error}", file=sys.stderr)
        return 2
    return 0 if result.subtype == "success" else 1


def _script_used_up(loop: LabLoop) -> list[str]:
    """What the scripted model said when the loop asked it for more than its scenario's steps, and each reply it
    could not send to this run's request as written (a call to a tool the run does not offer): none, [].
    Either way the answer is the scripted backend's, not a model's."""
    from .backend.scripted import SCRIPT_USED_UP

    engine = loop.engine
    if engine is None:
        return []
    problems = [str(f) for f in engine.failures if SCRIPT_USED_UP in str(f)]
    for call, request in enumerate(engine.message_requests, 1):
        if request.placeholder:
            problems.append(f"call {call}: the scripted reply could not be sent to this request "
                            f"({'; '.join(request.not_reached or [])}); a tool call marked `unoffered: true` is sent "
                            "anyway, and the loop answers it with an error result.")
    return problems


def _check_base_url(url: str, name: str = "--base-url") -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ConfigError(f"{name} {url!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} {url!r}: expected an http:// or https:// URL with a host, "
                          "such as http://127.0.0.1:8080")


def _check_trace_path(path: str, inputs: dict[str, Any]) -> None:
    """The trace may not overwrite an input (the scenario, the settings, a hook script, a sandbox file), nor be a
    folder; an existing trace is replaced only once the run starts (``Trace.open``)."""
    from .core.guard import check_outputs

    target = os.path.realpath(path)
    if os.path.isdir(target):
        raise ConfigError(f"--trace {path}: is a folder; give a file name such as {os.path.join(path, 'trace.jsonl')}")
    check_outputs({"--trace": path}, inputs)
    folder = os.path.dirname(target) or "."
    writable = os.access(target, os.W_OK) if os.path.exists(target) else (
        os.access(folder, os.W_OK | os.X_OK) if os.path.isdir(folder) else True)
    if not writable:
        raise ConfigError(f"--trace {path}: cannot write there (permission denied)")


def _sandbox_files() -> list[str]:
    """The files the demo tools read."""
    from .core.paths import sandbox_files

    return list(sandbox_files())


def _cost_words(cost: str, usd: float | None, scenario: Any, args: argparse.Namespace) -> str:
    """The run's cost as what it is: the price of its tokens at list price (data/prices.yaml), and, for a
    scripted run (a scenario without --base-url), that no money was spent."""
    if usd is None:
        return cost
    if scenario is not None and not args.base_url:
        return f"{cost} at list price for these tokens (data/prices.yaml), not money spent: a scripted run"
    return f"{cost} at list price for these tokens (data/prices.yaml)"


def _say_waiting(event: Any) -> None:
    """A call that has had no data for a while is said on stderr (the trace keeps it as a ``waiting`` event)."""
    if event.kind == "waiting":
        print(f"agentlab: call {event.call}: {event.data.get('message')}", file=sys.stderr, flush=True)


def _printer(out: _Output):
    from .ui.report import format_event

    def show(event) -> None:
        if event.kind == "waiting":
            return  # said on stderr
        line = format_event(event)
        if line:
            out.line(line)

    return show


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
