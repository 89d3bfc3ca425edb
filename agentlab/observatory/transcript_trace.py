"""A Claude Code session (``transcript.Session``) as agentlab's events, for the stepper and the plots.

Per main-thread call: a ``request`` (its context is the prompt Claude Code reported for it: input plus cache
reads and writes), a ``response`` with the measured usage and its cost, the tool results, then a
``transition`` naming the decision-table branch. Between calls: ``api_error`` and ``retry`` events for the
failures it retried, ``compaction`` (tokens before: Claude Code's ``preTokens``; after: its ``postTokens``, else
the next call's prompt), ``hook`` for a Stop-hook block. A ``result`` ends the trace. Nothing is estimated
except the context window, which is Claude Code's default of 200k tokens.
"""

from __future__ import annotations

from typing import Any

from ..core.compaction import DEFAULT_CONTEXT_WINDOW
from ..core.events import (
    Append,
    ApiError,
    CompactionEvent,
    HookEvent,
    Request,
    Response,
    ResultEvent,
    RetryEvent,
    Start,
    ToolRun,
    TransitionEvent,
)
from ..core.trace import Trace
from .replay import BRANCH_TYPES, COUNTED
from .transcript import CLIENT, Call, Session, SessionEvent, result_subtype

_END_BRANCHES = {"max_tokens_give_up", "context_give_up", "refusal", "pause_give_up", "api_error"}


def _response(call: Call, run_cost: float | None) -> Response:
    u = call.usage
    return Response(
        model=call.model, stop_reason=call.stop_reason, blocks=",".join(call.blocks), content=list(call.content),
        input_tokens=int(u.get("input_tokens") or 0), output_tokens=int(u.get("output_tokens") or 0),
        cache_read_input_tokens=int(u.get("cache_read_input_tokens") or 0),
        cache_creation_input_tokens=int(u.get("cache_creation_input_tokens") or 0),
        cost_usd=call.cost_usd, run_cost_usd=run_cost, usage=dict(u), context_window=DEFAULT_CONTEXT_WINDOW,
        extra={} if call.usage_known else {"usage_unknown": "Claude Code wrote only this refused reply's id"})


def _between(trace: Trace, n: int, events: list[SessionEvent], next_call: Call | None, attempts: list[int]) -> None:
    for e in events:
        if e.name == "tools":
            for block in e.data.get("results") or []:
                trace.emit(ToolRun(id=block.get("tool_use_id"), output=block.get("content"),
                                   is_error=bool(block.get("is_error"))), n)
            trace.emit(Append(role="user", content=list(e.data.get("results") or []), blocks="tool_result"), n)
        elif e.name == "retry_error":
            attempts[0] += 1
            trace.emit(ApiError(status=e.data.get("status"), message=e.detail, attempt=attempts[0]), n + 1)
            delay = e.data.get("retry_in_ms")
            trace.emit(RetryEvent(attempt=attempts[0], delay_s=round(delay / 1000, 3) if isinstance(delay, (int, float))
                                  else "?", reason=e.detail), n + 1)
        elif e.name == "compaction":
            before = int(e.data.get("pre_tokens") or 0)
            after = e.data.get("post_tokens") or (next_call.prompt_tokens if next_call else 0)
            trace.emit(CompactionEvent(trigger=str(e.data.get("trigger") or "auto"), strategy="claude-code summary",
                                       tokens_before=before, tokens_after=int(after), context_before=before,
                                       context_after=int(after), context_window=DEFAULT_CONTEXT_WINDOW), n)
        elif e.name == "hook_block":
            trace.emit(HookEvent(event=str(e.data.get("hook") or "Stop"), source="claude-code hook", decision="block",
                                 reason=e.detail), n)
        elif e.name in ("continuation", "refusal_retry", "prompt"):
            trace.emit(Append(role="user", content=[{"type": "text", "text": e.detail}], blocks="text"), n)


def _transition(call: Call, last: bool, ending: str, turns: int) -> TransitionEvent:
    terminal = last and call.branch in _END_BRANCHES
    return TransitionEvent(branch=call.branch, row=call.row, reason=f"{call.stop_reason}: Claude Code {call.next}",
                           type="End" if terminal else next((t for b, t in BRANCH_TYPES.items()
                                                             if b == call.branch), "Other"),
                           subtype=ending if terminal else None, num_turns=turns, model=call.model,
                           extra={"replay": True})


def _counts(session: Session) -> dict[str, int]:
    counts = {name: sum(1 for c in session.calls if c.branch in branches) for name, branches in COUNTED.items()}
    counts["compactions"] = len(session.of("compaction"))
    counts["retries"] = len(session.of("retry_error"))
    return counts


def session_to_trace(session: Session, *, secrets: tuple[str, ...] = ()) -> Trace:
    """The main thread as an agentlab Trace (the module's docstring says what is in it); ``secrets`` (the
    environment's API key) are redacted from every event."""
    trace = Trace(secrets=secrets)
    first = session.calls[0] if session.calls else None
    prompt = next((e.detail for e in session.events if e.name == "prompt"), None)
    trace.emit(Start(model=first.model if first else None, prompt=prompt, context_window=DEFAULT_CONTEXT_WINDOW,
                     extra={"client": CLIENT, "version": session.version, "replay": True, "transcript": True}), 0)
    if prompt:
        trace.emit(Append(role="user", content=[{"type": "text", "text": prompt}], blocks="text"), 0)
    attempts = [0]
    _between(trace, 0, [e for e in session.events if e.after == 0 and e.name != "prompt"], first, attempts)
    run_cost: float | None = 0.0
    for i, call in enumerate(session.calls):
        n = call.n
        nxt = session.calls[i + 1] if i + 1 < len(session.calls) else None
        trace.emit(Request(model=call.model, context_tokens=call.prompt_tokens, context_window=DEFAULT_CONTEXT_WINDOW,
                           extra={"request_id": call.request_id}), n)
        if call.usage_known:
            run_cost = None if run_cost is None or call.cost_usd is None else run_cost + call.cost_usd
        trace.emit(_response(call, run_cost), n)
        trace.emit(Append(role="assistant", content=list(call.content), blocks=",".join(call.blocks)), n)
        after = [e for e in session.events if e.after == n]
        trace.emit(_transition(call, nxt is None, result_subtype(session), i + 1), n)
        _between(trace, n, after, nxt, attempts)
        if call.usage_known:
            attempts[0] = 0
    _result(trace, session)
    return trace


def _result(trace: Trace, session: Session) -> None:
    last = session.calls[-1] if session.calls else None
    usage: dict[str, Any] = {}
    for c in session.calls:
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            usage[key] = usage.get(key, 0) + int(c.usage.get(key) or 0)
    text = next((b.get("text", "") for b in reversed(last.content) if b.get("type") == "text"), "") if last else ""
    subtype = result_subtype(session)
    trace.emit(ResultEvent(subtype=subtype, is_error=subtype != "success", num_turns=len(session.calls),
                           stop_reason=last.stop_reason if last else None, result=str(text)[:500], usage=usage,
                           model=last.model if last else None, requests=len(session.calls), cost_usd=session.cost_usd,
                           unpriced_models=session.unpriced, **_counts(session),
                           extra={"client": CLIENT, "version": session.version, "transcript": True,
                                  "ending": session.ending}),
               last.n if last else 0)
