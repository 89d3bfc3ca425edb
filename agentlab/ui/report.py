"""Readable one-line summaries of events, for the CLI's trace table and the widget's log."""

from __future__ import annotations

from typing import Any

from ..core.events import (
    Append,
    ApiError,
    CompactionEvent,
    Fallback,
    HookEvent,
    Request,
    Response,
    ResultEvent,
    RetryEvent,
    Start,
    ToolRun,
    TransitionEvent,
    Waiting,
)
from ..core.blocks import BlockSummary, summarise_block
from ..core.text import printable
from ..core.trace import Event


def _clip(text: Any, width: int = 70) -> str:
    text = " ".join(printable(str(text)).split())  # escape sequences go before the cut, never half of one
    return text if len(text) <= width else text[: width - 1] + "…"


def _content_summary(blocks: list[dict[str, Any]]) -> str:
    """The blocks on one line (``core.blocks.summarise_block`` reads each): texts and results clipped."""
    return "; ".join(_block_words(summarise_block(b)) for b in blocks) or "(empty)"


def _block_words(s: BlockSummary) -> str:
    if s.kind == "text":
        return f"text {_clip(s.text, 40)!r}"
    if s.kind == "tool_call":
        return f"{s.type} {s.name}({_clip(s.input, 30)})"
    if s.kind == "tool_result":
        return f"tool_result{' ERROR' if s.is_error else ''} {_clip(s.content, 30)!r}"
    return s.type


def prompt_tokens(d: Response) -> int:
    """A response's whole prompt: uncached input plus cache reads and writes."""
    return d.prompt_tokens


def cache_note(d: Response) -> str:
    """" (cache read R, written W)" for a response that read or wrote the prompt cache, else ""."""
    read, written = d.cache_read_input_tokens, d.cache_creation_input_tokens
    if not read and not written:
        return ""
    return f" (cache read {read}, written {written})"


def format_event(e: Event, staged: str | None = None) -> str | None:
    """One line for an event; ``staged`` (why a scenario stages this call's usage) is shown next to the numbers.
    What a model, a tool, a hook or a server wrote is shown printable (:func:`agentlab.core.text.printable`):
    its escape sequences removed, its other control characters in caret notation."""
    line = _event_line(e, staged)
    return None if line is None else printable(line, newlines=False)


def _event_line(e: Event, staged: str | None) -> str | None:
    head = f"{e.call:>3} {e.kind:<10}"
    note = f" (staged: {staged})" if staged else ""
    match e.payload:
        case Start() as d:
            return f"{head} model={d.model} max_tokens={d.max_tokens} stream={d.stream} " \
                   f"tools={','.join(d.tools) or '-'}"
        case Request() as d:
            purpose = "" if d.purpose == "turn" else f" [{d.purpose}]"
            return (f"{head} {d.model} max_tokens={d.max_tokens} messages={d.messages} "
                    f"context≈{d.context_tokens}{purpose}")
        case Waiting() as d:
            return f"{head} {d.message}"
        case Response() as d:
            return (f"{head} stop_reason={d.stop_reason} in/out={d.prompt_tokens}/"
                    f"{d.output_tokens}{cache_note(d)}{note} {_content_summary(list(d.content))}")
        case ApiError() as d:
            return f"{head} HTTP {d.status} {d.error_type}: {_clip(d.message)}{note}"
        case RetryEvent() as d:
            return f"{head} attempt {d.attempt} after {d.delay_s}s on {d.model}"
        case Fallback() as d:
            return f"{head} {d.from_model} -> {d.to_model} ({d.cause})"
        case TransitionEvent() as d:
            return f"{head} row {d.row:<3} {d.branch}: {_clip(d.reason, 80)}"
        case Append() as d:
            return f"{head} + {d.role}: {_content_summary(list(d.content))}"
        case ToolRun() as d:
            flag = " ERROR" if d.is_error else ""
            return f"{head} {d.name}({_clip(d.input, 30)}) ->{flag} {_clip(d.output, 50)!r}"
        case HookEvent() as d:
            if d.decision:
                what = d.decision
            elif d.error:
                what = "error: " + _clip(d.error, 40)
            elif d.event == "UserPromptSubmit" and d.stdout.strip():
                what = "added context"
            else:
                what = "no opinion"
            return f"{head} {d.event} [{d.source}] {what}"
        case CompactionEvent() as d:
            return (f"{head} {d.strategy} ({d.trigger}): {d.tokens_before} -> "
                    f"{d.tokens_after} tokens, {d.messages_before} -> {d.messages_after} messages")
        case ResultEvent() as d:
            return f"{head} {d.subtype} is_error={d.is_error} num_turns={d.num_turns}"
    return None


def print_trace(source: Any, kinds: tuple[str, ...] | list[str] | set[str] | None = None) -> None:
    """Print the readable line of every event of a loop's trace (or of a Trace), optionally only some kinds.

    For a scenario run, usage numbers the scenario stages on purpose say so.
    """
    events = getattr(source, "trace", source)
    engine = getattr(source, "engine", None)
    staged: dict[int, str] = engine.staged_calls() if engine is not None and hasattr(engine, "staged_calls") else {}
    wanted = set(kinds) if kinds is not None else None
    for event in events:
        if wanted is not None and event.kind not in wanted:
            continue
        line = format_event(event, staged.get(event.call) if event.kind in ("response", "api_error") else None)
        if line:
            print(line)
