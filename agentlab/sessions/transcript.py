"""Claude Code's session transcripts (``~/.claude/projects/<project>/<session>.jsonl``), read call by call.

Claude Code appends one JSON object a line to its session file as the session goes. ``read_session(path)``
reads it as a stream (one line in memory at a time, message texts cut to ``KEEP_CHARS``) into a ``Session``:

- every **model call**, in order: a streamed reply is written as several ``assistant`` entries sharing one
  ``message.id`` (one content block each), counted as one call; across resumed or forked files (which repeat
  earlier entries) a call is counted once, by message id and request id. 2.1.332 writes an ``api-request``
  entry before each request, with the model it asks for (``params.model``): each is answered by a reply, a
  refusal (a call whose reply was not written, only its id) or an error, and each call is of its own request's
  model and priced on it;
- the **events** between calls: API errors (``system`` ``api_error`` entries for the failures it retried, and
  the synthetic ``assistant`` entries with ``isApiErrorMessage`` for the one that ended the turn), compactions
  (``compact_boundary`` and the ``isCompactSummary`` user entry after it), refusals (``model_refusal_*``
  notices and the refusal-retry note) and the model switch a refusal made (``model_refusal_fallback``),
  Stop-hook blocks (``hook_blocking_error`` attachments, ``stop_hook_summary`` entries with errors, "Stop hook
  feedback" messages), continuation notes after ``max_tokens``, tool results and new prompts;
- **sidechains** (sub-agents: ``isSidechain`` entries, or ``<session>/subagents/*.jsonl`` beside the file),
  kept apart from the main thread;
- what it could **not** read: lines that are not a JSON object (a cut last line is a session still being
  written; a line nested deeper than Python parses is one too), sub-agent files that are not regular files, and
  entry types, system subtypes, attachment types, fields and field values of a shape it does not know, counted
  and named. The format is not a published contract: nothing unknown raises, nothing is dropped silently.

Each main-thread call gets the row of agentlab's decision table its stop_reason (and content) corresponds to,
what Claude Code did next, and its cost from ``data/prices.yaml``. ``transcript_trace.session_to_trace``
turns a session into agentlab's events, so the stepper and the plots read it like any run. ``detect_kind``
tells a transcript from an agentlab trace and a ``data/observed`` record.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from agentlab.core.cost import format_cost, usage_cost
from agentlab.core.errors import AgentlabError
from agentlab.core.text import printable
from agentlab.core.transitions import ROW_OF, StopReason
from agentlab.core.transitions import STOP_REASONS as CORE_STOP_REASONS

KEEP_CHARS = 2_000            # a text or tool result is kept up to this many characters
MAX_LINE_BYTES = 64 << 20     # a longer line is skipped (counted), never read whole
CLIENT = "claude-code"

Kind = Literal["claude-code", "agentlab-trace", "observed-record"]
EventName = Literal["prompt", "tools", "api_error", "retry_error", "compaction", "refusal", "refusal_retry",
                    "hook_block", "hook", "continuation", "notice", "interrupted", "subagent_done",
                    "fallback"]

# What the parser knows (seen in Claude Code 2.1.197 and 2.1.332 transcripts): the rest is "not understood".
READ_TYPES = {"user", "assistant", "system", "attachment", "api-request", "cost-state"}
SKIPPED_TYPES = {"queue-operation", "atis-latch", "api-request-shape", "api-request-blob", "last-prompt",
                 "summary", "file-history-snapshot", "tools-used", "custom-title"}
SYSTEM_SUBTYPES = {"api_error", "compact_boundary", "stop_hook_summary", "informational",
                   "model_refusal_no_fallback", "model_refusal_fallback"}
# "file": a file read earlier, attached again after a compaction (its text rides in the next request)
ATTACHMENT_TYPES = {"agent_listing_delta", "date", "deferred_tools_delta", "environment", "file", "hook_blocking_error",
                    "model", "prompt_snapshot", "remote_session_change", "session_context", "skill_listing",
                    "total_tokens_reminder"}
_COMMON = {"cwd", "entrypoint", "gitBranch", "isSidechain", "parentUuid", "sessionId", "slug", "timestamp", "type",
           "userType", "uuid", "version", "agentId", "isMeta", "logicalParentUuid", "requestId"}
KNOWN_FIELDS: dict[str, set[str]] = {
    "user": _COMMON | {"hookText", "hookTextLead", "isCompactSummary", "isVisibleInTranscriptOnly", "message",
                       "ownNote", "permissionMode", "promptId", "promptSource", "refusalRetry", "refusedMessageId",
                       "rowSource", "sentAtMs", "sourceToolAssistantUUID", "summarizedTurnPromptUuids",
                       "toolUseResult", "turnCompanion", "turnOrigin", "turnPosition", "thinkingMetadata", "todos",
                       "origin", "permissionDecision", "queueSkipAttachments",
                       "sandboxed"},  # a Bash tool result: whether the command ran in the sandbox
    "assistant": _COMMON | {"apiBlockIndex", "apiError", "apiErrorParams", "apiErrorStatus", "apiErrorType",
                            "effort", "error", "failedResponseHadNoToolCall", "isApiErrorMessage", "madeBy", "message",
                            "perTurnEffort", "promptCacheRequested", "refusedMessageId", "refusingModel",
                            "requestRef", "requestedModel", "toolInputStreamMs", "attributionAgent"},
    "system": _COMMON | {"apiRefusalCategory", "apiRefusalExplanation", "compactMetadata", "content", "error",
                         "failedHookErrorIndexes", "hasOutput", "hookAdditionalContext", "hookCount", "hookErrors",
                         "hookInfos", "level", "maxRetries", "originalModel", "preventedContinuation",
                         "refusedUserMessageUuid", "retryAttempt", "retryInMs", "source", "stopReason", "subtype",
                         "toolUseID", "fallbackModel",
                         # model_refusal_fallback (2.1.332): read in _Parser.refusal_notice, which says what they are
                         "trigger", "direction", "retractedMessageUuids", "scope"},
    "attachment": _COMMON | {"attachment", "rendered", "renderedBesideToolResult", "renderedRole"},
}
MESSAGE_FIELDS = {"container", "content", "context_management", "diagnostics", "id", "model", "role",
                  "stop_details", "stop_reason", "stop_sequence", "type", "usage"}
BLOCK_TYPES = {"text", "thinking", "redacted_thinking", "tool_use", "tool_result", "server_tool_use",
               "web_search_tool_result", "web_fetch_tool_result", "image", "document"}
STOP_REASONS: frozenset[StopReason | None] = frozenset({*CORE_STOP_REASONS, None})  # the core's, and null

_CONTINUATION = re.compile(r"^(Output token limit hit|\[?Output token limit)")
_STOP_HOOK = re.compile(r"^(<system-reminder>\s*)?Stop hook (feedback|blocking error)")
_SYNTHETIC = "<synthetic>"


class TranscriptError(AgentlabError):
    """Nothing could be read: ``reason`` says why, the message names the file."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.reason = reason


@dataclass
class Call:
    """One model call (one reply), as the transcript tells it."""

    n: int
    message_id: str | None
    request_id: str | None
    model: str | None
    stop_reason: str | None
    usage: dict[str, Any]
    blocks: list[str]
    content: list[dict[str, Any]]
    timestamp: str
    sidechain: bool = False
    agent: str | None = None
    usage_known: bool = True       # False for a refused reply Claude Code did not write (only its id is known)
    max_tokens: int | None = None  # from the request entry it answers (2.1.332 writes them; 2.1.197 does not)
    branch: str = ""
    row: str = ""
    next: str = ""
    cost_usd: float | None = None

    @property
    def prompt_tokens(self) -> int:
        u = self.usage
        return sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                "cache_creation_input_tokens"))

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "message_id": self.message_id, "request_id": self.request_id, "model": self.model,
                "stop_reason": self.stop_reason, "row": self.row, "branch": self.branch, "next": self.next,
                "usage": self.usage, "usage_known": self.usage_known, "cost_usd": self.cost_usd,
                "max_tokens": self.max_tokens,
                "blocks": self.blocks, "timestamp": self.timestamp, "sidechain": self.sidechain,
                "agent": self.agent}


@dataclass
class SessionEvent:
    """Something between calls: ``after`` is the number of main-thread calls before it."""

    name: EventName
    after: int
    timestamp: str
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.name, "after_call": self.after, "timestamp": self.timestamp, "detail": self.detail,
                **self.data}


@dataclass
class Session:
    paths: list[Path]
    version: str | None = None
    project: str | None = None
    started: str = ""
    last: str = ""
    session_ids: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    sidechain_calls: list[Call] = field(default_factory=list)
    events: list[SessionEvent] = field(default_factory=list)
    entries: int = 0
    duplicates: int = 0
    bad_lines: list[int] = field(default_factory=list)
    cut_last_line: bool = False
    unknown: Counter[str] = field(default_factory=Counter)
    reported_cost_usd: float | None = None    # what Claude Code itself wrote (cost-state), for comparison
    refused_files: list[str] = field(default_factory=list)   # sub-agent files not read (not regular files), why
    requests: int = 0               # the main thread's api-request entries (2.1.332 writes one per request sent)
    unanswered: int = 0             # of those, the ones no reply, refusal or error answered (a 400 it compacted on)

    @property
    def partial(self) -> bool:
        return bool(self.bad_lines) or self.cut_last_line or bool(self.refused_files)

    @property
    def known_cost_usd(self) -> float:
        """The cost of the calls whose usage was written and whose model has a price."""
        return round(sum(c.cost_usd or 0.0 for c in self.calls + self.sidechain_calls if c.usage_known), 6)

    @property
    def cost_usd(self) -> float | None:
        """The session's cost; None when a call's model has no price or its usage was not written."""
        calls = self.calls + self.sidechain_calls
        if any(not c.usage_known or c.cost_usd is None for c in calls):
            return None
        return self.known_cost_usd

    @property
    def unpriced(self) -> list[str]:
        return sorted({str(c.model) for c in self.calls + self.sidechain_calls if c.usage_known and c.cost_usd is None})

    def events_by_call(self) -> dict[int, list[SessionEvent]]:
        """The events by the number of main-thread calls before them (one pass: a long session stays linear)."""
        out: dict[int, list[SessionEvent]] = {}
        for e in self.events:
            out.setdefault(e.after, []).append(e)
        return out

    def of(self, *names: str) -> list[SessionEvent]:
        return [e for e in self.events if e.name in names]

    @property
    def ending(self) -> str:
        """How the session ended, in a few words."""
        ending = _ending(self)
        return f"{ending} (partial)" if self.partial else ending

    def not_understood_notes(self) -> list[str]:
        notes = [f"{n} {'entry' if n == 1 else 'entries'} of type {what} not understood"
                 for what, n in sorted(self.unknown.items()) if not what.startswith(("field ", "message field "))]
        fields = [f"{what.split(' ', 1)[1] if what.startswith('field ') else what} ({n})"
                  for what, n in sorted(self.unknown.items()) if what.startswith(("field ", "message field "))]
        if fields:
            notes.append(f"fields not understood: {', '.join(fields)}")
        return notes

    def notes(self) -> list[str]:
        out = []
        if self.cut_last_line:
            out.append("partial: the last line is cut off (the session may still be being written)")
        if self.bad_lines:
            shown = ", ".join(str(n) for n in self.bad_lines[:5]) + (" ..." if len(self.bad_lines) > 5 else "")
            out.append(f"partial: {len(self.bad_lines)} line(s) not read (not JSON or too long): line {shown}")
        out += [f"partial: sub-agent file not read: {why}" for why in self.refused_files]
        if self.duplicates:
            out.append(f"{self.duplicates} entr{'y' if self.duplicates == 1 else 'ies'} repeated from an earlier "
                       "file (a resumed or forked session) counted once")
        return out + self.not_understood_notes()

    def to_json(self) -> dict[str, Any]:
        main = self.calls
        return {
            "client": CLIENT, "version": self.version, "paths": [str(p) for p in self.paths],
            "session_ids": self.session_ids, "project": self.project, "started": self.started, "last": self.last,
            "partial": self.partial, "ending": self.ending,
            "calls": [c.to_json() for c in main],
            "sidechain_calls": [c.to_json() for c in self.sidechain_calls],
            "compactions": [e.to_json() for e in self.of("compaction")],
            "api_errors": [e.to_json() for e in self.of("api_error", "retry_error")],
            "hook_blocks": [e.to_json() for e in self.of("hook_block")],
            "refusals": [e.to_json() for e in self.of("refusal", "refusal_retry")],
            "events": [e.to_json() for e in self.events],
            "cost_usd": self.cost_usd, "known_cost_usd": self.known_cost_usd, "unpriced_models": self.unpriced,
            "calls_without_usage": sum(1 for c in self.calls + self.sidechain_calls if not c.usage_known),
            "reported_cost_usd": self.reported_cost_usd,
            "not_understood": dict(sorted(self.unknown.items())), "notes": self.notes(),
            "entries": self.entries, "bad_lines": self.bad_lines,
            "requests": self.requests, "unanswered_requests": self.unanswered,
        }


def result_subtype(session: Session) -> str:
    """The ending in the Agent SDK's result vocabulary (what agentlab's own runs end with)."""
    ending = _ending(session)
    if ending.startswith("API error"):
        return "error_max_output_tokens" if "max_output_tokens" in ending else "error_api"
    if ending.startswith("refusal"):
        return "error_refusal"
    if ending in ("end_turn", "stop_sequence"):
        return "success"
    return "error_during_execution"


def _ending(session: Session) -> str:
    last_call = session.calls[-1] if session.calls else None
    tail = []   # the events after the last call (they are in order of ``after``): a short walk from the end
    for e in reversed(session.events):
        if last_call is not None and e.after < last_call.n:
            break
        tail.append(e)
    tail.reverse()
    final = next((e for e in reversed(tail) if e.name in ("api_error", "refusal", "interrupted")), None)
    if final is not None:
        return {"api_error": "API error", "refusal": "refusal", "interrupted": "interrupted"}[final.name] + \
            (f": {final.detail}" if final.detail else "")
    if last_call is None:
        return "no model call"
    if last_call.stop_reason == "tool_use" and not any(e.name == "tools" for e in tail):
        return "tool_use, no tool result written (interrupted?)"
    return str(last_call.stop_reason)


# -- reading lines ---------------------------------------------------------------------------------------------

def _lines(handle: IO[bytes]) -> Iterator[tuple[int, bytes | None, bool]]:
    """(line number, bytes or None when too long, whether the line ended with a newline), one at a time."""
    number = 0
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):   # skip the rest of the long line
                line = handle.readline(MAX_LINE_BYTES)
            yield number, None, True
            continue
        yield number, line, line.endswith(b"\n")


def open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for reading when it is a regular file (a link is followed); a named pipe, a device
    (``/dev/zero``) or a folder is refused as TranscriptError without blocking: opening a pipe waits for a
    writer, and a device never ends."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except IsADirectoryError:
        raise TranscriptError(path, "is a folder: `agentlab sessions DIR` lists the sessions in it") from None
    except OSError as exc:
        raise TranscriptError(path, f"cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TranscriptError(path, "not a regular file")
    return os.fdopen(fd, "rb")


def _parsed(line: bytes) -> Any:
    """A line's JSON value; ValueError for a line that is not JSON, nested too deep for Python included."""
    try:
        return json.loads(line.decode("utf-8", errors="replace"))
    except RecursionError:
        raise ValueError("nested too deep") from None


def iter_entries(path: Path, session: Session) -> Iterator[dict[str, Any]]:
    """The JSON objects of a transcript, one at a time; bad lines (not JSON, nested too deep, not an object, too
    long) are noted on ``session``."""
    with open_regular(path) as handle:
        for number, line, ended in _lines(handle):
            if line is None:
                session.bad_lines.append(number)
                continue
            if not line.strip():
                continue
            try:
                entry = _parsed(line)
            except ValueError:
                if not ended:
                    session.cut_last_line = True
                else:
                    session.bad_lines.append(number)
                continue
            if isinstance(entry, dict):
                yield entry
            else:
                session.bad_lines.append(number)


# -- detecting what a file is ----------------------------------------------------------------------------------

SNIFF_LINES = 10   # a file whose first ten lines hold no JSON object is not JSON Lines


def _first_object(path: Path) -> dict[str, Any] | None:
    """The first JSON object among the first lines. A line before it that is not one (not JSON, or JSON that is
    not an object: ``null``, ``[]``) is left to the reader, which marks it, whatever it is."""
    with open_regular(path) as handle:
        for number, line, ended in _lines(handle):
            if number > SNIFF_LINES:
                return None
            if line is None or not line.strip():
                continue
            try:
                value = _parsed(line)
            except ValueError:
                if not ended and line.lstrip().startswith(b"{") and number == 1:
                    raise TranscriptError(path, "no readable entry: its only line is cut off (a session still "
                                                "being written?)") from None
                continue
            if isinstance(value, dict):
                return value
    return None


def detect_kind(path: str | os.PathLike[str]) -> Kind:
    """Which of the three run files ``path`` is; TranscriptError when it is none of them."""
    p = Path(path)
    if not p.exists():
        raise TranscriptError(p, "no such file")
    if p.is_dir():
        raise TranscriptError(p, "is a folder: `agentlab sessions DIR` lists the sessions in it")
    if not p.is_file():
        raise TranscriptError(p, "not a regular file")
    try:
        return _detect(p)
    except OSError as exc:
        raise TranscriptError(p, f"cannot be read: {exc.strerror or exc}") from None


def _detect(p: Path) -> Kind:
    if p.stat().st_size == 0:
        raise TranscriptError(p, "empty file: nothing to replay")
    if p.suffix == ".json" and p.stat().st_size < 50 << 20:
        with open_regular(p) as handle:
            text = handle.read()
        try:
            whole = _parsed(text)
        except ValueError:
            whole = None
        if isinstance(whole, dict) and "requests" in whole and "client" in whole:
            return "observed-record"
    first = _first_object(p)
    if first is None:
        raise TranscriptError(p, "not JSON Lines: not a Claude Code transcript, an agentlab trace (--trace) or a "
                                 "behaviour record (data/observed)")
    if {"seq", "kind", "data"} <= first.keys():
        return "agentlab-trace"
    if "type" in first and ({"sessionId", "uuid", "message", "leafUuid"} & first.keys()):
        return "claude-code"
    raise TranscriptError(p, f"not a Claude Code transcript, an agentlab trace or a behaviour record (its first "
                             f"object has the keys {', '.join(sorted(first)[:8])})")


# -- parsing ---------------------------------------------------------------------------------------------------

MAX_DEPTH = 16   # a content value is kept to this depth; deeper is "…" (so printing it can never recurse too far)
USAGE_SPLITS = ("cache_creation", "server_tool_use")   # usage fields that are objects of counts


def _cut(value: Any, depth: int = 0) -> Any:
    """A content value with long texts cut to KEEP_CHARS, lists to 50 items and nesting to MAX_DEPTH (memory
    stays flat on huge tool results)."""
    if isinstance(value, str):
        return value if len(value) <= KEEP_CHARS else value[:KEEP_CHARS] + f"… [{len(value) - KEEP_CHARS} more]"
    if isinstance(value, (list, dict)) and depth >= MAX_DEPTH:
        return "…"
    if isinstance(value, list):
        return [_cut(v, depth + 1) for v in value[:50]]
    if isinstance(value, dict):
        return {k: _cut(v, depth + 1) for k, v in value.items()}
    return value


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: Any) -> int | None:
    """A token count or a number of milliseconds: an integer (a finite float is rounded down); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return None


def _shape(value: Any) -> str:
    """What a JSON value is, in words, for a field whose value has an unexpected shape."""
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "a number",
            float: "a number"}.get(type(value), "null")


def _first_line(text: str, limit: int = 100) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"
                         and isinstance(b.get("text"), str))
    return ""


@dataclass
class _Request:
    """An ``api-request`` entry (2.1.332 writes one before each request): the model it asked, its max_tokens."""

    id: str
    model: str | None
    max_tokens: int | None


class _Parser:
    """The state of one read: calls by message id, events, and the ids already seen across files."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.by_id: dict[str, Call] = {}
        self.file_of: dict[str, int] = {}      # the file each call was first read from
        self.file_no = 0
        self.seen_entries: set[str] = set()
        self.refused: set[str] = set()          # refused replies' message ids, and "req:" + their request ids
        self.replies: set[str] = set()          # the message ids of the replies written
        self.known = 0                          # entries of a type Claude Code writes
        self.requests: dict[str, _Request] = {}   # every api-request entry, by its id (a reply's requestRef)
        self.unanswered: dict[str, _Request] = {}  # the main thread's requests with no reply, error or refusal yet
        self.last_compaction: SessionEvent | None = None

    # every entry goes through here
    def entry(self, e: dict[str, Any]) -> None:
        self.s.entries += 1
        uuid = e.get("uuid")
        if isinstance(uuid, str):
            if uuid in self.seen_entries:
                self.s.duplicates += 1
                return
            self.seen_entries.add(uuid)
        kind = e.get("type")
        if not isinstance(kind, str):
            self.s.unknown[f"({_shape(kind)} as its type)"] += 1
            return
        if kind in SKIPPED_TYPES:
            self.known += 1
            return
        if kind not in READ_TYPES:
            self.s.unknown[kind] += 1
            return
        self.known += 1
        self._fields(kind, e)
        self._meta(e)
        {"user": self.user, "assistant": self.assistant, "system": self.system, "attachment": self.attachment,
         "api-request": self.api_request, "cost-state": self.cost_state}[kind](e)

    def _fields(self, kind: str, e: dict[str, Any]) -> None:
        known = KNOWN_FIELDS.get(kind)
        if known is not None:
            for key in e.keys() - known:
                self.s.unknown[f"field {kind}.{key}"] += 1
        message = e.get("message")
        if kind in ("user", "assistant") and isinstance(message, dict):
            for key in message.keys() - MESSAGE_FIELDS:
                self.s.unknown[f"message field {kind}.message.{key}"] += 1

    def odd(self, where: str, value: Any) -> None:
        """A known field whose value has a shape Claude Code does not write: counted as not understood."""
        self.s.unknown[f"field {where} as {_shape(value)}"] += 1

    def text(self, holder: dict[str, Any], key: str, where: str) -> str | None:
        """``holder[key]`` when it is a string (None when absent); another shape is noted as not understood."""
        value = holder.get(key)
        if value is None or isinstance(value, str):
            return value
        self.odd(where, value)
        return None

    def number(self, holder: dict[str, Any], key: str, where: str) -> int | None:
        """``holder[key]`` when it is a number (None when absent); another shape is noted as not understood."""
        value = holder.get(key)
        counted = _count(value)
        if counted is None and value is not None:
            self.odd(where, value)
        return counted

    def usage(self, raw: Any, where: str) -> dict[str, Any]:
        """The counts of a reply's usage; a count that is not a number is left out and noted."""
        out: dict[str, Any] = {}
        for key, value in _dict(raw).items():
            if key in USAGE_SPLITS and isinstance(value, dict):
                split = {k: _count(v) for k, v in value.items()}
                for k in [k for k, v in split.items() if v is None and value[k] is not None]:
                    self.odd(f"{where}.{key}.{k}", value[k])
                out[key] = {k: v for k, v in split.items() if v is not None}
            elif _count(value) is not None:
                out[key] = _count(value)
            elif key.endswith("_tokens") or key in USAGE_SPLITS:
                if value is not None:
                    self.odd(f"{where}.{key}", value)
        return out

    def _meta(self, e: dict[str, Any]) -> None:
        s = self.s
        stamp = e.get("timestamp")
        if isinstance(stamp, str):
            s.started = min(s.started, stamp) if s.started else stamp
            s.last = max(s.last, stamp)
        if isinstance(e.get("version"), str):
            s.version = e["version"]
        if isinstance(e.get("cwd"), str) and not e.get("isSidechain"):
            s.project = s.project or e["cwd"]
        sid = e.get("sessionId")
        if isinstance(sid, str) and sid not in s.session_ids:
            s.session_ids.append(sid)

    def event(self, name: EventName, e: dict[str, Any], detail: str = "", **data: Any) -> None:
        if e.get("isSidechain"):
            return
        self.s.events.append(SessionEvent(name, len(self.s.calls), _str(e.get("timestamp")) or "", detail, data))

    def _main(self, e: dict[str, Any]) -> list[Call]:
        return self.s.sidechain_calls if e.get("isSidechain") else self.s.calls

    def answered(self, e: dict[str, Any], model: str | None = None) -> _Request | None:
        """The main thread's request an error, a refusal or a reply ends: the latest one not answered yet (of
        ``model``, when one of that model is waiting); None when the file has no request entries (2.1.197)."""
        if e.get("isSidechain") or not self.unanswered:
            return None
        ids = list(reversed(self.unanswered))
        chosen = next((i for i in ids if model and self.unanswered[i].model == model), ids[0])
        return self.unanswered.pop(chosen)

    # entry kinds
    def assistant(self, e: dict[str, Any]) -> None:
        message = _dict(e.get("message"))
        if e.get("isApiErrorMessage") or message.get("model") == _SYNTHETIC:
            self.api_error_message(e, message)
            return
        mid = self.text(message, "id", "assistant.message.id")
        rid = self.text(e, "requestId", "assistant.requestId")
        key = f"{mid}|{rid or ''}"
        content = [b for b in _list(message.get("content")) if isinstance(b, dict)]
        if not isinstance(message.get("content"), (list, type(None))):
            self.odd("assistant.message.content", message.get("content"))
        for block in content:
            kind = block.get("type")
            if not isinstance(kind, str) or kind not in BLOCK_TYPES:
                self.s.unknown[f"content block {_str(kind) or _shape(kind)}"] += 1
        call = self.by_id.get(key) if mid else None
        if call is not None and self.file_of[key] < self.file_no:   # a resumed or forked file repeats it
            self.s.duplicates += 1
            return
        if call is None:
            call = self._new_call(e, message, mid, rid)
        call.content += [_cut(b) for b in content]
        call.blocks += [_str(b.get("type")) or "?" for b in content]
        stop = message.get("stop_reason")
        if stop is not None and not isinstance(stop, str):
            self.odd("assistant.message.stop_reason", stop)
            stop = None
        call.stop_reason = stop or call.stop_reason
        if call.stop_reason not in STOP_REASONS:
            self.s.unknown[f"stop_reason {call.stop_reason}"] += 1
        if isinstance(message.get("usage"), dict):
            call.usage = self.usage(message["usage"], "assistant.message.usage")
        elif message.get("usage") is not None:
            self.odd("assistant.message.usage", message["usage"])

    def _new_call(self, e: dict[str, Any], message: dict[str, Any], mid: str | None, rid: str | None) -> Call:
        calls = self._main(e)
        ref = self.requests.get(_str(e.get("requestRef")) or "")
        if ref is not None and not e.get("isSidechain"):
            self.unanswered.pop(ref.id, None)
        call = Call(n=len(calls) + 1, message_id=mid, request_id=rid,
                    model=self.text(message, "model", "assistant.message.model") or (ref.model if ref else None),
                    stop_reason=None, usage={}, blocks=[], content=[], timestamp=_str(e.get("timestamp")) or "",
                    sidechain=bool(e.get("isSidechain")), agent=_str(e.get("agentId")),
                    max_tokens=ref.max_tokens if ref else None)
        calls.append(call)
        if mid:
            self.replies.add(mid)
            key = f"{mid}|{rid or ''}"
            self.by_id[key], self.file_of[key] = call, self.file_no
        return call

    def api_error_message(self, e: dict[str, Any], message: dict[str, Any]) -> None:
        text = _text_of(message.get("content"))
        if e.get("refusedMessageId") or message.get("stop_reason") == "refusal":
            model = self.text(e, "refusingModel", "assistant.refusingModel")
            self._refused_call(e, self.text(e, "refusedMessageId", "assistant.refusedMessageId"),
                               self.text(e, "requestId", "assistant.requestId"), model)
            self.event("refusal", e, _first_line(text), model=model, message=text[:600])
            return
        status = self.number(e, "apiErrorStatus", "assistant.apiErrorStatus")
        error = self.text(e, "error", "assistant.error")
        if status is not None:
            self.answered(e)   # the request that failed
        self.event("api_error", e, f"{status or ''} {error or ''}".strip() or _first_line(text),
                   status=status, error=error, message=text[:300])

    def _refused_call(self, e: dict[str, Any], message_id: str | None, request_id: str | None,
                      model: str | None) -> None:
        """A refused reply: 2.1.332 writes only its id (in a note, a notice or an error message), once or more;
        it is a call all the same, of the model its request asked for."""
        keys = {k for k in (message_id, f"req:{request_id}" if request_id else None) if k}
        if not keys or e.get("isSidechain"):
            return
        if keys & self.refused or message_id in self.replies:   # told already, or written as a reply
            self.refused |= keys
            return
        self.refused |= keys
        request = self.answered(e, model)
        self.s.calls.append(Call(
            n=len(self.s.calls) + 1, message_id=message_id, request_id=request_id,
            model=(request.model if request else None) or model, stop_reason="refusal", usage={}, blocks=[],
            content=[], timestamp=_str(e.get("timestamp")) or "", usage_known=False,
            max_tokens=request.max_tokens if request else None))

    def user(self, e: dict[str, Any]) -> None:
        message = _dict(e.get("message"))
        content = message.get("content")
        text = _text_of(content)
        if e.get("isCompactSummary"):
            if self.last_compaction is not None:
                self.last_compaction.data["summary"] = _cut(text)[:600]
            return
        if e.get("refusalRetry") or e.get("refusedMessageId"):
            self._refused_call(e, self.text(e, "refusedMessageId", "user.refusedMessageId"), None, None)
            self.event("refusal_retry", e, _first_line(text, 160))
            return
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            self.event("tools", e, f"{len(results)} tool result(s)",
                       errors=sum(1 for b in results if b.get("is_error")), results=[_cut(b) for b in results])
            return
        self._user_text(e, text)

    def _user_text(self, e: dict[str, Any], text: str) -> None:
        if _STOP_HOOK.match(text):
            self.event("hook_block", e, text.split(":", 1)[-1].strip()[:300], hook="Stop")
            return
        if e.get("hookText") or e.get("rowSource") == "hook":
            return   # the hook's text again (2.1.332), told by its hook_blocking_error attachment
        if _CONTINUATION.match(text):
            self.event("continuation", e, _first_line(text, 160))
            return
        if text.startswith("[Request interrupted"):
            self.event("interrupted", e, text[:120])
            return
        if e.get("isMeta") or e.get("isVisibleInTranscriptOnly"):
            return
        if _dict(e.get("origin")).get("kind") == "task-notification" or text.startswith("<task-notification>"):
            self.event("subagent_done", e, "a sub-agent's result came in")   # 2.1.332 runs sub-agents in the background
            return
        self.event("prompt", e, _cut(text)[:300])

    def system(self, e: dict[str, Any]) -> None:
        sub = self.text(e, "subtype", "system.subtype") or "(none)"
        if sub not in SYSTEM_SUBTYPES and not sub.startswith("model_refusal_"):
            self.s.unknown[f"system/{sub}"] += 1
            return
        if sub == "compact_boundary":
            self.compaction(e)
        elif sub == "api_error":
            error = _dict(e.get("error"))
            self.answered(e)   # the request that failed, sent again
            self.event("retry_error", e, (_str(error.get("formatted")) or _str(error.get("message")) or "")[:200],
                       status=self.number(error, "status", "system.error.status"),
                       attempt=self.number(e, "retryAttempt", "system.retryAttempt"),
                       retry_in_ms=self.number(e, "retryInMs", "system.retryInMs"))
        elif sub == "stop_hook_summary":
            errors = _list(e.get("hookErrors"))
            if errors and not self._told_block(e):
                self.event("hook_block", e, (_str(errors[0]) or json.dumps(_cut(errors[0])))[:300], hook="Stop")
            self.event("hook", e, "Stop hook ran" + (" and blocked" if errors else ""), hook="Stop",
                       blocked=bool(errors))
        elif sub.startswith("model_refusal_"):
            self.refusal_notice(e, sub)
        else:
            self.event("notice", e, (self.text(e, "content", "system.content") or "")[:200], subtype=sub)

    def compaction(self, e: dict[str, Any]) -> None:
        meta = _dict(e.get("compactMetadata"))
        trigger = self.text(meta, "trigger", "system.compactMetadata.trigger")
        self.event("compaction", e, trigger or "", trigger=trigger,
                   pre_tokens=self.number(meta, "preTokens", "system.compactMetadata.preTokens"),
                   post_tokens=self.number(meta, "postTokens", "system.compactMetadata.postTokens"))
        self.last_compaction = self.s.events[-1] if not e.get("isSidechain") else self.last_compaction

    def refusal_notice(self, e: dict[str, Any], sub: str) -> None:
        """``model_refusal_fallback`` (2.1.332: a second refusal, the turn retried on ``fallbackModel``) and
        ``model_refusal_no_fallback`` (the turn ends on the refusal): each tells of a refused request. Of the
        fallback's fields, ``trigger`` is what set it off ("refusal"), ``direction`` how ("retry": the turn is sent
        again on the fallback model), ``scope`` how far the switch goes ("session", as recorded; "local" when a
        sub-agent fell back and the session's model is unchanged), ``retractedMessageUuids`` the entries of the
        refused reply Claude Code withdraws from view (none when the refused reply was empty, as recorded); the
        values are 2.1.332's in tests/transcripts, the meanings as third-party readers of the format read them:
        the format is not a published contract.
        Why a refusal switches model: https://platform.claude.com/docs/en/build-with-claude/refusals-and-fallback
        (the API's side) and https://support.claude.com/en/articles/16049681 (Opus 5 falls back to Opus 4.8)."""
        original = self.text(e, "originalModel", "system.originalModel")
        category = self.text(e, "apiRefusalCategory", "system.apiRefusalCategory") or ""
        explanation = self.text(e, "apiRefusalExplanation", "system.apiRefusalExplanation") or ""
        self._refused_call(e, None, self.text(e, "requestId", "system.requestId"), original)
        self.event("notice", e, f"{sub}: {category} {explanation}".strip(), subtype=sub)
        if sub != "model_refusal_fallback":
            return
        fallback = self.text(e, "fallbackModel", "system.fallbackModel")
        retracted = [u for u in _list(e.get("retractedMessageUuids")) if isinstance(u, str)][:50]
        if not isinstance(e.get("retractedMessageUuids"), (list, type(None))):
            self.odd("system.retractedMessageUuids", e.get("retractedMessageUuids"))
        scope = self.text(e, "scope", "system.scope")
        why = f"{category}: {explanation}" if explanation else category
        self.event("fallback", e, f"{original or '?'} → {fallback or '?'} after a refusal" + (f" ({why})" if why
                   else "") + (" in a sub-agent; the session's model is unchanged" if scope == "local" else ""),
                   from_model=original, to_model=fallback, category=category or None, explanation=explanation or None,
                   trigger=self.text(e, "trigger", "system.trigger"),
                   direction=self.text(e, "direction", "system.direction"), scope=scope, retracted=retracted)

    def _told_block(self, e: dict[str, Any]) -> bool:
        """A block already told for this point (by the attachment or the feedback message): the events are in
        order of ``after``, so only the last ones are looked at."""
        for x in reversed(self.s.events):
            if x.after < len(self.s.calls):
                return False
            if x.name == "hook_block":
                return True
        return False

    def attachment(self, e: dict[str, Any]) -> None:
        att = _dict(e.get("attachment"))
        kind = _str(att.get("type")) or f"({_shape(att.get('type'))})"
        if kind not in ATTACHMENT_TYPES:
            self.s.unknown[f"attachment/{kind}"] += 1
            return
        if kind == "hook_blocking_error" and not self._told_block(e):
            blocking = _dict(att.get("blockingError"))
            self.event("hook_block", e, (_str(blocking.get("blockingError")) or "")[:300],
                       hook=_str(att.get("hookEvent")) or _str(att.get("hookName")))

    def api_request(self, e: dict[str, Any]) -> None:
        """A request Claude Code is about to send (2.1.332): the model it asks for and its max_tokens, for the reply
        (or the refusal, or the error) that answers it."""
        rid = self.text(e, "id", "api-request.id")
        params = _dict(e.get("params"))
        if not isinstance(e.get("params"), (dict, type(None))):
            self.odd("api-request.params", e.get("params"))
        request = _Request(rid or "", self.text(params, "model", "api-request.params.model"),
                           self.number(params, "max_tokens", "api-request.params.max_tokens"))
        if rid in self.requests:   # a resumed or forked file repeats the entries before it (these have no uuid)
            self.s.duplicates += 1
            return
        if rid:
            self.requests[rid] = request
            if not e.get("isSidechain"):
                self.unanswered[rid] = request
                self.s.requests += 1

    def cost_state(self, e: dict[str, Any]) -> None:
        cost = e.get("totalCostUSD")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost):
            self.s.reported_cost_usd = float(cost)
        elif cost is not None:
            self.odd("cost-state.totalCostUSD", cost)


# -- after reading: rows, what came next, costs -------------------------------------------------------------

_NEXT_WORDS = {"tools": "ran the tools", "continuation": "asked to continue", "compaction": "compacted",
               "retry_error": "retried after an API error", "api_error": "ended on an API error",
               "hook_block": "Stop hook blocked: fed back", "refusal_retry": "continued once after the refusal",
               "refusal": "ended on the refusal", "prompt": "ended the turn; next prompt",
               "subagent_done": "ended the turn; a sub-agent's result came in",
               "interrupted": "interrupted", "fallback": "switched model after the refusal"}


def _branch(call: Call, after: list[SessionEvent], called_again: bool = False) -> str:
    """The decision-table branch a call's reply and what followed it correspond to (2.1.197 writes no
    continuation message: a call right after a cut reply is its continuation)."""
    names = {e.name for e in after}
    if called_again and not names & {"prompt", "retry_error", "subagent_done"}:
        names.add("continuation")
    if "tool_use" in call.blocks:
        return "incomplete_tool_use" if call.stop_reason == "max_tokens" and call.blocks[-1] == "tool_use" \
            and "tools" not in names else "tool_use"
    stop = call.stop_reason
    if stop == "max_tokens":
        return "max_tokens_continue" if "continuation" in names else "max_tokens_give_up"
    if stop == "model_context_window_exceeded":
        return "context_compact" if "compaction" in names else \
            "max_tokens_continue" if "continuation" in names else "context_give_up"
    if stop == "refusal":
        return "refusal_fallback" if names & {"refusal_retry", "fallback"} else "refusal"
    if stop == "pause_turn":
        return "pause_turn" if "continuation" in names else "pause_give_up"
    if "hook_block" in names:
        return "stop_hook_block"
    if stop == "stop_sequence":
        return "stop_sequence"
    if not [b for b in call.blocks if b != "thinking"]:
        return "empty_nudge"
    return "complete"


def _next_words(e: SessionEvent) -> str:
    if e.name == "fallback" and e.data.get("to_model"):
        return f"switched to {e.data['to_model']} after the refusal"
    return _NEXT_WORDS[e.name]


def _finish(session: Session) -> None:
    by_call = session.events_by_call()
    for i, call in enumerate(session.calls):
        after = by_call.get(call.n, [])
        call.branch = _branch(call, after, called_again=i < len(session.calls) - 1)
        call.row = ROW_OF.get(call.branch, "—")
        told = list(dict.fromkeys(_next_words(e) for e in after if e.name in _NEXT_WORDS))
        last = i == len(session.calls) - 1
        call.next = "; ".join(told) or ("end" if last else "called again")
    models = [c.model for c in session.calls if c.model]
    for call in session.calls + session.sidechain_calls:
        call.model = call.model or (models[0] if models else None)
        call.cost_usd = usage_cost(call.usage, call.model) if call.usage_known else None
        if not call.row:
            call.branch = _branch(call, [])
            call.row = ROW_OF.get(call.branch, "—")


def read_sessions(paths: Iterable[str | os.PathLike[str]]) -> Session:
    """One session from several files (a session and its resumed or forked continuations), each call once."""
    files = [Path(p) for p in paths]
    session = Session(paths=files)
    parser = _Parser(session)
    for number, path in enumerate(files):
        parser.file_no = number
        kind = detect_kind(path)
        if kind != "claude-code":
            raise TranscriptError(path, f"is an {kind.replace('-', ' ')}, not a Claude Code transcript")
        try:
            for entry in iter_entries(path, session):
                parser.entry(entry)
            for side in sorted((path.parent / path.stem / "subagents").glob("*.jsonl")):
                _read_sidechain(side, session, parser)
        except OSError as exc:
            raise TranscriptError(path, f"cannot be read: {exc.strerror or exc}") from None
    if not session.entries:
        raise TranscriptError(files[0] if files else "(no file)", "no readable entry (every line is cut or not JSON)")
    if not parser.known:
        types = ", ".join(sorted(session.unknown)[:5])
        raise TranscriptError(files[0], f"not a Claude Code transcript: none of its {session.entries} entries is of "
                                        f"a type Claude Code writes (found: {types})")
    session.unanswered = len(parser.unanswered)
    _finish(session)
    return session


def _read_sidechain(path: Path, session: Session, parser: _Parser) -> None:
    """A sub-agent's file; one that is not a regular file (a named pipe, a link to a device) is refused as at the
    top level, and named in the notes, without reading it: the session is partial."""
    try:
        for entry in iter_entries(path, session):
            parser.entry({**entry, "isSidechain": True})
    except TranscriptError as exc:
        if exc.reason != "not a regular file" and not exc.reason.startswith("is a folder"):
            raise
        session.refused_files.append(f"{path}: {exc.reason}")


def read_session(path: str | os.PathLike[str]) -> Session:
    return read_sessions([path])


# -- the per-call table ----------------------------------------------------------------------------------------

def _k(value: Any) -> str:
    n = int(value or 0)
    return f"{n / 1000:.1f}k" if n >= 10_000 else str(n)


def table_lines(session: Session) -> list[str]:
    """The per-call table of the main thread, then the sidechains, the events and the totals; each line one line
    whatever the file holds (a newline or an escape sequence in a path, a model name or a message is shown in
    caret notation)."""
    return [printable(line, newlines=False) for line in _table(session)]


def _table(session: Session) -> list[str]:
    out = [f"Claude Code {session.version or '?'} · {session.project or '?'} · {session.started[:19]} · "
           f"{len(session.calls)} call(s) · ended: {session.ending}"]
    out.append(f"{'call':>4}  {'model':20} {'stop_reason':30} {'row':>3}  {'input':>7} {'output':>7} "
               f"{'cache r':>7} {'cache w':>7} {'cost':>9}  next")
    for c in session.calls:
        out.append(_call_line(c))
    if session.sidechain_calls:
        agents = sorted({c.agent or "?" for c in session.sidechain_calls})
        out.append(f"sidechains (sub-agents: {', '.join(agents)}), apart from the main thread:")
        out += [_call_line(c) for c in session.sidechain_calls]
    for e in session.events:
        if e.name in ("compaction", "api_error", "retry_error", "hook_block", "refusal", "refusal_retry", "fallback"):
            out.append(f"  after call {e.after}: {e.name.replace('_', ' ')}: {_event_detail(e)}")
    unknown_usage = sum(1 for c in session.calls + session.sidechain_calls if not c.usage_known)
    if unknown_usage and not session.unpriced:
        out.append(f"total cost unknown: {unknown_usage} refused call(s) without usage in the file; the others "
                   f"${session.known_cost_usd:.4f} (data/prices.yaml)")
    else:
        out.append(f"total {format_cost(session.cost_usd, session.unpriced)} (data/prices.yaml)")
    return out + session.notes()


def _call_line(c: Call) -> str:
    u = c.usage
    cost = "?" if not c.usage_known else (f"${c.cost_usd:.4f}" if c.cost_usd is not None else "no price")
    stop = str(c.stop_reason)
    return (f"{c.n:>4}  {str(c.model)[:20]:20} {stop[:30]:30} {c.row:>3}  {_k(u.get('input_tokens')):>7} "
            f"{_k(u.get('output_tokens')):>7} {_k(u.get('cache_read_input_tokens')):>7} "
            f"{_k(u.get('cache_creation_input_tokens')):>7} {cost:>9}  {c.next}")


def _event_detail(e: SessionEvent) -> str:
    if e.name == "compaction":
        pre, post = e.data.get("pre_tokens"), e.data.get("post_tokens")
        return f"{e.detail or 'compacted'}, {'?' if pre is None else _k(pre)} tokens before" + \
            (f", {_k(post)} after" if post else "")
    return e.detail
