"""``agentlab observe CLIENT [SCENARIO...]``: run a client against each scenario and record what it does.

Each scenario is served by a fresh :class:`~agentlab.backend.serve.ScenarioServer`; the client runs once against it;
what the client sent is turned into a normalised behaviour record (one JSON file per scenario, under
``data/observed/<client>/<version>/``): every request with its model, ``max_tokens``, whether it streamed,
what it appended to the conversation since the previous request (``diff_requests``), and an action label
(``retry``, ``escalate``, ``tool_results``, ``continuation``, ``resume``, ``nudge``, ``reprompt``,
``summary``, ``compacted``, ...); then the client's final result. Wall time is kept apart, under ``timing``
(the whole run, and when each request arrived, in seconds after the first), so that comparisons can leave it
out.

While observing, the scenario's ``expect`` checks do not answer with a 400: a foreign client may well send
something else, and the point is to see what it does next. They are evaluated anyway and recorded per
request as ``expect_unmet``. A request beyond the end of the script gets a plain ``end_turn`` reply saying the
script is used up (not an HTTP error, which a client could retry), and is counted in ``beyond_script``.

Clients (``CLIENTS``): ``agentlab`` (this CLI, in a subprocess), ``tool-runner`` (the anthropic SDK's beta
tool runner, in-process), ``claude-code`` (the Claude Code CLI, headless; ``claude-code@VERSION`` picks an
installed version, ``make claude-code`` installs them), ``pydantic-ai`` (a pydantic-ai ``Agent`` with the demo
tools) and ``langchain`` (``langchain.agents.create_agent`` with ``ChatAnthropic``). The last two need the
``clients`` extra, which ``make record`` installs into its own venv. Any other agent is one runner function
away: ``observe("my-agent", runner=my_runner, version="1.0")``.

A record (``RECORD_FORMAT`` 1) is one JSON object: ``format``, ``client``, ``version``, ``scenario``, ``row``,
``description``, ``settings`` (how the client was run), ``notes``, ``requests``, ``probes`` (non-model
requests such as ``HEAD /``), ``summary`` (``requests``, ``actions``, ``max_tokens``, ``max_tokens_raised``,
``models``, ``streamed``, ``error_replies``, ``beyond_script``, ``expect_unmet``, ``steps_used``), ``result``
(the client's own ending: ``exit_code``, ``subtype``/``raised``/``stop_reason``, ``is_error``, ``text``, ...)
and ``timing`` (wall time and when each request arrived, left out of comparisons). Each request has ``n``,
``path``, ``model``, ``max_tokens``, ``stream``, ``step``, ``kind`` (the engine's: ``message``, ``stream``, ``error``,
``summary``, ``prompt_too_long``, ``unexpected`` for a request beyond the script, ...), ``action``,
``reply`` (status, stop_reason, block types or error type), ``appended`` (:func:`diff_requests`),
``tokens`` (the request's estimated size, measured with what differs between machines replaced by
placeholders: ``<tmp>``, ``<python>``, ``<repo>``, ``<os-release>``, ``<date>``; see
:func:`machine_replacements`), ``expect_unmet`` when a step's check did not hold, and for an error reply
``error`` (its message), ``headers`` (the retry-steering headers sent: ``x-should-retry``, ``retry-after``)
and ``api_headers`` (what the real API sends in that case, from the scenario). Fields are only ever added,
never renamed.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backend.scenario import Scenario, is_summary_request, load_scenario, request_payload, scenario_names
from ..backend.scripted import ScenarioEngine, normalise_request
from ..backend.serve import ScenarioServer
from ..core.compaction import estimate_tokens, text_blocks
from ..core.errors import AgentlabError, ConfigError
from ..core.paths import observed_dir, project_dir, sandbox_dir
from . import frameworks

REPO = project_dir()
OBSERVED_DIR = observed_dir()
CLIENTS_PINS = OBSERVED_DIR / "clients-constraints.txt"  # the framework versions the records are of
SANDBOX_DIR = sandbox_dir()
CLAUDE_DIR = REPO / "tool" / "claude-code"  # make claude-code: tool/claude-code/<version>/node_modules/...
CLAUDE_BIN = CLAUDE_DIR / "node_modules" / ".bin" / "claude"  # an older single-version install
CLAUDE_CODE_PINNED = "2.1.197"  # the version `claude-code` means without @VERSION (the Makefile's default)
RECORD_FORMAT = 1
TEXT_LIMIT = 160
DEFAULT_TIMEOUT = 180.0
CLAUDE_MAX_TURNS = 20  # Claude Code's --max-turns when the scenario sets none: bounded, never the binding limit
OBSERVE_KEY = "agentlab-observe-key"
SERVER_TOOLS_NOT_OFFERED = "never offered the server tool"  # in a record's notes (grade reports them)


# -- what changed between two requests ------------------------------------------------------------------

def _short(text: Any, limit: int = TEXT_LIMIT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _norm_block(block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    return {k: v for k, v in block.items() if k != "cache_control" and v is not None}


def _norm_message(message: Any) -> dict[str, Any]:
    if not isinstance(message, dict):
        return {"role": None, "content": [message]}
    blocks = text_blocks(message.get("content"))
    return {"role": message.get("role"), "content": [_norm_block(b) for b in blocks]}


def _result_text(block: dict[str, Any]) -> str:
    inner = block.get("content")
    if isinstance(inner, list):
        return "\n".join(str(b.get("text", "")) for b in inner if isinstance(b, dict))
    return "" if inner is None else str(inner)


def describe_message(message: dict[str, Any]) -> dict[str, Any]:
    """A short, stable description of one message: role, block types, texts, tool calls and results."""
    m = _norm_message(message)
    out: dict[str, Any] = {"role": m["role"], "blocks": [b.get("type") if isinstance(b, dict) else "?"
                                                          for b in m["content"]]}
    texts = [_short(b.get("text", "")) for b in m["content"] if isinstance(b, dict) and b.get("type") == "text"]
    if texts:
        out["texts"] = texts
    uses = [{"id": b.get("id"), "name": b.get("name")} for b in m["content"]
            if isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use")]
    if uses:
        out["tool_uses"] = uses
    results = [{"tool_use_id": b.get("tool_use_id"), "is_error": bool(b.get("is_error")),
                "content": _short(_result_text(b))}
               for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        out["tool_results"] = results
    return out


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return str(system or "")


def _merged_text(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The text ``new`` adds when it is ``old`` with more text merged in (same role, no non-text block lost,
    every old text still there in order); None otherwise."""
    if old["role"] != new["role"]:
        return None

    def parts(m: dict[str, Any]) -> tuple[list[str], list[Any]]:
        texts = [str(b.get("text", "")) for b in m["content"] if isinstance(b, dict) and b.get("type") == "text"]
        others = [b for b in m["content"] if not (isinstance(b, dict) and b.get("type") == "text")]
        return texts, others

    (old_texts, old_other), (new_texts, new_other) = parts(old), parts(new)
    if old_other != new_other[:len(old_other)]:
        return None
    joined = "\n".join(new_texts)
    position = 0
    for text in old_texts:
        found = joined.find(text, position)
        if found < 0:
            return None
        position = found + len(text)
    rest = joined[position:].strip()
    if not rest:
        rest = "\n".join(t for t in new_texts if t not in old_texts).strip()
    return rest or None


def diff_requests(prev_body: dict[str, Any] | None, body: dict[str, Any]) -> dict[str, Any]:
    """What ``body`` changed relative to ``prev_body`` (None for the first request): a pure function.

    Messages are compared after dropping ``cache_control`` and null fields and turning string content into
    a text block, so clients that move cache markers around still show an unchanged history. ``kept`` is the
    length of the common prefix; ``dropped`` counts earlier messages that did not survive (a rewritten or
    compacted history); ``extended_last`` says the previous last message was continued in place (a
    paused assistant turn merged with its continuation); ``merged_last`` says text was merged into the
    previous last message instead (a re-prompt written into the user turn, not a compaction). ``appended``
    describes the messages after the prefix; ``injected_user_texts``, ``injected_system_texts`` (``role:
    system`` items), ``tool_results``
    and ``assistant_blocks`` pick them apart. ``changed`` lists top-level fields that differ.
    """
    prev = prev_body or {}
    before = [_norm_message(m) for m in prev.get("messages") or []]
    after = [_norm_message(m) for m in body.get("messages") or []]
    kept = 0
    while kept < min(len(before), len(after)) and before[kept] == after[kept]:
        kept += 1
    extended = merged = False
    extra: dict[str, Any] | None = None
    if kept == len(before) - 1 and len(after) > kept:
        old, new = before[kept], after[kept]
        n = len(old["content"])
        extended = (old["role"] == new["role"] and len(new["content"]) > n and new["content"][:n] == old["content"])
        if extended:
            extra = {"role": new["role"], "content": new["content"][n:]}
        else:  # the same message with text merged into it (a re-prompt written into the last user turn)
            added = _merged_text(old, new)
            if added is not None:
                merged = True
                extra = {"role": new["role"], "content": [{"type": "text", "text": added}]}
    appended: list[dict[str, Any]] = []
    if extra is not None:
        appended.append({**describe_message(extra), "extends_previous": True, **({"merged": True} if merged else {})})
        start = kept + 1
    else:
        start = kept
    appended += [describe_message(m) for m in after[start:]]
    user_texts = [t for a in appended if a["role"] == "user" for t in a.get("texts", [])]
    system_texts = [t for a in appended if a["role"] == "system" for t in a.get("texts", [])]
    results = [r for a in appended for r in a.get("tool_results", [])]
    assistant = [b for a in appended if a["role"] == "assistant" for b in a["blocks"]]
    changed: dict[str, Any] = {}
    if prev_body is not None:
        for key in ("model", "max_tokens", "stream"):
            if prev.get(key) != body.get(key):
                changed[key] = [prev.get(key), body.get(key)]
        if _system_text(prev) != _system_text(body):
            changed["system"] = True
        if prev.get("tools") != body.get("tools"):
            changed["tools"] = True
    last = after[-1]["role"] if after else None
    return {
        "messages_before": len(before), "messages_after": len(after), "kept": kept,
        "dropped": len(before) - kept - (1 if extra is not None else 0), "extended_last": extended,
        "merged_last": merged,
        "same_messages": prev_body is not None and before == after,
        "appended": appended, "injected_user_texts": user_texts, "injected_system_texts": system_texts,
        "tool_results": results, "assistant_blocks": assistant, "changed": changed,
        "summary_request": is_summary_request(normalise_request(body)), "ends_with": last,
    }


def classify(diff: dict[str, Any], prev_reply: dict[str, Any] | None) -> str:
    """One word for what a request did, given its diff and the reply to the previous main request."""
    if prev_reply is None:
        return "first"
    if diff["summary_request"]:
        return "summary"
    if diff["dropped"] > 0:
        return "compacted"
    model_changed = "model" in diff["changed"]
    if diff["same_messages"]:
        if model_changed:
            return "fallback_model"
        if prev_reply.get("status", 200) >= 400:
            return "retry"
        old, new = diff["changed"].get("max_tokens", [0, 0])
        if (new or 0) > (old or 0):
            return "escalate"
        return "resend"
    if diff["tool_results"]:
        return "tool_results"
    if diff["ends_with"] == "assistant" or (diff["extended_last"] and diff["appended"][0]["role"] == "assistant"):
        return "resume"
    if diff["injected_user_texts"] or diff["injected_system_texts"]:
        if prev_reply.get("stop_reason") in ("max_tokens", "model_context_window_exceeded"):
            return "continuation"
        if prev_reply.get("stop_reason") == "refusal":  # asked the refusing model again, with a note
            return "reprompt"
        if prev_reply.get("status", 200) < 400 and not prev_reply.get("blocks"):
            return "nudge"
        return "reprompt"
    return "other"


# -- reading what the server sent back ----------------------------------------------------------------------

def reply_summary(status: int, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """Status, stop_reason and content block types of a reply (JSON or SSE), or the error type."""
    out: dict[str, Any] = {"status": status}
    if status >= 400:
        try:
            out["error"] = json.loads(body)["error"]["type"]
        except (ValueError, KeyError, TypeError):
            out["error"] = "unknown"
        return out
    if headers.get("content-type", "").startswith("text/event-stream"):
        blocks: list[str] = []
        stop = None
        for line in body.decode("utf-8", "replace").splitlines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event.get("type") == "content_block_start":
                blocks.append(event["content_block"]["type"])
            elif event.get("type") == "message_delta":
                stop = event["delta"].get("stop_reason")
        out.update(stop_reason=stop, blocks=blocks)
        return out
    try:
        message = json.loads(body)
    except ValueError:
        return out
    if isinstance(message, dict) and message.get("type") == "message":
        out.update(stop_reason=message.get("stop_reason"), blocks=[b.get("type") for b in message["content"]])
    return out


# -- running a client ----------------------------------------------------------------------------------------

@dataclass
class ClientOutcome:
    """How a client run ended, as the client reported it."""

    result: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


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
    from ..lab import RunConfig

    try:
        result = RunConfig.from_scenario(scenario, base_url=base_url, stream=True).loop().run()
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
        result["text"] = _short(data.get("result", ""))
    elif err.strip():
        result["stderr"] = _short(err.strip().splitlines()[-1], 300)
    return ClientOutcome(result, {"command": ["agentlab", "run", scenario.name, "--base-url", "<server>",
                                              "--json", "--stream"]})


def _runner_tools(scenario: Scenario) -> list[Any]:
    """The demo tools (calculator, get_weather, read_file, run_tests) as the SDK's ``@beta_tool`` functions."""
    from anthropic import beta_tool

    from ..core.tools import TestsState, ToolError, calculate, fake_weather, read_sandboxed, run_pretend_tests

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
    import anthropic

    client = anthropic.Anthropic(base_url=base_url, api_key=OBSERVE_KEY, timeout=timeout)
    params: dict[str, Any] = {"model": scenario.model, "max_tokens": scenario.max_tokens,
                              "messages": [{"role": "user", "content": scenario.prompt}],
                              "tools": [*(_runner_tools(scenario) if scenario.tools == "demo" else []),
                                        *(dict(t) for t in scenario.server_tools)]}  # server tools as they are
    if scenario.system:
        params["system"] = scenario.system
    if scenario.max_turns:
        params["max_iterations"] = scenario.max_turns
    if scenario.stop_sequences:
        params["stop_sequences"] = scenario.stop_sequences
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
        result["text"] = _short("".join(getattr(b, "text", "") for b in last.content))
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
        raise ConfigError(f"`{binary} --version` failed: {_short((out + err).strip(), 300)}")
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
        result["text"] = _short(final.get("result", ""))
    elif err.strip():
        result["stderr"] = _short(err.strip().splitlines()[-1], 300)
    result["events"] = dict(sorted(events.items()))
    shown = [a if a != str(settings) else "<settings.json>" for a in args]
    notes = ["the demo tools are not Claude Code tools: it answers their calls with is_error results"] \
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
    from ..core.tools import TestsState, calculate, fake_weather, read_sandboxed, run_pretend_tests

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


def _raised(result: dict[str, Any], exc: BaseException) -> None:
    result.update(raised=type(exc).__name__, is_error=True, error=_short(str(exc), 300))
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        result["status"] = status


def _missing_extra(package: str, exc: ImportError) -> ConfigError:
    return ConfigError(f"{package} is not installed ({exc}): it is in the `clients` extra, outside agentlab's own "
                       "dependencies. `make record` installs it into .venv-clients; or `pip install "
                       "'agentlab[clients]'`")


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
        raise _missing_extra("pydantic-ai", exc) from None
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
    notes = []
    if scenario.stop_hook is not None:
        notes.append("pydantic-ai has no Stop hooks: the scenario's hook is not applied")
    if scenario.fallback_model or scenario.refusal_fallback_model:
        notes.append("no FallbackModel configured: the scenario's fallback model is not used")
    result: dict[str, Any] = {"exit_code": None}
    try:
        run = agent.run_sync(scenario.prompt, usage_limits=limits)
    except Exception as exc:  # noqa: BLE001 -- what the framework raises is the observation
        _raised(result, exc)
    else:
        result.update(is_error=False, text=_short(run.output))
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
        raise _missing_extra("langchain / langchain-anthropic", exc) from None
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
             "langchain-anthropic": _package_version("langchain-anthropic"),
             "max_tokens": scenario.max_tokens, "max_retries": 2, "recursion_limit": recursion,
             "server_tools": [t.get("name") for t in scenario.server_tools]}
    notes = []
    if scenario.stop_hook is not None:
        notes.append("create_agent has no Stop hooks: the scenario's hook is not applied")
    if scenario.fallback_model or scenario.refusal_fallback_model:
        notes.append("no fallback model middleware configured: the scenario's fallback model is not used")
    result: dict[str, Any] = {"exit_code": None}
    try:
        state = agent.invoke({"messages": [{"role": "user", "content": scenario.prompt}]},
                             {"recursion_limit": recursion})
    except Exception as exc:  # noqa: BLE001 -- what the framework raises is the observation
        _raised(result, exc)
    else:
        last = state["messages"][-1]
        meta = getattr(last, "response_metadata", {}) or {}
        result.update(is_error=False, stop_reason=meta.get("stop_reason"), text=_short(_lc_text(last)))
    return ClientOutcome(result, shown, notes)


def _lc_text(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        raise ConfigError(f"{name} is not installed: it is in the `clients` extra; `make record` installs it "
                          "into .venv-clients") from None


def _agentlab_version() -> str:
    from .. import __version__

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
    Client("pydantic-ai", run_pydantic_ai, lambda: _package_version("pydantic-ai-slim"),
           "a pydantic-ai Agent (pydantic-ai-slim[anthropic]) with the demo tools", 4),
    Client("langchain", run_langchain, lambda: _package_version("langchain"),
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


# -- one observation -----------------------------------------------------------------------------------------

def lenient(scenario: Scenario) -> Scenario:
    """The scenario without its ``expect`` checks (they are evaluated afterwards instead)."""
    return scenario.model_copy(update={"steps": [s.model_copy(update={"expect": None}) for s in scenario.steps]})


def build_record(scenario: Scenario, server: ScenarioServer, client: str, version: str,
                 outcome: ClientOutcome, wall_s: float,
                 replacements: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The behaviour record of one run, from the requests the server saw and the replies it gave.

    ``replacements`` (old, new) are applied to each request before its size is estimated, so that what
    differs from machine to machine (the temporary folder, the OS release a client writes into its system
    prompt) does not change the ``tokens`` of a record.
    """
    requests: list[dict[str, Any]] = []
    arrivals: list[float] = []
    probes: list[str] = []
    prev_body: dict[str, Any] | None = None
    prev_reply: dict[str, Any] | None = None
    prev_step_tokens: int | None = None
    for exchange in server.exchanges:
        recorded, reply = exchange.request, exchange.reply
        route = recorded.path.split("?", 1)[0]
        if recorded.method != "POST" or not route.endswith("/messages") or recorded.body is None:
            probes.append(f"{recorded.method} {route}")
            continue
        body = recorded.body
        normalised = normalise_request(body)
        summary = reply_summary(reply.status, reply.headers, reply.body)
        diff = diff_requests(prev_body, body)
        entry: dict[str, Any] = {
            "n": len(requests) + 1, "path": recorded.path, "model": body.get("model"),
            "max_tokens": body.get("max_tokens"), "stream": recorded.stream, "step": recorded.step,
            "kind": recorded.kind, "action": classify(diff, prev_reply), "reply": summary, "appended": diff,
        }
        if exchange.thread is not None:
            entry["thread"] = exchange.thread.get("type")
            entry["sent_messages"] = len((exchange.sent or {}).get("messages") or [])
        tokens = estimate_tokens(request_payload(_scrub(normalised, replacements or [])))
        if recorded.step is not None:
            step = scenario.steps[recorded.step]
            if step.expect is not None:
                unmet = step.expect.failures(normalised, recorded.stream, prev_step_tokens)
                if unmet:
                    entry["expect_unmet"] = unmet
            prev_step_tokens = tokens
        entry["tokens"] = tokens
        if reply.status >= 400:
            try:
                entry["error"] = _short(json.loads(reply.body)["error"]["message"], 300)
            except (ValueError, KeyError, TypeError):
                pass
            steering = {k: v for k, v in reply.headers.items() if k.lower() in RETRY_HEADERS}
            entry["headers"] = dict(sorted(steering.items()))
            spec = _error_spec(scenario, recorded.step, normalised, recorded.stream)
            if spec is not None and spec.api_headers is not None:
                entry["api_headers"] = dict(sorted((k.lower(), v) for k, v in spec.api_headers.items()))
        requests.append(entry)
        arrivals.append(exchange.at)
        if prev_body is None or not diff["summary_request"]:
            prev_body, prev_reply = body, summary
    notes = list(outcome.notes)
    if requests and requests[0]["kind"] == "prompt_too_long":
        notes.append(f"the first request ({requests[0]['tokens']:,} tokens) already exceeds the scenario's "
                     f"context_window ({scenario.context_window:,} tokens), so the scripted branch is never reached")
    if scenario.server_tools:
        offered = {t.get("name") for r in requests for t in (_body_tools(server, r["n"]) or [])}
        missing = [t.get("name") for t in scenario.server_tools if t.get("name") not in offered]
        if missing:
            notes.append(f"the client {SERVER_TOOLS_NOT_OFFERED}(s) {', '.join(map(str, missing))} that the "
                         "scripted model uses; the live API would not have answered with their blocks")
    record = {
        "format": RECORD_FORMAT, "client": client, "version": version, "scenario": scenario.name,
        "row": scenario.row, "description": scenario.description,
        "settings": outcome.settings, "notes": notes,
        "requests": requests, "probes": sorted(set(probes)),
        "summary": _summary(scenario, requests), "result": outcome.result,
        "timing": {"wall_s": round(wall_s, 3),
                   "request_s": [round(t - arrivals[0], 3) for t in arrivals] if arrivals else []},
    }
    return record


RETRY_HEADERS = ("x-should-retry", "retry-after", "retry-after-ms")


def _error_spec(scenario: Scenario, step: int | None, request: dict[str, Any], stream: bool):
    """The ErrorSpec the scenario answered ``request`` with at ``step`` (None for engine errors)."""
    from ..backend.scripted import choose_reply

    if step is None or step >= len(scenario.steps):
        return None
    return choose_reply(scenario.steps[step], request, stream).error


def _body_tools(server: ScenarioServer, n: int) -> list[dict[str, Any]] | None:
    """The ``tools`` of the n-th model request the server saw (1-based), or None."""
    bodies = [e.request.body for e in server.exchanges if e.request.method == "POST" and e.request.body is not None
              and e.request.path.split("?", 1)[0].endswith("/messages")]
    tools = bodies[n - 1].get("tools") if n <= len(bodies) else None
    return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None


def _summary(scenario: Scenario, requests: list[dict[str, Any]]) -> dict[str, Any]:
    def distinct(values: Iterable[Any]) -> list[Any]:
        out: list[Any] = []
        for v in values:
            if not out or out[-1] != v:
                out.append(v)
        return out

    streams = {r["stream"] for r in requests}
    max_tokens = distinct(r["max_tokens"] for r in requests)
    steps = {r["step"] for r in requests if r["step"] is not None}
    return {
        "requests": len(requests),
        "actions": [r["action"] for r in requests[1:]],
        "max_tokens": max_tokens,
        "max_tokens_raised": any(b > a for a, b in zip(max_tokens, max_tokens[1:], strict=False)
                                 if isinstance(a, int) and isinstance(b, int)),
        "models": distinct(r["model"] for r in requests),
        "streamed": "all" if streams == {True} else "none" if streams == {False} else "mixed" if streams else "-",
        "error_replies": sum(1 for r in requests if r["reply"]["status"] >= 400 and r["kind"] == "error"),
        "beyond_script": sum(1 for r in requests if r["kind"] == "unexpected"),
        "expect_unmet": sum(1 for r in requests if r.get("expect_unmet")),
        "steps_used": f"{len(steps)}/{len(scenario.steps)}",
    }


def _scrub(value: Any, replacements: list[tuple[str, str]]) -> Any:
    text = json.dumps(value, ensure_ascii=False)
    for old, new in replacements:
        if old:
            text = text.replace(json.dumps(old, ensure_ascii=False)[1:-1], new)
    text = re.sub(r"http://127\.0\.0\.1:\d+", "<server>", text)
    text = re.sub(r"\b20\d\d-\d\d-\d\d\b", "<date>", text)
    return json.loads(text)


def machine_replacements(tmp: str | Path) -> list[tuple[str, str]]:
    """What differs from one machine or run to the next, and the placeholder that stands for it in a record:
    the interpreter (which venv records), the temporary folder, the checkout, and the OS release (Claude Code
    writes ``OS Version: Linux <release>`` into its system prompt)."""
    tmp = str(tmp)
    found = [(str(Path(sys.executable).resolve()), "<python>"), (sys.executable, "<python>"),
             (str(Path(tmp).resolve()), "<tmp>"), (tmp, "<tmp>"), (str(REPO), "<repo>")]
    release = platform.release()
    if release:
        found.append((release, "<os-release>"))
    return found


def observe_scenario(client: str, scenario: str | Scenario, *, version: str | None = None,
                     timeout: float = DEFAULT_TIMEOUT, runner: Runner | None = None) -> dict[str, Any]:
    """Run ``client`` once against a fresh server for ``scenario`` and return its behaviour record.

    Any agent can be observed by passing a ``runner(scenario, base_url, workdir, timeout) -> ClientOutcome``
    and a ``version`` together with a client name of your choosing.
    """
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    if runner is None:
        known = resolve_client(client)
        runner, version = known.runner, version or known.version()
    elif not version:
        raise ConfigError(f"client {client!r} has a runner of its own: give its version= too")
    name = client.partition("@")[0]
    with tempfile.TemporaryDirectory(prefix="agentlab-observe-") as tmp:
        replacements = machine_replacements(tmp)
        engine = ScenarioEngine(lenient(sc), sizing=lambda request: _scrub(request, replacements))
        with ScenarioServer(engine) as server:
            started = time.perf_counter()
            outcome = runner(sc, server.base_url, Path(tmp), timeout)
            wall = time.perf_counter() - started
        record = build_record(sc, server, name, version, outcome, wall, replacements)
        return _scrub(record, replacements)


def record_path(out: Path, client: str, version: str, scenario: str) -> Path:
    return out / client / version / f"{scenario}.json"


def write_record(record: dict[str, Any], out: str | Path | None = None) -> Path:
    path = record_path(Path(out) if out else OBSERVED_DIR, record["client"], record["version"], record["scenario"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def observe(client: str, scenarios: Iterable[str] | None = None, *, out: str | Path | None = None,
            jobs: int | None = None, timeout: float = DEFAULT_TIMEOUT, in_process: bool = False,
            progress: Callable[[dict[str, Any], Path], None] | None = None, runner: Runner | None = None,
            version: str | None = None) -> list[dict[str, Any]]:
    """Observe ``client`` on each scenario (default: all), write the records, return them in order.

    ``client`` is a name from ``CLIENTS`` (``claude-code@VERSION`` for an installed Claude Code version), or
    any name together with ``runner=`` and ``version=``: adding a client is one function. ``in_process=True``
    runs the ``agentlab`` client through ``cli.main`` here instead of a subprocess, one scenario at a time;
    the records are the same.
    """
    if runner is None:
        known = resolve_client(client)
        runner, default_jobs = known.runner, known.jobs
        if in_process and client == "agentlab":  # captures stdout: one scenario at a time
            runner, default_jobs, jobs = run_agentlab_in_process, 1, 1
        version = version or known.version()
    else:
        if not version:
            raise ConfigError(f"client {client!r} has a runner of its own: give its version= too")
        default_jobs = 1
    names = list(scenarios or scenario_names())
    loaded = [load_scenario(n) for n in names]  # fail on a bad name before running anything
    jobs = jobs or default_jobs

    def one(sc: Scenario) -> dict[str, Any]:
        record = observe_scenario(client, sc, version=version, timeout=timeout, runner=runner)
        path = write_record(record, out)
        if progress is not None:
            progress(record, path)
        return record

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, loaded))


# -- reading records back ----------------------------------------------------------------------------------

def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its wall time: what comparisons between runs look at."""
    return {k: v for k, v in record.items() if k != "timing"}


def load_records(out: str | Path | None = None) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """Every committed record: ``{(client, version): {scenario: record}}``."""
    root = Path(out) if out else OBSERVED_DIR
    found: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for path in sorted(root.glob("*/*/*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        found.setdefault((record["client"], record["version"]), {})[record["scenario"]] = record
    return found


def drift(fresh: list[dict[str, Any]], out: str | Path | None = None) -> list[str]:
    """What differs between fresh records and the committed ones, one line per scenario (empty: none)."""
    committed = load_records(out)
    lines = []
    unrecorded: set[tuple[str, str]] = set()
    for record in fresh:
        key = (record["client"], record["version"])
        if key not in committed:
            if key not in unrecorded:  # a whole version without records: one line that says what to do
                unrecorded.add(key)
                others = sorted(v for c, v in committed if c == key[0])
                lines.append(f"{key[0]} {key[1]} has no committed records (committed: {', '.join(others) or 'none'})"
                             f"; the records are of the versions in {CLIENTS_PINS.name}, which `make record` "
                             f"installs; to observe {key[1]}, pin it there and run `make record UPDATE=1`")
            continue
        saved = committed[key].get(record["scenario"])
        if saved is None:
            lines.append(f"{record['scenario']}: no committed {record['client']} {record['version']} record")
        elif comparable(saved) != comparable(record):
            lines.append(f"{record['scenario']}: now {describe(record)!r}; committed {describe(saved)!r}"
                         + ("" if describe(record) != describe(saved) else " (the details differ)"))
    return lines


def observe_main(args: Any) -> int:
    """``agentlab observe CLIENT [SCENARIO...] [--out DIR] [--check] [--list]``."""
    if args.list or not args.client:
        width = max(map(len, CLIENTS))
        for name, client in CLIENTS.items():
            print(f"{name:{width}s} {client.about}")
        installed = installed_claude_versions()
        print(f"{'':{width}s} Claude Code versions installed here: {', '.join(installed) or 'none'}")
        return 0 if args.list else 2
    try:
        resolve_client(args.client).version()  # an unknown or missing client fails before anything runs
    except ConfigError as exc:
        if not args.skip_missing or str(exc).startswith("unknown client"):
            raise
        print(f"skipping {args.client}: {exc}")
        return 0

    def show(record: dict[str, Any], path: Path) -> None:
        result = record["result"]
        ending = result.get("subtype") or result.get("raised") or result.get("stop_reason")
        flag = " is_error" if result.get("is_error") else ""
        actions = ", ".join(record["summary"]["actions"]) or "-"
        code = "" if result.get("exit_code") is None else f" (exit {result['exit_code']})"
        print(f"{record['scenario']:26s} {record['summary']['requests']:2d} request(s)  {actions}  -> "
              f"{ending}{flag}{code}  {path}", flush=True)

    if args.out is not None and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ConfigError(f"--out {args.out}: is a file; --out takes a folder for the behaviour records")
    if not args.check:
        observe(args.client, args.scenarios or None, out=args.out, progress=show)
        return 0
    with tempfile.TemporaryDirectory(prefix="agentlab-check-") as tmp:
        fresh = observe(args.client, args.scenarios or None, out=tmp,
                        progress=lambda record, path: show(record, Path("<tmp>") / path.relative_to(tmp)))
    differing = drift(fresh, args.out)
    for line in differing:
        print(f"DRIFT {line}")
    print(f"{args.client}: {len(fresh) - len(differing)} of {len(fresh)} record(s) reproduce the committed ones")
    return 1 if differing else 0


# -- describing records -----------------------------------------------------------------------------------------

def outcome(record: dict[str, Any]) -> str:
    """``error`` when the run ended in error as the client reported it (is_error, a raised error, a non-zero
    exit, a timeout), else ``ok``."""
    result = record.get("result") or {}
    failed = (bool(result.get("is_error")) or bool(result.get("raised")) or bool(result.get("timed_out"))
              or result.get("exit_code") not in (0, None))
    return "error" if failed else "ok"


def overflowed(record: dict[str, Any]) -> bool:
    """The client's first request was already over the scenario's context window: the run says nothing about
    the branch the scenario is for (Claude Code's own system prompt and tools are ~29k tokens)."""
    requests = record.get("requests") or []
    return bool(requests) and requests[0].get("kind") == "prompt_too_long"


def _compress(actions: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(actions):
        j = i
        while j < len(actions) and actions[j] == actions[i]:
            j += 1
        out.append(actions[i] + (f" ×{j - i}" if j - i > 1 else ""))
        i = j
    return ", ".join(out)


def describe(record: dict[str, Any]) -> str:
    """A short description of a behaviour record, e.g. "4 requests: continuation ×3; no max_tokens raise;
    success, is_error (exit 1)"."""
    summary, result = record["summary"], record.get("result") or {}
    if overflowed(record):
        first = record["requests"][0]
        window = re.search(r"> (\d+) maximum", first.get("error", ""))
        size = f"{first['tokens']:,}" if isinstance(first.get("tokens"), int) else "?"
        return (f"not comparable: its first request (~{size} tokens of its own system prompt and tools) is "
                f"already over the {int(window.group(1)):,}-token window" if window else
                f"not comparable: its first request (~{size} tokens) is already over the window")
    n = summary["requests"]
    parts = [f"{n} request{'s' if n != 1 else ''}" + (f": {_compress(summary['actions'])}"
                                                      if summary["actions"] else "")]
    max_tokens = [m for m in summary["max_tokens"] if isinstance(m, int)]
    if summary["max_tokens_raised"]:
        parts.append("max_tokens " + "→".join(str(m) for m in max_tokens))
    elif str(record.get("row")) in ("1", "3"):
        parts.append("no max_tokens raise")
    if len(summary["models"]) > 1:
        parts.append("model " + "→".join(str(m) for m in summary["models"]))
    if summary.get("beyond_script"):
        parts.append(f"{summary['beyond_script']} beyond the script")
    if result.get("timed_out"):
        ending = "timed out"
    elif result.get("raised"):
        status = f" {result['status']}" if result.get("status") else ""
        ending = f"raised {result['raised']}{status}"
    elif result.get("subtype"):
        ending = result["subtype"] + (", is_error" if result.get("is_error") and result["subtype"] == "success"
                                      else "")
    else:
        ending = f"stop_reason {result.get('stop_reason')}"
    if result.get("exit_code") not in (None, 0):
        ending += f" (exit {result['exit_code']})"
    parts.append(ending)
    return "; ".join(parts)


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key for client versions: numbers as numbers, so 2.1.197 < 2.1.332; any other part ("x", "rc1")
    sorts after the numbers and by its text, never raising."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in version.replace("-", ".").split("."))
