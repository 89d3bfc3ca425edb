"""Server-side context management as the Messages API serves it: compaction and context editing.

Sources (the SDK's docstrings are exact; the pages say the same in prose):

- https://platform.claude.com/docs/en/build-with-claude/compaction ("Compaction") and the SDK's
  ``BetaCompactionConfigParam``, ``BetaCompact20260112EditParam``, ``BetaCompactionBlock(Param)``,
  ``BetaCompactionIterationUsage``, ``BetaIterationsUsage``:
  a request with ``compaction: {"type": "summarize"}`` is a compaction request: the reply holds only the
  signed ``compaction`` block (``stop_reason: "compaction"``), which later requests send back in place of the
  messages it summarises; it "cannot be combined with ``context_management``", and count_tokens ignores it.
  The ``compact_20260112`` edit compacts when the prompt reaches its trigger (default 150,000 input tokens)
  and, with ``pause_after_compaction``, returns the block alone (``stop_reason: "compaction"``); without it the
  model answers from the compacted context after the block. A compaction block is sent back unchanged
  (``signature``, ``encrypted_content``, ``tool_changes``); one with null content "the server treats as
  no-ops"; "Empty string content is not allowed". A ``compaction`` entry in ``usage.iterations`` reports the
  summarising request itself, and its tokens are not in the top-level ``usage``.
- https://platform.claude.com/docs/en/build-with-claude/context-editing ("Context editing") and the SDK's
  ``BetaClearToolUses20250919EditParam``, ``BetaClearThinking20251015EditParam``,
  ``BetaContextManagementResponse``, ``BetaCountTokensContextManagementResponse``: the edits are "applied
  before the prompt reaches Claude"; the client keeps its full history. ``clear_tool_uses_20250919`` clears
  the oldest tool results (replaced by a placeholder; with ``clear_tool_inputs`` the inputs too) once the
  prompt exceeds its trigger (default 100,000 input tokens), keeping the last ``keep`` tool uses (default 3),
  never ``exclude_tools``, and only when at least ``clear_at_least`` tokens go. ``clear_thinking_20251015``
  keeps the thinking blocks of the last ``keep`` assistant turns (``"all"``: every one). The reply's
  ``context_management.applied_edits`` reports each edit that cleared something (tokens and turns/uses
  cleared); count_tokens reports ``context_management.original_input_tokens``.

The placeholder text of a cleared tool result and the error wording are this server's: the pages read do not
quote the live API's.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

from .scenario import request_tokens

COMPACT_TRIGGER = 150_000       # compact_20260112's default trigger (BetaIterationsUsage)
CLEAR_TOOL_TRIGGER = 100_000    # clear_tool_uses_20250919's default trigger ("Context editing")
CLEAR_TOOL_KEEP = 3             # ... and the tool uses it keeps
CLEARED = "[tool result cleared by context editing]"
EDIT_TYPES = ("clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112")


def compaction_signature(content: str, encrypted: str) -> str:
    """The scripted server's signature of a compaction block: deterministic, and any change breaks it."""
    digest = hashlib.sha256(("agentlab-compaction\x00" + content + "\x00" + encrypted).encode()).digest()
    return base64.b64encode(digest * 2).decode()


def compaction_block(summary: str, compacted: int) -> dict[str, Any]:
    """The ``compaction`` block the server returns: the summary, signed, with opaque metadata."""
    encrypted = base64.b64encode(f"agentlab-compaction:{compacted}".encode()).decode()
    return {"type": "compaction", "content": summary, "encrypted_content": encrypted,
            "signature": compaction_signature(summary, encrypted), "tool_changes": []}


def config_problem(request: dict[str, Any]) -> str | None:
    """The 400 a request's ``compaction`` or ``context_management`` gets; None when accepted."""
    compaction, management = request.get("compaction"), request.get("context_management")
    if compaction is not None:
        if management is not None:
            return "compaction cannot be combined with context_management"
        if not isinstance(compaction, dict) or compaction.get("type") != "summarize":
            return "compaction.type: Input should be 'summarize'"
    if management is None:
        return None
    edits = management.get("edits") if isinstance(management, dict) else None
    if not isinstance(management, dict) or not isinstance(edits or [], list):
        return "context_management: expected an object with a list of edits"
    for i, edit in enumerate(edits or []):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind not in EDIT_TYPES:
            return f"context_management.edits.{i}.type: expected one of {', '.join(EDIT_TYPES)}, got {kind!r}"
    return None


def returned_block_problem(request: dict[str, Any]) -> str | None:
    """A compaction block sent back changed (its signature no longer matches) or with empty content."""
    for i, j, block in _compaction_blocks(request):
        content = block.get("content")
        if content is None:
            continue
        if content == "":
            return f"messages.{i}.content.{j}.content: empty string content is not allowed in a compaction block"
        if block.get("signature") != compaction_signature(str(content), str(block.get("encrypted_content") or "")):
            return f"messages.{i}.content.{j}: Invalid `signature` in `compaction` block"
    return None


@dataclass
class Edited:
    """A request as the model reads it, once the server's context management is applied."""

    request: dict[str, Any]
    applied: list[dict[str, Any]] = field(default_factory=list)   # context_management.applied_edits
    block: dict[str, Any] | None = None      # a compaction block this request triggered
    compacted_tokens: int = 0                # the prompt the compaction summarised
    pause: bool = False                      # pause_after_compaction: the block is the whole reply
    original_tokens: int = 0


def apply(request: dict[str, Any], tokens: int, summary: str, *, compact: bool = True) -> Edited:
    """What the model reads of ``request`` (``tokens``: its size as sent): messages before the last compaction
    block sent back dropped, then the context edits in order (``compact``: False for count_tokens, which
    applies only the clearing edits). An unchanged request is returned as is."""
    out = Edited(_after_compaction(request), original_tokens=tokens)
    edits = (request.get("context_management") or {}).get("edits") or []
    for edit in edits:
        size = request_tokens(out.request)
        if edit["type"] == "clear_thinking_20251015":
            _clear_thinking(out, edit, size)
        elif edit["type"] == "clear_tool_uses_20250919":
            _clear_tool_uses(out, edit, size)
        elif compact and size >= _trigger(edit, COMPACT_TRIGGER):
            out.block, out.compacted_tokens = compaction_block(summary, size), size
            out.pause = bool(edit.get("pause_after_compaction"))
            out.request = _after_compaction({**out.request, "messages": [
                {"role": "assistant", "content": [out.block]}, *_last_user(out.request)]})
    return out


def _trigger(edit: dict[str, Any], default: int) -> int:
    trigger = edit.get("trigger")
    value = trigger.get("value") if isinstance(trigger, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _compaction_blocks(request: dict[str, Any]) -> list[tuple[int, int, dict[str, Any]]]:
    messages = request.get("messages")
    return [(i, j, b) for i, m in enumerate(messages if isinstance(messages, list) else []) if isinstance(m, dict)
            for j, b in enumerate(_list(m.get("content")))
            if isinstance(b, dict) and b.get("type") == "compaction"]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _after_compaction(request: dict[str, Any]) -> dict[str, Any]:
    """The conversation from the last compaction block with content on: the summary as the first user turn,
    then whatever followed the block."""
    found = [(i, j, b) for i, j, b in _compaction_blocks(request) if b.get("content") is not None]
    messages = [m for m in request.get("messages") or []]
    if not found:
        if not _compaction_blocks(request):
            return request
        return {**request, "messages": _without_compaction(messages)}  # null-content blocks: no-ops
    i, j, block = found[-1]
    rest = messages[i]["content"][j + 1:]
    after = ([{"role": messages[i].get("role"), "content": rest}] if rest else []) + messages[i + 1:]
    summary = {"role": "user", "content": [{"type": "text", "text": str(block["content"])}]}
    return {**request, "messages": [summary, *_without_compaction(after)]}


def _without_compaction(messages: list[Any]) -> list[Any]:
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "compaction" for b in content):
            kept = [b for b in content if not (isinstance(b, dict) and b.get("type") == "compaction")]
            if not kept:
                continue
            m = {**m, "content": kept}
        out.append(m)
    return out


def _last_user(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's last user message, kept after a compaction triggered by it (the model answers it)."""
    users = [m for m in request.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1:]


def _clear_thinking(out: Edited, edit: dict[str, Any], size: int) -> None:
    keep = edit.get("keep", {"type": "thinking_turns", "value": 1})
    if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
        return
    turns = keep.get("value", 1) if isinstance(keep, dict) else 1
    messages = copy.deepcopy(out.request.get("messages") or [])
    with_thinking = [m for m in messages if m.get("role") == "assistant" and isinstance(m.get("content"), list)
                     and any(b.get("type") in ("thinking", "redacted_thinking") for b in m["content"])]
    cleared = with_thinking[:max(0, len(with_thinking) - int(turns))]
    for m in cleared:
        m["content"] = [b for b in m["content"] if b.get("type") not in ("thinking", "redacted_thinking")]
    if cleared:
        _record(out, {**out.request, "messages": messages}, size,
                {"type": "clear_thinking_20251015", "cleared_thinking_turns": len(cleared)})


def _clear_tool_uses(out: Edited, edit: dict[str, Any], size: int) -> None:
    if size <= _trigger(edit, CLEAR_TOOL_TRIGGER):
        return
    keep = edit.get("keep")
    kept = keep.get("value", CLEAR_TOOL_KEEP) if isinstance(keep, dict) else CLEAR_TOOL_KEEP
    excluded = set(edit.get("exclude_tools") or [])
    inputs = edit.get("clear_tool_inputs") or False
    messages = copy.deepcopy(out.request.get("messages") or [])
    uses = [b for m in messages if m.get("role") == "assistant" and isinstance(m.get("content"), list)
            for b in m["content"] if b.get("type") == "tool_use" and b.get("name") not in excluded]
    old = uses[:max(0, len(uses) - int(kept))]
    ids = {b.get("id") for b in old}
    for m in messages:
        for b in m.get("content") if isinstance(m.get("content"), list) else []:
            if b.get("type") == "tool_result" and b.get("tool_use_id") in ids:
                b["content"] = CLEARED
            elif b.get("type") == "tool_use" and b.get("id") in ids and (
                    inputs is True or (isinstance(inputs, list) and b.get("name") in inputs)):
                b["input"] = {}
    if not old:
        return
    trimmed = {**out.request, "messages": messages}
    least = edit.get("clear_at_least")
    if isinstance(least, dict) and size - request_tokens(trimmed) < int(least.get("value", 0)):
        return  # "Context will only be modified if at least this many tokens can be removed"
    _record(out, trimmed, size, {"type": "clear_tool_uses_20250919", "cleared_tool_uses": len(old)})


def _record(out: Edited, trimmed: dict[str, Any], size: int, applied: dict[str, Any]) -> None:
    out.applied.append({**applied, "cleared_input_tokens": max(0, size - request_tokens(trimmed))})
    out.request = trimmed


def involved(request: dict[str, Any]) -> bool:
    """Whether the server's context management has anything to do with ``request`` (the hot path skips it)."""
    return request.get("context_management") is not None or request.get("compaction") is not None or bool(
        _compaction_blocks(request))


def iteration(kind: str, usage: dict[str, Any]) -> dict[str, Any]:
    """A ``usage.iterations`` entry (``compaction`` or ``message``) from a usage dict."""
    return {"type": kind, "input_tokens": usage.get("input_tokens", 0), "output_tokens": usage.get("output_tokens", 0),
            "cache_creation_input_tokens": usage.get("cache_creation_input_tokens", 0),
            "cache_read_input_tokens": usage.get("cache_read_input_tokens", 0)}
