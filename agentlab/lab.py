"""The high-level entry points: build a loop for a scenario (offline) or for a server, and run it."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from .errors import ConfigError
from .loop import AgentLoop, Result
from .paths import sandbox_dir
from .scenario import Scenario, load_scenario
from .scripted import ScenarioEngine, scripted_client
from .trace import Trace
from .transitions import Limits

SANDBOX_DIR = sandbox_dir()
DEFAULT_MODEL = "claude-sonnet-4-6"


def scenario_stop_hook(scenario: Scenario):
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


def build_tools(kind: str | None, *, tests_fail_times: int | None = None, sandbox: str | None = None):
    if kind in (None, "none"):
        return None
    if kind != "demo":
        raise ConfigError(f"--tools: unknown tool set {kind!r}; the only one is 'demo'")
    from .tools import TestsState, demo_tools

    tests = TestsState(fail_times=tests_fail_times) if tests_fail_times is not None else None
    return demo_tools(sandbox=sandbox or SANDBOX_DIR, tests=tests)


def build_hooks(settings: Any = None, *, stop_hook=None, transcript_path: str | None = None,
                interactive: bool = False):
    if settings is None and stop_hook is None:
        return None
    from .hooks import Hooks

    hooks = Hooks(settings, cwd=os.getcwd(), transcript_path=transcript_path, interactive=interactive)
    if stop_hook is not None:
        hooks.on("Stop", stop_hook)
    return hooks


def scenario_loop(scenario: str | Scenario, *, stream: bool = False, trace: Trace | str | None = None,
                  settings: Any = None, engine: ScenarioEngine | None = None, **overrides: Any) -> AgentLoop:
    """A loop wired to a scenario through the real SDK client and an in-process transport.

    ``overrides`` take the AgentLoop / Limits keyword names (max_turns, max_tokens, model, fallback_model,
    prompt, tools, context_window, compaction, ...); anything not given comes from the scenario file.
    """
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    if overrides.get("context_window") is not None and engine is None:
        # one window for both sides: the loop plans with it and the scripted model enforces it
        sc = sc.model_copy(update={"context_window": overrides["context_window"]})
    engine = engine or ScenarioEngine(sc)
    client = scripted_client(engine)
    if not isinstance(trace, Trace):
        trace = Trace(trace)
    tools = overrides.pop("tools", sc.tools)
    if isinstance(tools, str) or tools is None:
        tools = build_tools(tools, tests_fail_times=sc.tests_pass_after)
    hooks = overrides.pop("hooks", None) or build_hooks(
        settings, stop_hook=scenario_stop_hook(sc), transcript_path=str(trace.path) if trace.path else None)
    limits = Limits(
        max_turns=overrides.pop("max_turns", sc.max_turns),
        fallback_model=overrides.pop("fallback_model", sc.fallback_model),
        refusal_fallback_model=overrides.pop("refusal_fallback_model", sc.refusal_fallback_model),
    )
    if "max_retries" in overrides:
        overrides["max_api_retries"] = overrides.pop("max_retries")
    limit_overrides = {k: overrides.pop(k) for k in list(overrides) if k in Limits.__dataclass_fields__}
    limits = replace(limits, **limit_overrides)
    loop = AgentLoop(
        client,
        prompt=overrides.pop("prompt", sc.prompt),
        model=overrides.pop("model", sc.model),
        system=overrides.pop("system", sc.system),
        tools=tools,
        max_tokens=overrides.pop("max_tokens", sc.max_tokens),
        limits=limits,
        stream=stream,
        hooks=hooks,
        trace=trace,
        compaction=overrides.pop("compaction", sc.compaction or "auto"),
        context_window=overrides.pop("context_window", sc.context_window or 200_000),
        compact_threshold=overrides.pop("compact_threshold", sc.compact_threshold),
        stop_sequences=overrides.pop("stop_sequences", sc.stop_sequences),
        sleep=overrides.pop("sleep", lambda seconds: None),
        server_tools=overrides.pop("server_tools", sc.server_tools or None),
        **overrides,
    )
    loop.engine = engine  # type: ignore[attr-defined]
    loop.scenario = sc  # type: ignore[attr-defined]
    return loop


def run_scenario(scenario: str | Scenario, **kwargs: Any) -> Result:
    """Run a scenario offline to its end and return the result (the trace is ``loop.trace``)."""
    return scenario_loop(scenario, **kwargs).run()
