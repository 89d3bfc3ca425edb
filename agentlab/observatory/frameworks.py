"""The agent frameworks people build loops with, each run as its smallest agent for ``agentlab observe``.

Four clients, two languages, each the framework's own loop on its Anthropic provider with the scenario's prompt,
system prompt and demo tools (agentlab's own calculator, get_weather, read_file and run_tests, with their own
schemas, so every client is offered and answered the same tools):

- ``vercel-ai``: the Vercel AI SDK, ``generateText`` with tools and ``stopWhen: stepCountIs(N)`` on
  ``@ai-sdk/anthropic`` (Node, ``clients/node/vercel-ai.mjs``);
- ``anthropic-ts``: the Anthropic TypeScript SDK's ``client.beta.messages.toolRunner`` (Node,
  ``clients/node/anthropic-ts.mjs``);
- ``openai-agents``: the OpenAI Agents SDK, ``Runner.run_sync`` with its LiteLLM model for Anthropic
  (``LitellmModel("anthropic/<model>")``);
- ``strands``: strands-agents, ``Agent`` on its ``AnthropicModel``.

The Node clients are installed by ``make node-clients`` (``npm ci`` of ``clients/node``'s lock file into
``tool/node-clients``, which the checkout ignores); their scripts read the run's settings from a JSON file and
call the demo tools through a local HTTP endpoint that this module serves for the run. The Python clients are in
the ``clients`` extra (``make record`` installs them into ``.venv-clients``).

A runner is ``(scenario, base_url, workdir, timeout) -> Observation``: the client's own ending (``result``), how
it was run (``settings``: the framework's version and the options that decide a branch: retries, step limit,
server tools, thinking) and ``notes`` (what the scenario asks that the framework does not do, and the settings a
framework needs to run offline, which the runner sets).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentlab.backend.scenario import Scenario
from agentlab.core.errors import ConfigError
from agentlab.core.paths import project_dir, sandbox_dir
from agentlab.core.tools import TestsState, ToolRegistry, demo_tools
from agentlab.observatory.records import missing_extra, record_raised, shorten

API_KEY = "agentlab-observe-key"
NODE_SOURCE = project_dir() / "clients" / "node"  # package.json, package-lock.json and the agent scripts
NODE_CLIENTS = project_dir() / "tool" / "node-clients"  # make node-clients: npm ci into here
DEFAULT_STEPS = 20  # the step limit when the scenario sets no max_turns: bounded, never the binding limit
MAX_RETRIES = 2  # the SDKs' own default, stated explicitly so the record says it
OFFLINE_ENV = {  # what openai-agents and LiteLLM need to run without reaching the internet
    "OPENAI_AGENTS_DISABLE_TRACING": "1",  # no trace export to OpenAI
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # the cost map shipped in the package, not downloaded at import
}


@dataclass
class Observation:
    """How a framework run ended (``result``), how it was run (``settings``) and what to know about it."""

    result: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def scenario_tools(scenario: Scenario) -> ToolRegistry:
    """The scenario's tools as agentlab runs them: the demo tools (or none), with the scenario's test state."""
    if scenario.tools != "demo":
        return ToolRegistry()
    tests = TestsState(fail_times=scenario.tests_pass_after) if scenario.tests_pass_after is not None \
        else TestsState()
    return demo_tools(sandbox_dir(), tests)


def _steps(scenario: Scenario) -> int:
    return scenario.max_turns or DEFAULT_STEPS


def common_notes(scenario: Scenario, framework: str, no_fallback: str | None = None) -> list[str]:
    """What a framework run leaves out of the scenario, for its record's notes: the Stop hook it has no place
    for, and the fallback model it was not given (``no_fallback`` names what is missing, in the framework's
    words; by default "no fallback model configured in <framework>")."""
    notes = []
    if scenario.stop_hook is not None:
        notes.append(f"{framework} has no Stop hooks: the scenario's hook is not applied")
    if scenario.fallback_model or scenario.refusal_fallback_model:
        missing = no_fallback or f"no fallback model configured in {framework}"
        notes.append(f"{missing}: the scenario's fallback model is not used")
    return notes




def python_version(package: str) -> str:
    """The installed version of a Python framework of the ``clients`` extra."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        raise ConfigError(f"{package} is not installed: it is in the `clients` extra; `make record` installs it "
                          "into .venv-clients") from None


# -- the Node clients ---------------------------------------------------------------------------------------

def node_version(package: str) -> str:
    """The version of an npm package installed by ``make node-clients``, or a ConfigError that says how."""
    manifest = NODE_CLIENTS / "node_modules" / package / "package.json"
    if shutil.which("node") is None:
        raise ConfigError("node is not on PATH: the TypeScript clients run on Node.js (20 or later)")
    if not manifest.is_file():
        raise ConfigError(f"{package} is not installed in {NODE_CLIENTS.relative_to(project_dir())}: run "
                          "`make node-clients` (npm ci of clients/node/package-lock.json)")
    return str(json.loads(manifest.read_text(encoding="utf-8"))["version"])


@contextmanager
def tool_endpoint(registry: ToolRegistry) -> Iterator[str]:
    """A local HTTP endpoint that runs the registry's tools: POST ``{"name", "input"}`` -> ``{"content",
    "is_error"}``. The Node scripts call it from their tools' ``execute``/``run``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 -- the http.server name
            call = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            outcome = registry.run(str(call.get("name")), call.get("input") or {})
            body = json.dumps({"content": outcome.content, "is_error": outcome.is_error}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- quiet
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/tool"
    finally:
        server.shutdown()
        server.server_close()


def _installed_script(name: str) -> Path:
    """``clients/node/<name>`` (and the ``common.mjs`` it imports) copied next to the installed node_modules,
    where Node resolves its imports; copied again whenever the source differs."""
    for file in (name, "common.mjs"):
        source, target = NODE_SOURCE / file, NODE_CLIENTS / file
        text = source.read_text(encoding="utf-8")
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            with tempfile.NamedTemporaryFile("w", dir=NODE_CLIENTS, suffix=".tmp", delete=False,
                                             encoding="utf-8") as tmp:
                tmp.write(text)
            os.replace(tmp.name, target)
    return NODE_CLIENTS / name


def _node_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE", "OPENAI_"))}


def _node_spec(scenario: Scenario, base_url: str, tools_url: str, registry: ToolRegistry,
               timeout: float) -> dict[str, Any]:
    return {"base_url": base_url, "api_key": API_KEY, "model": scenario.model, "max_tokens": scenario.max_tokens,
            "prompt": scenario.prompt, "system": scenario.system, "tools": registry.schemas(),
            "tools_url": tools_url, "server_tools": [dict(t) for t in scenario.server_tools],
            "max_steps": _steps(scenario), "max_turns": scenario.max_turns, "max_retries": MAX_RETRIES,
            "stop_sequences": scenario.stop_sequences, "thinking": scenario.thinking,
            "timeout_ms": int(timeout * 1000)}


def run_node(script: str, scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> dict[str, Any]:
    """Run ``node clients/node/<script> spec.json`` for the scenario; the client's result as it printed it."""
    if not (NODE_CLIENTS / "node_modules").is_dir():
        raise ConfigError(f"the Node clients are not installed in {NODE_CLIENTS}: run `make node-clients`")
    registry = scenario_tools(scenario)
    path = _installed_script(script)
    with tool_endpoint(registry) as tools_url:
        spec = workdir / "spec.json"
        spec.write_text(json.dumps(_node_spec(scenario, base_url, tools_url, registry, timeout)), encoding="utf-8")
        try:
            proc = subprocess.run(["node", str(path), str(spec)], env=_node_env(), cwd=workdir, capture_output=True,
                                  text=True, timeout=timeout + 10, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return {"exit_code": None, "timed_out": True, "is_error": True}
    result: dict[str, Any] = {"exit_code": proc.returncode}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    data = json.loads(lines[-1]) if lines else {}
    if data.get("type") != "result":
        result.update(is_error=True, stderr=shorten((proc.stderr.strip().splitlines() or [""])[-1], 300))
        return result
    for key in ("is_error", "finish_reason", "stop_reason", "steps", "iterations"):
        if key in data:
            result[key] = data[key]
    if data.get("error"):
        error = data["error"]
        result.update(raised=error.get("name"), error=shorten(error.get("message", ""), 300))
        if error.get("status"):
            result["status"] = error["status"]
    if "text" in data:
        result["text"] = shorten(data["text"])
    return result


def _server_tool_names(scenario: Scenario) -> list[Any]:
    return [t.get("name") for t in scenario.server_tools]


def run_vercel_ai(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> Observation:
    """``generateText({model: anthropic(model), tools, stopWhen: stepCountIs(N)})`` with ``@ai-sdk/anthropic``."""
    provider = node_version("@ai-sdk/anthropic")
    result = run_node("vercel-ai.mjs", scenario, base_url, workdir, timeout)
    settings = {"call": "generateText({model: anthropic(model), tools, stopWhen: stepCountIs(N), prompt})",
                "@ai-sdk/anthropic": provider, "base_url": "<server>/v1", "max_retries": MAX_RETRIES,
                "stop_when": f"stepCountIs({_steps(scenario)})", "max_output_tokens": scenario.max_tokens,
                "server_tools": _server_tool_names(scenario),
                "thinking": {"type": "enabled", "budgetTokens": scenario.thinking} if scenario.thinking else None,
                "stream": False}
    notes = common_notes(scenario, "generateText")
    notes.append("the provider's base URL is the server's with /v1: @ai-sdk/anthropic appends /messages to it")
    return Observation(result, settings, notes)


def run_anthropic_ts(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> Observation:
    """The TypeScript SDK's ``client.beta.messages.toolRunner({...})``, iterated to its end."""
    result = run_node("anthropic-ts.mjs", scenario, base_url, workdir, timeout)
    settings = {"call": "client.beta.messages.toolRunner({model, max_tokens, messages, tools})",
                "max_retries": MAX_RETRIES, "max_iterations": scenario.max_turns,
                "server_tools": _server_tool_names(scenario),
                "thinking": {"type": "enabled", "budget_tokens": scenario.thinking} if scenario.thinking else None,
                "stream": False}
    return Observation(result, settings, common_notes(scenario, "the tool runner"))


# -- the Python clients -------------------------------------------------------------------------------------

def _openai_agents_tools(registry: ToolRegistry) -> list[Any]:
    """The registry's tools as openai-agents ``FunctionTool``s with the registry's own schemas; a failing tool
    answers with its error text, as openai-agents' own ``function_tool`` does."""
    from agents import FunctionTool

    def tool(schema: dict[str, Any]) -> Any:
        async def invoke(context: Any, arguments: str) -> str:
            outcome = registry.run(schema["name"], json.loads(arguments or "{}"))
            return outcome.content

        return FunctionTool(name=schema["name"], description=schema["description"],
                            params_json_schema=schema["input_schema"], on_invoke_tool=invoke,
                            strict_json_schema=False)

    return [tool(s) for s in registry.schemas()]


def run_openai_agents(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> Observation:
    """The OpenAI Agents SDK's ``Runner.run_sync(Agent(model=LitellmModel("anthropic/<model>")), prompt)``.

    Set before anything is imported, for a run without the internet: tracing disabled (it would export to
    OpenAI) and LiteLLM's cost map read from the package instead of downloaded (``OFFLINE_ENV``)."""
    os.environ.update(OFFLINE_ENV)
    try:
        import litellm
        from agents import Agent, ModelSettings, RunConfig, Runner, set_tracing_disabled
        from agents.extensions.models.litellm_model import LitellmModel
    except ImportError as exc:
        raise missing_extra("openai-agents[litellm]", exc) from None
    set_tracing_disabled(True)
    litellm.suppress_debug_info = True
    extra: dict[str, Any] = {}
    if scenario.stop_sequences:
        extra["stop"] = scenario.stop_sequences
    if scenario.thinking:
        extra["thinking"] = {"type": "enabled", "budget_tokens": scenario.thinking}
    model_settings = ModelSettings(max_tokens=scenario.max_tokens, timeout=timeout, extra_args=extra or None)
    agent = Agent(name="assistant", instructions=scenario.system,
                  model=LitellmModel(model=f"anthropic/{scenario.model}", base_url=base_url, api_key=API_KEY),
                  tools=_openai_agents_tools(scenario_tools(scenario)), model_settings=model_settings)
    settings = {"call": "Runner.run_sync(Agent(model=LitellmModel('anthropic/<model>'), tools=[...]), prompt, "
                        "max_turns=N)",
                "litellm": python_version("litellm"), "max_turns": _steps(scenario),
                "max_tokens": scenario.max_tokens,
                # no retry: the runner's (ModelSettings.retry) is off unless configured, LiteLLM's num_retries unset
                "max_retries": 0, "retry": None, "litellm_num_retries": litellm.num_retries,
                "extra_args": extra or None, "server_tools": [],
                "thinking": extra.get("thinking"), "tracing_disabled": True,
                "env": dict(OFFLINE_ENV)}
    notes = common_notes(scenario, "openai-agents")
    notes.append("run offline: tracing disabled (OPENAI_AGENTS_DISABLE_TRACING=1, set_tracing_disabled) and "
                 "LiteLLM's local model cost map (LITELLM_LOCAL_MODEL_COST_MAP=True)")
    if scenario.server_tools:
        notes.append("openai-agents' hosted WebSearchTool is for OpenAI's Responses API, not a LiteLLM model: the "
                     "server tool is not offered")
    result: dict[str, Any] = {"exit_code": None}
    try:
        run = Runner.run_sync(agent, scenario.prompt, max_turns=_steps(scenario),
                              run_config=RunConfig(tracing_disabled=True))
    except Exception as exc:  # noqa: BLE001 -- what the framework raises is the observation
        record_raised(result, exc)
    else:
        result.update(is_error=False, text=shorten(run.final_output), turns=len(run.raw_responses))
    return Observation(result, settings, notes)


def _strands_tools(registry: ToolRegistry) -> list[Any]:
    """The registry's tools as strands ``PythonAgentTool``s with the registry's own schemas and results."""
    from strands.tools.tools import PythonAgentTool

    def tool(schema: dict[str, Any]) -> Any:
        def run(tool_use: Any, **state: Any) -> Any:
            outcome = registry.run(schema["name"], tool_use.get("input") or {})
            return {"toolUseId": tool_use["toolUseId"], "status": "error" if outcome.is_error else "success",
                    "content": [{"text": outcome.content}]}

        spec = {"name": schema["name"], "description": schema["description"],
                "inputSchema": {"json": schema["input_schema"]}}
        return PythonAgentTool(schema["name"], spec, run)

    return [tool(s) for s in registry.schemas()]


def run_strands(scenario: Scenario, base_url: str, workdir: Path, timeout: float) -> Observation:
    """strands-agents: ``await Agent(model=AnthropicModel(...), tools=[...]).invoke_async(prompt, limits={"turns":
    N})``, with its default retry strategy and conversation manager. ``agent(prompt)`` runs the same coroutine on
    an event loop of its own; awaiting it here lets the run close its HTTP client on that loop."""
    try:
        from strands import Agent
        from strands.models.anthropic import AnthropicModel
    except ImportError as exc:
        raise missing_extra("strands-agents", exc) from None
    params: dict[str, Any] = {}
    if scenario.stop_sequences:
        params["stop_sequences"] = scenario.stop_sequences
    if scenario.thinking:
        params["thinking"] = {"type": "enabled", "budget_tokens": scenario.thinking}
    config: dict[str, Any] = {"model_id": scenario.model, "max_tokens": scenario.max_tokens}
    if params:
        config["params"] = params
    if scenario.server_tools:
        config["anthropic_tools"] = [dict(t) for t in scenario.server_tools]
    model = AnthropicModel(client_args={"base_url": base_url, "api_key": API_KEY, "timeout": timeout}, **config)
    agent = Agent(model=model, tools=_strands_tools(scenario_tools(scenario)), system_prompt=scenario.system,
                  callback_handler=None)
    retry = agent._retry_strategy  # noqa: SLF001 -- the default strategy's bounds, for the record
    limits = {"turns": _steps(scenario)}
    settings = {"call": "await Agent(model=AnthropicModel(...), tools=[...]).invoke_async(prompt, limits=...)",
                "limits": limits,
                "anthropic": python_version("anthropic"), "max_retries": model.client.max_retries,
                "retry_strategy": {"max_attempts": getattr(retry, "_max_attempts", None),
                                   "initial_delay_s": getattr(retry, "_initial_delay", None),
                                   "max_delay_s": getattr(retry, "_max_delay", None)},
                "conversation_manager": type(agent.conversation_manager).__name__,
                "max_tokens": scenario.max_tokens, "params": params or None,
                "server_tools": _server_tool_names(scenario), "thinking": params.get("thinking"), "stream": True}
    notes = common_notes(scenario, "strands")
    notes.append("strands-agents' `anthropic` extra asks for anthropic<1; it is installed without that extra and "
                 "its AnthropicModel runs on the anthropic SDK pinned for the other clients")
    result: dict[str, Any] = {"exit_code": None}

    async def invoke() -> Any:
        try:
            return await agent.invoke_async(scenario.prompt, limits=limits)
        finally:
            await model.client.close()

    try:
        run = asyncio.run(invoke())
    except Exception as exc:  # noqa: BLE001 -- what the framework raises is the observation
        record_raised(result, exc)
    else:
        result.update(is_error=False, stop_reason=run.stop_reason, text=shorten(str(run)))
    return Observation(result, settings, notes)
