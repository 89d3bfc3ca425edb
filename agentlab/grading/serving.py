"""Serving the scenarios to a client for ``agentlab grade``: which scenarios a client can be graded on, a
command or a Python function run against a fresh scripted server per scenario (its timeout, its process
group killed), and what it sent graded (:func:`grade_command`, :func:`grade_function`)."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentlab.backend.scenario import Scenario, list_scenarios, load_scenario
from agentlab.core.errors import ConfigError, sdk_error_text
from agentlab.core.paths import write_output
from agentlab.core.processes import kill_tree, tagged, tagged_env, talk
from agentlab.core.transitions import Limits
from agentlab.grading.report import Report, ScenarioGrade, grade_record

GRADE_KEY = "agentlab-grade-key"
DEFAULT_TIMEOUT = 60.0
DEFAULT_JOBS = 4           # scenarios graded at the same time (--jobs)
PROMPT = "{prompt}"        # where the prompt goes in --command (else it is appended as the last argument)
STDERR_LINES = 5           # the last lines of a command's stderr kept in its record
# what a graded command is given in its environment, besides what it inherits (ANTHROPIC_* and CLAUDE* removed)
COMMAND_ENV = {
    "ANTHROPIC_BASE_URL": "the scenario's server, http://127.0.0.1:PORT",
    "ANTHROPIC_API_KEY": f"a dummy key, {GRADE_KEY}",
    "AGENTLAB_PROMPT": "the scenario's prompt (also the last argument, or where {prompt} stands)",
    "AGENTLAB_SCENARIO": "the scenario's name",
    "AGENTLAB_MODEL": "the scenario's model (the server answers any)",
    "AGENTLAB_MAX_TOKENS": "the scenario's max_tokens",
    "AGENTLAB_SERVER_TOOLS": "the server tools its model uses, as a JSON list of tool definitions ([] for none)",
}
MAX_TIMEOUT_S = 86400.0    # --timeout at most a day (threading and subprocess waits reject larger values)
KILL_GRACE_S = 2.0        # kept for callers; a command is now killed at once at its timeout
MAX_OUTPUT_BYTES = 1_000_000  # of a command's stdout and of its stderr, at most this much is read
# Linux's MAX_ARG_STRLEN: the most bytes one command-line argument may hold (the prompt is one), its NUL included
MAX_ARGUMENT_BYTES = 32 * 4096


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


def grading_engine(name: str):
    """The engine grade serves the scenario ``name`` with (``agentlab serve SCENARIO --mode grade``): no 400 for
    a request its script did not expect, requests sized as in a graded run."""
    import tempfile

    from agentlab.observatory.observe import observing_engine
    from agentlab.observatory.records import machine_replacements

    return observing_engine(load_scenario(name), machine_replacements(tempfile.gettempdir()))


# -- running a client -----------------------------------------------------------------------------------------

class InFlight:
    """The agents running now: each run registers how to stop it (a command's process tree killed, a function's
    wait ended). Ctrl-C during a grade stops them all at once (:meth:`stop_all`) instead of waiting out their
    timeout; a run that starts after that is stopped as it registers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stops: dict[int, Callable[[], None]] = {}
        self._next = 0
        self.stopped = False

    def add(self, stop: Callable[[], None]) -> int:
        with self._lock:
            self._next += 1
            key, stopped = self._next, self.stopped
            self._stops[key] = stop
        if stopped:
            stop()
        return key

    def remove(self, key: int) -> None:
        with self._lock:
            self._stops.pop(key, None)

    def stop_all(self) -> None:
        with self._lock:
            self.stopped = True
            stops = list(self._stops.values())
        for stop in stops:
            stop()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= 200 else line[:199] + "…"


def parse_command(command: str | Sequence[str]) -> list[str]:
    """``--command "CMD ARGS"`` as an argument list; a clear error when it is empty or CMD cannot be found."""
    try:
        argv = shlex.split(command) if isinstance(command, str) else [str(arg) for arg in command]
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise ConfigError(f"--command {str(command)[:200]!r}: cannot split it into arguments: {exc}") from None
    if any("\0" in arg for arg in argv):
        raise ConfigError("--command: holds a NUL byte, which no command-line argument can carry")
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


def check_prompt_argument(scenario: Scenario) -> None:
    """A command is handed the scenario's prompt as its last argument: refuse (ConfigError) a prompt that no
    argument can carry, a NUL byte or more than ``MAX_ARGUMENT_BYTES``, before anything runs."""
    where = scenario.source or scenario.name
    if "\0" in scenario.prompt:
        raise ConfigError(f"{where}: the prompt holds a NUL byte, which a command-line argument cannot carry; grade "
                          "this scenario with grade_function (the prompt is passed as a Python string)")
    size = len(scenario.prompt.encode("utf-8", "surrogatepass")) + 1
    if size > MAX_ARGUMENT_BYTES:
        raise ConfigError(f"{where}: the prompt is {size - 1} bytes; a command-line argument holds at most "
                          f"{MAX_ARGUMENT_BYTES - 1} (argument too long): pass it another way, with grade_function "
                          "(the prompt is passed as a Python string), or shorten it")


def check_suffix(suffix: str) -> str:
    """``--base-url-suffix``: a path such as ``/v1`` (starting with /, no spaces, query or fragment)."""
    if suffix and (not suffix.startswith("/") or any(c in suffix for c in " ?#\t\n")):
        raise ConfigError(f"--base-url-suffix: expected a path such as /v1, got {suffix!r}")
    return suffix.rstrip("/")


def command_argv(argv: Sequence[str], prompt: str) -> list[str]:
    """The command line of one run: the prompt where ``{prompt}`` stands (in any argument), else appended."""
    if any(PROMPT in arg for arg in argv):
        return [arg.replace(PROMPT, prompt) for arg in argv]
    return [*argv, prompt]


def check_pass_env(names: Sequence[str]) -> list[str]:
    """``--pass-env NAME``: variable names; not one that grade sets itself."""
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"--pass-env {name!r}: not an environment variable name")
        if name in COMMAND_ENV:
            raise ConfigError(f"--pass-env {name}: grade sets it for each scenario; it cannot be passed")
    return list(dict.fromkeys(names))


def command_env(scenario: Scenario, base_url: str, pass_env: Sequence[str] = ()) -> dict[str, str]:
    """The environment of a graded command: this one without ANTHROPIC_* and CLAUDE* (except ``pass_env``),
    with :data:`COMMAND_ENV` set for ``scenario``."""
    from agentlab.observatory.observe_clients import client_env

    env = client_env()
    env.update({name: os.environ[name] for name in pass_env if name in os.environ})
    env.update({"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": GRADE_KEY, "AGENTLAB_PROMPT": scenario.prompt,
                "AGENTLAB_SCENARIO": scenario.name, "AGENTLAB_MODEL": scenario.model,
                "AGENTLAB_MAX_TOKENS": str(scenario.max_tokens),
                "AGENTLAB_SERVER_TOOLS": json.dumps([dict(t) for t in scenario.server_tools])})
    return env


def _tail(text: str, lines: int = STDERR_LINES) -> str:
    kept = [line.rstrip() for line in (text or "").splitlines() if line.strip()][-lines:]
    return "\n".join(line if len(line) <= 200 else line[:199] + "…" for line in kept)


def _keep_output(folder: Path, out: str, err: str, result: dict[str, Any], argv: list[str]) -> None:
    """--keep: the command's stdout, stderr and how it ended, in the scenario's folder."""
    folder.mkdir(parents=True, exist_ok=True)
    write_output(folder / "stdout.txt", (out or "").encode("utf-8", errors="replace"), "--keep")
    write_output(folder / "stderr.txt", (err or "").encode("utf-8", errors="replace"), "--keep")
    ended = {k: result.get(k) for k in ("exit_code", "timed_out", "timeout_s", "signal") if k in result}
    write_output(folder / "exit.json", json.dumps({**ended, "argv": argv}, indent=1, ensure_ascii=False) + "\n",
                 "--keep")


def command_runner(argv: Sequence[str], cwd: str | Path | None = None, *, pass_env: Sequence[str] = (),
                   keep: str | Path | None = None, base_url_suffix: str = "", in_flight: InFlight | None = None):
    """An observe runner: the command with the prompt in it (:func:`command_argv`) and :func:`command_env`, in
    a session of its own. It is judged on its own exit: a background child still holding its stdout does not hold
    the grade. When it exits, or at the timeout, everything it started is ended: its process group, its
    descendants and every process carrying its tag, ``setsid`` ones too (:mod:`agentlab.core.processes`).
    ``keep``: a folder where each scenario's stdout, stderr and exit status are written (in a folder named after
    the scenario). ``base_url_suffix`` (``/v1``) is appended to the server's URL in ``ANTHROPIC_BASE_URL``, for
    clients that expect a base URL ending in /v1. ``in_flight``: where each run registers its process tree, for
    Ctrl-C to kill."""
    from agentlab.core.trace import redact
    from agentlab.observatory.observe_clients import ClientOutcome

    # what the command prints is kept and shown: any API key in it, and the values passed with --pass-env, are not
    secrets = tuple(os.environ[name] for name in pass_env if name in os.environ)

    base_url_suffix = check_suffix(base_url_suffix)
    running = in_flight or InFlight()

    def run(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
        env = command_env(scenario, base_url + base_url_suffix, pass_env)
        full = command_argv(argv, scenario.prompt)
        env, tag = tagged_env(env)
        try:
            proc = tagged(subprocess.Popen(full, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, start_new_session=True), tag)
        except (OSError, ValueError) as exc:  # E2BIG, a NUL byte, a missing working folder
            raise ConfigError(f"--command: cannot start {argv[0]!r} for scenario {scenario.name}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
        key = running.add(lambda: kill_tree(proc))
        try:
            said = talk(proc, b"", timeout, max_bytes=MAX_OUTPUT_BYTES, leftovers=kill_tree)
        finally:
            kill_tree(proc)  # also on Ctrl-C, and whatever it left after it exited
            running.remove(key)
        result: dict[str, Any] = {}
        if said.timed_out:
            result.update(exit_code=None, timed_out=True, timeout_s=timeout)
        else:
            result["exit_code"] = proc.returncode
            if proc.returncode < 0:
                result["signal"] = -proc.returncode
        out, err = (data.decode("utf-8", errors="replace") for data in (said.stdout, said.stderr))
        out, err = redact(out, secrets), redact(err, secrets)
        if _last_line(out):
            result["text"] = _last_line(out)
        if _tail(err):
            result["stderr"] = _tail(err)
        if keep is not None:
            _keep_output(Path(keep) / scenario.name, out, err, result, full)
        return ClientOutcome(result, {"command": command_argv(argv, "<prompt>")})

    return run


LoopFn = Callable[..., Any]


def function_runner(fn: LoopFn, in_flight: InFlight | None = None):
    """An observe runner for a Python agent loop ``fn(client, prompt, tools, run_tool)``: ``client`` is an
    ``anthropic.Anthropic`` pointed at the scenario's server (the SDK's defaults otherwise), ``tools`` the demo
    tools' definitions followed by the scenario's server tools (web search where its model searches; the API
    runs those, so they never come back as ``tool_use``), ``run_tool(name, input) -> str`` runs one. A loop
    that takes a ``model`` argument is given the scenario's model, as a command is (``AGENTLAB_MODEL``): a
    scenario's limits are its model's (max_tokens_clamp's ceiling of 4,096). The loop runs in a thread; at the
    timeout, or when ``in_flight`` is stopped (Ctrl-C), it is left behind (a thread cannot be killed) and graded as
    stopped."""
    from agentlab.core.sdk import sdk_client
    from agentlab.lab import build_tools
    from agentlab.observatory.records import ClientOutcome

    running = in_flight or InFlight()

    def run(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
        client = sdk_client(base_url=base_url, api_key=GRADE_KEY)
        registry = build_tools("demo", tests_fail_times=scenario.tests_pass_after)
        assert registry is not None
        tools = [*registry.schemas(), *(dict(t) for t in scenario.server_tools)]  # server tools as the API takes them

        def run_tool(name: str, tool_input: Any) -> str:
            return registry.run(name, tool_input).content

        outcome: dict[str, Any] = {}
        extra = {"model": scenario.model} if _takes_model(fn) else {}
        ended = threading.Event()  # the wait is over: the loop is done, or stopped (Ctrl-C)
        done = threading.Event()   # the loop returned or raised

        def target() -> None:
            try:
                value = fn(client, scenario.prompt, tools, run_tool, **extra)
                outcome["text"] = _last_line(str(value)) if value is not None else ""
                outcome["returned"] = True
            except Exception as exc:  # graded on what it sent; the error is part of the result
                outcome["raised"] = type(exc).__name__
                outcome["text"] = _last_line(sdk_error_text(exc))
            finally:
                done.set()
                ended.set()

        thread = threading.Thread(target=target, daemon=True, name=f"agentlab-grade-{scenario.name}")
        key = running.add(ended.set)
        thread.start()
        ended.wait(timeout)
        running.remove(key)
        # whether the loop is done, not whether its thread is alive: the thread lives on for a moment after
        # done.set() (its frame and what the loop returned are torn down), and a waiter woken in that moment,
        # as on a loaded machine, would grade a finished loop as stopped at the timeout
        if not done.is_set():
            return ClientOutcome({"timed_out": True, "timeout_s": timeout}, {"function": getattr(fn, "__name__", "?")})
        result = {k: v for k, v in outcome.items() if k != "returned"}
        return ClientOutcome(result, {"function": getattr(fn, "__name__", "?")})

    return run


def _takes_model(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` has a ``model`` parameter (a callable whose signature cannot be read has none)."""
    import inspect

    try:
        return "model" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def check_timeout(timeout: Any) -> float:
    """``--timeout``: a finite number of seconds above 0 (nan, inf and numbers too large for a float are not)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) \
            or timeout <= 0 or timeout > MAX_TIMEOUT_S:
        raise ConfigError(f"--timeout: expected a finite number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, "
                          f"got {timeout!r}")
    return float(timeout)


def keep_exchanges(folder: Path, server: Any, record: dict[str, Any]) -> None:
    """--keep: every request and reply as the server saw them (``exchanges.jsonl``: the lines of ``agentlab serve
    --record`` with the reply's status, headers and body added) and the behaviour record (``record.json``)."""
    from agentlab.backend.serve import request_record

    folder.mkdir(parents=True, exist_ok=True)
    first = server.exchanges[0].at if server.exchanges else 0.0
    lines = []
    for i, exchange in enumerate(server.exchanges, 1):
        line = request_record(exchange.request, exchange.reply.body, exchange.thread, index=i)
        reply = exchange.reply
        line["at_s"] = round(exchange.at - first, 3)
        line["reply"] = {"status": reply.status, "headers": dict(reply.headers),
                         "body": reply.body.decode("utf-8", "replace")}
        lines.append(json.dumps(line, ensure_ascii=False) + "\n")
    write_output(folder / "exchanges.jsonl", "".join(lines), "--keep")
    write_output(folder / "record.json", json.dumps(record, indent=1, ensure_ascii=False) + "\n", "--keep")


def _grade(label: str, runner: Any, scenarios: Sequence[str] | None, timeout: float, jobs: int,
           progress: Callable[[ScenarioGrade], None] | None, keep: str | Path | None = None,
           in_flight: InFlight | None = None) -> Report:
    """Each scenario served and graded, ``jobs`` at a time. Ctrl-C (or any error) in the waiting thread stops the
    agents in flight at once (``in_flight``, given to the runner too), cancels the scenarios not started, and goes
    on as it came: the CLI says "interrupted" and exits 130, pytest ends its run as it does on Ctrl-C."""
    from agentlab.observatory.observe import observe_scenario

    check_timeout(timeout)
    names = list(scenarios) if scenarios else gradeable_scenarios()
    loaded = [load_scenario(n) for n in names]  # a bad name fails before anything runs

    def one(sc: Scenario) -> ScenarioGrade:
        served = None if keep is None else (lambda server, rec: keep_exchanges(Path(keep) / sc.name, server, rec))
        record = observe_scenario(label, sc, version="graded", timeout=timeout, runner=runner, on_served=served)
        grade = grade_record(record, sc)
        if progress is not None:
            progress(grade)
        return grade

    pool = ThreadPoolExecutor(max_workers=max(1, min(jobs, len(loaded) or 1)))
    try:
        grades = list(pool.map(one, loaded))
    except BaseException:
        if in_flight is not None:
            in_flight.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return Report(label, grades)


def grade_command(command: str | Sequence[str], scenarios: Sequence[str] | None = None, *,
                  timeout: float = DEFAULT_TIMEOUT, jobs: int = DEFAULT_JOBS, label: str | None = None,
                  cwd: str | Path | None = None, pass_env: Sequence[str] = (), keep: str | Path | None = None,
                  base_url_suffix: str = "",
                  progress: Callable[[ScenarioGrade], None] | None = None) -> Report:
    """Grade a command: for each scenario (default: :func:`gradeable_scenarios`) serve it, run the command
    with its prompt (:func:`command_argv`, :func:`command_env`) against it, judge what it sent. ``keep``: a
    folder that receives, per scenario, what the server saw and what the command printed. ``base_url_suffix``
    (``/v1``) is appended to the server's URL in ``ANTHROPIC_BASE_URL``."""
    argv = parse_command(command)
    passed, base_url_suffix = check_pass_env(pass_env), check_suffix(base_url_suffix)
    for name in list(scenarios) if scenarios else gradeable_scenarios():
        check_prompt_argument(load_scenario(name))
    text = command if isinstance(command, str) else shlex.join(argv)
    in_flight = InFlight()
    report = _grade(label or text, command_runner(argv, cwd, pass_env=passed, keep=keep,
                                                    base_url_suffix=base_url_suffix, in_flight=in_flight),
                    scenarios, timeout, jobs, progress, keep, in_flight)
    report.command, report.passed_env = list(argv), passed
    return report


def grade_function(fn: LoopFn, scenarios: Sequence[str] | None = None, *, timeout: float = 30.0,
                   jobs: int = 8, label: str | None = None,
                   progress: Callable[[ScenarioGrade], None] | None = None) -> Report:
    """Grade a Python agent loop ``fn(client, prompt, tools, run_tool)`` (see :func:`function_runner`)."""
    in_flight = InFlight()
    report = _grade(label or str(getattr(fn, "__name__", "function")), function_runner(fn, in_flight), scenarios,
                    timeout, jobs, progress, in_flight=in_flight)
    report.subject = fn
    return report


