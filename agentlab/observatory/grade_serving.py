"""Serving the scenarios to a client for ``agentlab grade``: which scenarios a client can be graded on, a
command or a Python function run against a fresh scripted server per scenario (its timeout, its process
group killed), and what it sent graded (:func:`grade_command`, :func:`grade_function`)."""

from __future__ import annotations

import math
import os
import shlex
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..backend.scenario import Scenario, list_scenarios, load_scenario
from ..core.errors import ConfigError
from ..core.transitions import Limits
from .grade_report import Report, ScenarioGrade, grade_record

GRADE_KEY = "agentlab-grade-key"
DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT_S = 86400.0    # --timeout at most a day (threading and subprocess waits reject larger values)
KILL_GRACE_S = 2.0


# -- which scenarios a client can be graded on -----------------------------------------------------------------

def needs_settings(scenario: Scenario) -> list[str]:
    """The client settings a scenario depends on that a command line cannot be handed (empty: gradeable)."""
    needs = []
    if scenario.stop_hook is not None:
        needs.append("a Stop hook")
    if scenario.fallback_model:
        needs.append("a fallback model")
    if scenario.refusal_fallback_model:
        needs.append("a refusal fallback model")
    if scenario.max_turns:
        needs.append(f"max_turns {scenario.max_turns}")
    small = scenario.context_window is not None and scenario.context_window < Limits.context_window
    if small or scenario.compact_threshold is not None:  # a larger window than a client's own needs no setting
        needs.append("a small context window")
    return needs


def gradeable_scenarios() -> list[str]:
    """The scenarios any client can be graded on from its prompt alone: one branch each (a ``row``), no
    client settings needed (no Stop hook, fallback models, turn limit or small context window)."""
    return [sc.name for sc in list_scenarios() if sc.row and not needs_settings(sc)]


# -- running a client -----------------------------------------------------------------------------------------

def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the command's process group, SIGKILL after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=KILL_GRACE_S)
            if sig == signal.SIGTERM:
                # the leader is gone; make sure nothing it started lives on
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            return
        except subprocess.TimeoutExpired:
            continue


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= 200 else line[:199] + "…"


def parse_command(command: str | Sequence[str]) -> list[str]:
    """``--command "CMD ARGS"`` as an argument list; a clear error when it is empty or CMD cannot be found."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise ConfigError("--command: empty; give the command that runs your agent, e.g. "
                          "--command \"python my_agent.py\"")
    exe = argv[0]
    if os.sep in exe:
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            raise ConfigError(f"--command: {exe!r} is not an executable file")
    elif shutil.which(exe) is None:
        raise ConfigError(f"--command: {exe!r} was not found on PATH")
    return argv


def command_runner(argv: Sequence[str], cwd: str | Path | None = None):
    """An observe runner: ``argv + [prompt]`` with ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` (a dummy) set,
    in its own process group, killed (the whole group) at the timeout."""
    from .observe_clients import ClientOutcome, client_env

    def run(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
        env = {**client_env(), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": GRADE_KEY}
        proc = subprocess.Popen([*argv, scenario.prompt], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)
        result: dict[str, Any] = {}
        try:
            out, err = proc.communicate(timeout=timeout)
            result["exit_code"] = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:  # something outside the group holds the pipes open
                out, err = "", ""
            result.update(exit_code=None, timed_out=True, timeout_s=timeout)
        if result.get("exit_code") is not None and result["exit_code"] < 0:
            result["signal"] = -result["exit_code"]
        if _last_line(out):
            result["text"] = _last_line(out)
        if result.get("exit_code") not in (0, None) and _last_line(err):
            result["stderr"] = _last_line(err)
        return ClientOutcome(result, {"command": [*argv, "<prompt>"]})

    return run


LoopFn = Callable[..., Any]


def function_runner(fn: LoopFn):
    """An observe runner for a Python agent loop ``fn(client, prompt, tools, run_tool)``: ``client`` is an
    ``anthropic.Anthropic`` pointed at the scenario's server (the SDK's defaults otherwise), ``tools`` the demo
    tools' definitions followed by the scenario's server tools (web search where its model searches; the API
    runs those, so they never come back as ``tool_use``), ``run_tool(name, input) -> str`` runs one. The loop
    runs in a thread; at the timeout it is left behind (a thread cannot be killed) and graded as stopped."""
    import anthropic

    from ..lab import build_tools
    from .records import ClientOutcome

    def run(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
        client = anthropic.Anthropic(base_url=base_url, api_key=GRADE_KEY)
        registry = build_tools("demo", tests_fail_times=scenario.tests_pass_after)
        assert registry is not None
        tools = [*registry.schemas(), *(dict(t) for t in scenario.server_tools)]  # server tools as the API takes them

        def run_tool(name: str, tool_input: Any) -> str:
            return registry.run(name, tool_input).content

        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                value = fn(client, scenario.prompt, tools, run_tool)
                outcome["text"] = _last_line(str(value)) if value is not None else ""
                outcome["returned"] = True
            except Exception as exc:  # graded on what it sent; the error is part of the result
                outcome["raised"] = type(exc).__name__
                outcome["text"] = _last_line(str(exc))

        thread = threading.Thread(target=target, daemon=True, name=f"agentlab-grade-{scenario.name}")
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            return ClientOutcome({"timed_out": True, "timeout_s": timeout}, {"function": getattr(fn, "__name__", "?")})
        result = {k: v for k, v in outcome.items() if k != "returned"}
        return ClientOutcome(result, {"function": getattr(fn, "__name__", "?")})

    return run


def check_timeout(timeout: Any) -> float:
    """``--timeout``: a finite number of seconds above 0 (nan, inf and numbers too large for a float are not)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) \
            or timeout <= 0 or timeout > MAX_TIMEOUT_S:
        raise ConfigError(f"--timeout: expected a finite number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, "
                          f"got {timeout!r}")
    return float(timeout)


def _grade(label: str, runner: Any, scenarios: Sequence[str] | None, timeout: float, jobs: int,
           progress: Callable[[ScenarioGrade], None] | None) -> Report:
    from .observe import observe_scenario

    check_timeout(timeout)
    names = list(scenarios) if scenarios else gradeable_scenarios()
    loaded = [load_scenario(n) for n in names]  # a bad name fails before anything runs

    def one(sc: Scenario) -> ScenarioGrade:
        record = observe_scenario(label, sc, version="graded", timeout=timeout, runner=runner)
        grade = grade_record(record, sc)
        if progress is not None:
            progress(grade)
        return grade

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(loaded) or 1))) as pool:
        grades = list(pool.map(one, loaded))
    return Report(label, grades)


def grade_command(command: str | Sequence[str], scenarios: Sequence[str] | None = None, *,
                  timeout: float = DEFAULT_TIMEOUT, jobs: int = 4, label: str | None = None,
                  cwd: str | Path | None = None,
                  progress: Callable[[ScenarioGrade], None] | None = None) -> Report:
    """Grade a command: for each scenario (default: :func:`gradeable_scenarios`) serve it, run
    ``command + [prompt]`` against it, judge what it sent."""
    argv = parse_command(command)
    text = command if isinstance(command, str) else shlex.join(argv)
    return _grade(label or text, command_runner(argv, cwd), scenarios, timeout, jobs, progress)


def grade_function(fn: LoopFn, scenarios: Sequence[str] | None = None, *, timeout: float = 30.0,
                   jobs: int = 8, label: str | None = None,
                   progress: Callable[[ScenarioGrade], None] | None = None) -> Report:
    """Grade a Python agent loop ``fn(client, prompt, tools, run_tool)`` (see :func:`function_runner`)."""
    report = _grade(label or str(getattr(fn, "__name__", "function")), function_runner(fn), scenarios, timeout, jobs,
                    progress)
    report.subject = fn
    return report


