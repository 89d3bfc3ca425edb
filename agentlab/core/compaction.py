"""Context accounting and history compaction for the agent loop.

Everything here works on plain Messages-API dicts::

    {"role": "user" | "assistant", "content": str | list[block]}

and is pure: the input list and the dicts inside it are never modified.  A strategy
returns a *new* list; messages it leaves alone are shared with the input (not copied),
messages it rewrites are fresh dicts.  The system prompt is not part of ``messages``
and is never touched.

Vocabulary used throughout:

* **head** -- ``messages[0]`` (the first user request) plus any plain-text user
  messages that directly follow it, i.e. everything before the first assistant message.
* **turn** -- an assistant message together with the user message(s) that follow it up
  to the next assistant message: normally the ``tool_result`` reply, or the user's next
  text, possibly followed by a plain-text nudge.  Because a turn carries both halves of
  every ``tool_use``/``tool_result`` pair, dropping whole turns can never orphan a result,
  and because every turn starts with an assistant message and ends with a user message
  (only the final one may end with the assistant), ``head + any suffix of the turns``
  still alternates correctly.

Strategies, from gentlest to strongest (see :data:`DEFAULT_CHAIN`):

``clear_tool_results``
    Replace the content of old ``tool_result`` blocks with a short placeholder, in the
    spirit of the API's ``clear_tool_uses`` context edit.  The conversation's shape is
    untouched.
``summarize``
    Replace the older turns with a model-written summary, attached to the first request.
``drop_oldest``
    Delete the oldest turns outright.  Always possible, needs no model call, keeps no
    trace of what was removed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .blocks import TOOL_CALL_TYPES, summarise_block

DEFAULT_CONTEXT_WINDOW = 200_000   # tokens: the window the loop plans with unless told otherwise

__all__ = [
    "DEFAULT_CHAIN",
    "STRATEGIES",
    "SUMMARY_HEADER",
    "SUMMARY_PROMPT",
    "CompactionResult",
    "ContextMeter",
    "clear_tool_results",
    "drop_oldest",
    "estimate_tokens",
    "facts_kept",
    "summarize",
    "summary_input",
    "summary_request_messages",
    "text_blocks",
    "validate_history",
]

Message = dict[str, Any]
Summarizer = Callable[[list[Message]], str]

CLEARED_PLACEHOLDER = "[tool result cleared to save context]"

SUMMARY_HEADER = "This session continues an earlier conversation. Summary of it:\n"

SUMMARY_PROMPT = (
    "Your task is to create a detailed summary of the conversation so far: the context window is filling up,"
    " and the conversation above is about to be replaced by this summary.\n"
    "It must let you carry on the task without the original messages, so include:\n"
    "1. The user's request and every explicit instruction or constraint they gave.\n"
    "2. Every concrete fact learned so far, copied exactly: names, numbers, codes, ids, paths, URLs.\n"
    "3. What has been done: the tools called, what they returned, and any errors.\n"
    "4. What remains to do, and the very next step.\n"
    "Respond with TEXT ONLY. Do not call any tools and do not continue the task; "
    "write the summary and nothing else."
)

_SEPARATORS = (",", ":")
_SNIPPET_CHARS = 60


# ---------------------------------------------------------------------------
# Token estimates
# ---------------------------------------------------------------------------


def json_default(obj: Any) -> Any:
    """Fallback for objects json cannot encode (e.g. SDK models): dump them, else use str()."""
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump()
    return str(obj)


# The library's encoder, built once: json.dumps builds one per call, 1.07 x the CPU per model call of
# bench/overhead.py's conversation (4.79 against 4.53 ms, tools replayed, 80 interleaved rounds).
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=_SEPARATORS, default=json_default)


def compact_json(obj: Any) -> str:
    """``json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=json_default)``, the same text (and
    the same errors: a value that holds itself is a ValueError, Circular reference), from one encoder."""
    return _COMPACT.encode(obj)


def _chars(obj: Any) -> int:
    """Length of the compact JSON encoding of ``obj`` (a ``str`` counts as its own length)."""
    if isinstance(obj, str):
        return len(obj)
    return len(compact_json(obj))


def _json_chars(obj: Any) -> int:
    """Length of the compact JSON encoding, strings included (quoted and escaped)."""
    return len(compact_json(obj))


def _tokens_from_chars(chars: int) -> int:
    return math.ceil(chars / 4)


def estimate_tokens(obj: Any) -> int:
    """Cheap, deterministic token *estimate*: one token per four characters.

    A ``str`` counts ``ceil(len(s) / 4)``; anything else counts a quarter of the length
    of its compact JSON encoding (``ensure_ascii=False``, no spaces), rounded up.  This is
    only a rule of thumb -- the exact figure is the ``usage`` block of an API response --
    but it is stable, needs no tokenizer and is good enough to decide when to compact.
    """
    return _tokens_from_chars(_chars(obj))


class ContextMeter:
    """Incremental context accounting: exact from the last response's usage, plus estimates of
    what was appended since.

    After every response the loop calls :meth:`observe_usage`; that sets an exact *base*
    (everything that was sent plus what came back) and clears the pending estimate.  Each
    message appended afterwards (tool results, nudges) is passed to :meth:`appended`, which
    adds its :func:`estimate_tokens` to *pending*.  After a compaction the history no longer
    matches the last usage, so :meth:`reset` re-bases on an estimate of the whole new request.

    Call order in the loop: append the assistant message, then ``observe_usage`` (its
    ``output_tokens`` already cover that message; anything passed to ``appended`` before
    ``observe_usage`` is discarded by it), then ``appended`` for every later message.

    Every method is O(1) except ``appended`` (linear in the one message) and ``reset``
    (linear in the request it is given).
    """

    def __init__(self, window: int = DEFAULT_CONTEXT_WINDOW) -> None:
        if window <= 0:
            raise ValueError(f"window must be positive, got {window}")
        self.window = window
        self.base = 0
        self.pending = 0
        self.exact = False  # True while base comes from an API usage block

    def observe_usage(
        self, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_creation: int = 0
    ) -> None:
        """Re-base on a response's usage: uncached input + cache reads + cache writes + output."""
        self.base = input_tokens + cache_read + cache_creation + output_tokens
        self.pending = 0
        self.exact = True

    def appended(self, message: Message) -> None:
        """Account for a message added to the history since the last response."""
        self.pending += estimate_tokens(message)

    def reset(self, messages: list[Message], system: Any = None, tools: Any = None) -> None:
        """Re-base on an estimate of a whole request (after compaction rewrote the history)."""
        total = estimate_tokens(messages)
        if system:
            total += estimate_tokens(system)
        if tools:
            total += estimate_tokens(tools)
        self.base = total
        self.pending = 0
        self.exact = False

    @property
    def tokens(self) -> int:
        """Current size of the context: base + pending."""
        return self.base + self.pending

    @property
    def fill(self) -> float:
        """Fraction of the window in use (may exceed 1.0)."""
        return self.tokens / self.window

    def __repr__(self) -> str:
        kind = "exact" if self.exact else "estimated"
        return (
            f"ContextMeter(tokens={self.tokens}, base={self.base} ({kind}), pending={self.pending}, "
            f"window={self.window}, fill={self.fill:.1%})"
        )


# ---------------------------------------------------------------------------
# Results and shared helpers
# ---------------------------------------------------------------------------


@dataclass
class CompactionResult:
    """What a strategy produced.  ``messages`` is a new list; the input is never mutated.

    ``tokens_before``/``tokens_after`` are :func:`estimate_tokens` of the message lists.
    ``removed`` lists short descriptions of what was removed or replaced.  ``changed`` is
    False when the strategy could not reduce anything; ``messages`` then holds the input's
    messages unchanged and ``note`` says why.
    """

    messages: list[Message]
    strategy: str
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    removed: list[str] = field(default_factory=list)
    changed: bool = True
    note: str = ""

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after


def _list_chars(message_chars: Iterable[int]) -> int:
    """JSON length of a list whose elements encode to the given lengths: brackets plus commas."""
    total = 0
    count = 0
    for c in message_chars:
        total += c
        count += 1
    return total + 2 + max(count - 1, 0)


def _unchanged(
    messages: list[Message], strategy: str, note: str, tokens: int | None = None
) -> CompactionResult:
    if tokens is None:
        tokens = estimate_tokens(messages)
    return CompactionResult(
        messages=list(messages),
        strategy=strategy,
        tokens_before=tokens,
        tokens_after=tokens,
        messages_before=len(messages),
        messages_after=len(messages),
        removed=[],
        changed=False,
        note=note,
    )



def _changed(messages: list[Message], out: list[Message], strategy: str, before_tokens: int, after_tokens: int,
             removed: list[str]) -> CompactionResult:
    return CompactionResult(messages=out, strategy=strategy, tokens_before=before_tokens, tokens_after=after_tokens,
                            messages_before=len(messages), messages_after=len(out), removed=removed, changed=True)

def text_blocks(content: Any) -> list[Any]:
    """A message's content as a block list: a string is one text block; a list is copied; None is []."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def message_blocks(message: Any) -> list[dict[str, Any]]:
    """The content blocks of a message (a dict, or an SDK Message whose blocks are converted) as dicts; string
    or missing content has none, and a list item that is not a block is left out."""
    if message is None:
        return []
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    if not isinstance(content, list):
        return []
    return [b if isinstance(b, dict) else b.to_dict() for b in content if isinstance(b, dict) or hasattr(b, "to_dict")]


def _snippet(text: str) -> str:
    head = " ".join(text[: _SNIPPET_CHARS * 4].split())
    if len(head) > _SNIPPET_CHARS or len(text) > _SNIPPET_CHARS * 4:
        return f"'{head[:_SNIPPET_CHARS].rstrip()}…'"
    return f"'{head}'"


def _tool_names(message: Message | None) -> dict[str, str]:
    """tool_use id -> tool name for one assistant message."""
    if message is None or message.get("role") != "assistant":
        return {}
    return {
        str(b.get("id")): str(b.get("name", "?"))
        for b in message_blocks(message)
        if isinstance(b, dict) and b.get("type") == "tool_use"
    }


def _describe_message(message: Message, label: str, names: dict[str, str]) -> list[str]:
    """One short description per block of a removed message."""
    role = message.get("role", "?")
    content = message.get("content")
    if isinstance(content, str):
        return [f"{label}: {role} text {_snippet(content)}"]
    blocks = content if isinstance(content, list) else []
    return [f"{label}: {_removed_block(block, role, names)}" for block in blocks]


def _removed_block(block: Any, role: str, names: dict[str, str]) -> str:
    """A removed block in a few words (``blocks.summarise_block`` reads it): the ids and sizes of what went."""
    if not isinstance(block, dict):
        return f"{role} malformed block"
    s = summarise_block(block)
    if s.kind == "text":
        return f"{role} text {_snippet(s.text)}"
    if s.kind == "tool_call":
        return f"{s.type} {s.id} {s.name}"
    if s.kind == "tool_result":
        error = ", error" if s.is_error else ""
        return f"tool_result {s.id} ({names.get(str(s.id), '?')}, {estimate_tokens(s.content)} tokens{error})"
    if s.kind == "search_results":
        return f"web_search_tool_result {s.id} ({estimate_tokens(s.content)} tokens)"
    return f"{role} {s.type} block ({estimate_tokens(block)} tokens)"


def _turn_starts(messages: list[Message]) -> list[int]:
    """Indices of the assistant messages after messages[0]; each one opens a turn."""
    return [i for i in range(1, len(messages)) if messages[i].get("role") == "assistant"]


def _removable_turns(messages: list[Message], starts: list[int], keep_last_turns: int) -> int:
    """How many of the oldest turns a strategy may remove.

    A history that ends with an assistant message whose tool calls are still unanswered
    always keeps that turn, whatever ``keep_last_turns`` says: the loop is about to append
    the results, and they would have no tool_use to answer.
    """
    keep = keep_last_turns
    if starts and starts[-1] == len(messages) - 1:
        last = messages[-1]
        if any(isinstance(b, dict) and b.get("type") == "tool_use" for b in message_blocks(last)):
            keep = max(keep, 1)
    return max(len(starts) - keep, 0)


@dataclass
class _TurnPlan:
    """What drop_oldest and summarize both need first: turn starts, sizes, and how many turns may go."""

    starts: list[int]
    removable: int
    sizes: list[int]
    before_chars: int
    before_tokens: int


def _plan_turns(messages: list[Message], keep_last_turns: int, strategy: str) -> _TurnPlan | CompactionResult:
    """The turn plan, or the unchanged result when no turn may be removed."""
    if keep_last_turns < 0:
        raise ValueError(f"keep_last_turns must be >= 0, got {keep_last_turns}")
    starts = _turn_starts(messages)
    removable = _removable_turns(messages, starts, keep_last_turns)
    sizes = [_json_chars(m) for m in messages]
    before_chars = _list_chars(sizes)
    before_tokens = _tokens_from_chars(before_chars)
    if removable == 0:
        why = "no turns after the first request" if not starts else f"all {len(starts)} turn(s) are kept"
        return _unchanged(messages, strategy, why, before_tokens)
    return _TurnPlan(starts, removable, sizes, before_chars, before_tokens)


def _describe_span(messages: list[Message], start: int, end: int, turn_no: int) -> list[str]:
    label = f"turn {turn_no}" if turn_no > 0 else "request"
    out: list[str] = []
    for i in range(start, end):
        names = _tool_names(messages[i - 1]) if i > 0 else {}
        out.extend(_describe_message(messages[i], label, names))
    return out


# ---------------------------------------------------------------------------
# Strategy 1: clear old tool results
# ---------------------------------------------------------------------------


def clear_tool_results(
    messages: list[Message], *, keep_last: int = 2, placeholder: str = CLEARED_PLACEHOLDER
) -> CompactionResult:
    """Replace the content of all but the last ``keep_last`` tool_result blocks with ``placeholder``.

    Block ids, ``is_error`` flags and every other block stay as they were, so all
    tool_use/tool_result pairs remain intact.  Results that are already no larger than the
    placeholder (including ones cleared earlier) are left alone, so the strategy never
    grows the history and running it twice changes nothing the second time.
    """
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    strategy = "clear_tool_results"
    # Locate every tool_result block in order: (message index, block index).
    locations = [
        (i, j)
        for i, msg in enumerate(messages)
        if msg.get("role") == "user"
        for j, block in enumerate(message_blocks(msg))
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    candidates = locations[: max(len(locations) - keep_last, 0)]
    placeholder_chars = _json_chars(placeholder)

    new_blocks: dict[int, list[Any]] = {}
    removed: list[str] = []
    delta = 0
    for i, j in candidates:
        block = messages[i]["content"][j]
        old = block.get("content", "")
        old_chars = _json_chars(old) if "content" in block else 0
        if old_chars <= placeholder_chars:
            continue
        blocks = new_blocks.get(i)
        if blocks is None:
            blocks = new_blocks[i] = list(messages[i]["content"])
        replacement = dict(block)
        replacement["content"] = placeholder
        blocks[j] = replacement
        # Only the value of "content" changes, so the encoded length changes by exactly this much.
        delta += placeholder_chars - old_chars
        tid = block.get("tool_use_id")
        name = _tool_names(messages[i - 1] if i > 0 else None).get(tid, "?")
        err = ", error" if block.get("is_error") else ""
        removed.append(f"tool_result {tid} ({name}, {estimate_tokens(old)} tokens{err})")

    before_chars = _json_chars(messages)
    before_tokens = _tokens_from_chars(before_chars)
    after_tokens = _tokens_from_chars(before_chars + delta)
    if not new_blocks or after_tokens >= before_tokens:
        if not locations:
            note = "history holds no tool results"
        elif not candidates:
            note = f"only {len(locations)} tool result(s), all within keep_last={keep_last}"
        else:
            note = "the older tool results are already no larger than the placeholder"
        return _unchanged(messages, strategy, note, before_tokens)

    out = list(messages)
    for i, blocks in new_blocks.items():
        msg = dict(messages[i])
        msg["content"] = blocks
        out[i] = msg
    return _changed(messages, out, strategy, before_tokens, after_tokens, removed)


# ---------------------------------------------------------------------------
# Strategy 2: drop the oldest turns
# ---------------------------------------------------------------------------


def drop_oldest(
    messages: list[Message], *, target_tokens: int | None = None, keep_last_turns: int = 1
) -> CompactionResult:
    """Drop whole turns, oldest first, keeping the head (first request) and the last turns.

    With ``target_tokens`` turns are dropped one at a time until the estimate is at or
    below the target (or nothing droppable is left -- check ``tokens_after``).  Without a
    target the older half of the droppable turns goes (rounded up, so a single droppable
    turn is dropped).  The last ``keep_last_turns`` turns are never dropped, nor is a final
    assistant message with unanswered tool calls.

    Since a turn is an assistant message plus its answering user message(s), what remains is
    ``head + the newest turns``: the first message after the head is an assistant message,
    roles still alternate, and no tool_result loses its tool_use.
    """
    strategy = "drop_oldest"
    plan = _plan_turns(messages, keep_last_turns, strategy)
    if isinstance(plan, CompactionResult):
        return plan
    starts, droppable, sizes = plan.starts, plan.removable, plan.sizes
    before_chars, before_tokens = plan.before_chars, plan.before_tokens

    bounds = starts + [len(messages)]
    if target_tokens is None:
        n_drop = math.ceil(droppable / 2)
        chars = before_chars
        for k in range(n_drop):
            chars -= sum(sizes[bounds[k] : bounds[k + 1]]) + (bounds[k + 1] - bounds[k])
    else:
        if before_tokens <= target_tokens:
            return _unchanged(
                messages, strategy, f"already within target ({before_tokens} tokens)", before_tokens
            )
        n_drop = 0
        chars = before_chars
        while n_drop < droppable and _tokens_from_chars(chars) > target_tokens:
            lo, hi = bounds[n_drop], bounds[n_drop + 1]
            chars -= sum(sizes[lo:hi]) + (hi - lo)  # the messages and their separating commas
            n_drop += 1

    cut = bounds[n_drop]
    head_end = starts[0]
    removed: list[str] = []
    for k in range(n_drop):
        removed.extend(_describe_span(messages, bounds[k], bounds[k + 1], k + 1))
    out = messages[:head_end] + messages[cut:]
    return _changed(messages, out, strategy, before_tokens, _tokens_from_chars(chars), removed)


# ---------------------------------------------------------------------------
# Strategy 3: summarise the older turns
# ---------------------------------------------------------------------------


def _is_summary_block(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and str(block.get("text", "")).startswith(SUMMARY_HEADER)
    )


def _first_request_blocks(first: Message) -> list[Any]:
    """messages[0] as a block list, without any summary block a previous compaction appended."""
    return [b for b in text_blocks(first.get("content")) if not _is_summary_block(b)]


def summary_input(messages: list[Message], *, keep_last_turns: int = 2) -> list[Message] | None:
    """What ``summarize`` would hand its summarizer (``messages[:cut]``); None when it has nothing to summarise.

    A caller that must make the summary call itself (the loop yields it as an effect) asks for the input
    first, then passes ``summarize`` a summarizer that returns the finished text.
    """
    plan = _plan_turns(messages, keep_last_turns, "summarize")
    if isinstance(plan, CompactionResult):
        return None
    return messages[:(plan.starts + [len(messages)])[plan.removable]]


def summarize(
    messages: list[Message], summarizer: Summarizer, *, keep_last_turns: int = 2
) -> CompactionResult:
    """Replace everything before the last ``keep_last_turns`` turns with a summary.

    The cut falls on a turn boundary: ``cut`` is the index of the first kept assistant
    message, and ``summarizer(messages[:cut])`` is called once (``messages[:cut]`` is itself
    a valid history ending with a user message; the summarizer must not modify it).
    Exceptions from the summarizer propagate unchanged.

    Output shape::

        [
          {"role": "user", "content": [<messages[0]'s content, verbatim, as blocks>,
                                       {"type": "text", "text": SUMMARY_HEADER + summary}]},
          <the last keep_last_turns turns, unchanged, starting with an assistant message>,
        ]

    A string ``messages[0]["content"]`` becomes a single text block holding the same string.
    A summary block left by an earlier compaction is replaced, not stacked (the summarizer
    saw it, so its content carries over).  The first request therefore survives verbatim
    and no tool_result is separated from its tool_use.

    A final assistant message with unanswered tool calls is always kept, even with
    ``keep_last_turns=0``.  Nothing is called and ``changed`` is False when there is no
    turn to summarise.  The
    summary is also rejected (``changed=False``, see ``note``) when it is blank or the new
    history would not be smaller than the old one.
    """
    strategy = "summarize"
    plan = _plan_turns(messages, keep_last_turns, strategy)
    if isinstance(plan, CompactionResult):
        return plan
    starts, n_summarised, sizes = plan.starts, plan.removable, plan.sizes
    before_tokens = plan.before_tokens

    bounds = starts + [len(messages)]
    cut = bounds[n_summarised]
    summary = summarizer(messages[:cut])
    if not isinstance(summary, str) or not summary.strip():
        return _unchanged(messages, strategy, "summarizer returned an empty summary", before_tokens)

    first = dict(messages[0])
    first["content"] = _first_request_blocks(messages[0]) + [
        {"type": "text", "text": SUMMARY_HEADER + summary.strip()}
    ]
    out = [first] + messages[cut:]
    after_chars = _list_chars([_json_chars(first)] + sizes[cut:])
    after_tokens = _tokens_from_chars(after_chars)
    if after_tokens >= before_tokens:
        return _unchanged(
            messages, strategy, f"summary would not shrink the history ({after_tokens} tokens)", before_tokens
        )

    removed: list[str] = []
    if any(_is_summary_block(b) for b in message_blocks(messages[0])):
        removed.append("request: earlier summary (replaced by the new one)")
    removed.extend(_describe_span(messages, 1, starts[0], 0))  # nudges that followed the request
    for k in range(n_summarised):
        removed.extend(_describe_span(messages, bounds[k], bounds[k + 1], k + 1))
    return _changed(messages, out, strategy, before_tokens, after_tokens, removed)


def _is_plain_text(message: Message) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        return bool(content)
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "text" for b in content)
    )


_SUMMARY_TAG = re.compile(r"<summary>(.*?)(?:</summary>|$)", re.DOTALL)


def summary_text(reply_text: str) -> str:
    """What a summary reply contributes: the part inside ``<summary>…</summary>`` when the model used that
    form (its ``<analysis>`` notes are left out, as Claude Code does), else the whole text."""
    found = _SUMMARY_TAG.search(reply_text)
    return found.group(1).strip() if found and found.group(1).strip() else reply_text.strip()


def summary_request_messages(older: list[Message], prompt: str = SUMMARY_PROMPT) -> list[Message]:
    """Build the message list for a summary request: ``older`` plus ``prompt`` as a user turn.

    ``older`` is what :func:`summarize` hands its summarizer (it ends with a user message).
    A plain-text last user message gets the prompt appended as an extra text block; after
    a tool_result message the prompt becomes its own plain-text user message (the one
    allowed user-after-user shape); after an assistant message it is a normal user turn.
    The input is not modified.
    """
    prompt_msg: Message = {"role": "user", "content": prompt}
    if not older:
        return [prompt_msg]
    last = older[-1]
    if last.get("role") == "user" and _is_plain_text(last):
        blocks = text_blocks(last["content"])
        merged = dict(last)
        merged["content"] = blocks + [{"type": "text", "text": prompt}]
        return older[:-1] + [merged]
    return older + [prompt_msg]


# ---------------------------------------------------------------------------
# Registry and chain
# ---------------------------------------------------------------------------

STRATEGIES: dict[str, Callable[..., CompactionResult]] = {
    "clear_tool_results": clear_tool_results,
    "drop_oldest": drop_oldest,
    "summarize": summarize,
}

#: Strategies in order of increasing strength, i.e. of how much they lose.  Clearing old
#: tool results keeps every message and only forgets bulky outputs that can be fetched
#: again; summarising rewrites older turns but keeps their gist, at the price of one model
#: call; dropping turns needs no call and always works, but forgets the dropped turns
#: completely, so it is the last resort.
DEFAULT_CHAIN: tuple[str, ...] = ("clear_tool_results", "summarize", "drop_oldest")


# ---------------------------------------------------------------------------
# Validation and fact checks
# ---------------------------------------------------------------------------

_ASSISTANT_ONLY = {"tool_use", "server_tool_use", "web_search_tool_result", "thinking", "redacted_thinking"}


def validate_history(messages: list[Message], *, allow_pending_tool_use: bool = False) -> list[str]:
    """Check a history against the rules the loop relies on; returns problems (empty = valid).

    Rules: the history is a non-empty list starting with a user message; roles alternate,
    except that a plain-text user message (a nudge) may follow a user message -- never
    more than two user messages in a row; content is a string or a list of typed blocks
    and is non-empty (only a final assistant message may be empty); every ``tool_use`` of
    an assistant message is answered, exactly once, by a ``tool_result`` with its id in the
    very next message, which is a user message holding only tool_result blocks; and no
    tool_result appears anywhere else.  ``allow_pending_tool_use`` accepts a final assistant
    message whose tool calls have not been answered yet.
    """
    if not isinstance(messages, list):
        return ["history is not a list"]
    if not messages:
        return ["history is empty"]
    problems: list[str] = []
    last = len(messages) - 1
    prev_role: str | None = None
    users_in_row = 0
    pending: list[str] = []  # tool_use ids of the previous assistant message
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            problems.append(f"{where}: not a dict")
            prev_role, pending, users_in_row = None, [], 0
            continue
        role = msg.get("role")
        if role not in ("user", "assistant"):
            problems.append(f"{where}: unknown role {role!r}")
            prev_role, pending, users_in_row = None, [], 0
            continue
        if i == 0 and role != "user":
            problems.append(f"{where}: history must start with a user message, not {role}")
        blocks = _typed_blocks(where, msg.get("content"), i == last and role == "assistant", problems)
        if pending and role != "user":
            problems.append(f"{where}: tool_use {', '.join(pending)} not answered (next message is {role})")
        if role == "assistant":
            pending = _assistant_problems(where, blocks, prev_role, i == last and not allow_pending_tool_use,
                                          problems)
            users_in_row = 0
        else:
            _user_problems(where, i, msg, blocks, pending, prev_role, users_in_row, problems)
            users_in_row += 1
            pending = []
        prev_role = role
    return problems


def _typed_blocks(where: str, content: Any, may_be_empty: bool, problems: list[str]) -> list[dict[str, Any]]:
    """The content's blocks that have a type (none for a string); a problem for an empty content (unless
    ``may_be_empty``: the final assistant message), a block without a type, or content of another kind."""
    if not isinstance(content, (str, list)):
        problems.append(f"{where}: content must be a string or a list of blocks")
        return []
    if not content and not may_be_empty:
        problems.append(f"{where}: empty content")
    if isinstance(content, str):
        return []
    blocks: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            problems.append(f"{where}.content[{j}]: block without a type")
        else:
            blocks.append(block)
    return blocks


def _assistant_problems(where: str, blocks: list[dict[str, Any]], prev_role: str | None, ends_unanswered: bool,
                        problems: list[str]) -> list[str]:
    """An assistant message's problems; returns its tool_use ids, which the next message must answer.
    ``ends_unanswered``: it is the last message and unanswered tool calls are not allowed there."""
    if prev_role == "assistant":
        problems.append(f"{where}: two assistant messages in a row")
    if any(b["type"] == "tool_result" for b in blocks):
        problems.append(f"{where}: tool_result in an assistant message")
    uses = [b for b in blocks if b["type"] == "tool_use"]
    ids = [str(b.get("id")) for b in uses]
    problems.extend(f"{where}: tool_use without id or name" for b in uses if not b.get("id") or not b.get("name"))
    if len(set(ids)) != len(ids):
        problems.append(f"{where}: duplicate tool_use ids")
    if ids and ends_unanswered:
        problems.append(f"{where}: tool_use {', '.join(ids)} not answered (history ends)")
    return ids


def _user_problems(where: str, i: int, msg: Message, blocks: list[dict[str, Any]], pending: list[str],
                   prev_role: str | None, users_in_row: int, problems: list[str]) -> None:
    """A user message's problems: blocks only an assistant sends, and its tool_results against ``pending``, the
    tool_use ids of the message before (or, with none pending, whether a user message may stand here)."""
    types = [b["type"] for b in blocks]
    misplaced = sorted({t for t in types if t in _ASSISTANT_ONLY})
    if misplaced:
        problems.append(f"{where}: {', '.join(misplaced)} block in a user message")
    result_ids = [str(b.get("tool_use_id")) for b in blocks if b["type"] == "tool_result"]
    if pending:
        if not isinstance(msg.get("content"), list) or any(t != "tool_result" for t in types):
            problems.append(f"{where}: the reply to tool_use must hold only tool_result blocks")
        missing = [t for t in pending if t not in result_ids]
        extra = [t for t in result_ids if t not in pending]
        if missing:
            problems.append(f"{where}: no tool_result for tool_use {', '.join(missing)}")
        if extra:
            problems.append(f"{where}: tool_result {', '.join(extra)} has no tool_use in messages[{i - 1}]")
        if len(set(result_ids)) != len(result_ids):
            problems.append(f"{where}: duplicate tool_result ids")
        return
    if result_ids:
        problems.append(f"{where}: tool_result {', '.join(result_ids)} lacks a tool_use in the prior message")
    if prev_role == "user":
        if not _is_plain_text(msg):
            problems.append(f"{where}: a user message may only follow a user message as plain text")
        elif users_in_row >= 2:
            problems.append(f"{where}: more than two user messages in a row")


def _history_text(messages: list[Message]) -> str:
    """All searchable text of a history: text blocks, tool_use inputs and tool_result contents."""
    parts: list[str] = []
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, str):
            parts.append(content)
            continue
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                parts.append(str(block.get("text", "")))
            elif kind in TOOL_CALL_TYPES:
                parts.append(json.dumps(block.get("input"), ensure_ascii=False, default=json_default))
            elif kind == "tool_result":
                inner = block.get("content", "")
                if isinstance(inner, str):
                    parts.append(inner)
                else:
                    for sub in inner if isinstance(inner, list) else [inner]:
                        if isinstance(sub, dict) and sub.get("type") == "text":
                            parts.append(str(sub.get("text", "")))
                        else:
                            parts.append(json.dumps(sub, ensure_ascii=False, default=json_default))
            elif kind == "web_search_tool_result":
                parts.append(json.dumps(block.get("content"), ensure_ascii=False, default=json_default))
    return "\n".join(parts)


def facts_kept(messages: list[Message], facts: dict[str, str]) -> dict[str, bool]:
    """For planted facts such as ``{"door code": "4711"}``, whether each value still occurs in the history.

    Looks at text (string contents and text blocks), tool_use inputs and tool_result
    contents; thinking blocks do not count.  Matching is an exact, case-sensitive
    substring test.  One pass over the history, however many facts.
    """
    text = _history_text(messages)
    return {name: str(value) in text for name, value in facts.items()}
