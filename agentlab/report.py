"""Readable one-line summaries of events, for the CLI's trace table and the widget's log."""

from __future__ import annotations

from typing import Any

from .trace import Event


def _clip(text: Any, width: int = 70) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _content_summary(blocks: list[dict[str, Any]]) -> str:
    parts = []
    for b in blocks:
        kind = b.get("type")
        if kind == "text":
            parts.append(f"text {_clip(b.get('text', ''), 40)!r}")
        elif kind in ("tool_use", "server_tool_use"):
            parts.append(f"{kind} {b.get('name')}({_clip(b.get('input'), 30)})")
        elif kind == "tool_result":
            flag = " ERROR" if b.get("is_error") else ""
            parts.append(f"tool_result{flag} {_clip(b.get('content'), 30)!r}")
        else:
            parts.append(str(kind))
    return "; ".join(parts) or "(empty)"


def prompt_tokens(d: dict[str, Any]) -> Any:
    """A response's whole prompt: uncached input plus cache reads and writes (the input_tokens alone when
    nothing was cached)."""
    cached = int(d.get("cache_read_input_tokens") or 0) + int(d.get("cache_creation_input_tokens") or 0)
    return d.get("input_tokens") if not cached else int(d.get("input_tokens") or 0) + cached


def _cache_note(d: dict[str, Any]) -> str:
    read, written = int(d.get("cache_read_input_tokens") or 0), int(d.get("cache_creation_input_tokens") or 0)
    if not read and not written:
        return ""
    return f" (cache read {read}, written {written})"


def format_event(e: Event, staged: str | None = None) -> str | None:
    """One line for an event; ``staged`` (why a scenario stages this call's usage) is shown next to the numbers."""
    d = e.data
    head = f"{e.call:>3} {e.kind:<10}"
    if e.kind == "start":
        return f"{head} model={d.get('model')} max_tokens={d.get('max_tokens')} stream={d.get('stream')} " \
               f"tools={','.join(d.get('tools') or []) or '-'}"
    if e.kind == "request":
        purpose = "" if d.get("purpose") == "turn" else f" [{d.get('purpose')}]"
        return (f"{head} {d.get('model')} max_tokens={d.get('max_tokens')} messages={d.get('messages')} "
                f"context≈{d.get('context_tokens')}{purpose}")
    if e.kind == "response":
        note = f" (staged: {staged})" if staged else ""
        return (f"{head} stop_reason={d.get('stop_reason')} in/out={prompt_tokens(d)}/"
                f"{d.get('output_tokens')}{_cache_note(d)}{note} {_content_summary(d.get('content') or [])}")
    if e.kind == "api_error":
        note = f" (staged: {staged})" if staged else ""
        return f"{head} HTTP {d.get('status')} {d.get('error_type')}: {_clip(d.get('message'))}{note}"
    if e.kind == "retry":
        return f"{head} attempt {d.get('attempt')} after {d.get('delay_s')}s on {d.get('model')}"
    if e.kind == "fallback":
        return f"{head} {d.get('from_model')} -> {d.get('to_model')} ({d.get('cause')})"
    if e.kind == "transition":
        return f"{head} row {d.get('row'):<3} {d.get('branch')}: {_clip(d.get('reason'), 80)}"
    if e.kind == "append":
        return f"{head} + {d.get('role')}: {_content_summary(d.get('content') or [])}"
    if e.kind == "tool":
        flag = " ERROR" if d.get("is_error") else ""
        return f"{head} {d.get('name')}({_clip(d.get('input'), 30)}) ->{flag} {_clip(d.get('output'), 50)!r}"
    if e.kind == "hook":
        if d.get("decision"):
            what = d["decision"]
        elif d.get("error"):
            what = "error: " + _clip(d.get("error"), 40)
        elif d.get("event") == "UserPromptSubmit" and str(d.get("stdout", "")).strip():
            what = "added context"
        else:
            what = "no opinion"

        return f"{head} {d.get('event')} [{d.get('source')}] {what}"
    if e.kind == "compaction":
        return (f"{head} {d.get('strategy')} ({d.get('trigger')}): {d.get('tokens_before')} -> "
                f"{d.get('tokens_after')} tokens, {d.get('messages_before')} -> {d.get('messages_after')} messages")
    if e.kind == "result":
        return f"{head} {d.get('subtype')} is_error={d.get('is_error')} num_turns={d.get('num_turns')}"
    return None


def print_trace(source: Any, kinds: tuple[str, ...] | list[str] | set[str] | None = None) -> None:
    """Print the readable line of every event of a loop's trace (or of a Trace), optionally only some kinds.

    For a scenario run, usage numbers the scenario stages on purpose say so.
    """
    events = getattr(source, "trace", source)
    engine = getattr(source, "engine", None)
    staged = engine.staged_calls() if hasattr(engine, "staged_calls") else {}
    wanted = set(kinds) if kinds is not None else None
    for event in events:
        if wanted is not None and event.kind not in wanted:
            continue
        line = format_event(event, staged.get(event.call) if event.kind in ("response", "api_error") else None)
        if line:
            print(line)
