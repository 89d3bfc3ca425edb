"""The ``agentlab`` command: run the loop (offline on a scenario, or against any Messages API server),
list scenarios, serve a scenario over HTTP, observe other clients.

Exit status: 0 for a ``success`` result, 1 for any error result, 2 for bad usage or bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .errors import AgentlabError, ConfigError

PLACEHOLDER_KEY = "agentlab-placeholder-key"  # one of loop.PLACEHOLDER_KEYS


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
    run.add_argument("--max-retries", type=int, help="retries of a failed call (429/529/5xx/connection; default 5)")
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

    sub.add_parser("scenarios", help="list the scenarios, one line each")

    serve = sub.add_parser("serve", help="serve a scenario as a Messages API on 127.0.0.1")
    serve.add_argument("scenario")
    serve.add_argument("--port", type=int, default=0, help="port (default: a free one, printed)")
    serve.add_argument("--record", help="append every request to this JSONL file")

    observe = sub.add_parser("observe", help="run a client against each scenario and record what it does")
    observe.add_argument("client", help="agentlab, tool-runner or claude-code")
    observe.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    observe.add_argument("--out", help="folder for the behaviour records (default: data/observed)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "scenarios":
            return _scenarios()
        if args.command == "run":
            return _run(args)
        if args.command == "serve":
            from .serve import serve_main

            return serve_main(args)
        if args.command == "observe":
            from .observe import observe_main

            return observe_main(args)
    except AgentlabError as exc:
        print(f"agentlab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("agentlab: interrupted", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command!r}")
    return 2


def _scenarios() -> int:
    from .scenario import list_scenarios

    for sc in list_scenarios():
        row = f"row {sc.row}" if sc.row else "mixed"
        print(f"{sc.name:26s} {row:8s} {sc.description}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from .lab import build_hooks, build_tools, scenario_loop, scenario_stop_hook
    from .loop import AgentLoop
    from .scenario import load_scenario
    from .trace import Trace, redact
    from .transitions import Limits

    key = os.environ.get("ANTHROPIC_API_KEY") or ""
    trace_path = args.trace
    if trace_path is None and args.settings:
        # hooks are promised a transcript_path, as Claude Code always sends one
        import tempfile

        trace_path = os.path.join(tempfile.mkdtemp(prefix="agentlab-"), "transcript.jsonl")
    trace = Trace(trace_path, secrets=(key,))
    overrides: dict[str, Any] = {}
    if args.max_retries is not None and args.max_retries < 0:
        raise ConfigError(f"--max-retries must be 0 or more, got {args.max_retries}")
    for name in ("prompt", "system", "model", "fallback_model", "refusal_fallback_model", "max_turns", "max_tokens",
                 "compaction", "context_window", "compact_threshold", "stop_sequences", "max_retries", "thinking"):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    if args.tools is not None:
        overrides["tools"] = args.tools
    if args.count_tokens:
        overrides["count_tokens"] = True
    overrides["cache"] = args.cache
    if not args.json:
        trace.subscribe(_printer())

    if args.scenario and not args.base_url:
        loop = scenario_loop(args.scenario, stream=args.stream, trace=trace, settings=args.settings, **overrides)
    else:
        if not args.base_url and not key:
            raise ConfigError("no scenario, no --base-url and no ANTHROPIC_API_KEY: nothing to run against. "
                              "Give a scenario name (see `agentlab scenarios`), --base-url URL, or set the key.")
        sc = load_scenario(args.scenario) if args.scenario else None
        client = _client(args.base_url, key)
        tools = build_tools(overrides.pop("tools", sc.tools if sc else None),
                            tests_fail_times=sc.tests_pass_after if sc else None)
        hooks = build_hooks(args.settings, stop_hook=scenario_stop_hook(sc) if sc else None,
                            transcript_path=trace_path)
        retries = overrides.pop("max_retries", None)
        limits = Limits(max_turns=overrides.pop("max_turns", sc.max_turns if sc else None),
                        max_api_retries=Limits.max_api_retries if retries is None else retries,
                        fallback_model=overrides.pop("fallback_model", sc.fallback_model if sc else None),
                        refusal_fallback_model=overrides.pop("refusal_fallback_model",
                                                             sc.refusal_fallback_model if sc else None))
        model = overrides.pop("model", None) or (sc.model if sc else None) or os.environ.get(
            "ANTHROPIC_MODEL") or "claude-sonnet-4-6"
        prompt = overrides.pop("prompt", None) or (sc.prompt if sc else None)
        if prompt is None:
            raise ConfigError("--prompt is required when no scenario is given")
        loop = AgentLoop(
            client, prompt=prompt, model=model, system=overrides.pop("system", sc.system if sc else None),
            tools=tools, max_tokens=overrides.pop("max_tokens", sc.max_tokens if sc else 1024), limits=limits,
            stream=args.stream, hooks=hooks, trace=trace,
            compaction=overrides.pop("compaction", (sc.compaction if sc else None) or "auto"),
            context_window=overrides.pop("context_window", (sc.context_window if sc else None) or 200_000),
            compact_threshold=overrides.pop("compact_threshold", sc.compact_threshold if sc else None),
            stop_sequences=overrides.pop("stop_sequences", sc.stop_sequences if sc else None),
            count_tokens=overrides.pop("count_tokens", False),
            thinking=overrides.pop("thinking", sc.thinking if sc else None), cache=overrides.pop("cache", True))
    try:
        result = loop.run()
    finally:
        trace.close()
    secrets = (key,)
    if args.json:
        print(redact(json.dumps(result.to_dict(), sort_keys=True), secrets))
    else:
        from .cost import format_cost

        usage = result.usage
        print(f"\n{result.subtype}: {result.num_turns} turn(s), {result.requests} request(s), "
              f"stop_reason {result.stop_reason}, usage in/out {usage['input_tokens']}/{usage['output_tokens']}, "
              f"cache read/write {usage.get('cache_read_input_tokens', 0)}/"
              f"{usage.get('cache_creation_input_tokens', 0)}, {format_cost(result.cost_usd, result.unpriced_models)}")
        if result.result:
            print(redact(result.result, secrets))
    return 0 if result.subtype == "success" else 1


def _client(base_url: str | None, key: str):
    import anthropic

    kwargs: dict[str, Any] = {"api_key": key or PLACEHOLDER_KEY, "max_retries": 0}
    if base_url:
        kwargs["base_url"] = base_url
    return anthropic.Anthropic(**kwargs)


def _printer():
    from .report import format_event

    def show(event) -> None:
        line = format_event(event)
        if line:
            print(line, flush=True)

    return show


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
