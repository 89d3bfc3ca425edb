"""The ``agentlab`` command: run the loop (offline on a scenario, or against any Messages API server),
list scenarios, serve a scenario over HTTP, observe other clients.

Exit status: 0 for a ``success`` result, 1 for any error result, 2 for bad usage or bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
from typing import Any

from .core.errors import AgentlabError, ConfigError



def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value <= 86_400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected seconds above 0 and at most 86400, got {text}")
    return value


def _retries(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected 0 to 100 retries, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentlab", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the agent loop and print its trace or result")
    run.add_argument("scenario", nargs="?", help="a scenario name (see `agentlab scenarios`) or a file path")
    run.add_argument("--prompt", help="the user request (default: the scenario's prompt)")
    run.add_argument("--system", help="a system prompt")
    run.add_argument("--base-url", help="any server that speaks the Messages API (key from ANTHROPIC_API_KEY)")
    run.add_argument("--model", help="model name (default: the scenario's, else $ANTHROPIC_MODEL)")
    run.add_argument("--fallback-model", help="switch to this model after repeated 529 overloaded errors")
    run.add_argument("--refusal-fallback-model", help="retry a refusal once on this model")
    run.add_argument("--max-turns", type=_positive, help="at most N model calls that return a message")
    run.add_argument("--max-tokens", type=_positive, help="max_tokens of each request")
    run.add_argument("--max-retries", type=_retries,
                     help="retries of a failed call (429/529/5xx/connection/cut stream; 0-100, default 5)")
    run.add_argument("--timeout", type=_seconds,
                     help="seconds a call may wait for the server's next data, streaming or not, before it "
                          "fails and is retried (default 600)")
    run.add_argument("--stop-sequence", action="append", dest="stop_sequences",
                     help="a custom stop sequence (repeat for several)")
    run.add_argument("--tools", choices=["demo", "none"], help="send and run the demo tools")
    run.add_argument("--stream", action="store_true",
                     help="stream every request (requests with a large max_tokens stream anyway, as the SDK requires)")
    run.add_argument("--thinking", type=_positive, metavar="BUDGET",
                     help="extended thinking with this budget_tokens (at least 1024, below max_tokens)")
    run.add_argument("--no-cache", dest="cache", action="store_false",
                     help="send no cache_control breakpoints (prompt caching is on by default)")
    run.add_argument("--settings", help="a Claude Code settings JSON file with hooks")
    run.add_argument("--compaction", help="compaction strategy: auto, clear_tool_results, drop_oldest, summarize")
    run.add_argument("--context-window", type=_positive, help="context window in tokens (default 200000)")
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
                                       "against the careful-loop rules of docs/conformance.md. Exit 0 when every "
                                       "rule holds, 1 when any fails, 2 for bad usage.")
    grade.add_argument("scenarios", nargs="*", help="scenario names (default: every scenario a client can be "
                                                     "graded on from its prompt alone)")
    grade.add_argument("--command", dest="agent_command",
                       help="the agent: \"CMD ARGS\"; the scenario's prompt is appended as the last argument, "
                            "ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY (a dummy) are set")
    grade.add_argument("--timeout", type=float, default=60.0,
                       help="seconds per scenario; a command still running then is stopped (its process group "
                            "killed) and graded as such (default 60)")
    grade.add_argument("--jobs", type=int, default=4, help="scenarios run at the same time (default 4)")
    grade.add_argument("--label", help="the name of the graded client in reports (default: the command)")
    grade.add_argument("--observed", nargs="*", metavar="CLIENT",
                       help="also grade the committed records of these clients (client or client@version; "
                            "none named: all)")
    grade.add_argument("--load", action="append", metavar="REPORT.json", help="add a report saved with --save")
    grade.add_argument("--save", metavar="REPORT.json", help="save the reports, to combine them later (--load)")
    grade.add_argument("--heatmap", metavar="FILE.png", help="draw the reports as a heatmap, clients × branches")
    grade.add_argument("--json", action="store_true",
                       help="print one JSON object on the last line: the verdict, each scenario's name, verdict "
                            "and failed rules")
    return parser


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a lone surrogate from a model or a hook is shown escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    tokens = list(sys.argv[1:] if argv is None else argv)
    bad = _not_utf8(tokens)
    if bad is not None:
        print(f"agentlab: {bad}", file=sys.stderr)
        return 2
    args = parser.parse_args(tokens)
    try:
        if args.command == "scenarios":
            return _scenarios(long=args.long)
        if args.command == "run":
            return _run(args)
        if args.command == "serve":
            from .backend.serve import serve_main

            return serve_main(args)
        if args.command == "observe":
            from .observatory.observe import observe_main

            return observe_main(args)
        if args.command == "grade":
            from .observatory.grade import grade_main
            from .ui.plots import grade_heatmap

            return grade_main(args, heatmap=grade_heatmap)
    except AgentlabError as exc:
        print(f"agentlab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("agentlab: interrupted", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command!r}")
    return 2


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
    SCENARIO_LINE_WIDTH); with ``long``, the whole description wrapped under it. Broken scenario files are
    skipped with a message (exit 2)."""
    from .backend.scenario import scan_scenarios

    loaded, broken = scan_scenarios()
    out = _Output()
    name_width = max((len(sc.name) for sc in loaded), default=0)
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
    if args.scenario is None and not args.base_url and not key:
        raise ConfigError("no scenario, no --base-url and no ANTHROPIC_API_KEY: nothing to run against. "
                          "Give a scenario name (see `agentlab scenarios`), --base-url URL, or set the key.")
    sc = load_scenario(args.scenario) if args.scenario else None
    inputs = {"the scenario": sc.source if sc is not None and sc.source else None, "--settings": args.settings}
    if args.settings:
        build_hooks(args.settings)  # reads and checks the settings file now (HookConfigError names the field)
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
    from .core.trace import Trace, redact
    from .lab import RunConfig

    out = _Output()
    config = RunConfig.from_flags(args, scenario=sc)
    trace = Trace(trace_path, secrets=(key,))
    if not args.json:
        trace.subscribe(_printer(out))
    loop = config.loop(trace=trace)
    try:
        result = loop.run()
    except KeyboardInterrupt:
        if loop.hooks is not None and hasattr(loop.hooks, "kill_running"):
            loop.hooks.kill_running()
        raise
    finally:
        trace.close()
    secrets = (key,)
    if args.json:
        out.line(redact(json.dumps(result.to_dict(), sort_keys=True), secrets))
    else:
        from .core.cost import format_cost

        usage = result.usage
        out.line(f"\n{result.subtype}: {result.num_turns} turn(s), {result.requests} request(s), "
                 f"stop_reason {result.stop_reason}, usage in/out {usage['input_tokens']}/{usage['output_tokens']}, "
                 f"cache read/write {usage.get('cache_read_input_tokens', 0)}/"
                 f"{usage.get('cache_creation_input_tokens', 0)}, "
                 f"{format_cost(result.cost_usd, result.unpriced_models)}")
        if result.result:
            out.line(redact(result.result, secrets))
    if trace.write_error is not None:
        print(f"agentlab: --trace {trace_path}: {trace.write_error}", file=sys.stderr)
        return 2
    return 0 if result.subtype == "success" else 1


def _check_base_url(url: str) -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ConfigError(f"--base-url {url!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--base-url {url!r}: expected an http:// or https:// URL with a host, "
                          "such as http://127.0.0.1:8080")


def _check_trace_path(path: str, inputs: dict[str, str | None]) -> None:
    """The trace may not overwrite an input, nor be a folder; an existing trace is replaced only once the run
    starts (the Trace opens its file at the first event)."""
    target = os.path.realpath(path)
    if os.path.isdir(target):
        raise ConfigError(f"--trace {path}: is a folder; give a file name such as {os.path.join(path, 'trace.jsonl')}")
    for what, source in inputs.items():
        if source and os.path.exists(source) and _same_file(source, target):
            raise ConfigError(f"--trace {path}: is {what} file; the trace would overwrite it. Choose another name.")
    folder = os.path.dirname(target) or "."
    writable = os.access(target, os.W_OK) if os.path.exists(target) else (
        os.access(folder, os.W_OK | os.X_OK) if os.path.isdir(folder) else True)
    if not writable:
        raise ConfigError(f"--trace {path}: cannot write there (permission denied)")


def _same_file(a: str, b: str) -> bool:
    """The same file on disk: the same path once links are resolved, or the same inode (a hard link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # b does not exist yet: it cannot be a hard link to a
        return False


def _printer(out: _Output):
    from .ui.report import format_event

    def show(event) -> None:
        line = format_event(event)
        if line:
            out.line(line)

    return show


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
