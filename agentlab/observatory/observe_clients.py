"""The clients ``agentlab observe`` runs (``CLIENTS``): agentlab, the SDK's tool runner, Claude Code,
pydantic-ai and langchain, each a runner ``(scenario, base_url, workdir, timeout) -> ClientOutcome``, with
how to read its version; :func:`resolve_client` picks one by name (``claude-code@VERSION``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlab.backend.scenario import Scenario
from agentlab.core.errors import AgentlabError, ConfigError
from agentlab.core.paths import sandbox_dir
from agentlab.observatory import frameworks
from agentlab.observatory.records import REPO, ClientOutcome, missing_extra, record_raised, shorten

SANDBOX_DIR = sandbox_dir()
CLAUDE_DIR = REPO / "tool" / "claude-code"  # make claude-code: tool/claude-code/<version>/node_modules/...
CLAUDE_BIN = CLAUDE_DIR / "node_modules" / ".bin" / "claude"  # an older single-version install
CLAUDE_CODE_PINNED = "2.1.197"  # the version `claude-code` means without @VERSION (the Makefile's default)
CLAUDE_MAX_TURNS = 20  # Claude Code's --max-turns when the scenario sets none: bounded, never the binding limit
OBSERVE_KEY = "agentlab-observe-key"


# -- running a client ----------------------------------------------------------------------------------------

Runner = Callable[[Scenario, str, Path, float], ClientOutcome]


def _subprocess(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int | None, str, str]:
    try:
        proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return None, out, err
    return proc.returncode, proc.stdout, proc.stderr


def client_env() -> dict[str, str]:
    """The parent's environment without any Anthropic settings (no real key reaches a client)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}


def _agentlab_argv(scenario: Scenario, base_url: str) -> list[str]:
    return ["run", scenario.source or scenario.name, "--base-url", base_url, "--json", "--stream"]


def run_agentlab(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
    """``python -m agentlab run SCENARIO --base-url URL --json --stream`` in a subprocess."""
    cmd = [sys.executable, "-m", "agentlab", *_agentlab_argv(scenario, base_url)]
    env = {**client_env(), "ANTHROPIC_API_KEY": OBSERVE_KEY}
    code, out, err = _subprocess(cmd, env, REPO, timeout)
    return _agentlab_outcome(scenario, code, out, err)


def run_agentlab_in_process(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
    """The same run as ``run_agentlab`` in this process (no interpreter start-up; used by the test suite): the
    configuration that ``agentlab run SCENARIO --base-url URL --json --stream`` builds, run to its end, and its
    result as that command prints it (exit status 0 for success, 1 for an error result, 2 for bad input)."""
    from agentlab.lab import RunSetup

    try:
        result = RunSetup.from_scenario(scenario, base_url=base_url, stream=True).loop().run()
    except AgentlabError as exc:
        return _agentlab_outcome(scenario, 2, "", f"agentlab: {exc}")
    return _agentlab_outcome(scenario, 0 if result.subtype == "success" else 1,
                             json.dumps(result.to_dict(), sort_keys=True), "")


def _agentlab_outcome(scenario: Scenario, code: int | None, out: str, err: str) -> ClientOutcome:
    result: dict[str, Any] = {"exit_code": code}
    if code is None:
        result["timed_out"] = True
    lines = [line for line in out.splitlines() if line.strip()]
    try:
        data = json.loads(lines[-1]) if lines else {}
    except ValueError:
        data = {}
    if isinstance(data, dict) and data.get("type") == "result":
        for key in ("subtype", "is_error", "num_turns", "stop_reason", "requests"):
            result[key] = data.get(key)
        result["text"] = shorten(data.get("result", ""))
    elif err.strip():
        result["stderr"] = shorten(err.strip().splitlines()[-1], 300)
    return ClientOutcome(result, {"command": ["agentlab", "run", scenario.name, "--base-url", "<server>",
                                              "--json", "--stream"]})


def _runner_tools(scenario: Scenario) -> list[Any]:
    """The demo tools (calculator, get_weather, read_file, run_tests) as the SDK's ``@beta_tool`` functions."""
    from anthropic import beta_tool

    from agentlab.core.tools import TestsState, ToolError, calculate, fake_weather, read_sandboxed, run_pretend_tests

    tests = TestsState(fail_times=scenario.tests_pass_after) if scenario.tests_pass_after is not None \
        else TestsState()

    def safely(fn: Callable[[], str]) -> str:
        try:
            return fn()
        except ToolError as exc:  # the runner turns raised errors into is_error results; keep the text plain
            raise RuntimeError(str(exc)) from None

    @beta_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression and return the result.

        Args:
            expression: Arithmetic such as '(2 + 3) * 4 / 7' or '2 ** 8'
        """
        return safely(lambda: calculate(expression))

    @beta_tool
    def get_weather(location: str) -> str:
        """Get the current weather for a location (a demo service with made-up but stable answers).

        Args:
            location: A city name, e.g. 'Paris'
        """
        return safely(lambda: fake_weather(location))

    @beta_tool
    def read_file(path: str) -> str:
        """Read a text file from the sandbox folder. Long files are cut off after 20,000 characters.

        Args:
            path: Path relative to the sandbox folder, e.g. 'notes.txt'
        """
        return safely(lambda: read_sandboxed(SANDBOX_DIR, path))

    @beta_tool
    def run_tests() -> str:
        """Run the project's test suite and report how many tests passed and failed."""
        return run_pretend_tests(tests)

    return [calculator, get_weather, read_file, run_tests]


def run_tool_runner(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
    from agentlab.core import wire
    from agentlab.core.sdk import anthropic, sdk_client

    client = sdk_client(base_url=base_url, api_key=OBSERVE_KEY, timeout=timeout)
    params = wire.request_params(scenario.model, scenario.max_tokens, [{"role": "user", "content": scenario.prompt}],
                                 system=scenario.system, stop_sequences=scenario.stop_sequences)
    # the tool runner takes tools= always (an empty list too); server tools go to the API as they are
    params["tools"] = [*(_runner_tools(scenario) if scenario.tools == "demo" else []),
                       *(dict(t) for t in scenario.server_tools)]
    if scenario.max_turns:
        params["max_iterations"] = scenario.max_turns
    settings: dict[str, Any] = {"call": "client.beta.messages.tool_runner(...)", "max_retries": client.max_retries,
                                "max_iterations": scenario.max_turns, "stream": False}
    if scenario.server_tools:
        settings["server_tools"] = [t.get("name") for t in scenario.server_tools]
    notes = []
    if scenario.stop_hook is not None:
        notes.append("the tool runner has no Stop hooks: the scenario's hook is not applied")
    if scenario.fallback_model or scenario.refusal_fallback_model:
        notes.append("the tool runner has no fallback model option")
    result: dict[str, Any] = {"exit_code": None}
    iterations = 0
    last = None
    try:
        for message in client.beta.messages.tool_runner(**params):
            iterations += 1
            last = message
    except anthropic.APIStatusError as exc:
        result.update(raised=type(exc).__name__, status=exc.status_code, is_error=True)
    except anthropic.APIError as exc:
        result.update(raised=type(exc).__name__, is_error=True)
    else:
        result["is_error"] = False
    result["iterations"] = iterations
    if last is not None:
        result["stop_reason"] = last.stop_reason
        result["text"] = shorten("".join(getattr(b, "text", "") for b in last.content))
    return ClientOutcome(result, settings, notes)


def claude_bin(version: str | None = None) -> Path | None:
    """The project-local Claude Code CLI of ``version`` (``make claude-code CLAUDE_CODE_VERSION=...``).

    Without a version: the pinned one (2.1.197) when installed, else an older single-version install, else
    ``claude`` on PATH. With one: only ``tool/claude-code/<version>`` counts.
    """
    wanted = CLAUDE_DIR / (version or CLAUDE_CODE_PINNED) / "node_modules" / ".bin" / "claude"
    if wanted.exists():
        return wanted
    if version is not None:
        return None
    if CLAUDE_BIN.exists():
        return CLAUDE_BIN
    found = shutil.which("claude")
    return Path(found) if found else None


def installed_claude_versions() -> list[str]:
    """The Claude Code versions installed under tool/claude-code/, oldest first."""
    if not CLAUDE_DIR.is_dir():
        return []
    found = [p.name for p in CLAUDE_DIR.iterdir() if (p / "node_modules" / ".bin" / "claude").exists()]
    return sorted(found, key=lambda v: tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.-]", v)))


def claude_version(binary: Path | None = None) -> str:
    binary = binary or claude_bin()
    if binary is None:
        raise ConfigError("the Claude Code CLI is not installed: run `make claude-code` (npm) first")
    code, out, err = _subprocess([str(binary), "--version"], {**client_env(), "DISABLE_AUTOUPDATER": "1"},
                                 REPO, 60)
    match = re.search(r"\d+\.\d+\.\d+\S*", out)
    if code != 0 or not match:
        raise ConfigError(f"`{binary} --version` failed: {shorten((out + err).strip(), 300)}")
    return match.group(0)


_STOP_HOOK_SCRIPT = """\
#!{python}
import json, pathlib
state = pathlib.Path(__file__).with_name("stop_calls")
calls = int(state.read_text()) + 1 if state.exists() else 1
state.write_text(str(calls))
times = {times!r}
if times == "always" or calls <= times:
    print(json.dumps({{"decision": "block", "reason": {reason!r}}}))
"""


def _claude_settings(scenario: Scenario, home: Path) -> Path | None:
    """The scenario's Stop hook as a command hook in Claude Code's settings format."""
    spec = scenario.stop_hook
    if spec is None:
        return None
    script = home / "stop_hook.py"
    script.write_text(_STOP_HOOK_SCRIPT.format(python=sys.executable, times=spec.times, reason=spec.reason),
                      encoding="utf-8")
    script.chmod(0o755)
    # the command is the script alone: short and the same whichever interpreter records (clients quote it)
    command = shlex.quote(str(script))
    settings = home / "settings.json"
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": command}]}]}}),
                        encoding="utf-8")
    return settings


def run_claude_code(scenario: Scenario, base_url: str, workdir: Path, timeout: float, *,
                    binary: Path | None = None) -> ClientOutcome:
    """The Claude Code CLI, headless (``-p``, stream-json), in a fresh HOME with the sandbox files as its cwd."""
    binary = binary or claude_bin()
    if binary is None:
        raise ConfigError("the Claude Code CLI is not installed: run `make claude-code` (npm) first")
    home = workdir / "home"
    cwd = workdir / "work"
    home.mkdir()
    cwd.mkdir()
    for item in SANDBOX_DIR.iterdir():
        if item.is_file():
            shutil.copy(item, cwd / item.name)
    args = ["-p", scenario.prompt, "--output-format", "stream-json", "--verbose",
            "--max-turns", str(scenario.max_turns or CLAUDE_MAX_TURNS), "--allowedTools", "Bash,Read",
            "--model", scenario.model]
    if scenario.fallback_model:
        args += ["--fallback-model", scenario.fallback_model]
    if scenario.system:
        args += ["--append-system-prompt", scenario.system]
    settings = _claude_settings(scenario, home)
    if settings is not None:
        args += ["--settings", str(settings)]
    env = {**client_env(), "HOME": str(home), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "dummy",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_MAX_RETRIES": "2",
           "SHELL": "/bin/bash"}  # its system prompt names the shell: the same on every machine
    code, out, err = _subprocess([str(binary), *args], env, cwd, timeout)
    result: dict[str, Any] = {"exit_code": code}
    if code is None:
        result["timed_out"] = True
    events: dict[str, int] = {}
    final: dict[str, Any] | None = None
    for line in out.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        name = str(event.get("type")) + (f"/{event['subtype']}" if event.get("subtype") else "")
        events[name] = events.get(name, 0) + 1
        if event.get("type") == "result":
            final = event
    if final is not None:
        for key in ("subtype", "is_error", "num_turns", "stop_reason", "api_error_status"):
            result[key] = final.get(key)
        result["text"] = shorten(final.get("result", ""))
    elif err.strip():
        result["stderr"] = shorten(err.strip().splitlines()[-1], 300)
    result["events"] = dict(sorted(events.items()))
    shown = [a if a != str(settings) else "<settings.json>" for a in args]
    notes = ["the demo tools are not Claude Code tools: the scripted model calls its Bash tool instead (stand_ins)"] \
        if scenario.tools == "demo" else []
    if settings is not None and scenario.stop_hook is not None:
        notes.append(f"Stop hook: a command hook that blocks {scenario.stop_hook.times} time(s)")
    if scenario.server_tools:
        notes.append("Claude Code offers web search as its own WebSearch tool, which asks the API in a separate "
                     "request; the main loop never offers the server tool")
    env_shown = {k: env[k] for k in ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_TELEMETRY",
                                     "DISABLE_AUTOUPDATER", "CLAUDE_CODE_MAX_RETRIES", "SHELL")}
    return ClientOutcome(result, {"command": ["claude", *shown], "env": env_shown}, notes)


def _demo_functions(scenario: Scenario) -> list[Callable[..., str]]:
    """The demo tools as plain typed functions with docstrings, for frameworks that build tool schemas from
    signatures (pydantic-ai, langchain). A failing tool raises, and each framework reports that its way."""
    from agentlab.core.tools import TestsState, calculate, fake_weather, read_sandboxed, run_pretend_tests

    tests = TestsState(fail_times=scenario.tests_pass_after) if scenario.tests_pass_after is not None \
        else TestsState()

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression and return the result.

        Args:
            expression: Arithmetic such as '(2 + 3) * 4 / 7' or '2 ** 8'
        """
        return calculate(expression)

    def get_weather(location: str) -> str:
        """Get the current weather for a location (a demo service with made-up but stable answers).

        Args:
            location: A city name, e.g. 'Paris'
        """
        return fake_weather(location)

    def read_file(path: str) -> str:
        """Read a text file from the sandbox folder. Long files are cut off after 20,000 characters.

        Args:
            path: Path relative to the sandbox folder, e.g. 'notes.txt'
        """
        return read_sandboxed(SANDBOX_DIR, path)

    def run_tests() -> str:
        """Run the project's test suite and report how many tests passed and failed."""
        return run_pretend_tests(tests)

    return [calculator, get_weather, read_file, run_tests]




def run_pydantic_ai(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
    """A pydantic-ai ``Agent`` on ``AnthropicModel`` with the demo tools, run with ``agent.run_sync``.

    The scenario's server tools are enabled as pydantic-ai native tools (``WebSearchTool``); ``max_turns``
    becomes ``UsageLimits(request_limit=...)``."""
    try:
        from anthropic import AsyncAnthropic
        from pydantic_ai import Agent
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider
        from pydantic_ai.usage import UsageLimits
    except ImportError as exc:
        raise missing_extra("pydantic-ai", exc) from None
    client = AsyncAnthropic(base_url=base_url, api_key=OBSERVE_KEY, timeout=timeout)
    model = AnthropicModel(scenario.model, provider=AnthropicProvider(anthropic_client=client))
    native: list[Any] = []  # the API's own server tools, as pydantic-ai "native tools"
    if any(t.get("name") == "web_search" for t in scenario.server_tools):
        from pydantic_ai import WebSearchTool
        from pydantic_ai.capabilities import NativeTool

        native.append(NativeTool(WebSearchTool()))
    settings: dict[str, Any] = {"max_tokens": scenario.max_tokens}
    if scenario.stop_sequences:
        settings["stop_sequences"] = scenario.stop_sequences
    agent = Agent(model, tools=_demo_functions(scenario) if scenario.tools == "demo" else [],
                  instructions=scenario.system, capabilities=native, model_settings=settings)
    limits = UsageLimits(request_limit=scenario.max_turns) if scenario.max_turns else None
    shown = {"call": "Agent(AnthropicModel(...), tools=[...]).run_sync(prompt)", "model_settings": settings,
             "native_tools": [type(c.tool).__name__ for c in native], "max_retries": client.max_retries,
             "usage_limits": {"request_limit": scenario.max_turns} if scenario.max_turns else None}
    notes = frameworks.common_notes(scenario, "pydantic-ai", "no FallbackModel configured")
    result: dict[str, Any] = {"exit_code": None}
    try:
        run = agent.run_sync(scenario.prompt, usage_limits=limits)
    except Exception as exc:  # noqa: BLE001 -- what the framework raises is the observation
        record_raised(result, exc)
    else:
        result.update(is_error=False, text=shorten(run.output))
        responses = [m for m in run.all_messages() if type(m).__name__ == "ModelResponse"]
        if responses:
            last = responses[-1]
            result["stop_reason"] = getattr(last, "provider_details", None) and \
                last.provider_details.get("finish_reason") or getattr(last, "finish_reason", None)
    return ClientOutcome(result, shown, notes)


def run_langchain(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
    """langchain's agent loop: ``create_agent(ChatAnthropic(...), tools=[...])`` invoked with the prompt.

    ``max_turns`` becomes ``recursion_limit = 2 * max_turns - 1``: exactly ``max_turns`` model calls."""
    try:
        from langchain.agents import create_agent
        from langchain_anthropic import ChatAnthropic
        from langchain_core.tools import tool
    except ImportError as exc:
        raise missing_extra("langchain / langchain-anthropic", exc) from None
    kwargs: dict[str, Any] = {"model": scenario.model, "base_url": base_url, "api_key": OBSERVE_KEY,
                              "max_tokens": scenario.max_tokens, "timeout": timeout, "max_retries": 2}
    if scenario.stop_sequences:
        kwargs["stop_sequences"] = scenario.stop_sequences
    model = ChatAnthropic(**kwargs)
    tools: list[Any] = [tool(fn) for fn in _demo_functions(scenario)] if scenario.tools == "demo" else []
    tools += [dict(t) for t in scenario.server_tools]  # server tools go to the API as they are
    agent = create_agent(model, tools=tools, system_prompt=scenario.system)
    # langgraph counts graph steps, not model calls: n model calls with a tool step between each pair are 2n - 1
    # steps, so the limit stops the run before the tool step that would lead to call n + 1
    recursion = 2 * (scenario.max_turns or CLAUDE_MAX_TURNS) - 1
    shown = {"call": "create_agent(ChatAnthropic(...), tools=[...]).invoke({'messages': [prompt]})",
             "langchain-anthropic": frameworks.python_version("langchain-anthropic"),
             "max_tokens": scenario.max_tokens, "max_retries": 2, "recursion_limit": recursion,
             "server_tools": [t.get("name") for t in scenario.server_tools]}
    notes = frameworks.common_notes(scenario, "create_agent", "no fallback model middleware configured")
    result: dict[str, Any] = {"exit_code": None}
    try:
        state = agent.invoke({"messages": [{"role": "user", "content": scenario.prompt}]},
                             {"recursion_limit": recursion})
    except Exception as exc:  # noqa: BLE001 -- what the framework raises is the observation
        record_raised(result, exc)
    else:
        last = state["messages"][-1]
        meta = getattr(last, "response_metadata", {}) or {}
        result.update(is_error=False, stop_reason=meta.get("stop_reason"), text=shorten(_lc_text(last)))
    return ClientOutcome(result, shown, notes)


def _lc_text(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def _agentlab_version() -> str:
    from agentlab import __version__

    return __version__


def _anthropic_version() -> str:
    import anthropic

    return anthropic.__version__


@dataclass(frozen=True)
class Client:
    """A client that ``observe`` can run: its runner, how to read its version, and how many scenarios may run
    at once. ``about`` is shown by ``agentlab observe --list``."""

    name: str
    runner: Runner
    version: Callable[[], str]
    about: str
    jobs: int = 4


CLIENTS: dict[str, Client] = {c.name: c for c in (
    Client("agentlab", run_agentlab, _agentlab_version, "this package's CLI, `agentlab run`, in a subprocess", 6),
    Client("tool-runner", run_tool_runner, _anthropic_version,
           "the anthropic SDK's beta tool runner (client.beta.messages.tool_runner)", 6),
    Client("claude-code", run_claude_code, lambda: claude_version(),
           f"the Claude Code CLI, headless; claude-code@VERSION picks an installed version "
           f"(default {CLAUDE_CODE_PINNED})", 2),
    Client("pydantic-ai", run_pydantic_ai, lambda: frameworks.python_version("pydantic-ai-slim"),
           "a pydantic-ai Agent (pydantic-ai-slim[anthropic]) with the demo tools", 4),
    Client("langchain", run_langchain, lambda: frameworks.python_version("langchain"),
           "langchain's create_agent with ChatAnthropic (langchain-anthropic) and the demo tools", 4),
)}


def _framework(run: Callable[[Scenario, str, Path, float], frameworks.Observation]) -> Runner:
    """A runner of ``frameworks`` as an observe runner."""
    def runner(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
        seen = run(scenario, base_url, workdir, timeout)
        return ClientOutcome(seen.result, seen.settings, seen.notes)

    return runner


CLIENTS.update({c.name: c for c in (
    Client("vercel-ai", _framework(frameworks.run_vercel_ai), lambda: frameworks.node_version("ai"),
           "the Vercel AI SDK (ai + @ai-sdk/anthropic), generateText with tools and stopWhen: stepCountIs(N); "
           "make node-clients installs it", 4),
    Client("anthropic-ts", _framework(frameworks.run_anthropic_ts),
           lambda: frameworks.node_version("@anthropic-ai/sdk"),
           "the Anthropic TypeScript SDK's client.beta.messages.toolRunner; make node-clients installs it", 4),
    Client("openai-agents", _framework(frameworks.run_openai_agents),
           lambda: frameworks.python_version("openai-agents"),
           "the OpenAI Agents SDK's Runner with its LiteLLM model for Anthropic (LitellmModel), run offline", 1),
    Client("strands", _framework(frameworks.run_strands), lambda: frameworks.python_version("strands-agents"),
           "a strands-agents Agent on its AnthropicModel", 2),
)})


def resolve_client(spec: str) -> Client:
    """A client by name; ``claude-code@2.1.332`` is Claude Code at that installed version."""
    name, _, version = spec.partition("@")
    if name not in CLIENTS:
        raise ConfigError(f"unknown client {spec!r}: choose from {', '.join(CLIENTS)}")
    client = CLIENTS[name]
    if not version:
        return client
    if name != "claude-code":
        raise ConfigError(f"{spec!r}: only claude-code takes @VERSION (install that version and observe it); "
                          f"the {name} version is the installed package's")
    binary = claude_bin(version)
    if binary is None:
        installed = ", ".join(installed_claude_versions()) or "none"
        raise ConfigError(f"Claude Code {version} is not installed (installed: {installed}): run "
                          f"`make claude-code CLAUDE_CODE_VERSION={version}`")

    def runner(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> ClientOutcome:
        return run_claude_code(scenario, base_url, workdir, timeout, binary=binary)

    return Client(name, runner, lambda: claude_version(binary), client.about, client.jobs)


def client_version(client: str) -> str:
    return resolve_client(client).version()


