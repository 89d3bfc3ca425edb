"""The agent loop: call the model, ask ``decide()`` what that means, apply it; one Event per step.

``AgentLoop.step()`` makes one model call (sending the request, retrying it, or compacting first) and
applies the transition that follows; ``run()`` steps until the run ends. The widget, the CLI and the
lessons all drive this same object. All effects live here; all choices live in ``transitions.py``.
"""

from __future__ import annotations

import copy
import math
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import anthropic
import httpx2

from . import compaction as compaction_mod
from .caching import count_breakpoints, with_breakpoints
from .compaction import ContextMeter, estimate_tokens
from .cost import PriceTable, default_prices, usage_cost
from .errors import ConfigError
from .trace import Trace
from .transitions import (
    MAX_TURNS_MARKER,
    Compact,
    Complete,
    ContinueTruncated,
    End,
    Escalate,
    Failure,
    HookBlocked,
    Limits,
    LoopState,
    Nudge,
    Resume,
    Retry,
    RetryOnModel,
    RunTools,
    Transition,
    after_stop_hooks,
    check_turns,
    decide,
    note_success,
)

SUBTYPES = ("success", "error_max_turns", "error_max_output_tokens", "error_refusal", "error_context_window",
            "error_api", "error_during_execution")

Message = dict[str, Any]

# Keys that stand in for a real one (offline runs, servers that ignore keys): nothing to hide.
PLACEHOLDER_KEYS = frozenset({"scripted-offline-key", "agentlab-placeholder-key"})


@dataclass
class Result:
    """The run's outcome, shaped like the Claude Agent SDK's result message."""

    subtype: str
    is_error: bool
    num_turns: int
    stop_reason: str | None
    stop_sequence: str | None
    result: str
    usage: dict[str, int]
    model: str
    requests: int
    escalations: int                   # resends with a higher max_tokens (rows 1, 3); see transitions.py
    continuations: int                 # cut replies kept and continued (row 3)
    compactions: int
    retries: int
    fallbacks: int
    pause_continuations: int
    nudges: int
    stop_hook_blocks: int
    messages: list[Message] = field(default_factory=list)
    cost_usd: float | None = None       # None when a model of the run has no price (see unpriced_models)
    unpriced_models: list[str] = field(default_factory=list)

    @classmethod
    def from_event(cls, data: dict[str, Any]) -> Result:
        """A Result from a ``result`` event's payload (a trace read back, or a replayed client run).

        Fields the payload lacks take neutral values: no counts, no model, no messages.
        """
        counts = ("escalations", "continuations", "compactions", "retries", "fallbacks", "pause_continuations",
                  "nudges", "stop_hook_blocks")
        values = {name: int(data.get(name) or 0) for name in counts}
        cost = data.get("cost_usd")
        return cls(
            cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
            unpriced_models=[str(m) for m in data.get("unpriced_models") or []],
            subtype=str(data["subtype"]), is_error=bool(data["is_error"]), num_turns=int(data.get("num_turns") or 0),
            stop_reason=data.get("stop_reason"), stop_sequence=data.get("stop_sequence"),
            result=str(data.get("result") or ""), usage=dict(data.get("usage") or {}),
            model=str(data.get("model") or ""), requests=int(data.get("requests") or 0), **values)

    def to_dict(self, *, with_messages: bool = False) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "messages"}
        data["usage"] = dict(self.usage)
        data["unpriced_models"] = list(self.unpriced_models)
        data["type"] = "result"
        if with_messages:
            data["messages"] = copy.deepcopy(self.messages)
        return data


@dataclass
class StepReport:
    """What one step did: the transition taken and the events it emitted."""

    transition: Transition
    events: list[Any]
    done: bool


class AgentLoop:
    def __init__(
        self,
        client: anthropic.Anthropic,
        *,
        prompt: str | None = None,
        messages: list[Message] | None = None,
        model: str = "claude-sonnet-4-6",
        system: str | None = None,
        tools: Any = None,
        max_tokens: int = 1024,
        limits: Limits | None = None,
        stream: bool = False,
        hooks: Any = None,
        trace: Trace | None = None,
        compaction: str | tuple[str, ...] = "auto",
        context_window: int = 200_000,
        compact_threshold: float | None = None,
        stop_sequences: list[str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.perf_counter,
        seed: int = 0,
        request_timeout: float = 600.0,
        count_tokens: bool = False,
        thinking: int | None = None,
        cache: bool = True,
        prices: PriceTable | None = None,
        server_tools: list[dict[str, Any]] | None = None,
    ) -> None:
        if (prompt is None) == (messages is None):
            raise ConfigError("AgentLoop needs exactly one of prompt= or messages=")
        if isinstance(trace, str | os.PathLike):
            trace = Trace(trace)  # a path: the JSONL file the trace is written to
        _check_arguments(client=client, prompt=prompt, messages=messages, tools=tools, hooks=hooks, trace=trace,
                         limits=limits, max_tokens=max_tokens, context_window=context_window,
                         compact_threshold=compact_threshold, request_timeout=request_timeout)
        if thinking is not None:
            if isinstance(thinking, bool) or not isinstance(thinking, int) or thinking < 1024:
                raise ConfigError(f"thinking: a budget of at least 1024 tokens (the API's minimum), got {thinking!r}")
            if thinking >= max_tokens:
                raise ConfigError(f"thinking: the budget ({thinking}) must be below max_tokens ({max_tokens})")
        self.thinking = thinking       # extended thinking budget_tokens; None: thinking off
        self.cache = bool(cache)       # cache_control breakpoints on tools, system and the latest message
        self.prices = prices or default_prices()
        self.cost_usd = 0.0
        self.unpriced_models: list[str] = []
        self.client = client
        self.system = system
        self.tools = tools
        self.stream = stream
        self.hooks = hooks
        self.trace = trace if trace is not None else Trace()
        key = getattr(client, "api_key", None)
        if isinstance(key, str) and key not in PLACEHOLDER_KEYS:
            self.trace.add_secret(key)
        self.limits = limits or Limits()
        self.context_window = context_window
        self.compact_threshold = compact_threshold
        self.chain = _compaction_chain(compaction)
        self.stop_sequences = stop_sequences
        self.sleep = sleep
        self.clock = clock
        self.request_timeout = request_timeout  # seconds without data from the server before a request fails
        self.count_tokens = count_tokens  # ask the API's count_tokens endpoint before each call (live use)
        self._rng = random.Random(seed)
        self.prompt = prompt
        self.messages: list[Message] = [dict(m) for m in messages] if messages else []
        self.state = LoopState(model=model, max_tokens=max_tokens)
        self.meter = ContextMeter(context_window)
        self.result: Result | None = None
        self.requests = 0
        self.usage: dict[str, int] = {"input_tokens": 0, "output_tokens": 0,
                                      "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        self.counts = {"escalations": 0, "continuations": 0, "compactions": 0, "retries": 0, "fallbacks": 0,
                       "pause_continuations": 0, "nudges": 0, "stop_hook_blocks": 0}
        self.last_stop_reason: str | None = None
        self.last_stop_sequence: str | None = None
        self.last_transition: Transition | None = None
        self._final_text = ""
        self._pieces: list[str] = []     # text of the replies kept by continuations, for the answer
        self._started = False
        self._pending_compaction: str | None = None
        self._proactive_gave_up_at = -1
        self._last_failure: Failure | None = None
        # server tools (web_search, ...) run on the API's side: offered in ``tools``, never run here
        schemas = [*(tools.schemas() if tools is not None and tools.names() else []), *(server_tools or [])]
        self._tool_schemas = schemas or None

    # -- driving ----------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.result is not None

    def run(self) -> Result:
        while not self.done:
            self.step()
        assert self.result is not None
        return self.result

    def __iter__(self):
        while not self.done:
            yield self.step()

    def step(self) -> StepReport:
        """One model call and the transition after it (or the end of the run)."""
        if self.done:
            raise RuntimeError("the run has ended; make a new AgentLoop to run again")
        first_event = len(self.trace)
        if not self._started:
            transition = self._start()
            if transition is not None:
                return self._report(transition, first_event)
        gate = check_turns(self.state, self.limits)                                      # row 9
        if gate is not None:
            self._emit_transition(gate)
            self._end(gate)
            return self._report(gate, first_event)
        if self.count_tokens:
            self._count_context()
        if self._pending_compaction or self._over_threshold():
            trigger = self._pending_compaction or "proactive"
            self._pending_compaction = None
            end = self._compact(trigger)
            if end is not None:
                return self._report(end, first_event)
        outcome = self._call()
        transition = decide(outcome, self.state, self.limits)
        self._emit_transition(transition)
        self._apply(transition, outcome)
        return self._report(transition, first_event)

    def _report(self, transition: Transition, first_event: int) -> StepReport:
        self.last_transition = transition
        return StepReport(transition, self.trace.events[first_event:], self.done)

    # -- start --------------------------------------------------------------------------------------------
    def _start(self) -> Transition | None:
        self._started = True
        self.trace.emit("start", 0, {
            "model": self.state.model, "max_tokens": self.state.max_tokens, "stream": self.stream,
            "prompt": self.prompt, "limits": asdict(self.limits), "context_window": self.context_window,
            "tools": self.tools.names() if self.tools is not None else [],
            "compaction": list(self.chain), "thinking": self.thinking, "cache": self.cache})
        if self.prompt is None:
            self._seed_meter()
            return None
        content: list[dict[str, Any]] = [{"type": "text", "text": self.prompt}]
        outcome = self._hook("UserPromptSubmit", {"prompt": self.prompt})
        if outcome is not None:
            if outcome.stop_loop or outcome.blocked:
                why = outcome.stop_reason or outcome.reason or "no reason given"
                end = End("hook_stop", f"UserPromptSubmit hook stopped the prompt: {why}",
                          subtype="error_during_execution", message=f"Prompt blocked by a hook: {why}")
                self._emit_transition(end)
                self._end(end)
                return end
            content += [{"type": "text", "text": c} for c in outcome.additional_context]
        self._append({"role": "user", "content": content[0]["text"] if len(content) == 1 else content})
        self._seed_meter()
        return None

    def _seed_meter(self) -> None:
        """Before the first response, the estimate covers the whole request: system, tools and messages."""
        self.meter.reset(self.messages, self.system, self._tool_schemas)

    # -- the model call -----------------------------------------------------------------------------------
    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.state.model, "max_tokens": self.state.max_tokens,
                                  "messages": self.messages}
        if self.system:
            params["system"] = self.system
        if self._tool_schemas:
            params["tools"] = self._tool_schemas
        if self.stop_sequences:
            params["stop_sequences"] = self.stop_sequences
        return self._finish_params(params)

    def _finish_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Thinking (its budget kept below this request's max_tokens) and cache breakpoints, when on."""
        if self.thinking is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": min(self.thinking, params["max_tokens"] - 1)}
        return with_breakpoints(params) if self.cache else params

    def _streams(self, params: dict[str, Any]) -> bool:
        """Whether this request goes as a stream: always with stream=True, else when the SDK requires it
        (a max_tokens that implies more than 10 minutes of output), rather than forcing a timeout on it."""
        return self.stream or needs_streaming(self.client, params)

    def _count_context(self) -> None:
        """Replace the context estimate by the API's own count of the next request (when it answers)."""
        params = {k: v for k, v in self._params().items() if k in ("model", "messages", "system", "tools")}
        try:
            counted = self.client.messages.count_tokens(**params).input_tokens
        except (anthropic.AnthropicError, ValueError):
            return  # keep the estimate; the call itself will report any real problem
        self.meter.base, self.meter.pending, self.meter.exact = int(counted), 0, True

    def _send(self, params: dict[str, Any]) -> Any:
        """One request through the SDK; returns the Message as a dict (converted once) or a Failure.

        Never raises for API trouble: every HTTP error, timeout and connection problem is a Failure, and so
        is a reply that is not a whole message (a stream cut before ``message_stop``, a body that is not a
        Message, a message without ``stop_reason``). Failures without an HTTP status are retried like
        connection errors, so a half-received answer is never taken for the answer, nor its tool calls run.
        """
        try:
            if self._streams(params):
                message = self._send_stream(params)
                if isinstance(message, Failure):
                    return message
            else:
                message = self.client.messages.create(**params, timeout=self.request_timeout)
            message = message.to_dict() if hasattr(message, "to_dict") else message
        except anthropic.APIStatusError as exc:
            return _failure_from_status(exc)
        except anthropic.APITimeoutError as exc:
            return Failure(None, "timeout", str(exc) or "request timed out")
        except anthropic.APIConnectionError as exc:
            return Failure(None, "connection_error", str(exc) or "connection error")
        except anthropic.APIResponseValidationError as exc:
            return Failure(None, "invalid_response", f"the reply is not a valid Message: {exc}")
        except httpx2.TimeoutException as exc:
            return Failure(None, "timeout", f"no data from the server within {self.request_timeout:g} s ({exc})")
        except httpx2.TransportError as exc:
            return Failure(None, "connection_error", f"the connection failed mid-answer: {exc or type(exc).__name__}")
        except (anthropic.AnthropicError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            return Failure(None, "invalid_response",
                           f"the reply could not be read as a Message: {type(exc).__name__}: {_clip(str(exc))}")
        return _check_message(message)

    def _send_stream(self, params: dict[str, Any]) -> Any:
        """Stream one request; a stream that does not run from ``message_start`` to ``message_stop`` fails."""
        seen: set[str] = set()
        with self.client.messages.stream(**params, timeout=self.request_timeout) as stream:
            try:
                for event in stream:
                    seen.add(event.type)
            except RuntimeError as exc:  # the SDK's accumulator: an event before message_start
                return Failure(None, "incomplete_stream", f"the stream did not begin with message_start ({exc})")
            if "message_start" not in seen:
                return Failure(None, "incomplete_stream", "the stream carried no message_start event")
            if "message_stop" not in seen:
                return Failure(None, "incomplete_stream",
                               "the stream ended before message_stop: the connection was cut mid-answer")
            return stream.get_final_message()

    def _call(self) -> Any:
        self.requests += 1
        call = self.requests
        params = self._params()
        self.trace.emit("request", call, {
            "model": params["model"], "max_tokens": params["max_tokens"], "stream": self._streams(params),
            "messages": len(self.messages), "context_tokens": self.meter.tokens,
            "context_window": self.context_window, "purpose": "turn",
            "thinking_budget": (params.get("thinking") or {}).get("budget_tokens"),
            "cache_breakpoints": count_breakpoints(params)})
        started = self.clock()
        outcome = self._send(params)
        wall = (self.clock() - started) * 1000
        self._last_failure = outcome if isinstance(outcome, Failure) else None
        if isinstance(outcome, Failure):
            self.trace.emit("api_error", call, {
                "status": outcome.status, "error_type": outcome.error_type, "message": outcome.message,
                "retry_after": outcome.retry_after, "attempt": self.state.api_attempts + 1}, wall_ms=wall)
            return outcome
        self._record_response(call, outcome, wall, purpose="turn")
        self.state = note_success(self.state)
        self.last_stop_reason = outcome.get("stop_reason")
        self.last_stop_sequence = outcome.get("stop_sequence")
        return outcome

    def _record_response(self, call: int, message: dict[str, Any], wall: float, *, purpose: str) -> None:
        usage = message.get("usage") or {}
        for key in self.usage:
            self.usage[key] += int(usage.get(key) or 0)
        model = message.get("model") or self.state.model
        cost = usage_cost(usage, model, self.prices)
        if cost is None:
            if model not in self.unpriced_models:
                self.unpriced_models.append(model)
        else:
            self.cost_usd += cost
        content = message.get("content") or []
        if purpose == "turn":
            self.meter.observe_usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0),
                                     int(usage.get("cache_read_input_tokens") or 0),
                                     int(usage.get("cache_creation_input_tokens") or 0))
        self.trace.emit("response", call, {
            "purpose": purpose, "model": message.get("model"), "stop_reason": message.get("stop_reason"),
            "stop_sequence": message.get("stop_sequence"), "stop_details": message.get("stop_details"),
            "blocks": ",".join(b["type"] for b in content), "content": content,
            "input_tokens": int(usage.get("input_tokens") or 0),
            "output_tokens": int(usage.get("output_tokens") or 0),
            "cache_read_input_tokens": int(usage.get("cache_read_input_tokens") or 0),
            "cache_creation_input_tokens": int(usage.get("cache_creation_input_tokens") or 0),
            "cost_usd": cost, "run_cost_usd": self.run_cost,
            "usage": usage, "context_window": self.context_window}, wall_ms=wall)

    @property
    def run_cost(self) -> float | None:
        """The run's cost so far in US dollars; None once a call was made with a model that has no price."""
        return None if self.unpriced_models else round(self.cost_usd, 8)

    # -- applying a transition ----------------------------------------------------------------------------
    def _apply(self, t: Transition, outcome: Any) -> None:
        failed = isinstance(outcome, Failure)
        blocks = [] if failed else outcome.get("content") or []
        resets: dict[str, int] = {}  # counters of consecutive events that this outcome interrupts
        if not isinstance(t, Compact) and not failed and self.state.consecutive_compactions:
            resets["consecutive_compactions"] = 0
        if not isinstance(t, Resume) and self.state.pause_continuations:
            resets["pause_continuations"] = 0
        if not failed and outcome.get("stop_reason") != "max_tokens" and self.state.continuations:
            resets["continuations"] = 0
        if resets:
            self.state = replace(self.state, **resets)
        if isinstance(t, (Escalate, RetryOnModel)) and not failed:
            # the reply is thrown away and the same request goes again: its output is not in the context
            self.meter.base -= int((outcome.get("usage") or {}).get("output_tokens") or 0)
        if isinstance(t, Retry):                                                         # row 0
            self._retry(t)
        elif isinstance(t, End):
            if t.subtype == "error_refusal":  # keep what was said, never an unanswered tool call
                self._merge_or_append_assistant([b for b in blocks if b.get("type") in ("text", "thinking")])
            self._end(t)
        elif isinstance(t, Compact):                                                     # rows 0b, 4
            self._pending_compaction = t.trigger
        elif isinstance(t, Escalate):                                                    # rows 1, 3
            if t.branch == "max_tokens_clamp":  # lowered to the model's ceiling: not an escalation
                self.state = replace(self.state, max_tokens=t.max_tokens)
            else:
                self.state = replace(self.state, max_tokens=t.max_tokens, escalations=self.state.escalations + 1)
                self.counts["escalations"] += 1
        elif isinstance(t, RunTools):                                                    # row 2
            self._pieces = []
            self._merge_or_append_assistant(blocks)
            self._run_tools(t)
        elif isinstance(t, ContinueTruncated):                                           # row 3
            if self._merge_or_append_assistant(blocks):
                self._append_user_text(t.text)
            # an empty partial leaves nothing to continue from: the same request goes again (still counted)
            self._pieces.append(_text_of(blocks))
            self.state = replace(self.state, continuations=self.state.continuations + 1)
            self.counts["continuations"] += 1
        elif isinstance(t, Resume):                                                      # row 6
            self._merge_or_append_assistant(blocks)
            self.state = replace(self.state, pause_continuations=self.state.pause_continuations + 1)
            self.counts["pause_continuations"] += 1
        elif isinstance(t, Nudge):                                                       # row 8
            self._append_user_text(t.text)
            self.state = replace(self.state, nudges=self.state.nudges + 1)
            self.counts["nudges"] += 1
        elif isinstance(t, RetryOnModel):                                                # row 5
            self.trace.emit("fallback", self.requests, {"from_model": self.state.model, "to_model": t.model,
                                                        "cause": "refusal"})
            self.state = replace(self.state, model=t.model, refusal_fallback_used=True)
            self.counts["fallbacks"] += 1
        elif isinstance(t, Complete):                                                    # rows 7, 11 → 10
            self._merge_or_append_assistant(blocks)
            # the answer: the pieces kept by continuations, then this reply
            self._final_text = "".join(self._pieces) + _text_of(blocks)
            self._pieces = []
            self._stop_hooks(blocks)

    def _retry(self, t: Retry) -> None:
        attempt = self.state.api_attempts + 1
        delay = t.delay * (1 + 0.25 * self._rng.random()) if t.delay else 0.0
        if t.switch_model:
            self.trace.emit("fallback", self.requests, {"from_model": self.state.model, "to_model": t.switch_model,
                                                        "cause": "overloaded"})
            self.state = replace(self.state, model=t.switch_model, fallback_used=True, consecutive_overloads=0,
                                 api_attempts=attempt)
            self.counts["fallbacks"] += 1
        else:
            self.state = replace(self.state, api_attempts=attempt, consecutive_overloads=t.consecutive_overloads)
        self.trace.emit("retry", self.requests, {"attempt": attempt, "delay_s": round(delay, 3),
                                                 "model": self.state.model, "reason": t.reason})
        self.counts["retries"] += 1
        if delay:
            self.sleep(delay)

    def _merge_or_append_assistant(self, blocks: list[dict[str, Any]]) -> bool:
        """Append the assistant turn; after a pause_turn the continuation joins the paused turn.

        Blank text blocks are left out (the API rejects them in a resent turn); nothing is appended when
        nothing is left. Returns whether anything was appended.
        """
        blocks = [b for b in blocks if not (b.get("type") == "text" and not str(b.get("text", "")).strip())]
        if not blocks:
            return False
        if self.messages and self.messages[-1]["role"] == "assistant":
            merged = list(self.messages[-1]["content"]) + blocks
            self.messages[-1] = {"role": "assistant", "content": merged}
            self.trace.emit("append", self.requests, {"role": "assistant", "merged": True,
                                                      "content": blocks, "blocks": _types(blocks)})
            return True
        self._append({"role": "assistant", "content": blocks})
        return True

    def _append_user_text(self, text: str) -> None:
        """A loop-written user message (continuation, nudge, hook feedback), keeping roles alternating.

        After a plain-text user message (when the model's turn left nothing to append) the text joins it;
        after a tool_result message it goes into a message of its own, so the tool results stay alone in
        theirs (the API merges the two user turns).
        """
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "user" and not self.state.after_tool_results:
            content = last["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            merged = {"role": "user", "content": blocks + [{"type": "text", "text": text}]}
            self.messages[-1] = merged
            self.meter.appended({"role": "user", "content": text})
            self.trace.emit("append", self.requests, {"role": "user", "merged": True,
                                                      "content": [{"type": "text", "text": text}], "blocks": "text"})
            return
        self._append({"role": "user", "content": text})

    def _append(self, message: Message) -> None:
        self.messages.append(message)
        if message["role"] == "user":  # an assistant message is already counted in its response's usage
            self.meter.appended(message)
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        self.state = replace(self.state, after_tool_results=message["role"] == "user" and bool(blocks)
                             and all(b.get("type") == "tool_result" for b in blocks))
        self.trace.emit("append", self.requests, {"role": message["role"], "merged": False, "content": blocks,
                                                  "blocks": _types(blocks)})

    # -- tools --------------------------------------------------------------------------------------------
    def _run_tools(self, t: RunTools) -> None:
        results: list[dict[str, Any] | None] = [None] * len(t.tool_uses)
        runnable: list[tuple[int, str, str, Any]] = []
        stop: str | None = None
        for i, use in enumerate(t.tool_uses):
            name, tool_input = use.get("name", ""), use.get("input", {})
            pre = self._hook("PreToolUse", {"tool_name": name, "tool_input": tool_input, "tool_use_id": use["id"]},
                             tool_name=name)
            if pre is not None:
                if pre.stop_loop:
                    stop = pre.stop_reason or "a PreToolUse hook said continue: false"
                if pre.permission == "deny" or pre.permission == "ask":
                    why = pre.permission_reason or "denied by a PreToolUse hook"
                    results[i] = self._tool_result(use, f"Permission denied: {why}", True, hook="PreToolUse")
                    continue
                if pre.updated_input is not None:
                    tool_input = pre.updated_input
            runnable.append((i, use["id"], name, tool_input))
        if self.tools is None:
            outcomes = [_no_tools(name) for _, _, name, _ in runnable]
        else:
            outcomes = self.tools.run_many([(uid, name, inp) for _, uid, name, inp in runnable])
        for (i, uid, name, tool_input), out in zip(runnable, outcomes, strict=True):
            content = out.content
            use = t.tool_uses[i]
            post = self._hook("PostToolUse", {"tool_name": name, "tool_input": tool_input,
                                              "tool_response": content, "tool_use_id": uid}, tool_name=name)
            if post is not None:
                if post.blocked and post.reason:
                    content += f"\n\nPostToolUse hook feedback: {post.reason}"
                for extra in post.additional_context:
                    content += f"\n\n{extra}"
                if post.stop_loop:
                    stop = post.stop_reason or "a PostToolUse hook said continue: false"
            results[i] = self._tool_result(use, content, out.is_error, tool_input=tool_input)
        self._append({"role": "user", "content": [r for r in results if r is not None]})
        if stop is not None:
            end = End("hook_stop", f"a hook ended the run: {stop}", subtype="error_during_execution",
                      message=f"Stopped by a hook: {stop}")
            self._emit_transition(end)
            self._end(end)

    def _tool_result(self, use: dict[str, Any], content: str, is_error: bool, *, tool_input: Any = None,
                     hook: str | None = None) -> dict[str, Any]:
        self.trace.emit("tool", self.requests, {
            "id": use["id"], "name": use.get("name"),
            "input": tool_input if tool_input is not None else use.get("input"),
            "output": content, "is_error": is_error, "denied_by": hook})
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use["id"], "content": content}
        if is_error:
            block["is_error"] = True
        return block

    # -- hooks --------------------------------------------------------------------------------------------
    def _hook(self, event: str, payload: dict[str, Any], *, tool_name: str | None = None) -> Any:
        if self.hooks is None or not self.hooks.has(event):
            return None
        outcome = self.hooks.run(event, payload, tool_name=tool_name)
        for run in outcome.runs:
            data = asdict(run)
            wall = data.pop("duration_ms", None)
            self.trace.emit("hook", self.requests, data, wall_ms=wall)
        return outcome

    def _stop_hooks(self, blocks: list[dict[str, Any]]) -> None:
        outcome = self._hook("Stop", {"stop_hook_active": self.state.stop_hook_active,
                                      "last_assistant_message": _text_of(blocks)})
        if outcome is not None and outcome.stop_loop:
            end = End("hook_stop", f"a Stop hook said continue: false: {outcome.stop_reason}",
                      subtype="success", message=outcome.stop_reason or "")
            self._emit_transition(end)
            self._end(end)
            return
        blocked = bool(outcome and outcome.blocked)
        verdict = after_stop_hooks(blocked, outcome.reason if outcome else None, self.state, self.limits)
        if verdict.branch != getattr(self.last_transition, "branch", None):
            self._emit_transition(verdict)
        if isinstance(verdict, HookBlocked):
            self._append_user_text(verdict.feedback)
            self.state = replace(self.state, stop_hook_active=True,
                                 stop_hook_blocks=self.state.stop_hook_blocks + 1)
            self.counts["stop_hook_blocks"] += 1
        else:
            assert isinstance(verdict, End)
            if blocked:
                self.counts["stop_hook_blocks"] += 1
            self._end(verdict)

    # -- compaction ---------------------------------------------------------------------------------------
    def _over_threshold(self) -> bool:
        if self.compact_threshold is None or len(self.messages) < 3:
            return False
        if len(self.messages) == self._proactive_gave_up_at:  # nothing new since it last found nothing to do
            return False
        return self._near_threshold(1.0)

    def _near_threshold(self, share: float) -> bool:
        return self.compact_threshold is not None and \
            self.meter.tokens > share * self.compact_threshold * self.context_window

    def _compact(self, trigger: str) -> End | None:
        """Compact the history; None when the loop may send its request, an End when it cannot.

        Strategies run in the chain's order, starting further down it after repeated failures, and go on
        down the chain until the history is under the target: at least halved after a reactive trigger, a
        tenth under the threshold after a proactive one.
        A proactive compaction that finds nothing to do is not an error: the request is sent as it is.
        """
        reactive = trigger != "proactive"
        pre = self._hook("PreCompact", {"trigger": "auto", "custom_instructions": None, "cause": trigger})
        if pre is not None and pre.blocked:
            if not reactive:
                self._proactive_gave_up_at = len(self.messages)
                return None
            return self._give_up_on_context(f"a PreCompact hook blocked compaction: {pre.reason}")
        level = self.state.consecutive_compactions
        current = estimate_tokens(self.messages)
        if reactive:  # the server said it does not fit: cut in proportion to what it reported, at least by half
            target = int(current * min(0.5, _fit_ratio(self._last_failure_message)) * 0.9)
        else:
            target = int(self.context_window * (self.compact_threshold or 0.8) * 0.6)
        applied = []
        for name in self.chain[min(level, len(self.chain) - 1):]:
            result = self._run_strategy(name, self.messages, target, reactive=reactive)
            if result is None or not result.changed:
                continue
            context_before = self.meter.tokens
            self.messages = result.messages
            self.meter.reset(self.messages, self.system, self._tool_schemas)
            self.counts["compactions"] += 1
            applied.append(result.strategy)
            self.trace.emit("compaction", self.requests, {
                "trigger": trigger, "strategy": result.strategy, "tokens_before": result.tokens_before,
                "tokens_after": result.tokens_after, "messages_before": result.messages_before,
                "messages_after": result.messages_after, "removed": result.removed,
                "context_before": context_before, "context_after": self.meter.tokens,
                "target": target, "context_window": self.context_window})
            if result.tokens_after <= target if reactive else not self._near_threshold(0.9):
                break
        if applied:
            self.state = replace(self.state, consecutive_compactions=level + 1)
            self._hook("PostCompact", {"trigger": "auto", "strategies": applied})
            return None
        if not reactive:
            self._proactive_gave_up_at = len(self.messages)
            return None
        return self._give_up_on_context(f"{trigger}: no compaction strategy could shrink the history")

    def _give_up_on_context(self, reason: str) -> End:
        end = End("context_give_up", reason, subtype="error_context_window",
                  message="The conversation does not fit the context window and cannot be compacted further.")
        self._emit_transition(end)
        self._end(end)
        return end

    @property
    def _last_failure_message(self) -> str:
        return self._last_failure.message if self._last_failure is not None else ""

    def _run_strategy(self, name: str, messages: list[Message], target: int, *, reactive: bool):
        fn = compaction_mod.STRATEGIES[name]
        if name == "summarize":
            try:
                return fn(messages, self._summarize, keep_last_turns=1 if reactive else 2)
            except _SummaryFailed:
                return None
        if name == "drop_oldest":
            return fn(messages, target_tokens=target)
        return fn(messages, keep_last=1 if reactive else 2)

    def _summarize(self, older: list[Message]) -> str:
        """The summary model call: the older history plus the summary instruction, text only, no tools."""
        self.requests += 1
        call = self.requests
        params = {"model": self.state.model, "max_tokens": min(self.state.max_tokens * 4, 8192),
                  "messages": compaction_mod.summary_request_messages(older)}
        if self.system:
            params["system"] = self.system
        context_tokens = estimate_tokens(params["messages"])  # before the breakpoints: they are not tokens
        params = self._finish_params(params)
        self.trace.emit("request", call, {"model": params["model"], "max_tokens": params["max_tokens"],
                                          "stream": self._streams(params), "messages": len(params["messages"]),
                                          "context_tokens": context_tokens,
                                          "context_window": self.context_window, "purpose": "summary",
                                          "thinking_budget": (params.get("thinking") or {}).get("budget_tokens"),
                                          "cache_breakpoints": count_breakpoints(params)})
        started = self.clock()
        outcome = self._send(params)
        wall = (self.clock() - started) * 1000
        if isinstance(outcome, Failure):
            self.trace.emit("api_error", call, {"status": outcome.status, "error_type": outcome.error_type,
                                                "message": outcome.message, "purpose": "summary"}, wall_ms=wall)
            raise _SummaryFailed(outcome.message)
        self._record_response(call, outcome, wall, purpose="summary")
        text = compaction_mod.summary_text(_text_of(outcome.get("content") or []))
        if not text:
            raise _SummaryFailed("the summary came back empty")
        return text

    # -- ending -------------------------------------------------------------------------------------------
    def _emit_transition(self, t: Transition) -> None:
        self.last_transition = t
        self.trace.emit("transition", self.requests, {
            "branch": t.branch, "row": t.row, "reason": t.reason, "type": type(t).__name__,
            "subtype": getattr(t, "subtype", None), "num_turns": self.state.num_turns,
            "max_tokens": self.state.max_tokens, "model": self.state.model,
            "escalations": self.state.escalations, "continuations": self.state.continuations,
            "consecutive_compactions": self.state.consecutive_compactions,
            "api_attempts": self.state.api_attempts, "stop_hook_blocks": self.state.stop_hook_blocks,
            "pause_continuations": self.state.pause_continuations})

    def _end(self, t: End) -> None:
        if t.subtype == "error_max_turns":
            self.trace.emit("append", self.requests, {"role": "marker", "merged": False,
                                                      "content": [{"type": "text", "text": MAX_TURNS_MARKER}],
                                                      "blocks": "marker"})
        text = self._final_text if t.subtype == "success" else (t.message or t.reason)
        c = self.counts
        self.result = Result(
            subtype=t.subtype, is_error=t.subtype != "success", num_turns=self.state.num_turns,
            stop_reason=self.last_stop_reason, stop_sequence=self.last_stop_sequence, result=text,
            usage=dict(self.usage), model=self.state.model,
            requests=self.requests, escalations=c["escalations"], continuations=c["continuations"],
            compactions=c["compactions"], retries=c["retries"],
            fallbacks=c["fallbacks"], pause_continuations=c["pause_continuations"], nudges=c["nudges"],
            stop_hook_blocks=c["stop_hook_blocks"], messages=self.messages,
            cost_usd=self.run_cost, unpriced_models=list(self.unpriced_models))
        self.trace.emit("result", self.requests, self.result.to_dict())


def needs_streaming(client: Any, params: dict[str, Any]) -> bool:
    """The SDK's own rule: a non-streaming request whose max_tokens implies more than 10 minutes of
    generation (or more than the model's non-streaming ceiling) is refused unless a timeout is forced."""
    check = getattr(client, "_calculate_nonstreaming_timeout", None)
    if check is None:
        return False
    try:
        from anthropic._constants import MODEL_NONSTREAMING_TOKENS
    except ImportError:  # pragma: no cover - older SDKs
        MODEL_NONSTREAMING_TOKENS = {}
    try:
        check(params["max_tokens"], MODEL_NONSTREAMING_TOKENS.get(params["model"]))
    except ValueError:
        return True
    return False


def _check_arguments(*, client: Any, prompt: Any, messages: Any, tools: Any, hooks: Any, trace: Any, limits: Any,
                     max_tokens: Any, context_window: Any, compact_threshold: Any, request_timeout: Any) -> None:
    """Refuse, at construction, an argument the loop could only fail on later; the message names it."""
    def whole(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"AgentLoop({name}=...): expected a whole number of at least 1, got {value!r}")

    if client is None or not hasattr(client, "messages"):
        raise ConfigError(f"AgentLoop(client=...): expected an anthropic.Anthropic client (or one shaped like it), "
                          f"got {type(client).__name__}")
    if prompt is not None and not isinstance(prompt, str):
        raise ConfigError(f"AgentLoop(prompt=...): expected a string, got {type(prompt).__name__}")
    if messages is not None and not (isinstance(messages, list) and messages
                                     and all(isinstance(m, dict) and m.get("role") in ("user", "assistant")
                                             and "content" in m for m in messages)):
        raise ConfigError("AgentLoop(messages=...): expected a non-empty list of {'role': 'user'|'assistant', "
                          "'content': ...} dicts")
    if tools is not None and not (callable(getattr(tools, "schemas", None)) and callable(getattr(tools, "names", None))
                                  and callable(getattr(tools, "run_many", None))):
        raise ConfigError(f"AgentLoop(tools=...): expected a ToolRegistry (agentlab.tools) or None, got {tools!r}"
                          [:200])
    if hooks is not None and not (callable(getattr(hooks, "has", None)) and callable(getattr(hooks, "run", None))):
        raise ConfigError(f"AgentLoop(hooks=...): expected a Hooks object or None, got {hooks!r}; for a settings "
                          "file, pass Hooks('settings.json')"[:300])
    if trace is not None and not isinstance(trace, Trace):
        raise ConfigError(f"AgentLoop(trace=...): expected a Trace, a file path or None, got {type(trace).__name__}")
    if limits is not None and not isinstance(limits, Limits):
        raise ConfigError(f"AgentLoop(limits=...): expected a Limits, got {type(limits).__name__}")
    whole("max_tokens", max_tokens)
    whole("context_window", context_window)
    if compact_threshold is not None and (isinstance(compact_threshold, bool)
                                          or not isinstance(compact_threshold, int | float)
                                          or not 0 < compact_threshold <= 1):
        raise ConfigError(f"AgentLoop(compact_threshold=...): expected None (no proactive compaction) or a share of "
                          f"the window above 0 and at most 1, got {compact_threshold!r}")
    if (isinstance(request_timeout, bool) or not isinstance(request_timeout, int | float)
            or not (request_timeout > 0 and math.isfinite(request_timeout))):
        raise ConfigError(f"AgentLoop(request_timeout=...): expected a finite number of seconds above 0, "
                          f"got {request_timeout!r}")


_TOO_LONG = re.compile(r"(\d+)\s*tokens\s*>\s*(\d+)")


def _fit_ratio(message: str) -> float:
    """From "prompt is too long: 250000 tokens > 200000 maximum", the share that fits (0.8); 0.5 if unknown."""
    match = _TOO_LONG.search(message)
    if not match or int(match.group(1)) == 0:
        return 0.5
    return int(match.group(2)) / int(match.group(1))


class _SummaryFailed(Exception):
    pass


# The HTTP status each API error type comes with; an SSE ``event: error`` arrives inside a 200 stream, so its
# type alone says whether it is retried (overloaded_error as a 529, api_error as a 500, ...).
STATUS_OF_ERROR_TYPE = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
    "timeout_error": 504, "overloaded_error": 529,
}
_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _check_message(message: Any) -> Any:
    """The message dict when it is a whole Message the loop can act on, else a Failure naming the problem."""
    def bad(why: str, kind: str = "invalid_response") -> Failure:
        return Failure(None, kind, f"the reply is not a whole Message: {why}")

    if not isinstance(message, dict) or message.get("type", "message") != "message":
        return bad(f"expected an object of type 'message', got {_clip(repr(message), 120)}")
    content = message.get("content")
    if not isinstance(content, list) or not all(isinstance(b, dict) and isinstance(b.get("type"), str)
                                                for b in content):
        return bad("content is not a list of blocks with a type")
    for block in content:
        if block["type"] == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                                                and isinstance(block.get("input"), dict)):
            return bad("a tool_use block lacks a string id, a string name or an object input")
    if message.get("stop_reason") is None:
        return bad("stop_reason is null (the answer did not finish)", "incomplete_response")
    if not isinstance(message.get("stop_reason"), str):
        return bad(f"stop_reason is not a string: {_clip(repr(message.get('stop_reason')), 80)}")
    usage = message.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return bad("usage is not an object")
    for key in _USAGE_KEYS:
        value = (usage or {}).get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 10**12):
            return bad(f"usage.{key} is not a token count: {_clip(repr(value), 80)}")
    return message


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _failure_from_status(exc: anthropic.APIStatusError) -> Failure:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    message = str(error.get("message") or exc.message)
    status = exc.status_code
    if status < 400:  # an SSE error event inside a 200 stream: its type stands for the status
        status = STATUS_OF_ERROR_TYPE.get(str(error.get("type")), 500)
    headers = exc.response.headers if exc.response is not None else {}
    retry_after = None
    raw = headers.get("retry-after")
    if raw is not None:
        try:
            retry_after = max(0.0, float(raw))
        except ValueError:
            retry_after = None
    should = headers.get("x-should-retry")
    should_retry = None if should is None else should.strip().lower() == "true"
    return Failure(status, str(error.get("type") or "api_error"), message, retry_after, should_retry)


def _no_tools(name: str):
    from .tools import ToolOutcome

    return ToolOutcome(f"No tools are configured in this run, so {name!r} cannot run.", is_error=True)


def _types(blocks: list[dict[str, Any]]) -> str:
    return ",".join(str(b.get("type")) for b in blocks)


def _text_of(blocks: list[dict[str, Any]]) -> str:
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


def _compaction_chain(compaction: str | tuple[str, ...]) -> tuple[str, ...]:
    if compaction in ("auto", None):
        return tuple(compaction_mod.DEFAULT_CHAIN)
    names = (compaction,) if isinstance(compaction, str) else tuple(compaction)
    for name in names:
        if name not in compaction_mod.STRATEGIES:
            raise ConfigError(f"unknown compaction strategy {name!r}; choose from auto, "
                              + ", ".join(compaction_mod.STRATEGIES))
    return names
