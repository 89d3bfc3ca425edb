"""A run's configuration, built once, and the loop built from it: the one path the CLI, the Stepper, the
lessons and the Python API share.

``RunConfig.from_scenario(name, **overrides)`` takes everything a scenario file says and replaces what the
overrides name (the AgentLoop and Limits keyword names: max_turns, max_tokens, model, fallback_model,
prompt, tools, context_window, compaction, ...); ``RunConfig.from_flags(args)`` reads the ``agentlab run``
flags. ``config.loop()`` builds the AgentLoop: against the scripted backend in-process when the config has
a scenario and no ``base_url``, else against ``base_url`` or the live API with a real client.
``scenario_loop()`` and ``run_scenario()`` are the short forms.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .backend.scenario import Scenario, load_scenario
from .backend.scripted import ScenarioEngine, scripted_async_client, scripted_client
from .core.cost import PriceTable
from .core.errors import ConfigError
from .core.hooks import Hooks
from .core.loop import AgentLoop, Result
from .core.paths import sandbox_dir
from .core.sdk import anthropic
from .core.tools import TestsState, ToolRegistry, demo_tools
from .core.trace import Trace
from .core.transitions import DEFAULT_MODEL, Limits

SANDBOX_DIR = sandbox_dir()
PLACEHOLDER_KEY = "agentlab-placeholder-key"  # one of loop.PLACEHOLDER_KEYS: a server that ignores keys
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}  # agentlab run --web-search: the API's server tool

_LIMIT_NAMES = frozenset(f.name for f in dataclasses.fields(Limits))
_ALIASES = {"max_retries": "max_api_retries"}


@dataclass(frozen=True)
class RunConfig:
    """Everything one run is made of, except the live objects (client, trace, clock) given to ``loop()``."""

    prompt: str | None
    model: str = DEFAULT_MODEL
    system: str | None = None
    tools: str | ToolRegistry | None = None    # "demo", a registry of your own, or None
    max_tokens: int = 1024
    limits: Limits = field(default_factory=Limits)
    stream: bool = False
    settings: Any = None                       # Claude Code settings with hooks: a path or a dict
    stop_sequences: list[str] | None = None
    compaction: str | tuple[str, ...] = "auto"
    count_tokens: bool = False
    thinking: int | None = None                # extended thinking budget_tokens; None: thinking off
    cache: bool = True                         # cache_control breakpoints on tools, system and the latest message
    prices: PriceTable | None = None           # the price table for cost_usd (None: data/prices.yaml)
    server_tools: list[dict[str, Any]] | None = None   # tools the API runs (web_search, ...), offered as they are
    scenario: Scenario | None = None           # the scripted model, and its Stop hook and test tool
    base_url: str | None = None                # a server to talk to instead of the scripted backend

    @classmethod
    def from_scenario(cls, scenario: str | Scenario, **overrides: Any) -> RunConfig:
        """The scenario file's settings, with ``overrides`` (RunConfig, Limits or AgentLoop names) on top."""
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        config = cls(prompt=sc.prompt, model=sc.model, system=sc.system, tools=sc.tools, max_tokens=sc.max_tokens,
                     limits=Limits(max_turns=sc.max_turns, fallback_model=sc.fallback_model,
                                   refusal_fallback_model=sc.refusal_fallback_model,
                                   context_window=sc.context_window or Limits.context_window,
                                   compact_threshold=sc.compact_threshold),
                     stop_sequences=sc.stop_sequences, compaction=sc.compaction or "auto",
                     thinking=sc.thinking, server_tools=sc.server_tools or None, scenario=sc)
        return config.with_overrides(**overrides)

    @classmethod
    def from_flags(cls, args: argparse.Namespace, *, scenario: Scenario | None = None,
                   environ: Mapping[str, str] | None = None) -> RunConfig:
        """The ``agentlab run`` flags (a scenario name or file, and/or ``--base-url``, ``--prompt``, ...);
        ``scenario`` is the scenario the flags name, when the caller has loaded it already."""
        env = os.environ if environ is None else environ
        if args.max_retries is not None and args.max_retries < 0:
            raise ConfigError(f"--max-retries must be 0 or more, got {args.max_retries}")
        overrides = {name: getattr(args, name) for name in (
            "prompt", "system", "model", "fallback_model", "refusal_fallback_model", "max_turns", "max_tokens",
            "compaction", "context_window", "compact_threshold", "stop_sequences", "max_retries", "tools",
            "settings", "base_url", "thinking") if getattr(args, name, None) is not None}
        if getattr(args, "timeout", None) is not None:
            overrides["request_timeout"] = args.timeout
        overrides.update(stream=args.stream, count_tokens=args.count_tokens, cache=getattr(args, "cache", True))
        if getattr(args, "web_search", False):
            overrides["server_tools"] = [dict(WEB_SEARCH)]
        if args.scenario:
            return cls.from_scenario(scenario or args.scenario, **overrides)
        if not args.base_url and not env.get("ANTHROPIC_API_KEY"):
            raise ConfigError("no scenario, no --base-url and no ANTHROPIC_API_KEY: nothing to run against. "
                              "Give a scenario name (see `agentlab scenarios`), --base-url URL, or set the key.")
        if not overrides.get("prompt"):
            raise ConfigError("--prompt is required when no scenario is given")
        overrides.setdefault("model", env.get("ANTHROPIC_MODEL") or DEFAULT_MODEL)
        return cls(prompt=None).with_overrides(**overrides)

    def with_overrides(self, **overrides: Any) -> RunConfig:
        """A copy with RunConfig fields and Limits bounds replaced (``max_retries`` names ``max_api_retries``)."""
        own = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        bounds: dict[str, Any] = {}
        for name, value in overrides.items():
            name = _ALIASES.get(name, name)
            if name in own:
                changes[name] = value
            elif name in _LIMIT_NAMES:
                bounds[name] = value
            else:
                raise ConfigError(f"unknown run setting {name!r}; expected one of "
                                  + ", ".join(sorted(own | _LIMIT_NAMES | set(_ALIASES))))
        if "limits" in changes:
            changes["limits"] = replace(changes["limits"], **bounds)
        elif bounds:
            changes["limits"] = replace(self.limits, **bounds)
        if "stop_sequences" in changes and changes["stop_sequences"] is not None:
            changes["stop_sequences"] = list(changes["stop_sequences"])
        config = replace(self, **changes)
        if config.prompt is None and config.scenario is None:
            raise ConfigError("a run needs a prompt (or a scenario that has one)")
        return config

    # -- the live objects ---------------------------------------------------------------------------------
    def engine(self) -> ScenarioEngine:
        """The scripted model for this config: the scenario, with the loop's context window enforced too."""
        if self.scenario is None:
            raise ConfigError("this run has no scenario, so there is no scripted model to build")
        sc = self.scenario
        if self.limits.context_window != (sc.context_window or Limits.context_window):
            # one window for both sides: the loop plans with it and the scripted model enforces it
            sc = sc.model_copy(update={"context_window": self.limits.context_window})
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
        return anthropic.AsyncAnthropic(**kwargs) if asynchronous else anthropic.Anthropic(**kwargs)

    def build_tools(self) -> ToolRegistry | None:
        if self.tools is None or isinstance(self.tools, ToolRegistry):
            return self.tools
        return build_tools(self.tools, tests_fail_times=self.scenario.tests_pass_after if self.scenario else None)

    def build_hooks(self, *, transcript_path: str | None = None) -> Hooks | None:
        stop_hook = scenario_stop_hook(self.scenario) if self.scenario is not None else None
        return build_hooks(self.settings, stop_hook=stop_hook, transcript_path=transcript_path)

    def loop(self, *, trace: Trace | str | os.PathLike[str] | None = None,
             client: anthropic.Anthropic | anthropic.AsyncAnthropic | None = None, asynchronous: bool = False,
             engine: ScenarioEngine | None = None, hooks: Hooks | None = None, **runtime: Any) -> AgentLoop:
        """The AgentLoop for this config. ``runtime`` takes the loop's live extras: sleep, asleep, clock, seed.

        Offline (a scenario, no base_url) the loop never really waits: ``sleep`` defaults to a no-op.
        """
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
        loop = AgentLoop(client, prompt=self.prompt, model=self.model, system=self.system, tools=self.build_tools(),
                         max_tokens=self.max_tokens, limits=self.limits, stream=self.stream, hooks=hooks,
                         trace=trace, compaction=self.compaction, stop_sequences=self.stop_sequences,
                         count_tokens=self.count_tokens, thinking=self.thinking, cache=self.cache, prices=self.prices,
                         server_tools=self.server_tools, **runtime)
        # the scenario the scripted model plays (with the loop's context window), when there is one
        loop.engine, loop.scenario, loop.config = engine, engine.scenario if engine else self.scenario, self
        return loop


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
                  settings: Any = None, engine: ScenarioEngine | None = None, **overrides: Any) -> AgentLoop:
    """A loop wired to a scenario through the real SDK client and an in-process transport.

    ``overrides`` take the RunConfig, Limits and AgentLoop keyword names (max_turns, max_tokens, model,
    fallback_model, prompt, tools, context_window, compaction, sleep, seed, ...); anything not given comes
    from the scenario file. ``asynchronous=True`` gives the loop an ``AsyncAnthropic`` client (``arun()``).
    """
    runtime = {k: overrides.pop(k) for k in list(overrides) if k in _RUNTIME}
    config = RunConfig.from_scenario(scenario, stream=stream, settings=settings, **overrides)
    return config.loop(trace=_checked_trace(trace), engine=engine, **runtime)


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
