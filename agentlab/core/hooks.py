"""Hooks: Claude Code's hook protocol, for Python callables and for shell commands.

A hook is asked for its opinion at fixed points of the loop (the events in ``HOOK_EVENTS``). It comes in
two forms that behave the same way:

* a Python callable ``fn(payload) -> dict | str | None``, registered with ``Hooks.on()``; it returns what a
  command would print (a dict is the JSON object, a str is plain stdout text, None is no opinion). If it
  raises, that is recorded as a non-blocking error and the run goes on;
* a command configured exactly as in Claude Code's ``settings.json``::

      {"hooks": {"Stop": [{"matcher": "", "hooks": [{"type": "command", "command": "...", "timeout": 30}]}]}}

  run with ``shell=True``, the event's JSON on stdin, in the configured ``cwd``, with ``CLAUDE_PROJECT_DIR``
  set to that directory. A hook script written for Claude Code runs here unchanged.

The answer, as Claude Code reads it:

* exit 0: stdout is parsed as JSON when it starts with ``{``. ``{"decision": "block", "reason": ...}`` blocks
  Stop, PostToolUse, UserPromptSubmit and PreCompact; PreToolUse answers with ``hookSpecificOutput``
  (``permissionDecision`` allow/deny/ask, ``permissionDecisionReason``, ``updatedInput``) or the older
  ``{"decision": "approve" | "block"}``; ``hookSpecificOutput.additionalContext`` adds context;
  ``{"continue": false, "stopReason": ...}`` ends the whole run. Plain text is context for UserPromptSubmit
  and ignored elsewhere;
* exit 2: blocks, and stderr is the reason (PreToolUse: deny; PostCompact cannot block);
* any other exit code, a timeout, output that looks like JSON but does not parse, or output with fields of
  the wrong type: a non-blocking error, recorded in the ``HookRun`` and otherwise ignored.

Where agentlab chooses (Claude Code leaves it open or differs between versions):

* all matching hooks of one firing run concurrently in a thread pool, as Claude Code runs them in
  parallel; the runs are reported in configuration order (settings first, then callables in the order
  they were registered), so traces are deterministic. Identical command strings run once per firing;
* PreToolUse/PostToolUse matchers match the tool name, PreCompact/PostCompact matchers the ``trigger``
  ("manual" / "auto"); other events ignore the matcher. A matcher is ``*``, empty or missing (everything),
  a name or ``A|B`` list (exact), or else a regular expression that must match the whole name;
* several ``updatedInput`` answers: the last one in configuration order wins; it is dropped when the
  aggregate decision is deny;
* ``ask`` in a non-interactive run becomes ``deny``, with a reason that says so;
* events of Claude Code that agentlab never fires (SessionStart, Notification, ...) may stay in a settings
  file: they are listed in ``Hooks.ignored_events`` and never run. Names close to an agentlab event
  (``stop``, ``PreToolUsed``) are reported as errors.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import re
import shlex
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .paths import FileTooLarge, NotAFile, read_small_file
from .processes import Talk as _Talk
from .processes import kill_carrying, kill_group, kill_tree, tagged, tagged_env, talk
from .trace import without_lone_surrogates

HOOK_EVENTS = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "PreCompact", "PostCompact")

# The payload field a matcher is compared with; events not listed here take no matcher.
MATCH_FIELD = {"PreToolUse": "tool_name", "PostToolUse": "tool_name",
               "PreCompact": "trigger", "PostCompact": "trigger"}
# Events where "decision": "block" (or exit 2) blocks; PreToolUse blocks through its permission instead.
BLOCKING_EVENTS = frozenset({"UserPromptSubmit", "PostToolUse", "Stop", "PreCompact"})
# Events where hookSpecificOutput.additionalContext is read; plain stdout text only for UserPromptSubmit.
CONTEXT_EVENTS = frozenset({"UserPromptSubmit", "PreToolUse", "PostToolUse"})
PLAIN_TEXT_CONTEXT_EVENTS = frozenset({"UserPromptSubmit"})

PERMISSION_ORDER = ("deny", "ask", "allow")  # the strongest answer wins
NOT_INTERACTIVE = ("a hook answered 'ask' (confirm with the user), but no one can answer in a "
                   "non-interactive run, so the tool call is denied")
_MAX_WORKERS = 8
_CLIP = 400  # characters of bad output quoted in an error message
MAX_OUTPUT_BYTES = 1_000_000  # read at most this much of a hook's stdout and of its stderr
MAX_KEPT_CHARS = 10_000  # stdout, stderr and reasons kept in the trace and fed to the model
MAX_TIMEOUT_S = 86_400.0  # a hook's "timeout" may be at most a day
_DRAIN_S = 0.5  # after a hook exits, how long its buffered output is still read
_POLL_S = 0.05  # how often a running hook is checked for having exited


class HookConfigError(ConfigError):
    """Invalid hook settings; the message names the file and the JSON path of the bad field."""


@dataclass
class HookRun:
    """One hook execution, for the trace (JSON-able via ``dataclasses.asdict``)."""

    event: str
    source: str  # "python" | "command"
    name: str  # the command string or the callable's __qualname__
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    error: str | None  # non-blocking error: bad exit code, garbage JSON, timeout, exception
    decision: str | None  # "block" | "allow" | "deny" | "ask" | None
    reason: str | None
    duration_ms: float


@dataclass
class HookOutcome:
    """What all the hooks of one event firing said together."""

    event: str
    runs: list[HookRun]
    blocked: bool = False  # Stop/PostToolUse/UserPromptSubmit/PreCompact "block" or exit 2
    reason: str | None = None  # the block reasons, joined by "\n"
    permission: str | None = None  # PreToolUse aggregate: deny > ask > allow
    permission_reason: str | None = None
    updated_input: dict[str, Any] | None = None
    additional_context: list[str] = field(default_factory=list)
    stop_loop: bool = False  # some hook said {"continue": false}
    stop_reason: str | None = None  # its "stopReason"
    system_messages: list[str] = field(default_factory=list)  # "systemMessage": shown to the user only

    @property
    def errors(self) -> list[str]:
        """The non-blocking errors of this firing, one line per failed run."""
        return [f"{run.name}: {run.error}" for run in self.runs if run.error]


@dataclass
class _Reply:
    """What one hook said, before aggregation."""

    decision: str | None = None
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    context: list[str] = field(default_factory=list)
    stop_loop: bool = False
    stop_reason: str | None = None
    system_message: str | None = None


@dataclass(frozen=True)
class _Hook:
    event: str
    matches: Callable[[str | None], bool]
    command: str | None = None
    timeout: float | None = None
    fn: Callable[[dict[str, Any]], Any] | None = None

    @property
    def name(self) -> str:
        if self.command is not None:
            return self.command
        return getattr(self.fn, "__qualname__", None) or repr(self.fn)


class Hooks:
    """The hooks of a run: settings-file commands plus registered callables, fired with ``run()``."""

    def __init__(self, settings: dict[str, Any] | str | os.PathLike[str] | None = None, *, cwd: str | None = None,
                 session_id: str = "agentlab", transcript_path: str | None = None,
                 default_timeout: float = 60.0, interactive: bool = False,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.session_id = session_id
        self.transcript_path = transcript_path
        if (isinstance(default_timeout, bool) or not isinstance(default_timeout, int | float)
                or not 0 < default_timeout <= MAX_TIMEOUT_S):  # also refuses nan and inf
            raise ConfigError(f"Hooks(default_timeout=...): expected a number of seconds above 0 and at most "
                              f"{MAX_TIMEOUT_S:g}, got {default_timeout!r}")
        self.default_timeout = float(default_timeout)
        self.interactive = interactive
        self._clock = clock
        self.ignored_events: list[str] = []
        self._live: set[subprocess.Popen[bytes]] = set()  # hook processes running now
        self._answered: set[str] = set()  # the tags of hooks that answered: what they left running ends with the run
        self._live_lock = threading.Lock()
        data, source = _read_settings(settings)
        self._hooks: list[_Hook] = _parse_settings(data, source, self.ignored_events)

    # -- registration ---------------------------------------------------------------------------------

    def on(self, event: str, fn: Callable[[dict[str, Any]], Any] | None = None, *,
           matcher: str | None = None) -> Any:
        """Register ``fn`` for ``event``; without ``fn``, return a decorator that does."""
        _check_event(event)
        matches = _compile_matcher(event, matcher, f"Hooks.on({event!r})")

        def register(func: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
            if not callable(func):
                raise TypeError(f"Hooks.on({event!r}): expected a callable, got {type(func).__name__}")
            self._hooks.append(_Hook(event=event, matches=matches, fn=func))
            return func

        return register if fn is None else register(fn)

    def has(self, event: str) -> bool:
        _check_event(event)
        return any(hook.event == event for hook in self._hooks)

    def script_paths(self) -> list[str]:
        """The files the command hooks name (a script, its arguments), as they would be run here: words of each
        command that are existing files, with ``$CLAUDE_PROJECT_DIR`` expanded, relative to ``cwd``. A run
        must not write over them (its ``--trace`` would replace the script the hook runs)."""
        found: list[str] = []
        for hook in self._hooks:
            if hook.command is None:
                continue
            command = hook.command.replace("${CLAUDE_PROJECT_DIR}", self.cwd).replace("$CLAUDE_PROJECT_DIR", self.cwd)
            try:
                words = shlex.split(command)
            except ValueError:  # the shell will say what is wrong with it
                continue
            for word in words:
                word = word.split("=", 1)[1] if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word) else word
                path = os.path.normpath(os.path.join(self.cwd, word))
                if word and os.path.isfile(path) and path not in found:
                    found.append(path)
        return found

    # -- firing ---------------------------------------------------------------------------------------

    def run(self, event: str, payload: dict[str, Any], *, tool_name: str | None = None) -> HookOutcome:
        """Fire ``event``: run every matching hook and combine their answers into one HookOutcome.

        ``payload`` is the event-specific part; the common fields (session_id, transcript_path, cwd) are
        added unless the payload sets them, and hook_event_name is always the event.
        """
        stdin_text, selected = self._firing(event, payload, tool_name)
        if len(selected) <= 1:
            results = [self._run_one(hook, stdin_text) for hook in selected]
        else:
            pool = ThreadPoolExecutor(max_workers=min(len(selected), _MAX_WORKERS))
            try:
                results = list(pool.map(lambda hook: self._run_one(hook, stdin_text), selected))
            except BaseException:  # Ctrl-C lands here, not in the workers: stop their hooks, then let it through
                self.kill_running()
                raise
            finally:
                pool.shutdown(wait=True)
        return _aggregate(event, results, self.interactive)

    async def arun(self, event: str, payload: dict[str, Any], *, tool_name: str | None = None) -> HookOutcome:
        """``run()`` for an asyncio program: commands run as asyncio subprocesses, concurrently; callables
        run inline. The answer is combined exactly as ``run()`` combines it."""
        stdin_text, selected = self._firing(event, payload, tool_name)
        results = await asyncio.gather(*(self._arun_one(hook, stdin_text) for hook in selected))
        return _aggregate(event, list(results), self.interactive)

    def _firing(self, event: str, payload: dict[str, Any], tool_name: str | None) -> tuple[str, list[_Hook]]:
        """What every hook of one firing of ``event`` reads on stdin, and the hooks that match it."""
        _check_event(event)
        full = {"session_id": self.session_id, "transcript_path": self.transcript_path, "cwd": self.cwd,
                **payload, "hook_event_name": event}
        target = tool_name if tool_name is not None else full.get(MATCH_FIELD.get(event, ""))
        return json.dumps(full, ensure_ascii=False, default=str), self._select(event, target)

    async def _arun_one(self, hook: _Hook, stdin_text: str) -> tuple[HookRun, _Reply]:
        if hook.fn is not None:
            return self._run_callable(hook, stdin_text)
        return await self._arun_command(hook, stdin_text)

    async def _arun_command(self, hook: _Hook, stdin_text: str) -> tuple[HookRun, _Reply]:
        """``_run_command`` as an asyncio subprocess: the same input, limits, kills and answer."""
        timeout = hook.timeout if hook.timeout is not None else self.default_timeout
        env, tag = tagged_env({**os.environ, "CLAUDE_PROJECT_DIR": self.cwd})
        start = self._clock()
        assert hook.command is not None
        try:
            proc = tagged(await asyncio.create_subprocess_shell(
                hook.command, cwd=self.cwd, env=env, start_new_session=True,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE), tag)
        except OSError as exc:
            run = HookRun(event=hook.event, source="command", name=hook.name, exit_code=None, stdout="",
                          stderr="", timed_out=False, error=f"could not start: {exc}", decision=None,
                          reason=None, duration_ms=(self._clock() - start) * 1000.0)
            return run, _Reply()
        try:
            talk = await _atalk(proc, stdin_text.encode("utf-8", "backslashreplace"), timeout)
        except BaseException:  # cancelled while the hook runs: nothing it started outlives the run
            _kill_tree(proc)
            raise
        with self._live_lock:
            self._answered.add(tag)
        return self._command_answer(hook, proc.returncode, talk, timeout, start)

    def _select(self, event: str, target: str | None) -> list[_Hook]:
        chosen: list[_Hook] = []
        commands: set[str] = set()
        for hook in self._hooks:
            if hook.event != event or not hook.matches(target):
                continue
            if hook.command is not None:
                if hook.command in commands:
                    continue  # Claude Code runs an identical command once per firing
                commands.add(hook.command)
            chosen.append(hook)
        return chosen

    def _run_one(self, hook: _Hook, stdin_text: str) -> tuple[HookRun, _Reply]:
        if hook.fn is not None:
            return self._run_callable(hook, stdin_text)
        return self._run_command(hook, stdin_text)

    def _run_callable(self, hook: _Hook, stdin_text: str) -> tuple[HookRun, _Reply]:
        # The callable gets a fresh decoded copy: exactly what a command reads from stdin.
        start = self._clock()
        stdout = stderr = ""
        try:
            assert hook.fn is not None
            result = hook.fn(json.loads(stdin_text))
            if result is None:
                reply, error = _Reply(), None
            elif isinstance(result, str):
                stdout = result
                reply, error = _read_stdout(hook.event, result)
            elif isinstance(result, dict):
                stdout = json.dumps(result, ensure_ascii=False)  # raises for values a command cannot print
                reply, error = _read_json(hook.event, json.loads(stdout))
            else:
                reply, error = _Reply(), (f"returned {type(result).__name__}; "
                                          "expected a dict (the JSON answer), a str (plain output) or None")
        except Exception as exc:  # noqa: BLE001 - a broken hook must not break the run
            stderr = _where_it_failed(exc)
            reply, error = _Reply(), f"raised {type(exc).__name__}: {exc}"
        answer, answer_replaced = _capped_reply(reply)
        run = _capped(HookRun(event=hook.event, source="python", name=hook.name, exit_code=None, stdout=stdout,
                              stderr=stderr, timed_out=False, error=error, decision=reply.decision,
                              reason=reply.reason, duration_ms=(self._clock() - start) * 1000.0), answer_replaced)
        return run, answer

    def _run_command(self, hook: _Hook, stdin_text: str) -> tuple[HookRun, _Reply]:
        timeout = hook.timeout if hook.timeout is not None else self.default_timeout
        env, tag = tagged_env({**os.environ, "CLAUDE_PROJECT_DIR": self.cwd})
        start = self._clock()
        try:
            assert hook.command is not None
            proc = tagged(subprocess.Popen(hook.command, shell=True, cwd=self.cwd, env=env, start_new_session=True,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE), tag)
        except OSError as exc:
            run = HookRun(event=hook.event, source="command", name=hook.name, exit_code=None, stdout="",
                          stderr="", timed_out=False, error=f"could not start: {exc}", decision=None,
                          reason=None, duration_ms=(self._clock() - start) * 1000.0)
            return run, _Reply()
        with self._live_lock:
            self._live.add(proc)
        try:
            talk = _talk(proc, stdin_text.encode("utf-8", "backslashreplace"), timeout)
        except BaseException:  # Ctrl-C while the hook runs: nothing it started outlives the run
            _kill_tree(proc)
            raise
        finally:
            with self._live_lock:
                self._live.discard(proc)
                self._answered.add(tag)
        return self._command_answer(hook, proc.returncode, talk, timeout, start)

    def _command_answer(self, hook: _Hook, returncode: int | None, talk: _Talk, timeout: float,
                        start: float) -> tuple[HookRun, _Reply]:
        """What a finished command said, read as Claude Code reads it (the same for run() and arun())."""
        duration_ms = (self._clock() - start) * 1000.0
        stdout, stderr = _decode(talk.stdout), _decode(talk.stderr)
        error: str | None
        if talk.timed_out or returncode is None:
            reply, error = _Reply(), f"timed out after {timeout:g} s and was killed"
        else:
            reply, error = _read_exit(hook.event, returncode, stdout, stderr)
        if talk.overflow:
            error = _join([error, f"printed more than {MAX_OUTPUT_BYTES} bytes on "
                                  f"{' and '.join(talk.overflow)}; the rest was not read"])
        answer, answer_replaced = _capped_reply(reply)
        run = _capped(HookRun(event=hook.event, source="command", name=hook.name, exit_code=returncode,
                              stdout=stdout, stderr=stderr, timed_out=talk.timed_out, error=error,
                              decision=reply.decision, reason=reply.reason, duration_ms=duration_ms), answer_replaced)
        return run, answer

    def kill_running(self) -> None:
        """Kill every hook still running, with what it started (the run was interrupted), and what the hooks that
        answered left behind."""
        with self._live_lock:
            live = list(self._live)
        for proc in live:
            _kill_tree(proc)
        self.end_leftovers()

    def end_leftovers(self) -> int:
        """The run has ended: kill what the hooks that answered left running outside their process group (a
        ``setsid`` daemon; what stayed in the group went when the hook answered). One look at the process table
        for every hook of the run; returns how many processes were killed. The loop calls it when its run ends."""
        with self._live_lock:
            tags, self._answered = set(self._answered), set()
        return kill_carrying(tags)


# -- reading a hook's answer --------------------------------------------------------------------------

def _read_exit(event: str, code: int, stdout: str, stderr: str) -> tuple[_Reply, str | None]:
    if code == 0:
        return _read_stdout(event, stdout)
    if code == 2:
        return _exit_two(event, stderr)
    return _Reply(), f"exit code {code} (non-blocking): {stderr.strip() or '(no stderr)'}"


def _exit_two(event: str, stderr: str) -> tuple[_Reply, str | None]:
    reason = stderr.strip() or f"blocked by a {event} hook (exit code 2, nothing on stderr)"
    if event == "PreToolUse":
        return _Reply(decision="deny", reason=reason), None
    if event in BLOCKING_EVENTS:
        return _Reply(decision="block", reason=reason), None
    return _Reply(), f"exit code 2, but {event} cannot block: {stderr.strip() or '(no stderr)'}"


def _read_stdout(event: str, stdout: str) -> tuple[_Reply, str | None]:
    text = stdout.strip()
    if text.startswith("{"):
        try:
            answer = json.loads(text)
        except json.JSONDecodeError as exc:
            return _Reply(), (f"stdout looks like JSON but does not parse ({exc.msg}, line {exc.lineno} "
                              f"column {exc.colno}): {_clip(text)}")
        except RecursionError:
            return _Reply(), f"stdout is JSON nested too deeply to read: {_clip(text)}"
        except ValueError as exc:  # an integer of more than 4300 digits
            return _Reply(), f"stdout is JSON that cannot be read ({exc}): {_clip(text)}"
        return _read_json(event, answer)
    if text and event in PLAIN_TEXT_CONTEXT_EVENTS:
        return _Reply(context=[text]), None
    return _Reply(), None


def _read_json(event: str, answer: dict[str, Any]) -> tuple[_Reply, str | None]:
    """Turn a hook's JSON answer into a _Reply; an answer with any bad field is ignored as a whole."""
    problems: list[str] = []
    top = _Fields(answer, "", problems)
    cont = top.get("continue", bool)
    stop_reason = top.get("stopReason", str)
    system_message = top.get("systemMessage", str)
    top.get("suppressOutput", bool)
    decision = top.get("decision", str)
    reason = top.get("reason", str)
    specific = top.get("hookSpecificOutput", dict)
    spec = _Fields(specific or {}, "hookSpecificOutput.", problems)
    named = spec.get("hookEventName", str)
    if named is not None and named != event:
        problems.append(f"hookSpecificOutput.hookEventName is {named!r} in a {event} hook")
    context = spec.get("additionalContext", str)
    reply = _Reply(stop_loop=cont is False, stop_reason=stop_reason, system_message=system_message)
    if context and event in CONTEXT_EVENTS:
        reply.context.append(context)
    if event == "PreToolUse":
        _read_permission(spec, decision, reason, reply, problems)
    elif decision is not None:
        if event not in BLOCKING_EVENTS or decision not in ("block", "approve"):
            problems.append(f"decision {decision!r} has no meaning for {event}")
        elif decision == "block":
            reply.decision = "block"
            reply.reason = reason or f"blocked by a {event} hook (no reason given)"
    if problems:
        return _Reply(), "invalid hook output, ignored: " + "; ".join(problems)
    return reply, None


def _read_permission(spec: _Fields, decision: str | None, reason: str | None, reply: _Reply,
                     problems: list[str]) -> None:
    permission = spec.get("permissionDecision", str)
    permission_reason = spec.get("permissionDecisionReason", str)
    updated = spec.get("updatedInput", dict)
    if permission is not None:
        if permission not in (*PERMISSION_ORDER, "defer"):
            problems.append(f"hookSpecificOutput.permissionDecision {permission!r} is not allow, deny or ask")
        elif permission != "defer":  # defer: leave the decision to the normal permission flow
            reply.decision = permission
            reply.reason = permission_reason or reason
    elif decision is not None:  # the older form
        legacy = {"approve": "allow", "block": "deny"}
        if decision not in legacy:
            problems.append(f"decision {decision!r} is not 'approve' or 'block'")
        else:
            reply.decision = legacy[decision]
            reply.reason = reason or permission_reason
    reply.updated_input = updated


class _Fields:
    """Typed access to a JSON object's fields, collecting a problem for each field of the wrong type."""

    def __init__(self, obj: dict[str, Any], prefix: str, problems: list[str]) -> None:
        self.obj, self.prefix, self.problems = obj, prefix, problems

    def get(self, key: str, kind: type) -> Any:
        value = self.obj.get(key)
        if value is None:
            return None
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            self.problems.append(f"{self.prefix}{key} should be {_KIND_NAMES[kind]}, got {value!r}"[:_CLIP])
            return None
        return value


_KIND_NAMES = {bool: "true or false", str: "a string", dict: "an object"}


def _aggregate(event: str, results: list[tuple[HookRun, _Reply]], interactive: bool) -> HookOutcome:
    replies = [reply for _, reply in results]
    outcome = HookOutcome(event=event, runs=[run for run, _ in results])
    blocks = [r.reason or "" for r in replies if r.decision == "block"]
    if blocks:
        outcome.blocked, outcome.reason = True, "\n".join(blocks)
    for level in PERMISSION_ORDER:
        chosen = [r for r in replies if r.decision == level]
        if chosen:
            outcome.permission = level
            outcome.permission_reason = _join(r.reason for r in chosen)
            break
    if outcome.permission == "ask" and not interactive:
        outcome.permission = "deny"
        outcome.permission_reason = _join([NOT_INTERACTIVE, outcome.permission_reason])
    updates = [r.updated_input for r in replies if r.updated_input is not None]
    if updates and outcome.permission != "deny":
        outcome.updated_input = updates[-1]
    outcome.additional_context = [text for r in replies for text in r.context]
    if any(r.stop_loop for r in replies):
        outcome.stop_loop = True
        outcome.stop_reason = _join(r.stop_reason for r in replies if r.stop_loop)
    outcome.system_messages = [r.system_message for r in replies if r.system_message]
    return outcome


def _join(parts: Iterable[str | None]) -> str | None:
    texts = [p for p in parts if p]
    return "\n".join(texts) if texts else None


def _clip(text: str) -> str:
    return text if len(text) <= _CLIP else text[:_CLIP] + "…"


def _where_it_failed(exc: Exception) -> str:
    """The exception and its innermost frame, with the file's base name only (traces stay portable)."""
    frames = traceback.extract_tb(exc.__traceback__)
    text = "".join(traceback.format_exception_only(exc)).rstrip()
    if frames:
        last = frames[-1]
        text += f"\n  at {os.path.basename(last.filename)}:{last.lineno} in {last.name}"
    return text


def _talk(proc: subprocess.Popen[bytes], data: bytes, timeout: float) -> _Talk:
    """Feed the hook its stdin and read what it prints until it exits or its timeout passes
    (:func:`.processes.talk`, with the hook's limits)."""
    return talk(proc, data, timeout, max_bytes=MAX_OUTPUT_BYTES, drain_s=_DRAIN_S, poll_s=_POLL_S)


async def _atalk(proc: asyncio.subprocess.Process, data: bytes, timeout: float) -> _Talk:
    """``_talk`` for an asyncio subprocess: feed stdin, read both pipes (at most ``MAX_OUTPUT_BYTES`` each),
    take the answer when the hook process exits (its group is then killed), kill the tree on timeout, and drain
    what is still buffered for at most ``_DRAIN_S`` seconds.

    ``proc.wait()`` also waits for the pipes to close, which a background child that keeps them open delays
    until it ends; the hook's own exit shows in ``proc.returncode`` (set by the child watcher), so that is what
    is watched. Cancelled (Ctrl-C, a task cancelled), the hook is killed with everything it started.
    """
    overflow: list[str] = []

    async def read(stream: asyncio.StreamReader | None, name: str) -> bytes:
        kept = bytearray()
        while stream is not None:
            chunk = await stream.read(65536)
            if not chunk:
                break
            room = MAX_OUTPUT_BYTES - len(kept)
            if len(chunk) > room and name not in overflow:
                overflow.append(name)
            kept += chunk[:max(room, 0)]
        return bytes(kept)

    async def write() -> None:
        if proc.stdin is None:
            return
        try:
            if data:
                proc.stdin.write(data)
                await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the hook does not read its input: fine
        finally:
            proc.stdin.close()

    loop = asyncio.get_running_loop()
    readers = [asyncio.ensure_future(read(proc.stdout, "stdout")), asyncio.ensure_future(read(proc.stderr, "stderr"))]
    writer = asyncio.ensure_future(write())
    waiter = asyncio.ensure_future(proc.wait())  # done at once when the hook exits and its pipes close with it
    deadline = loop.time() + timeout
    timed_out = False
    try:
        while proc.returncode is None:
            left = deadline - loop.time()
            if left <= 0:
                timed_out = True
                _kill_tree(proc)
                break
            await asyncio.wait([waiter], timeout=min(_POLL_S, left))
        if not timed_out:
            _kill_group(proc)  # the hook answered; what it left running in its group goes with it
        done, _ = await asyncio.wait(readers, timeout=_DRAIN_S)
        out, err = (task.result() if task in done else b"" for task in readers)
    except BaseException:
        _kill_tree(proc)
        raise
    finally:
        for task in (*readers, writer):
            task.cancel()
        transport = getattr(proc, "_transport", None)
        if transport is not None:  # stop listening: what still holds the pipes is outside the hook's group
            transport.close()
        if not waiter.done():
            try:
                await asyncio.wait([waiter], timeout=_DRAIN_S)
            finally:
                waiter.cancel()
    return _Talk(out, err, timed_out, overflow)


def _kill_group(proc: subprocess.Popen[bytes] | asyncio.subprocess.Process) -> None:
    kill_group(proc)


def _kill_tree(proc: subprocess.Popen[bytes] | asyncio.subprocess.Process) -> None:
    """Kill a hook with every process it started: its process group, its descendants, and every process that
    carries its tag, such as a ``setsid`` child of a subshell that has exited (see :mod:`.processes`)."""
    kill_tree(proc)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _cap(text: str | None, limit: int = MAX_KEPT_CHARS) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text) - limit} more characters not kept]"


def _capped(run: HookRun, answer_replaced: int) -> HookRun:
    """The run as the trace keeps it: stdout, stderr and reason cut to ``MAX_KEPT_CHARS``, and lone surrogates
    (text that is not valid Unicode, from a JSON escape such as ``"\\ud800"`` or a Python hook) replaced with
    U+FFFD, so that what a hook said can be sent to the model; ``error`` says what was changed."""
    notes = []
    texts = {name: getattr(run, name) for name in ("stdout", "stderr", "reason", "error")}
    cleaned, replaced = without_lone_surrogates(texts)
    if replaced or answer_replaced:  # in the run's texts, or anywhere in its answer (``_capped_reply``)
        notes.append("lone surrogates (text that is not valid Unicode) in its output replaced with U+FFFD")
    cut = [name for name in ("stdout", "stderr", "reason") if len(cleaned[name] or "") > MAX_KEPT_CHARS]
    if cut:
        notes.append(f"{', '.join(cut)} longer than {MAX_KEPT_CHARS} characters: cut")
    if not notes:
        return run
    return replace(run, stdout=_cap(cleaned["stdout"]) or "", stderr=_cap(cleaned["stderr"]) or "",
                   reason=_cap(cleaned["reason"]), error=_join([cleaned["error"], *notes]))


def _capped_reply(reply: _Reply) -> tuple[_Reply, int]:
    """The answer as the loop takes it: lone surrogates replaced with U+FFFD, texts cut to ``MAX_KEPT_CHARS``;
    and how many surrogates were replaced."""
    fields, replaced = without_lone_surrogates(asdict(reply))
    reply = _Reply(**fields) if replaced else reply
    return replace(reply, reason=_cap(reply.reason), stop_reason=_cap(reply.stop_reason),
                   system_message=_cap(reply.system_message),
                   context=[_cap(c) or "" for c in reply.context]), replaced


# -- settings -----------------------------------------------------------------------------------------

def _check_event(event: str) -> None:
    if event not in HOOK_EVENTS:
        raise ValueError(f"unknown hook event {event!r}; expected one of {', '.join(HOOK_EVENTS)}")


def _read_settings(settings: dict[str, Any] | str | os.PathLike[str] | None) -> tuple[Any, str]:
    if settings is None:
        return {}, "settings"
    if isinstance(settings, dict):
        return settings, "settings"
    path = os.fspath(settings)
    if Path(path).is_dir():
        raise HookConfigError(f"{path}: is a folder; give the settings JSON file")
    try:
        text = read_small_file(path, MAX_SETTINGS_BYTES).decode("utf-8")
    except FileTooLarge:
        raise HookConfigError(f"{path}: more than {MAX_SETTINGS_BYTES} bytes; a settings file is at most "
                              f"{MAX_SETTINGS_BYTES} bytes") from None
    except NotAFile:
        raise HookConfigError(f"{path}: not a regular file (a device or a pipe); give the settings JSON file") \
            from None
    except OSError as exc:
        raise HookConfigError(f"{path}: cannot read the settings file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise HookConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text), path
    except RecursionError:
        raise HookConfigError(f"{path}: nested too deeply to be a settings file") from None
    except json.JSONDecodeError as exc:
        raise HookConfigError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}): "
                              f"{exc.msg}") from None


MAX_SETTINGS_BYTES = 1_000_000  # a settings file is small data


def _fail(source: str, where: str, problem: str) -> HookConfigError:
    return HookConfigError(f"{source}: {where}: {problem}")


def _parse_settings(data: Any, source: str, ignored: list[str]) -> list[_Hook]:
    if not isinstance(data, dict):
        raise HookConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
    if "hooks" not in data:
        strays = [key for key in data if key in HOOK_EVENTS]
        if strays:
            raise _fail(source, strays[0], 'hook events belong under a top-level "hooks" key')
        return []
    events = data["hooks"]
    if not isinstance(events, dict):
        raise _fail(source, "hooks", f"expected an object of events, got {type(events).__name__}")
    hooks: list[_Hook] = []
    for event, groups in events.items():
        if event not in HOOK_EVENTS:
            _unknown_event(source, event)
            ignored.append(event)
            continue
        hooks.extend(_parse_event(source, event, groups))
    return hooks


def _unknown_event(source: str, event: str) -> None:
    """Claude Code has more events than agentlab fires; those are ignored, near-misses are errors."""
    lowered = {name.lower(): name for name in HOOK_EVENTS}
    close = lowered.get(event.lower()) or next(iter(difflib.get_close_matches(event, HOOK_EVENTS, 1, 0.8)),
                                               None)
    if close:
        raise _fail(source, f"hooks.{event}", f"unknown hook event; did you mean {close!r}?")


def _parse_event(source: str, event: str, groups: Any) -> list[_Hook]:
    where = f"hooks.{event}"
    if not isinstance(groups, list):
        raise _fail(source, where, f"expected a list of matcher groups, got {type(groups).__name__}")
    hooks: list[_Hook] = []
    for i, group in enumerate(groups):
        at = f"{where}[{i}]"
        if not isinstance(group, dict):
            raise _fail(source, at, f"expected an object, got {type(group).__name__}")
        matcher = group.get("matcher")
        if matcher is not None and not isinstance(matcher, str):
            raise _fail(source, f"{at}.matcher", f"expected a string, got {matcher!r}")
        matches = _compile_matcher(event, matcher, f"{source}: {at}.matcher")
        entries = group.get("hooks")
        if not isinstance(entries, list):
            raise _fail(source, f"{at}.hooks", f"expected a list of hooks, got {entries!r}")
        for j, entry in enumerate(entries):
            hooks.append(_parse_hook(source, f"{at}.hooks[{j}]", event, matches, entry))
    return hooks


def _parse_hook(source: str, at: str, event: str, matches: Callable[[str | None], bool], entry: Any) -> _Hook:
    if not isinstance(entry, dict):
        raise _fail(source, at, f"expected an object, got {type(entry).__name__}")
    kind = entry.get("type")
    if kind != "command":
        raise _fail(source, f"{at}.type", f"expected 'command', got {kind!r}")
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise _fail(source, f"{at}.command", f"expected a non-empty string, got {command!r}")
    if "\0" in command:
        raise _fail(source, f"{at}.command", "holds a NUL byte, which no shell command can carry")
    timeout = entry.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not 0 < timeout <= MAX_TIMEOUT_S):
        raise _fail(source, f"{at}.timeout",
                    f"expected a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, got {timeout!r}")
    return _Hook(event=event, matches=matches, command=command, timeout=timeout)


def _compile_matcher(event: str, matcher: str | None, where: str) -> Callable[[str | None], bool]:
    if event not in MATCH_FIELD or matcher is None or matcher.strip() in ("", "*"):
        return _match_all
    if re.fullmatch(r"[A-Za-z0-9_|]+", matcher):
        names = frozenset(matcher.split("|"))
        return lambda name: name in names
    try:
        pattern = re.compile(matcher)
    except re.error as exc:
        raise HookConfigError(f"{where}: not a valid regular expression {matcher!r}: {exc}") from None
    return lambda name: name is not None and pattern.fullmatch(name) is not None


def _match_all(name: str | None) -> bool:
    return True
