"""A run built from a scenario or from flags: the one configuration path the CLI, the Stepper, the lessons and
the Python API share.

The run's settings are the core's ``RunConfig`` (agentlab.core.config). A ``RunSetup`` is that value and what
the run is played against and with: a scenario (the scripted model) or a ``base_url``, the hooks' settings, and
the tool set ("demo": a fresh registry for each loop built). ``RunSetup.from_scenario(name, **overrides)`` takes
everything a scenario file says and replaces what the overrides name (RunConfig fields and Limits bounds, flat:
max_turns, max_tokens, model, fallback_model, prompt, tools, context_window, compaction, ...);
``RunSetup.from_flags(args)`` reads the ``agentlab run`` flags. ``setup.loop()`` builds the loop: against the
scripted backend in-process when there is a scenario and no ``base_url``, else against ``base_url`` or the
live API with a real client. ``scenario_loop()`` and ``run_scenario()`` are the short forms.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .backend.models import model_limits
from .backend.scenario import Scenario, load_scenario
from .backend.scripted import ScenarioEngine, scripted_async_client, scripted_client
from .core.config import RunConfig, ServerCompaction
from .core.errors import ConfigError
from .core.hooks import Hooks
from .core.loop import AgentLoop, Result
from .core.paths import sandbox_dir
from .core.sdk import anthropic, sdk_client
from .core.tools import TestsState, ToolRegistry, demo_tools
from .core.trace import Trace
from .core.transitions import DEFAULT_MODEL

__all__ = ["LabLoop", "RunConfig", "RunSetup", "run_scenario", "scenario_loop"]

SANDBOX_DIR = sandbox_dir()
PLACEHOLDER_KEY = "agentlab-placeholder-key"  # one of loop.PLACEHOLDER_KEYS: a server that ignores keys
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}  # agentlab run --web-search: the API's server tool

_FLAG_SETTINGS = ("prompt", "system", "model", "fallback_model", "refusal_fallback_model", "max_turns", "max_tokens",
                  "compaction", "context_window", "compact_threshold", "stop_sequences", "max_retries", "tools",
                  "settings", "base_url", "thinking")


def model_bounds(model: str) -> dict[str, int]:
    """The bounds a run on ``model`` plans with unless told otherwise: its context window, from the model table
    (data/models.yaml; the default's for a model not in it). The output ceiling stays the loop's own
    (``Limits.max_tokens_ceiling``): a higher one is learnt from the API's 400 (row 3)."""
    return {"context_window": model_limits(model).context_window}


class LabLoop(AgentLoop):
    """An AgentLoop built by a RunSetup: it knows the scripted model behind its client (``engine``, None against a
    server) and the scenario that model plays (with the loop's context window)."""

    def __init__(self, client: anthropic.Anthropic | anthropic.AsyncAnthropic, config: RunConfig, *,
                 setup: RunSetup, engine: ScenarioEngine | None, **live: Any) -> None:
        super().__init__(client, config, **live)
        self.setup = setup
        self.engine = engine
        self.scenario = engine.scenario if engine is not None else setup.scenario


@dataclass(frozen=True)
class RunSetup:
    """A run's ``RunConfig`` and what it is played against and with; the live objects (client, trace, clock)
    are given to ``loop()``."""

    config: RunConfig
    scenario: Scenario | None = None           # the scripted model, and its Stop hook and test tool
    base_url: str | None = None                # a server to talk to instead of the scripted backend
    settings: Any = None                       # Claude Code settings with hooks: a path or a dict
    tool_set: str | None = None                # "demo": a fresh demo registry for each loop (see build_tools)

    @classmethod
    def from_scenario(cls, scenario: str | Scenario, **overrides: Any) -> RunSetup:
        """The scenario file's settings, with ``overrides`` (RunConfig fields, Limits bounds, RunSetup fields) on
        top."""
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        bounds = model_bounds(overrides.get("model", sc.model))
        if sc.context_window:
            bounds["context_window"] = sc.context_window
        config = RunConfig.of(prompt=sc.prompt, model=sc.model, system=sc.system, max_tokens=sc.max_tokens,
                              max_turns=sc.max_turns, fallback_model=sc.fallback_model,
                              refusal_fallback_model=sc.refusal_fallback_model, **bounds,
                              compact_threshold=sc.compact_threshold, stop_sequences=sc.stop_sequences,
                              compaction=sc.compaction or "auto", thinking=sc.thinking, server_tools=sc.server_tools)
        return cls(config, scenario=sc, tool_set=sc.tools).with_overrides(**overrides)

    @classmethod
    def of(cls, *, prompt: str | None = None, messages: Any = None, **settings: Any) -> RunSetup:
        """A run without a scenario, from flat names: ``RunSetup.of(prompt=..., tools="demo", max_turns=5)``; the
        model's context window (data/models.yaml) unless ``settings`` name one."""
        bounds = {**model_bounds(settings.get("model", DEFAULT_MODEL)), **settings}
        return cls(RunConfig(prompt=prompt, messages=messages)).with_overrides(**bounds)

    @classmethod
    def from_flags(cls, args: argparse.Namespace, *, scenario: Scenario | None = None,
                   environ: Mapping[str, str] | None = None) -> RunSetup:
        """The ``agentlab run`` flags (a scenario name or file, and/or ``--base-url``, ``--prompt``, ...);
        ``scenario`` is the scenario the flags name, when the caller has loaded it already."""
        env = os.environ if environ is None else environ
        if args.max_retries is not None and args.max_retries < 0:
            raise ConfigError(f"--max-retries must be 0 or more, got {args.max_retries}")
        overrides = {name: getattr(args, name) for name in _FLAG_SETTINGS if getattr(args, name, None) is not None}
        if getattr(args, "timeout", None) is not None:
            overrides["request_timeout"] = args.timeout
        overrides.update(stream=args.stream, count_tokens=args.count_tokens, cache=getattr(args, "cache", True))
        if getattr(args, "web_search", False):
            overrides["server_tools"] = [dict(WEB_SEARCH)]
        overrides.update(_server_side_flags(args))
        if args.scenario:
            return cls.from_scenario(scenario or args.scenario, **overrides)
        if not args.base_url and not env.get("ANTHROPIC_API_KEY"):
            raise ConfigError("no scenario, no --base-url and no ANTHROPIC_API_KEY: nothing to run against. "
                              "Give a scenario name (see `agentlab scenarios`), --base-url URL, or set the key.")
        if not overrides.get("prompt"):
            raise ConfigError("--prompt is required when no scenario is given")
        overrides.setdefault("model", env.get("ANTHROPIC_MODEL") or DEFAULT_MODEL)
        return cls.of(**overrides)

    def with_overrides(self, **overrides: Any) -> RunSetup:
        """A copy with settings replaced: RunSetup fields (scenario, base_url, settings), ``tools`` (a tool set
        name such as "demo", or a ToolRegistry), and RunConfig fields and Limits bounds, named flat."""
        own: dict[str, Any] = {name: overrides.pop(name) for name in ("scenario", "base_url", "settings")
                               if name in overrides}
        if "tools" in overrides:
            tools = overrides.pop("tools")
            own["tool_set"] = tools if isinstance(tools, str) else None
            overrides["tools"] = None if isinstance(tools, str) else tools
        return replace(self, config=self.config.with_overrides(**overrides) if overrides else self.config, **own)

    # -- the live objects ---------------------------------------------------------------------------------
    def engine(self) -> ScenarioEngine:
        """The scripted model for this run: the scenario, with the loop's context window enforced too."""
        if self.scenario is None:
            raise ConfigError("this run has no scenario, so there is no scripted model to build")
        sc, window = self.scenario, self.config.limits.context_window
        if window != (sc.context_window or model_limits(sc.model).context_window):
            # one window for both sides: the loop plans with it and the scripted model enforces it
            sc = sc.model_copy(update={"context_window": window})
        return ScenarioEngine(sc)

    def client(self, *, asynchronous: bool = False, engine: ScenarioEngine | None = None,
               api_key: str | None = None) -> anthropic.Anthropic | anthropic.AsyncAnthropic:
        """The real SDK client: offline through the scripted backend, or against ``base_url`` / the live API."""
        if self.base_url is None and self.scenario is not None:
            engine = engine or self.engine()
            return scripted_async_client(engine) if asynchronous else scripted_client(engine)
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY") or ""
        kwargs: dict[str, Any] = {"api_key": key or PLACEHOLDER_KEY, "max_retries": 0}
        if self.base_url:
            kwargs["base_url"] = self.base_url
        return sdk_client(asynchronous=asynchronous, **kwargs)

    def build_tools(self) -> ToolRegistry | None:
        """The run's tools: the config's registry, or a fresh one of the tool set."""
        if self.tool_set is None:
            return self.config.tools
        return build_tools(self.tool_set, tests_fail_times=self.scenario.tests_pass_after if self.scenario else None)

    def build_hooks(self, *, transcript_path: str | None = None) -> Hooks | None:
        stop_hook = scenario_stop_hook(self.scenario) if self.scenario is not None else None
        return build_hooks(self.settings, stop_hook=stop_hook, transcript_path=transcript_path)

    def loop(self, *, trace: Trace | str | os.PathLike[str] | None = None,
             client: anthropic.Anthropic | anthropic.AsyncAnthropic | None = None, asynchronous: bool = False,
             engine: ScenarioEngine | None = None, hooks: Hooks | None = None, **runtime: Any) -> LabLoop:
        """The loop for this run. ``runtime`` takes the loop's other live objects: sleep, asleep, clock, seed.
        The config is completed with the tools (refused here when two tools share a name).

        Offline (a scenario, no base_url) the loop never really waits: ``sleep`` defaults to a no-op.
        """
        config = self.config if self.tool_set is None else self.config.with_overrides(tools=self.build_tools())
        if not isinstance(trace, Trace):
            trace = Trace(trace)
        offline = self.base_url is None and self.scenario is not None
        if offline and engine is None:
            engine = self.engine()
        if client is None:
            client = self.client(asynchronous=asynchronous, engine=engine)
        if hooks is None:
            hooks = self.build_hooks(transcript_path=str(trace.path) if trace.path else None)
        if offline:
            runtime.setdefault("sleep", _no_wait)
            runtime.setdefault("asleep", _no_wait_async)
        return LabLoop(client, config, setup=self, engine=engine, trace=trace, hooks=hooks, **runtime)


def _server_side_flags(args: argparse.Namespace) -> dict[str, Any]:
    """``--fallbacks`` and ``--server-compaction``/``--compaction-trigger`` as RunConfig settings."""
    settings: dict[str, Any] = {}
    fallbacks = getattr(args, "fallbacks", None)
    if fallbacks is not None:
        settings["fallbacks"] = "default" if fallbacks == "default" else [m.strip() for m in fallbacks.split(",")]
    edits, trigger = getattr(args, "server_compaction", None), getattr(args, "compaction_trigger", None)
    names = tuple(e.strip() for e in (edits or "").split(",") if e.strip())
    if trigger is not None and "compact" not in names:
        raise ConfigError("--compaction-trigger: it sets the compact edit's trigger, so it needs "
                          "--server-compaction compact")
    if edits is not None:
        on_demand = names == ("on_demand",)
        settings["server_compaction"] = ServerCompaction(edits=() if on_demand else names, on_demand=on_demand,
                                                         trigger_tokens=trigger)
    return settings


def _no_wait(seconds: float) -> None:
    return None


async def _no_wait_async(seconds: float) -> None:
    return None


def scenario_stop_hook(scenario: Scenario) -> Callable[[dict[str, Any]], dict[str, Any] | None] | None:
    """The scenario's built-in Stop hook as a Python callable: blocks ``times`` times, then lets the run end."""
    spec = scenario.stop_hook
    if spec is None:
        return None
    calls = {"n": 0}

    def stop_hook(payload: dict[str, Any]) -> dict[str, Any] | None:
        calls["n"] += 1
        if spec.times == "always" or calls["n"] <= spec.times:
            return {"decision": "block", "reason": spec.reason}
        return None

    return stop_hook


def build_tools(kind: str | None, *, tests_fail_times: int | None = None,
                sandbox: str | os.PathLike[str] | None = None) -> ToolRegistry | None:
    if kind in (None, "none"):
        return None
    if kind != "demo":
        raise ConfigError(f"--tools: unknown tool set {kind!r}; the only one is 'demo'")
    tests = TestsState(fail_times=tests_fail_times) if tests_fail_times is not None else None
    return demo_tools(sandbox=sandbox or SANDBOX_DIR, tests=tests)


def demo_tool_runner() -> Callable[[str, dict[str, Any]], str]:
    """``run_tool(name, input) -> str`` with agentlab's demo tools (calculator, get_weather, read_file, ...)."""
    tools = build_tools("demo")
    assert tools is not None

    def run_tool(name: str, tool_input: dict[str, Any]) -> str:
        return tools.run(name, tool_input).content

    return run_tool


def build_hooks(settings: Any = None, *, stop_hook: Callable[[dict[str, Any]], Any] | None = None,
                transcript_path: str | None = None, interactive: bool = False) -> Hooks | None:
    if settings is None and stop_hook is None:
        return None
    hooks = Hooks(settings, cwd=os.getcwd(), transcript_path=transcript_path, interactive=interactive)
    if stop_hook is not None:
        hooks.on("Stop", stop_hook)
    return hooks


_RUNTIME = frozenset({"sleep", "asleep", "clock", "seed", "hooks", "client", "asynchronous"})


def scenario_loop(scenario: str | Scenario, *, stream: bool = False, trace: Trace | str | None = None,
                  settings: Any = None, engine: ScenarioEngine | None = None, **overrides: Any) -> LabLoop:
    """A loop wired to a scenario through the real SDK client and an in-process transport.

    ``overrides`` take RunConfig fields, Limits bounds and the loop's live objects by name (max_turns,
    max_tokens, model, fallback_model, prompt, tools, context_window, compaction, sleep, seed, ...); anything not
    given comes from the scenario file. ``asynchronous=True`` gives the loop an ``AsyncAnthropic`` client (``arun()``).
    """
    runtime = {k: overrides.pop(k) for k in list(overrides) if k in _RUNTIME}
    setup = RunSetup.from_scenario(scenario, stream=stream, settings=settings, **overrides)
    return setup.loop(trace=_checked_trace(trace), engine=engine, **runtime)


def _checked_trace(trace: Trace | str | os.PathLike[str] | None) -> Trace | None:
    """A trace given as a path is checked when the loop is built: a path that cannot be written (a folder that
    refuses it, a file another run holds, a pipe no one reads) is a ConfigError before anything runs, not a run
    that ends without its file. A Trace object is the caller's."""
    if trace is None or isinstance(trace, Trace):
        return trace
    checked = Trace(trace)
    checked.check_writable()
    return checked


def run_scenario(scenario: str | Scenario, **kwargs: Any) -> Result:
    """Run a scenario offline to its end and return the result (the trace is ``loop.trace``)."""
    return scenario_loop(scenario, **kwargs).run()
