"""A content block as the summaries of blocks read it: the one place that says which block types are a tool call,
a tool's result, web search results or thinking, and which of a block's fields each shows.

Three readers show blocks: the trace line (``agentlab.ui.report``), the list of what a compaction removed
(``compaction``) and the notebook's transcript pane (``agentlab.ui.widgets``). Each formats the ``BlockSummary``
that :func:`summarise_block` reads, in its own words (one line, a line per removed block, HTML).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["TOOL_CALL_TYPES", "BlockKind", "BlockSummary", "summarise_block"]

TOOL_CALL_TYPES = ("tool_use", "server_tool_use")   # a client tool's call, and a server tool's (web search)

BlockKind = Literal["text", "tool_call", "tool_result", "search_results", "thinking", "other"]
_KINDS: dict[str, BlockKind] = {"text": "text", **dict.fromkeys(TOOL_CALL_TYPES, "tool_call"),
                                "tool_result": "tool_result", "web_search_tool_result": "search_results",
                                "thinking": "thinking", "redacted_thinking": "thinking"}


@dataclass(frozen=True)
class BlockSummary:
    """What a block says, by kind. ``text``: a text block's text, a thinking block's thinking, a tool result's
    content as text (its text blocks joined by spaces); ``id``: a call's id, or the call a result answers."""

    type: str                   # the block's own type ("unknown" when it has none)
    kind: BlockKind
    text: str = ""
    name: Any = None            # a tool call's tool
    id: Any = None
    input: Any = None           # a tool call's input
    content: Any = ""           # a result's content as sent: a string or a list of blocks ("" when it has none)
    is_error: bool = False


def summarise_block(block: Mapping[str, Any]) -> BlockSummary:
    """``block`` (a content block as a dict) read as a ``BlockSummary``."""
    kind_of = str(block.get("type", "unknown"))
    kind = _KINDS.get(kind_of, "other")
    if kind == "text":
        return BlockSummary(kind_of, kind, text=str(block.get("text", "")))
    if kind == "tool_call":
        return BlockSummary(kind_of, kind, name=block.get("name"), id=block.get("id"), input=block.get("input"))
    if kind in ("tool_result", "search_results"):
        content = block.get("content", "")
        return BlockSummary(kind_of, kind, text=_content_text(content), id=block.get("tool_use_id"),
                            content=content, is_error=bool(block.get("is_error")))
    if kind == "thinking":
        return BlockSummary(kind_of, kind, text=str(block.get("thinking", "")))
    return BlockSummary(kind_of, kind)


def _content_text(content: Any) -> str:
    """A tool result's content as text: a string as it is, a list's text blocks (and anything else, as text)
    joined by spaces."""
    if isinstance(content, list):
        return " ".join(str(c.get("text", c)) if isinstance(c, dict) else str(c) for c in content)
    return str(content or "")
