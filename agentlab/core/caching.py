"""Prompt caching: where the loop puts ``cache_control`` breakpoints, and how the scripted backend answers them.

The loop marks three breakpoints, as Claude Code does: the last tool, the system prompt and the last block
of the latest message (``with_breakpoints``). The request's prefix up to a breakpoint is written to the
cache; a later request that starts with the same prefix reads it back at a tenth of the input price.
The order is tools → system → messages, so a change anywhere (a compaction rewriting the history, another
tool set) breaks every prefix after it.

``PromptCache`` is the scripted backend's model of that cache, deterministic: the prefix read is the
longest prefix, ending at a block boundary at most 20 blocks before one of the request's breakpoints, that
an earlier request wrote; the prefix written is everything up to the request's last breakpoint beyond
what was read. Prefixes shorter than the minimum cacheable length are not cached (the API's rule too).
Entries do not expire (the API's lifetime is 5 minutes, refreshed on every hit).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .compaction import compact_json, text_blocks

EPHEMERAL = {"type": "ephemeral"}
LOOKBACK_BLOCKS = 20          # the API looks for hits this many blocks before each breakpoint
UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})  # blocks that cannot carry cache_control


def with_breakpoints(params: dict[str, Any]) -> dict[str, Any]:
    """A copy of request ``params`` with breakpoints on the last tool, the system prompt and the latest
    message's last cacheable block. The history the loop keeps is not touched."""
    return place_breakpoints(params)[0]


def place_breakpoints(params: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``with_breakpoints(params)`` and how many breakpoints it placed (0 to 3), without reading the rest of
    the request: when nothing else in it carries ``cache_control``, that is ``count_breakpoints`` of the copy."""
    out = dict(params)
    placed = 0
    tools = params.get("tools")
    if tools:
        out["tools"] = [*tools[:-1], {**tools[-1], "cache_control": dict(EPHEMERAL)}]
        placed += 1
    system = params.get("system")
    if system:
        marked: list[dict[str, Any]] = copy.deepcopy(text_blocks(system))
        marked[-1]["cache_control"] = dict(EPHEMERAL)
        out["system"] = marked
        placed += 1
    messages = params.get("messages") or []
    if messages:
        last = dict(messages[-1])
        content = last.get("content")
        blocks: list[dict[str, Any]] = [dict(b) for b in text_blocks(content)]
        for block in reversed(blocks):
            if block.get("type") not in UNCACHEABLE and not (block.get("type") == "text" and not block.get("text")):
                block["cache_control"] = dict(EPHEMERAL)
                last["content"] = blocks
                out["messages"] = [*messages[:-1], last]
                placed += 1
                break
    return out, placed


def has_breakpoints(messages: list[Any], system: Any = None, tools: Any = None) -> bool:
    """Whether any of ``messages`` (their content blocks), the ``system`` blocks or the ``tools`` carry a
    ``cache_control`` marker: the places ``count_breakpoints`` counts."""
    return (_marked(tools) or _marked(system)  # the loop's marks: on the last tool, the system, the last message
            or any(_marked(m.get("content")) for m in reversed(messages) if isinstance(m, dict)))


def _marked(blocks: Any) -> bool:
    return isinstance(blocks, list) and any(isinstance(b, dict) and "cache_control" in b for b in blocks)


def without_breakpoints(obj: Any) -> Any:
    """``obj`` with every ``cache_control`` key left out (the markers are not part of the prompt's tokens);
    the same object when it has none."""
    if isinstance(obj, dict):
        if "cache_control" not in obj and not any(isinstance(v, (dict, list)) for v in obj.values()):
            return obj
        return {k: without_breakpoints(v) for k, v in obj.items() if k != "cache_control"}
    if isinstance(obj, list):
        return [without_breakpoints(v) for v in obj]
    return obj


# In compact JSON a quote inside a string is escaped, so an unescaped quote right after "{" or "," opens a key:
# this finds every cache_control key of a value's JSON text, at any depth, and none inside a string.
_MARK_KEY = re.compile(r'[{,]"cache_control":')
_DECODER = json.JSONDecoder()


def chars_without_breakpoints(obj: Any) -> int:
    """``len`` of the compact JSON of ``without_breakpoints(obj)`` (``ensure_ascii=False``, no spaces), from one
    encoding of ``obj`` with the markers' text taken out: no copy of the request is made."""
    text = compact_json(obj)
    if '"cache_control":' not in text:
        return len(text)
    removed = 0
    for match in _MARK_KEY.finditer(text):
        end = _DECODER.raw_decode(text, match.end())[1]  # just after the marker's value
        removed += end - match.start() - 1  # the key and its value
        if text[match.start()] == "," or text[end] == ",":  # the comma that separated it from a neighbour
            removed += 1
    return len(text) - removed


def count_breakpoints(request: dict[str, Any]) -> int:
    return sum(1 for block in _flatten(request) if block[2])


# json.dumps(block, sort_keys=True, ensure_ascii=False, separators=(",", ":")), its encoder built once (as
# compaction.compact_json's: json.dumps would build one per block of every request)
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _canonical(block: Any) -> str:
    if isinstance(block, dict) and "cache_control" in block:
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return _CANONICAL.encode(block)


def _flatten(request: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The request's blocks in cache order: (section, canonical JSON, has a breakpoint)."""
    out: list[tuple[str, str, bool]] = []
    for tool in request.get("tools") or []:
        out.append(("tools", _canonical(tool), isinstance(tool, dict) and "cache_control" in tool))
    system = request.get("system")
    if isinstance(system, str) and system:
        out.append(("system", _canonical({"type": "text", "text": system}), False))
    elif isinstance(system, list):
        for block in system:
            out.append(("system", _canonical(block), isinstance(block, dict) and "cache_control" in block))
    for message in request.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role"))
        content = message.get("content")
        blocks = text_blocks(content)
        for i, block in enumerate(blocks):
            marked = isinstance(block, dict) and "cache_control" in block
            # the role and a message boundary belong to the prefix: the same text as user or assistant differs
            out.append(("messages", f"{role}{'+' if i else '|'}{_canonical(block)}", marked))
    return out


@dataclass
class CacheUsage:
    read: int = 0       # cache_read_input_tokens
    written: int = 0    # cache_creation_input_tokens


@dataclass
class PromptCache:
    """The scripted backend's prompt cache: prefixes written by earlier requests, by hash."""

    min_tokens: int = 1024
    entries: dict[str, int] = field(default_factory=dict)  # prefix hash -> prefix tokens

    def clear(self) -> None:
        self.entries.clear()

    def use(self, request: dict[str, Any], total_tokens: int) -> CacheUsage:
        """Read and write the cache for one request; returns its cache usage (both 0 without breakpoints)."""
        messages = request.get("messages")
        if not has_breakpoints(messages if isinstance(messages, list) else [], request.get("system"),
                               request.get("tools")):
            return CacheUsage()
        blocks = _flatten(request)
        marks = [i for i, (_, _, marked) in enumerate(blocks) if marked]
        if not marks:
            return CacheUsage()
        model = str(request.get("model"))
        thinking = json.dumps(request.get("thinking"), sort_keys=True)
        candidates = sorted({j for m in marks for j in range(max(0, m - LOOKBACK_BLOCKS + 1), m + 1)}, reverse=True)
        hashes: dict[int, str] = {}  # the prefix hash and size at each block a hit may end on
        tokens: dict[int, int] = {}
        wanted = set(candidates)
        digest = hashlib.sha256(model.encode())
        chars = 0
        pending: list[str] = []  # text not yet hashed: the digest is fed once per wanted block, not per block
        for j, (section, text, _) in enumerate(blocks):
            # a change of thinking settings invalidates the messages' prefixes, not tools or system (API rule)
            pending += (section, thinking if section == "messages" else "", "\x00", text, "\x00")
            chars += len(text)
            if j in wanted:
                digest.update("".join(pending).encode())
                pending.clear()
                hashes[j] = digest.hexdigest()
                tokens[j] = min(total_tokens, math.ceil(chars / 4))
        read = next((tokens[j] for j in candidates if hashes[j] in self.entries), 0)
        last = marks[-1]
        written = 0
        if tokens[last] >= self.min_tokens and tokens[last] > read:
            written = tokens[last] - read
        for m in marks:
            if tokens[m] >= self.min_tokens:
                self.entries[hashes[m]] = tokens[m]
        return CacheUsage(read=read, written=written)
