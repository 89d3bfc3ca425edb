"""A Claude Code session (``transcript.Session``) as agentlab's events, for the stepper and the plots.

Per main-thread call: a ``request`` (its context is the prompt Claude Code reported for it: input plus cache
reads and writes), a ``response`` with the measured usage and its cost, the tool results, then a
``transition`` naming the decision-table branch. Between calls: ``api_error`` and ``retry`` events for the
failures it retried, ``compaction`` (tokens before: Claude Code's ``preTokens``; after: its ``postTokens``, else
the next call's prompt), ``hook`` for a Stop-hook block, ``fallback`` when a refusal made Claude Code switch model
(``model_refusal_fallback``). A ``result`` ends the trace. Nothing is estimated
except the context window, which is Claude Code's default of 200k tokens.
"""

from __future__ import annotations

from typing import Any

from agentlab.backend.models import model_limits
from agentlab.core.events import (
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
)
from agentlab.core.trace import Trace
from agentlab.core.transitions import ROW_OF
from agentlab.observatory.replay import BRANCH_TYPES, COUNTED
from agentlab.sessions.transcript import CLIENT, Call, Session, SessionEvent, result_subtype

_END_BRANCHES = {"max_tokens_give_up", "context_give_up", "refusal", "pause_give_up", "api_error"}


def _response(call: Call, run_cost: float | None) -> Response:
    u = call.usage
    return Response(
        model=call.model, stop_reason=call.stop_reason, blocks=",".join(call.blocks), content=list(call.content),
        input_tokens=int(u.get("input_tokens") or 0), output_tokens=int(u.get("output_tokens") or 0),
        cache_read_input_tokens=int(u.get("cache_read_input_tokens") or 0),
        cache_creation_input_tokens=int(u.get("cache_creation_input_tokens") or 0),
        cost_usd=call.cost_usd, run_cost_usd=run_cost, usage=dict(u), context_window=window_of(call.model),
        extra={} if call.usage_known else {"usage_unknown": "Claude Code wrote only this refused reply's id"})


def _failed_request(e: SessionEvent) -> bool:
    """An API error with an HTTP status: a request that failed (without one, Claude Code's own message that it
    gave up, such as after max_tokens)."""
    return e.name == "api_error" and isinstance(e.data.get("status"), int)


class _Builder:
    """Emits the events; ``n`` counts requests (a failed attempt is a request of its own, as in agentlab's
    runs), so the plots' call numbers can run ahead of the session's reply numbers after API errors."""

    def __init__(self, trace: Trace, session: Session) -> None:
        self.trace, self.session = trace, session
        self.window = window_of(session.calls[0].model if session.calls else None)
        self.n = 0
        self.attempts = 0

    def failed(self, e: SessionEvent, last: bool) -> None:
        """A request that came back with an error: retried (``retry_error``), or the one that ended the turn."""
        self.n += 1
        self.attempts += 1
        status = e.data.get("status")
        self.trace.emit(Request(extra={"failed": True}), self.n)
        self.trace.emit(ApiError(status=status if isinstance(status, int) else None, error_type=e.data.get("error"),
                                 message=e.detail, attempt=self.attempts), self.n)
        if e.name == "retry_error":
            delay = e.data.get("retry_in_ms")
            self.trace.emit(TransitionEvent(branch="api_retry", row=ROW_OF["api_retry"], type="Retry",
                                            api_attempts=self.attempts - 1,   # as it stood before this decision
                                            reason=f"{e.detail}: Claude Code sent the request again"), self.n)
            self.trace.emit(RetryEvent(attempt=self.attempts, delay_s=round(delay / 1000, 3)
                                       if isinstance(delay, (int, float)) else "?", reason=e.detail), self.n)
        else:
            self.trace.emit(TransitionEvent(branch="api_error", row=ROW_OF["api_error"], reason=f"{e.detail}: Claude "
                                            "Code ended the turn", type="End" if last else "Other",
                                            api_attempts=self.attempts - 1,
                                            subtype=result_subtype(self.session) if last else None), self.n)

    def between(self, events: list[SessionEvent], next_call: Call | None, last: bool) -> None:
        for e in events:
            if e.name == "retry_error" or _failed_request(e):
                self.failed(e, last and e is events[-1])
            elif e.name == "tools":
                for block in e.data.get("results") or []:
                    self.trace.emit(ToolRun(id=block.get("tool_use_id"), output=block.get("content"),
                                            is_error=bool(block.get("is_error"))), self.n)
                self.trace.emit(Append(role="user", content=list(e.data.get("results") or []), blocks="tool_result"),
                                self.n)
            elif e.name == "compaction":
                self.compaction(e, next_call)
            elif e.name == "fallback":
                self.trace.emit(Fallback(from_model=e.data.get("from_model"), to_model=e.data.get("to_model"),
                                         cause="refusal"), self.n)
            elif e.name == "hook_block":
                self.trace.emit(HookEvent(event=str(e.data.get("hook") or "Stop"), source="claude-code hook",
                                          decision="block", reason=e.detail), self.n)
            elif e.name in ("continuation", "refusal_retry", "prompt"):
                self.trace.emit(Append(role="user", content=[{"type": "text", "text": e.detail}], blocks="text"),
                                self.n)

    def compaction(self, e: SessionEvent, next_call: Call | None) -> None:
        before = int(e.data.get("pre_tokens") or 0)
        after = int(e.data.get("post_tokens") or (next_call.prompt_tokens if next_call else 0))
        self.trace.emit(CompactionEvent(trigger=str(e.data.get("trigger") or "auto"), strategy="claude-code summary",
                                        tokens_before=before, tokens_after=after, context_before=before,
                                        context_after=after, context_window=self.window), self.n)


def window_of(model: str | None) -> int:
    """The context window of ``model`` in the model table (data/models.yaml; its default's for a model not in it),
    the window a reply of that model filled: Claude Code writes no window of its own."""
    return model_limits(model).context_window


def _transition(call: Call, last: bool, ending: str, turns: int) -> TransitionEvent:
    terminal = last and call.branch in _END_BRANCHES
    return TransitionEvent(branch=call.branch, row=call.row, reason=f"{call.stop_reason}: Claude Code {call.next}",
                           type="End" if terminal else next((t for b, t in BRANCH_TYPES.items()
                                                             if b == call.branch), "Other"),
                           subtype=ending if terminal else None, num_turns=turns, model=call.model,
                           extra={"replay": True})


def _counts(session: Session) -> dict[str, Any]:
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
    trace.emit(Start(model=first.model if first else None, prompt=prompt,
                     context_window=window_of(first.model if first else None),
                     extra={"client": CLIENT, "version": session.version, "replay": True, "transcript": True}), 0)
    if prompt:
        trace.emit(Append(role="user", content=[{"type": "text", "text": prompt}], blocks="text"), 0)
    build = _Builder(trace, session)
    by_call = session.events_by_call()   # one pass over the events: replay stays linear in the session's length
    build.between([e for e in by_call.get(0, []) if e.name != "prompt"], first, not session.calls)
    run_cost: float | None = 0.0
    subtype = result_subtype(session)
    for i, call in enumerate(session.calls):
        nxt = session.calls[i + 1] if i + 1 < len(session.calls) else None
        build.n += 1
        trace.emit(Request(model=call.model, max_tokens=call.max_tokens, context_tokens=call.prompt_tokens,
                           context_window=window_of(call.model),
                           extra={"request_id": call.request_id, "reply": call.n}), build.n)
        if call.usage_known:
            run_cost = None if run_cost is None or call.cost_usd is None else run_cost + call.cost_usd
        trace.emit(_response(call, run_cost), build.n)
        trace.emit(Append(role="assistant", content=list(call.content), blocks=",".join(call.blocks)), build.n)
        after = by_call.get(call.n, [])
        ends_on_error = nxt is None and any(_failed_request(e) for e in after)
        trace.emit(_transition(call, nxt is None and not ends_on_error, subtype, i + 1), build.n)
        build.attempts = 0
        build.between(after, nxt, nxt is None)
    _result(trace, session, build.n)
    return trace


def _result(trace: Trace, session: Session, requests: int) -> None:
    last = session.calls[-1] if session.calls else None
    usage: dict[str, Any] = {}
    for c in session.calls:
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            usage[key] = usage.get(key, 0) + int(c.usage.get(key) or 0)
    text = next((b.get("text", "") for b in reversed(last.content) if b.get("type") == "text"), "") if last else ""
    subtype = result_subtype(session)
    trace.emit(ResultEvent(subtype=subtype, is_error=subtype != "success", num_turns=len(session.calls),
                           stop_reason=last.stop_reason if last else None, result=str(text)[:500], usage=usage,
                           model=last.model if last else None, requests=requests, cost_usd=session.cost_usd,
                           unpriced_models=session.unpriced, **_counts(session),
                           extra={"client": CLIENT, "version": session.version, "transcript": True,
                                  "ending": session.ending}),
               requests)
