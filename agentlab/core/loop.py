"""The agent loop: the decision table in motion. Call the model, ask ``decide()`` what that means, perform it;
one Event per step.

A loop is built from a client and a ``RunConfig`` (config.py): ``AgentLoop(client, RunConfig(prompt="..."))``.
It is written once, as generators that *yield* the effects they need (a model call, a token count, tools,
hooks, a wait) and get the answer back; they never call a client, a tool or a hook themselves. Two small
drivers perform the effects: ``step()``/``run()``/``iter(loop)`` with an ``anthropic.Anthropic`` client, and
``astep()``/``arun()``/``asteps()`` with an ``anthropic.AsyncAnthropic`` one (hooks then run as asyncio
subprocesses). Both run the same decisions, state updates, hooks and compaction, so a scenario gives the same
trace either way. The calls themselves, and the reading of what came back (a Message, or a Failure), are the
wire's (wire.py).

With thinking on, every request carries the budget (kept below its max_tokens); unless switched off, prompt
cache breakpoints too. A request goes as a stream when the config says so or when the SDK requires it for its
max_tokens (``wire.needs_streaming``), a choice the step makes and the drivers follow. Every response is priced
(``cost.py``), so the Result and the trace carry ``cost_usd``.

``step()`` makes one model call (sending the request, retrying it, or compacting first) and performs the
transition that follows. The choices are the pure functions of ``transitions.py``: which branch after a
call (``decide``), the gates around it (``check_turns``, ``after_stop_hooks``), the ends an effect causes (a
hook that stops the run, a history that cannot be compacted), when and how far to compact, and every counter.
The loop performs them: it keeps the latest ``LoopState``, the history and the trace, and derives its
``Result`` from the final state.
"""

from __future__ import annotations

import asyncio
import copy
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeAlias, TypeVar, assert_never, cast

from . import compaction as compaction_mod
from . import wire
from .caching import count_breakpoints, has_breakpoints, place_breakpoints
from .calls import Progress, abounded_call, bounded_call, in_daemon_thread
from .compaction import ContextMeter, estimate_tokens, text_blocks
from .config import RunConfig
from .cost import default_prices, usage_cost
from .errors import ConfigError
from .events import (
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
from .hooks import HookOutcome, Hooks
from .sdk import anthropic
from .tools import ToolOutcome, ToolRegistry, ToolsCancelled
from .trace import Event, Trace, surrogate_note, without_lone_surrogates
from .transitions import (
    MAX_TURNS_MARKER,
    SUBTYPES,
    Clamp,
    Compact,
    CompactTrigger,
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
    Subtype,
    Transition,
    advance,
    after_append,
    after_compaction,
    after_stop_hooks,
    check_turns,
    compaction_enough,
    compaction_target,
    completion_stands,
    context_give_up,
    decide,
    finish,
    note_request,
    note_success,
    note_usage,
    proactive_compaction_due,
    prompt_hook_stop,
    stop_hook_said_stop,
    text_of,
    tool_hook_stop,
)

__all__ = ["PLACEHOLDER_KEYS", "SUBTYPES", "AgentLoop", "Result", "RunConfig", "StepReport"]

Message = dict[str, Any]

# Keys that stand in for a real one (offline runs, servers that ignore keys): nothing to hide.
PLACEHOLDER_KEYS = frozenset({"scripted-offline-key", "agentlab-placeholder-key"})


@dataclass
class Result:
    """The run's outcome, shaped like the Claude Agent SDK's result message."""

    subtype: str                       # a Subtype (transitions.py); read from a replayed client, its own label
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
    def from_state(cls, state: LoopState, messages: list[Message]) -> Result:
        """The result of a run that ended in ``state`` (``state.subtype`` set by ``transitions.finish``)."""
        if state.subtype is None:
            raise ValueError("the run has not ended: its state has no subtype")
        return cls(
            subtype=state.subtype, is_error=state.subtype != "success", num_turns=state.num_turns,
            stop_reason=state.stop_reason, stop_sequence=state.stop_sequence, result=state.end_text,
            usage=dict(state.usage), model=state.model, requests=state.requests, escalations=state.escalations,
            continuations=state.continuations, compactions=state.compactions,
            retries=state.retries, fallbacks=state.fallbacks, pause_continuations=state.pause_continuations,
            nudges=state.nudges, stop_hook_blocks=state.stop_hook_blocks, messages=messages,
            cost_usd=state.run_cost, unpriced_models=list(state.unpriced_models))

    @classmethod
    def from_event(cls, data: dict[str, Any] | ResultEvent) -> Result:
        """A Result from a ``result`` event's payload (a trace read back, or a replayed client run), typed or
        in its JSONL form.

        Fields the payload lacks take neutral values: no counts, no model, no messages.
        """
        if not isinstance(data, ResultEvent):
            if "subtype" not in data or "is_error" not in data:
                raise ValueError("a result event needs a subtype and is_error")
            data = cast(ResultEvent, ResultEvent.from_data(data))
        p = data
        cost = p.cost_usd
        return cls(
            cost_usd=float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
            unpriced_models=[str(m) for m in p.unpriced_models or []],
            subtype=str(p.subtype), is_error=bool(p.is_error), num_turns=int(p.num_turns or 0),
            stop_reason=p.stop_reason, stop_sequence=p.stop_sequence, result=str(p.result or ""),
            usage=dict(p.usage or {}), model=str(p.model or ""), requests=int(p.requests or 0),
            escalations=int(p.escalations or 0), continuations=int(p.continuations or 0),
            compactions=int(p.compactions or 0), retries=int(p.retries or 0), fallbacks=int(p.fallbacks or 0),
            pause_continuations=int(p.pause_continuations or 0), nudges=int(p.nudges or 0),
            stop_hook_blocks=int(p.stop_hook_blocks or 0))

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
    events: list[Event]
    done: bool


# --- effects: what the loop asks its driver to do ------------------------------------------------------------

@dataclass(frozen=True)
class CallModel:
    """Send one Messages API request (as a stream when ``stream``); the answer is the Message as a dict, or a
    Failure."""

    params: dict[str, Any]
    stream: bool = False


@dataclass(frozen=True)
class CountTokens:
    """Ask the count_tokens endpoint; the answer is the count, or a Failure when it did not answer one."""

    params: dict[str, Any]


@dataclass(frozen=True)
class RunHooks:
    """Fire a hook event; the answer is the HookOutcome."""

    event: str
    payload: dict[str, Any]
    tool_name: str | None = None


@dataclass(frozen=True)
class RunTools_:
    """Run tool calls ``(tool_use_id, name, input)``; the answer is their ToolOutcomes, in order."""

    calls: list[tuple[str, str, Any]]


@dataclass(frozen=True)
class Wait:
    """Wait this many seconds before the next request."""

    seconds: float


Effect: TypeAlias = CallModel | CountTokens | RunHooks | RunTools_ | Wait
T = TypeVar("T")
Steps: TypeAlias = Generator[Effect, Any, T]   # a piece of the loop: yields effects, returns T


class _SummaryFailed(Exception):
    pass


@dataclass(frozen=True)
class _Credit:
    """A refusal's ``fallback_credit_token`` for the retry on another model (None: discarded after a rejection),
    and the partial content that retry appends as one assistant turn (``prefill``; None: the body goes
    unchanged), which only ``fallback_has_prefill_claim: true`` allows. Docs: "Fallback credit"; the SDK's
    ``BetaRefusalStopDetails``."""

    token: str | None
    prefill: list[dict[str, Any]] | None
    reformed: bool = False          # the retry was sent again in another form once: never again

    @classmethod
    def of(cls, message: Message | None) -> _Credit | None:
        details = (message or {}).get("stop_details")
        token = details.get("fallback_credit_token") if isinstance(details, dict) else None
        if not isinstance(token, str) or not token:
            return None
        claim = details.get("fallback_has_prefill_claim") is True if isinstance(details, dict) else False
        return cls(token, _continuable((message or {}).get("content") or []) if claim else None)

    def after_rejection(self, failure: Failure) -> _Credit | None:
        """The retry's one other form after the API answered it with a 400 (None: none; the failure is decided
        as any other). From the SDK's ``BetaRefusalStopDetails`` docstrings:
        - the appended-assistant form rejected "despite true": "fall back to resending the original request
          body with the token" (advisory; the SDK's refusal-fallback middleware does the same on any 400);
        - the same body rejected "with a 400 saying the token must be redeemed by continuing the partial
          response": the loop sends the same body only when the prefill claim was false (with a claim it appends
          first), which is the docstring's one exception (a forced tool choice or an output format, server tools
          already run): "discard the token and retry without it";
        - any other 400 about ``fallback_credit_token`` (malformed, refused beside ``fallbacks``, a strict-mode
          redemption): the token only credits the cache, so the retry goes once more without it."""
        if self.reformed or failure.status != 400:
            return None
        said = failure.message.lower()
        if self.prefill:
            return _Credit(self.token, None, reformed=True)
        if "continuing the partial" in said or "fallback_credit_token" in said:
            return _Credit(None, None, reformed=True)
        return None


def _continuable(blocks: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """A refusal's content as the retry's appended assistant turn: unpaired tool_use blocks left out, trailing
    whitespace stripped from the final text block (a blank one left out); None when nothing is left."""
    kept = [dict(b) for b in blocks if b.get("type") != "tool_use"]
    if kept and kept[-1].get("type") == "text":
        kept[-1]["text"] = str(kept[-1].get("text", "")).rstrip()
        if not kept[-1]["text"]:
            kept.pop()
    return kept or None


class AgentLoop:
    """One run: built from a client and a :class:`RunConfig` (``AgentLoop(client, RunConfig(prompt="..."))``);
    ``step()``/``run()`` with an ``anthropic.Anthropic`` client, ``astep()``/``arun()`` with an ``AsyncAnthropic``.

    Beside the configuration, the run's live objects: ``trace`` (a Trace, or the path of its JSONL file),
    ``hooks``, ``sleep``/``asleep`` (a retry's wait) and ``clock`` (a call's wall time); ``seed`` seeds the
    retries' jitter.
    """

    def __init__(
        self,
        client: anthropic.Anthropic | anthropic.AsyncAnthropic,
        config: RunConfig,
        *,
        trace: Trace | str | os.PathLike[str] | None = None,
        hooks: Hooks | None = None,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.perf_counter,
        seed: int = 0,
    ) -> None:
        _check_live(client, config, trace, hooks)
        self.config = config
        self.client = client
        self.is_async = isinstance(client, anthropic.AsyncAnthropic)
        self.hooks = hooks
        self.trace = trace if isinstance(trace, Trace) else Trace(trace)  # a path: the JSONL file it is written to
        key = getattr(client, "api_key", None)
        if isinstance(key, str) and key not in PLACEHOLDER_KEYS:
            self.trace.add_secret(key)
        self.prices = config.prices or default_prices()
        self.sleep, self.asleep, self.clock = sleep, asleep, clock
        self.count_failure: Failure | None = None  # why the latest count_tokens call gave no count, if it did not
        self._rng = random.Random(seed)
        self.messages: list[Message] = [dict(m) for m in config.messages or ()]
        self.state = LoopState(model=config.model, max_tokens=config.max_tokens)
        self.meter = ContextMeter(config.limits.context_window)
        self.result: Result | None = None
        self.last_transition: Transition | None = None
        self._started = False
        self._pending_compaction: CompactTrigger | None = None
        self._proactive_gave_up_at = -1
        self._last_failure: Failure | None = None
        self._credit: _Credit | None = None  # a refusal's credit token, for the retry on the fallback model
        self._before_prefill: tuple[int, Message | None] | None = None  # the history's length and last message
        # before the retry's appended partial, to take it back out
        self._summarize_on_server = False    # the next request is a server-side compaction request
        self._tool_schemas = config.tool_schemas()  # server tools (web_search, ...) are offered, never run here
        # cache_control markers the loop did not place (given messages, system or tools): while there are none,
        # a request's breakpoints are the ones placed, counted without reading the request again
        self._foreign_marks = has_breakpoints(self.messages, config.system, self._tool_schemas)
        self._reply_progress: Progress | None = None  # of the model call just performed (_noted)
        self._streaming_needed: dict[tuple[str, int], bool] = {}  # (model, max_tokens) -> the SDK's rule (_streams)

    # -- the configuration, read through -----------------------------------------------------------------
    @property
    def limits(self) -> Limits:
        return self.config.limits

    @property
    def tools(self) -> ToolRegistry | None:
        return self.config.tools

    @property
    def prompt(self) -> str | None:
        return self.config.prompt

    @property
    def system(self) -> str | None:
        return self.config.system

    # -- bounds and counts, read from the limits and the state -------------------------------------------
    @property
    def context_window(self) -> int:
        return self.limits.context_window

    @property
    def compact_threshold(self) -> float | None:
        return self.limits.compact_threshold

    @property
    def request_timeout(self) -> float:
        return self.limits.request_timeout

    @property
    def requests(self) -> int:
        return self.state.requests

    @property
    def usage(self) -> dict[str, int]:
        return dict(self.state.usage)

    @property
    def cost_usd(self) -> float:
        """What the priced calls of the run cost so far, in US dollars."""
        return self.state.cost_usd

    @property
    def unpriced_models(self) -> list[str]:
        """Models of calls made in this run that have no price in the table."""
        return list(self.state.unpriced_models)

    @property
    def run_cost(self) -> float | None:
        """The run's cost so far in US dollars; None once a call was made with a model that has no price."""
        return self.state.run_cost

    @property
    def last_stop_reason(self) -> str | None:
        return self.state.stop_reason

    @property
    def done(self) -> bool:
        return self.result is not None

    # -- the drivers: each performs the effects the steps ask for, sync or async ---------------------------
    def step(self) -> StepReport:
        """One model call and the transition after it (or the end of the run)."""
        steps, answer = self._begin(asynchronous=False), None
        while not isinstance(got := self._next(steps, answer), StepReport):
            answer = self._perform(got)
        return got

    async def astep(self) -> StepReport:
        """``step()`` for a loop with an ``AsyncAnthropic`` client."""
        steps, answer = self._begin(asynchronous=True), None
        while not isinstance(got := self._next(steps, answer), StepReport):
            answer = await self._aperform(got)
        return got

    def run(self) -> Result:
        """Run to the end: ``result = loop.run()``."""
        with self._hooks_end_with_the_run():
            for _ in self._until_done():
                self.step()
        return self._final()

    async def arun(self) -> Result:
        """Run to the end with an ``AsyncAnthropic`` client: ``result = await loop.arun()``."""
        with self._hooks_end_with_the_run():
            for _ in self._until_done():
                await self.astep()
        return self._final()

    def __iter__(self) -> Iterator[StepReport]:
        while not self.done:
            yield self.step()

    async def asteps(self) -> AsyncIterator[StepReport]:
        """``async for report in loop.asteps(): ...``: one StepReport per model call, to the end."""
        while not self.done:
            yield await self.astep()

    def _perform(self, effect: Effect) -> Any:
        client = cast(anthropic.Anthropic, self.client)
        timeout, http = self.limits.request_timeout, getattr(client, "_client", None)
        match effect:
            case CallModel(params=params, stream=stream):
                return bounded_call(lambda progress: wire.send(client, params, stream, timeout, self._noted(progress)),
                                    **self._call_bounds(), http_client=http)
            case CountTokens(params=params):
                return bounded_call(lambda _: wire.count(client, params, timeout), **self._call_bounds(),
                                    http_client=http)
            case RunHooks(event=event, payload=payload, tool_name=tool_name):
                assert self.hooks is not None
                return self.hooks.run(event, payload, tool_name=tool_name)
            case RunTools_(calls=calls):
                return self._tool_outcomes(calls)
            case Wait(seconds=seconds):
                return self.sleep(seconds)
            case _:
                assert_never(effect)

    async def _aperform(self, effect: Effect) -> Any:
        client = cast(anthropic.AsyncAnthropic, self.client)
        timeout = self.limits.request_timeout
        match effect:
            case CallModel(params=params, stream=stream):
                return await abounded_call(lambda progress: wire.asend(client, params, stream, timeout,
                                                                       self._noted(progress)), **self._call_bounds())
            case CountTokens(params=params):
                return await abounded_call(lambda _: wire.acount(client, params, timeout), **self._call_bounds())
            case RunHooks(event=event, payload=payload, tool_name=tool_name):
                assert self.hooks is not None
                return await self.hooks.arun(event, payload, tool_name=tool_name)
            case RunTools_(calls=calls):
                return await in_daemon_thread(self._tool_outcomes, calls)  # Ctrl-C: no wait for the tools
            case Wait(seconds=seconds):
                return await self.asleep(seconds)
            case _:
                assert_never(effect)

    def _begin(self, *, asynchronous: bool) -> Steps[StepReport]:
        """The steps of one model call, for the driver that matches the client."""
        if asynchronous != self.is_async:
            raise ConfigError("this loop has an AsyncAnthropic client: use `await loop.astep()` or `loop.arun()`"
                              if self.is_async else
                              "this loop has a sync Anthropic client: use `loop.step()` or `loop.run()`")
        return self._step()

    def _next(self, steps: Steps[StepReport], answer: Any) -> Effect | StepReport:
        """The next effect the steps ask for, given the answer to the last one; their report once they are done
        (and, when the run has ended, nothing a hook started outlives it: :meth:`Hooks.end_leftovers`)."""
        try:
            return steps.send(answer)
        except StopIteration as stop:
            if self.done and self.hooks is not None:
                self.hooks.end_leftovers()
            report: StepReport = stop.value
            return report

    def _until_done(self) -> Iterator[int]:
        """The steps of a run to its end, at most ``Limits.max_steps`` of them (more is a bug of the loop)."""
        steps = 0
        while not self.done:
            if steps >= self.limits.max_steps:
                raise RuntimeError(f"the run did not end after {steps} steps (Limits.max_steps); a loop that never "
                                   "ends is a bug")
            yield steps
            steps += 1

    def _final(self) -> Result:
        assert self.result is not None
        return self.result

    @contextmanager
    def _hooks_end_with_the_run(self) -> Iterator[None]:
        """``run()`` and ``arun()`` left by an exception (a tool's bug, Ctrl-C, a task cancelled): the run is over
        for its caller, so the hooks still running and what the hooks that answered left behind are killed too
        (:meth:`Hooks.kill_running`); the exception goes on."""
        try:
            yield
        except BaseException:
            if self.hooks is not None:
                self.hooks.kill_running()
            raise

    def _noted(self, progress: Progress) -> Progress:
        """The progress of the model call being performed, kept for ``_record_response``."""
        self._reply_progress = progress
        return progress

    def _call_bounds(self) -> dict[str, Any]:
        """A call's whole deadline (the request timeout) and the notice of a quiet wait (see :mod:`.calls`): after
        ``quiet_notice_s`` without data, or half the deadline when that is sooner."""
        notice = self.limits.quiet_notice_s
        deadline = self.limits.request_timeout
        return {"deadline_s": deadline, "notice_s": None if notice is None else min(notice, deadline / 2),
                "on_quiet": self._quiet}

    def _quiet(self, seconds: float) -> None:
        self.trace.emit(Waiting(seconds=seconds, deadline_s=self.limits.request_timeout,
                                message=f"no data from the server for {seconds:g} s; still waiting (the call's "
                                        f"deadline is {self.limits.request_timeout:g} s)"), self.requests)

    def _tool_outcomes(self, calls: list[tuple[str, str, Any]]) -> list[ToolOutcome]:
        if self.tools is None:
            return [ToolOutcome(f"No tools are configured in this run, so {name!r} cannot run.", is_error=True)
                    for _, name, _ in calls]
        try:
            return self.tools.run_many(calls)
        except ToolsCancelled as exc:  # Ctrl-C: the trace says which calls were cancelled; the history is as it was
            for name in exc.cancelled:
                self.trace.emit(ToolRun(name=name, output="cancelled: the run was interrupted while it ran",
                                        is_error=True), self.requests)
            raise

    # -- one step -----------------------------------------------------------------------------------------
    def _step(self) -> Steps[StepReport]:
        if self.done:
            raise RuntimeError("the run has ended; make a new AgentLoop to run again")
        first_event = len(self.trace)
        if not self._started:
            ended = yield from self._start()
            if ended is not None:
                return self._report(ended, first_event)
        gate = check_turns(self.state, self.limits)                                      # row 9
        if gate is not None:
            self._end_with(gate)
            return self._report(gate, first_event)
        if self.config.count_tokens:
            yield from self._count_context()
        if self._pending_compaction or proactive_compaction_due(self.meter.tokens, len(self.messages),
                                                               self._proactive_gave_up_at, self.limits):
            trigger: CompactTrigger = self._pending_compaction or "proactive"
            self._pending_compaction = None
            end = yield from self._compact(trigger)
            if end is not None:
                return self._report(end, first_event)
        outcome = yield from self._call()
        transition = decide(outcome, self.state, self.limits)
        self._emit_transition(transition)
        yield from self._apply(transition, outcome)
        return self._report(transition, first_event)

    def _report(self, transition: Transition, first_event: int) -> StepReport:
        self.last_transition = transition
        return StepReport(transition, self.trace.events[first_event:], self.done)

    # -- start --------------------------------------------------------------------------------------------
    def _start(self) -> Steps[End | None]:
        self._started = True
        self.trace.emit(Start(
            model=self.state.model, max_tokens=self.state.max_tokens, stream=self.config.stream, prompt=self.prompt,
            limits={f.name: getattr(self.limits, f.name) for f in fields(self.limits)},
            context_window=self.context_window,
            tools=self.tools.names() if self.tools is not None else [], compaction=list(self.config.compaction),
            thinking=self.config.thinking, cache=self.config.cache), 0)
        if self.prompt is None:
            self._seed_meter()
            return None
        content: list[dict[str, Any]] = [{"type": "text", "text": self.prompt}]
        outcome = yield from self._hook("UserPromptSubmit", {"prompt": self.prompt})
        if outcome is not None:
            if outcome.stop_loop or outcome.blocked:
                end = prompt_hook_stop(outcome.stop_reason or outcome.reason or "no reason given")
                self._end_with(end)
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
        return self._request()[0]

    def _request(self) -> tuple[dict[str, Any], int]:
        """The next request's params and the number of cache breakpoints in them."""
        params = wire.request_params(self.state.model, self.state.max_tokens, self.messages, system=self.system,
                                     tools=self._tool_schemas, stop_sequences=self.config.stop_sequences)
        self._ask_the_server(params)
        return self._finish_params(params)

    def _ask_the_server(self, params: dict[str, Any]) -> None:
        """The API's own recoveries this run asks for (beta fields, each with its header in ``betas``): server-side
        ``fallbacks``; the fallback-credit beta whenever the loop has a refusal fallback of its own, so that a
        refusal carries its ``fallback_credit_token``, and that token on the retry (in the object form with
        ``mode: best_effort``, as the SDK's refusal-fallback middleware sends it; never with ``fallbacks``, which
        the API refuses beside it); server-side compaction (on demand, or the compact edit) and context editing
        (``context_management``).
        Docs: "Refusals and fallback", "Fallback credit", "Compaction", "Context editing"."""
        betas: list[str] = []
        fallbacks, server = self.config.fallbacks, self.config.server_compaction
        if fallbacks is not None and self._credit is None:
            params["fallbacks"] = fallbacks if isinstance(fallbacks, str) else [{"model": m} for m in fallbacks]
            betas.append(wire.SERVER_FALLBACK_BETA)
        if self.limits.refusal_fallback_model is not None or self._credit is not None:
            betas.append(wire.CREDIT_BETA)
        if self._credit is not None and self._credit.token is not None:
            params["fallback_credit_token"] = {"token": self._credit.token, "mode": "best_effort"}
        if self._summarize_on_server:  # a compaction request, which takes no context_management beside it
            params["compaction"] = {"type": "summarize"}
            betas.append(wire.COMPACT_BETA)
        edits = server.context_management() if server is not None else None
        if server is not None and edits is not None:
            params["context_management"] = edits
            betas += [wire.CONTEXT_MANAGEMENT_BETA, *([wire.COMPACT_BETA] if "compact" in server.edits else [])]
        if betas:
            params["betas"] = betas

    def _finish_params(self, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """Thinking (its budget kept below this request's max_tokens) and cache breakpoints, when on; the params
        and how many breakpoints they carry."""
        budget = self.config.thinking
        if budget is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": min(budget, params["max_tokens"] - 1)}
        placed = 0
        if self.config.cache:
            params, placed = place_breakpoints(params)
        return params, count_breakpoints(params) if self._foreign_marks else placed

    def _streams(self, params: dict[str, Any]) -> bool:
        """Whether this request goes as a stream: always with stream=True, else when the SDK requires it
        (a max_tokens that implies more than 10 minutes of output), rather than forcing a timeout on it.
        The SDK's answer depends only on the model and max_tokens: asked once per pair in a run."""
        if self.config.stream:
            return True
        key = (params["model"], params["max_tokens"])
        known = self._streaming_needed.get(key)
        if known is None:
            known = self._streaming_needed[key] = wire.needs_streaming(self.client, params)
        return known

    def _count_context(self) -> Steps[None]:
        """Replace the context estimate by the API's own count of the next request (when it answers)."""
        params = {k: v for k, v in self._params().items() if k in ("model", "messages", "system", "tools")}
        counted: int | Failure = yield CountTokens(params)
        if isinstance(counted, Failure):  # keep the estimate; the call itself will report any real problem
            self.count_failure = counted
            return
        self.count_failure = None
        self.meter.base, self.meter.pending, self.meter.exact = counted, 0, True

    def _call(self) -> Steps[Message | Failure]:
        self.state = note_request(self.state)
        call = self.requests
        params, breakpoints = self._request()
        stream = self._streams(params)
        self.trace.emit(Request(
            model=params["model"], max_tokens=params["max_tokens"], stream=stream,
            messages=len(self.messages), context_tokens=self.meter.tokens,
            context_window=self.context_window, purpose="turn",
            thinking_budget=(params.get("thinking") or {}).get("budget_tokens"),
            cache_breakpoints=breakpoints), call)
        started = self.clock()
        self._reply_progress = None  # set by the driver that performs the call (see _record_response)
        outcome: Message | Failure = yield CallModel(params, stream)
        wall = (self.clock() - started) * 1000
        self._last_failure = outcome if isinstance(outcome, Failure) else None
        if isinstance(outcome, Failure):
            self.trace.emit(ApiError(
                status=outcome.status, error_type=outcome.error_type, message=outcome.message,
                retry_after=outcome.retry_after, attempt=self.state.api_attempts + 1), call, wall_ms=wall)
            reformed = self._credit.after_rejection(outcome) if self._credit is not None else None
            if reformed is None:
                return outcome
            self._reform_credited_retry(reformed)
            return (yield from self._call())  # once: a reformed credit is never reformed again
        self._record_response(call, outcome, wall, purpose="turn")
        self.state = note_success(self.state, outcome)
        self._credit = None  # redeemed (or not) by the reply: a token is echoed once
        self._summarize_on_server = False
        return outcome

    def _reform_credited_retry(self, credit: _Credit) -> None:
        """The refusal's retry in its other form (:meth:`_Credit.after_rejection`): the history as it was before
        the partial was appended, then the partial appended again when the new form carries it."""
        if self._credit is not None and self._credit.prefill and self._before_prefill is not None:
            count, last = self._before_prefill
            del self.messages[count:]
            if last is not None:
                self.messages[-1] = last
                self.state = after_append(self.state, last)
        self._credit = credit
        if credit.prefill:
            self._merge_or_append_assistant(credit.prefill)

    def _record_response(self, call: int, message: Message, wall: float, *, purpose: str) -> None:
        replaced = 0
        progress = self._reply_progress
        # JSON carries a lone surrogate only as an escape: a reply whose bytes were seen without one is not walked
        if progress is None or progress.surrogate_escapes is not False:
            cleaned, replaced = without_lone_surrogates(message)
        if replaced:  # text that could never be sent back (not UTF-8): taken in with U+FFFD; the event says so
            message.clear()
            message.update(cleaned)
        usage = message.get("usage") or {}
        model = message.get("model") or self.state.model
        cost = usage_cost(usage, model, self.prices)
        self.state = note_usage(self.state, usage, model, cost)
        content = message.get("content") or []
        fresh, output = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
        read = int(usage.get("cache_read_input_tokens") or 0)
        written = int(usage.get("cache_creation_input_tokens") or 0)
        if purpose == "turn":
            self.meter.observe_usage(fresh, output, read, written)
        self.trace.emit(Response(
            purpose="turn" if purpose == "turn" else "summary", model=message.get("model"),
            stop_reason=message.get("stop_reason"), stop_sequence=message.get("stop_sequence"),
            stop_details=message.get("stop_details"), blocks=",".join(b["type"] for b in content), content=content,
            input_tokens=fresh, output_tokens=output, cache_read_input_tokens=read,
            cache_creation_input_tokens=written, cost_usd=cost, run_cost_usd=self.run_cost,
            usage=usage, context_window=self.context_window, extra=surrogate_note(replaced)), call, wall_ms=wall)

    # -- performing a transition --------------------------------------------------------------------------
    def _apply(self, t: Transition, outcome: Message | Failure) -> Steps[None]:
        """Perform ``t``: the history, the trace and the effects. Every count is ``advance()``'s."""
        message = None if isinstance(outcome, Failure) else outcome
        blocks: list[dict[str, Any]] = [] if message is None else list(message.get("content") or [])
        before = self.state
        self.state = advance(self.state, t, outcome)
        if isinstance(t, (Escalate, Clamp, RetryOnModel)) and message is not None:
            # the reply is thrown away and the same request goes again: its output is not in the context
            self.meter.base -= int((message.get("usage") or {}).get("output_tokens") or 0)
        match t:
            case Retry():                                                                   # row 0
                delay = t.delay * (1 + self.limits.backoff_jitter * self._rng.random()) if t.delay else 0.0
                if t.switch_model:
                    self.trace.emit(Fallback(from_model=before.model, to_model=t.switch_model, cause="overloaded"),
                                    self.requests)
                self.trace.emit(RetryEvent(attempt=self.state.api_attempts, delay_s=round(delay, 3),
                                           model=self.state.model, reason=t.reason), self.requests)
                if delay:
                    yield Wait(delay)
            case End():                                                                     # the run ends
                if t.subtype == "error_refusal":  # keep what was said, never an unanswered tool call
                    self._merge_or_append_assistant([b for b in blocks if b.get("type") in
                                                     ("text", "thinking", "redacted_thinking")])
                self._end()
            case Compact():                                                                 # rows 0b, 4
                self._pending_compaction = t.trigger
            case Escalate() | Clamp():                                                      # rows 1, 3
                pass
            case RunTools():                                                                # row 2
                self._merge_or_append_assistant(blocks)
                yield from self._run_tools(t)
            case ContinueTruncated():                                                       # row 3
                # an empty partial leaves nothing to continue from: the same request goes again (still counted)
                if self._merge_or_append_assistant(blocks):
                    self._append_user_text(t.text)
            case Resume():                                                                  # row 6
                self._merge_or_append_assistant(blocks)
            case Nudge():                                                                   # row 8
                self._append_user_text(t.text)
            case RetryOnModel():                                                            # row 5
                self.trace.emit(Fallback(from_model=before.model, to_model=t.model, cause="refusal"), self.requests)
                self._credit = _Credit.of(message)  # echoed on the retry; its partial, when the token allows it
                self._before_prefill = (len(self.messages), self.messages[-1] if self.messages else None)
                if self._credit is not None and self._credit.prefill:
                    self._merge_or_append_assistant(self._credit.prefill)
            case Complete():                                                                # rows 7, 11 → 10
                self._merge_or_append_assistant(blocks)
                yield from self._stop_hooks(blocks)
            case HookBlocked():  # only after_stop_hooks() gives this, never decide()
                self._append_user_text(t.feedback)
            case _:
                assert_never(t)

    def _merge_or_append_assistant(self, blocks: list[dict[str, Any]]) -> bool:
        """Append the assistant turn; after a pause_turn the continuation joins the paused turn.

        Blank text blocks are left out (the API rejects them in a resent turn); nothing is appended when
        nothing is left. Returns whether anything was appended.
        """
        blocks = [b for b in blocks if not (b.get("type") == "text" and not str(b.get("text", "")).strip())]
        if not blocks:
            return False
        self._foreign_marks = self._foreign_marks or has_breakpoints([{"content": blocks}])
        if self.messages and self.messages[-1]["role"] == "assistant":
            merged = list(self.messages[-1]["content"]) + blocks
            self.messages[-1] = {"role": "assistant", "content": merged}
            self.trace.emit(Append(role="assistant", merged=True, content=blocks, blocks=_types(blocks)),
                            self.requests)
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
            blocks = text_blocks(last["content"])
            merged = {"role": "user", "content": blocks + [{"type": "text", "text": text}]}
            self.messages[-1] = merged
            self.meter.appended({"role": "user", "content": text})
            self.trace.emit(Append(role="user", merged=True, content=[{"type": "text", "text": text}], blocks="text"),
                            self.requests)
            return
        self._append({"role": "user", "content": text})

    def _append(self, message: Message) -> None:
        """A message joins the history. Only a reply's blocks can bring cache_control markers the loop did not
        place, and ``_merge_or_append_assistant`` looks for them; the loop's own messages carry none."""
        self.messages.append(message)
        if message["role"] == "user":  # an assistant message is already counted in its response's usage
            self.meter.appended(message)
        self.state = after_append(self.state, message)
        blocks = text_blocks(message["content"])
        self.trace.emit(Append(role=message["role"], merged=False, content=blocks, blocks=_types(blocks)),
                        self.requests)

    # -- tools --------------------------------------------------------------------------------------------
    def _run_tools(self, t: RunTools) -> Steps[None]:
        results: list[dict[str, Any] | None] = [None] * len(t.tool_uses)
        runnable: list[tuple[int, str, str, Any]] = []
        stop: str | None = None
        pre_hooks, post_hooks = self._has_hooks("PreToolUse"), self._has_hooks("PostToolUse")
        for i, use in enumerate(t.tool_uses):
            name, tool_input = use.get("name", ""), use.get("input", {})
            pre = None
            if pre_hooks:
                pre = yield from self._hook("PreToolUse", {"tool_name": name, "tool_input": tool_input,
                                                           "tool_use_id": use["id"]}, tool_name=name)
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
        outcomes: list[ToolOutcome] = yield RunTools_([(uid, name, inp) for _, uid, name, inp in runnable])
        for (i, uid, name, tool_input), out in zip(runnable, outcomes, strict=True):
            content = out.content
            use = t.tool_uses[i]
            post = None
            if post_hooks:
                post = yield from self._hook("PostToolUse", {"tool_name": name, "tool_input": tool_input,
                                                             "tool_response": content, "tool_use_id": uid},
                                             tool_name=name)
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
            self._end_with(tool_hook_stop(stop))

    def _tool_result(self, use: dict[str, Any], content: str, is_error: bool, *, tool_input: Any = None,
                     hook: str | None = None) -> dict[str, Any]:
        content, replaced = without_lone_surrogates(content)  # a tool's text that could never be sent: U+FFFD
        self.trace.emit(ToolRun(
            id=use["id"], name=use.get("name"), input=tool_input if tool_input is not None else use.get("input"),
            output=content, is_error=is_error, denied_by=hook, extra=surrogate_note(replaced)), self.requests)
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use["id"], "content": content}
        if is_error:
            block["is_error"] = True
        return block

    # -- hooks --------------------------------------------------------------------------------------------
    def _has_hooks(self, event: str) -> bool:
        return self.hooks is not None and self.hooks.has(event)

    def _hook(self, event: str, payload: dict[str, Any], *, tool_name: str | None = None) -> Steps[HookOutcome | None]:
        if not self._has_hooks(event):
            return None
        outcome: HookOutcome = yield RunHooks(event, payload, tool_name)
        for run in outcome.runs:
            data = asdict(run)
            wall = data.pop("duration_ms", None)
            self.trace.emit(HookEvent.from_data(data), self.requests, wall_ms=wall)
        return outcome

    def _stop_hooks(self, blocks: list[dict[str, Any]]) -> Steps[None]:
        outcome = yield from self._hook("Stop", {"stop_hook_active": self.state.stop_hook_active,
                                                 "last_assistant_message": text_of(blocks)})
        if outcome is not None and outcome.stop_loop:
            self._end_with(stop_hook_said_stop(outcome.stop_reason))
            return
        blocked = bool(outcome and outcome.blocked)
        verdict = after_stop_hooks(blocked, outcome.reason if outcome else None, self.state, self.limits)
        match verdict:
            case None:  # nothing blocked: the completion stands
                stands = completion_stands(self.last_transition)
                if stands is not None:
                    self._emit_transition(stands)
                self.state = finish(self.state, "success")
                self._end()
            case HookBlocked():
                self._emit_transition(verdict)
                self.state = advance(self.state, verdict, None)
                self._append_user_text(verdict.feedback)
            case End():
                self._end_with(verdict)
            case _:
                assert_never(verdict)

    # -- compaction ---------------------------------------------------------------------------------------
    def _compact(self, trigger: CompactTrigger) -> Steps[End | None]:
        """Compact the history; None when the loop may send its request, an End when it cannot.

        Strategies run in the chain's order, starting further down it after repeated failures, and go on
        down the chain until ``transitions.compaction_enough`` says so, for the target that
        ``transitions.compaction_target`` sets (both read their shares from ``Limits``).
        A proactive compaction that finds nothing to do is not an error: the request is sent as it is.
        """
        reactive = trigger != "proactive"
        pre = yield from self._hook("PreCompact", {"trigger": "auto", "custom_instructions": None, "cause": trigger})
        if pre is not None and pre.blocked:
            if not reactive:
                self._proactive_gave_up_at = len(self.messages)
                return None
            return self._give_up_on_context(f"a PreCompact hook blocked compaction: {pre.reason}")
        if self.config.server_compaction is not None and self.config.server_compaction.on_demand:
            return self._compact_on_the_server(trigger)
        level = self.state.consecutive_compactions
        target = compaction_target(trigger, estimate_tokens(self.messages), self._last_failure_message, self.limits)
        applied = []
        for name in self.config.compaction[min(level, len(self.config.compaction) - 1):]:
            result = yield from self._run_strategy(name, self.messages, target, reactive=reactive)
            if result is None or not result.changed:
                continue
            context_before = self.meter.tokens
            self.messages = result.messages
            self._foreign_marks = self._foreign_marks and has_breakpoints(self.messages, self.system,
                                                                          self._tool_schemas)
            self.meter.reset(self.messages, self.system, self._tool_schemas)
            applied.append(result.strategy)
            self.trace.emit(CompactionEvent(
                trigger=trigger, strategy=result.strategy, tokens_before=result.tokens_before,
                tokens_after=result.tokens_after, messages_before=result.messages_before,
                messages_after=result.messages_after, removed=result.removed, context_before=context_before,
                context_after=self.meter.tokens, target=target, context_window=self.context_window), self.requests)
            if compaction_enough(trigger, result.tokens_after, target, self.meter.tokens, self.limits):
                break
        self.state = after_compaction(self.state, len(applied))
        if applied:
            yield from self._hook("PostCompact", {"trigger": "auto", "strategies": applied})
            return None
        if not reactive:
            self._proactive_gave_up_at = len(self.messages)
            return None
        return self._give_up_on_context(f"{trigger}: no compaction strategy could shrink the history")

    def _compact_on_the_server(self, trigger: CompactTrigger) -> End | None:
        """Server-side compaction on demand: the next request is a compaction request (``compaction={"type":
        "summarize"}``), whose reply is the compaction block alone (``stop_reason: "compaction"``), sent back
        unchanged as the turn goes on (row 6). Right after such a block there is nothing left to compact."""
        last = self.messages[-1]["content"] if self.messages and self.messages[-1]["role"] == "assistant" else []
        if isinstance(last, list) and last and last[-1].get("type") == "compaction":
            if trigger == "proactive":
                self._proactive_gave_up_at = len(self.messages)
                return None
            return self._give_up_on_context(f"{trigger}: the server's compaction did not make the request fit")
        self._summarize_on_server = True
        self.state = after_compaction(self.state, 1)
        return None

    def _give_up_on_context(self, reason: str) -> End:
        end = context_give_up(reason)
        self._end_with(end)
        return end

    @property
    def _last_failure_message(self) -> str:
        return self._last_failure.message if self._last_failure is not None else ""

    def _run_strategy(self, name: str, messages: list[Message], target: int, *,
                      reactive: bool) -> Steps[compaction_mod.CompactionResult | None]:
        if name == "summarize":
            keep = 1 if reactive else 2
            older = compaction_mod.summary_input(messages, keep_last_turns=keep)
            if older is None:  # nothing to summarise: the strategy reports why, without a call
                return compaction_mod.summarize(messages, _no_summary, keep_last_turns=keep)
            try:
                text = yield from self._summarize(older)
            except _SummaryFailed:
                return None
            return compaction_mod.summarize(messages, lambda _older: text, keep_last_turns=keep)
        if name == "drop_oldest":
            return compaction_mod.drop_oldest(messages, target_tokens=target)
        return compaction_mod.clear_tool_results(messages, keep_last=1 if reactive else 2)

    def _summarize(self, older: list[Message]) -> Steps[str]:
        """The summary model call: the older history plus the summary instruction, text only, no tools."""
        self.state = note_request(self.state)
        call = self.requests
        params: dict[str, Any] = {"model": self.state.model, "max_tokens": min(self.state.max_tokens * 4, 8192),
                                  "messages": compaction_mod.summary_request_messages(older)}
        if self.system:
            params["system"] = self.system
        context_tokens = estimate_tokens(params["messages"])  # before the breakpoints: they are not tokens
        params, breakpoints = self._finish_params(params)
        stream = self._streams(params)
        self.trace.emit(Request(model=params["model"], max_tokens=params["max_tokens"], stream=stream,
                                messages=len(params["messages"]), context_tokens=context_tokens,
                                context_window=self.context_window, purpose="summary",
                                thinking_budget=(params.get("thinking") or {}).get("budget_tokens"),
                                cache_breakpoints=breakpoints), call)
        started = self.clock()
        self._reply_progress = None  # set by the driver that performs the call (see _record_response)
        outcome: Message | Failure = yield CallModel(params, stream)
        wall = (self.clock() - started) * 1000
        if isinstance(outcome, Failure):
            self.trace.emit(ApiError(status=outcome.status, error_type=outcome.error_type, message=outcome.message,
                                     purpose="summary"), call, wall_ms=wall)
            raise _SummaryFailed(outcome.message)
        self._record_response(call, outcome, wall, purpose="summary")
        text = compaction_mod.summary_text(text_of(outcome.get("content") or []))
        if not text:
            raise _SummaryFailed("the summary came back empty")
        return text

    # -- ending -------------------------------------------------------------------------------------------
    def _emit_transition(self, t: Transition) -> None:
        self.last_transition = t
        s = self.state
        self.trace.emit(TransitionEvent(
            branch=t.branch, row=t.row, reason=t.reason, type=type(t).__name__,
            subtype=t.subtype if isinstance(t, End) else None, num_turns=s.num_turns, max_tokens=s.max_tokens,
            model=s.model, escalations=s.escalations, continuations_in_a_row=s.continuations_in_a_row,
            consecutive_compactions=s.consecutive_compactions,
            api_attempts=s.api_attempts, stop_hook_blocks=s.stop_hook_blocks,
            pauses_in_a_row=s.pauses_in_a_row), self.requests)

    def _end_with(self, end: End) -> None:
        """A gate or an effect ended the run (not decide()): the transition, the final state, the result."""
        self._emit_transition(end)
        self.state = advance(self.state, end, None)
        self._end()

    def _end(self) -> None:
        """The run has ended (``self.state`` is final): the marker, the Result read off the state, the event."""
        subtype: Subtype | None = self.state.subtype
        assert subtype is not None, "the run ended without a subtype in its state"
        if subtype == "error_max_turns":
            self.trace.emit(Append(role="marker", merged=False, content=[{"type": "text", "text": MAX_TURNS_MARKER}],
                                   blocks="marker"), self.requests)
        self.result = Result.from_state(self.state, self.messages)
        self.trace.emit(ResultEvent.from_data(self.result.to_dict()), self.requests)


def _no_summary(older: list[Message]) -> str:
    raise AssertionError("summarize() asked for a summary of a history it found nothing to summarise in")


def _types(blocks: list[dict[str, Any]]) -> str:
    return ",".join(str(b.get("type")) for b in blocks)


def _check_live(client: Any, config: Any, trace: Any, hooks: Any) -> None:
    """Refuse, at construction, what the loop could only fail on later; the message names it."""
    if client is None or not hasattr(client, "messages"):
        raise ConfigError("AgentLoop(client, ...): expected an anthropic.Anthropic or AsyncAnthropic client (or one "
                          f"shaped like it), got {type(client).__name__}")
    if not isinstance(config, RunConfig):
        raise ConfigError(f"AgentLoop(client, config): expected a RunConfig (agentlab.core.config), got "
                          f"{type(config).__name__}; for the common case, AgentLoop(client, RunConfig(prompt=...))")
    if trace is not None and not isinstance(trace, Trace | str | os.PathLike):
        raise ConfigError(f"AgentLoop(trace=...): expected a Trace, a file path or None, got {type(trace).__name__}")
    if hooks is not None and not isinstance(hooks, Hooks):
        raise ConfigError(f"AgentLoop(hooks=...): expected a Hooks object or None, got {hooks!r}; for a settings "
                          "file, pass Hooks('settings.json')"[:300])
