"""The events of a run: one frozen dataclass per kind, each with its JSONL form.

A trace line is ``{"seq", "kind", "call", "data", "wall_ms"}``; ``data`` is the payload's ``to_data()``, and
``payload_from_data(kind, data)`` reads it back. Fields a line lacks take their defaults, and keys a payload
does not know (a newer trace, or a replayed client's extra facts) are kept in ``extra`` and written back
unchanged, so every trace file written so far stays readable.

Payloads are deterministic: no timestamps, no addresses. The measured wall time travels beside them in
``Event.wall_ms``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

EventKind = Literal["start", "request", "waiting", "response", "api_error", "retry", "fallback", "transition",
                    "append", "tool", "hook", "compaction", "result"]
# In the order a learner meets them in a run.
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)

Purpose = Literal["turn", "summary"]


def _plain(value: Any) -> Any:
    """The JSON form of a field value: tuples become lists, mappings plain dicts."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    """A payload class's field names in order, ``extra`` left out (read once per class, not per event)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.name != "extra")
    return names


@dataclass(frozen=True)
class Payload:
    """Base of every event payload: its kind, its JSONL form and the way back."""

    kind: ClassVar[EventKind]
    extra: Mapping[str, Any] = field(default_factory=dict, kw_only=True)

    def to_data(self) -> dict[str, Any]:
        data = {name: _plain(getattr(self, name)) for name in _names(type(self))}
        data.update(self.extra)
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Payload:
        names = _names(cls)
        known: dict[str, Any] = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**known, extra=extra)


@dataclass(frozen=True)
class Start(Payload):
    """The run begins: the model, its limits, the tools and the compaction chain."""

    kind: ClassVar[EventKind] = "start"
    model: str | None = None
    max_tokens: int | None = None
    stream: bool | None = None
    prompt: str | None = None
    limits: Mapping[str, Any] = field(default_factory=dict)
    context_window: int | None = None
    tools: Sequence[str] = ()
    compaction: Sequence[str] = ()
    thinking: int | None = None        # extended thinking budget_tokens; None: off
    cache: bool | None = None          # cache_control breakpoints sent


@dataclass(frozen=True)
class Request(Payload):
    """A model call is about to be sent."""

    kind: ClassVar[EventKind] = "request"
    model: str | None = None
    max_tokens: int | None = None
    stream: bool | None = None
    messages: int = 0
    context_tokens: int = 0
    context_window: int | None = None
    purpose: Purpose = "turn"
    thinking_budget: int | None = None  # the request's thinking budget_tokens (below its max_tokens)
    cache_breakpoints: int = 0          # cache_control markers in the request


@dataclass(frozen=True)
class Waiting(Payload):
    """A call has had no data from the server for ``seconds`` (once per quiet stretch); it goes on waiting until
    data comes or its deadline (``deadline_s``, the request timeout) passes."""

    kind: ClassVar[EventKind] = "waiting"
    seconds: float = 0.0
    deadline_s: float = 0.0
    message: str = ""


@dataclass(frozen=True)
class Response(Payload):
    """A message came back."""

    kind: ClassVar[EventKind] = "response"
    purpose: Purpose = "turn"
    model: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None
    stop_details: Any = None
    blocks: str = ""
    content: Sequence[dict[str, Any]] = ()
    input_tokens: int = 0                 # uncached input
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float | None = None         # this call's cost; None when its model has no price
    run_cost_usd: float | None = None     # the run's cost so far; None once a call had no price
    usage: Mapping[str, Any] = field(default_factory=dict)
    context_window: int | None = None

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt: uncached input plus cache reads and writes."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass(frozen=True)
class ApiError(Payload):
    """The call failed with an HTTP status, or without one (connection error, timeout)."""

    kind: ClassVar[EventKind] = "api_error"
    status: int | None = None
    error_type: str | None = None
    message: str = ""
    retry_after: float | None = None
    attempt: int | None = None
    purpose: Purpose = "turn"


@dataclass(frozen=True)
class RetryEvent(Payload):
    """The loop waits and sends the same request again."""

    kind: ClassVar[EventKind] = "retry"
    attempt: int = 0
    delay_s: Any = 0.0            # seconds; a replayed client's unknown wait is "?"
    model: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class Fallback(Payload):
    """The loop switches model."""

    kind: ClassVar[EventKind] = "fallback"
    from_model: str | None = None
    to_model: str | None = None
    cause: Literal["overloaded", "refusal"] = "overloaded"


@dataclass(frozen=True)
class TransitionEvent(Payload):
    """``decide()`` (or a gate) chose a branch of the decision table; the state counters as they were."""

    kind: ClassVar[EventKind] = "transition"
    branch: str = ""                      # a Branch for agentlab's runs; a replay adds the client's own (resend, ...)
    row: str = ""
    reason: str = ""
    type: str = ""
    subtype: str | None = None            # a Subtype for agentlab's runs; a replayed client's own label
    num_turns: int = 0
    max_tokens: int | None = None
    model: str | None = None
    escalations: int | None = None        # resends with a higher max_tokens so far in the run
    continuations_in_a_row: int | None = None   # continuations after max_tokens since the last reply not cut
    consecutive_compactions: int | None = None
    api_attempts: int | None = None
    stop_hook_blocks: int | None = None   # Stop-hook blocks fed back so far in the run
    pauses_in_a_row: int | None = None    # pause_turn continuations since the last other reply

    # the names these in-a-row counts had in traces written before (the Result's totals keep theirs)
    OLD_NAMES: ClassVar[Mapping[str, str]] = {"continuations": "continuations_in_a_row",
                                              "pause_continuations": "pauses_in_a_row"}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Payload:
        renamed = {cls.OLD_NAMES.get(k, k): v for k, v in data.items()
                   if k not in cls.OLD_NAMES or cls.OLD_NAMES[k] not in data}   # a new name wins over its old one
        return super().from_data(renamed)


@dataclass(frozen=True)
class Append(Payload):
    """A message (or blocks merged into the last one) joined the history."""

    kind: ClassVar[EventKind] = "append"
    role: Literal["user", "assistant", "marker"] = "user"
    merged: bool = False
    content: Sequence[dict[str, Any]] = ()
    blocks: str = ""


@dataclass(frozen=True)
class ToolRun(Payload):
    """A tool ran (or was denied by a PreToolUse hook)."""

    kind: ClassVar[EventKind] = "tool"
    id: str | None = None
    name: str | None = None
    input: Any = None
    output: Any = None
    is_error: bool = False
    denied_by: str | None = None


@dataclass(frozen=True)
class HookEvent(Payload):
    """A hook ran."""

    kind: ClassVar[EventKind] = "hook"
    event: str = ""
    source: str = ""
    name: str = ""
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    error: str | None = None
    decision: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class CompactionEvent(Payload):
    """The history was compacted by one strategy."""

    kind: ClassVar[EventKind] = "compaction"
    trigger: str = ""
    strategy: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int | None = None
    messages_after: int | None = None
    removed: Any = None
    context_before: int | None = None
    context_after: int | None = None
    target: int | None = None
    context_window: int | None = None


@dataclass(frozen=True)
class ResultEvent(Payload):
    """The run ended: the result, shaped like the Claude Agent SDK's result message (``Result.to_dict()``)."""

    kind: ClassVar[EventKind] = "result"
    type: str = "result"
    subtype: str = ""                     # a Subtype for agentlab's runs; a replayed client's own label
    is_error: bool = False
    num_turns: int = 0
    stop_reason: str | None = None
    stop_sequence: str | None = None
    result: str = ""
    usage: Mapping[str, Any] = field(default_factory=dict)
    model: str | None = None
    requests: int = 0
    escalations: int = 0
    continuations: int = 0
    compactions: int = 0
    retries: int = 0
    fallbacks: int = 0
    pause_continuations: int = 0
    nudges: int = 0
    stop_hook_blocks: int = 0
    cost_usd: float | None = None         # None when a model of the run has no price (see unpriced_models)
    unpriced_models: Sequence[str] = ()


class _Factory:
    """The default of a field made by its factory, in a payload's ``__init__`` (shown as dataclasses show it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _fast_init(cls: type[Payload]) -> None:
    """Give ``cls`` an ``__init__`` with the dataclass's own signature (defaults and factories included) that fills
    the instance's ``__dict__`` at once, instead of one ``object.__setattr__`` per field as a frozen dataclass does:
    the loop makes several payloads per model call. The instances are the same (frozen, equal, hashable alike)."""
    fields = dataclasses.fields(cls)
    names: dict[str, Any] = {}
    params: list[str] = []
    kw_only: list[str] = []
    body: list[str] = []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            names[f"_d_{f.name}"] = f.default
            param = f"{f.name}=_d_{f.name}"
            body.append(f"d[{f.name!r}] = {f.name}")
        else:  # every payload field has a default or a factory
            names[f"_f_{f.name}"] = f.default_factory
            param = f"{f.name}=_FACTORY"
            body.append(f"d[{f.name!r}] = _f_{f.name}() if {f.name} is _FACTORY else {f.name}")
        (kw_only if f.kw_only else params).append(param)
    names["_FACTORY"] = _FACTORY
    signature = ", ".join(["self", *params, *(["*", *kw_only] if kw_only else [])])
    source = f"def __init__({signature}):\n    d = self.__dict__\n    " + "\n    ".join(body)
    exec(source, names)  # noqa: S102 - source made above from the class's own field names
    names["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    names["__init__"].__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = names["__init__"]  # type: ignore[method-assign]


PAYLOADS: dict[EventKind, type[Payload]] = {cls.kind: cls for cls in (
    Start, Request, Waiting, Response, ApiError, RetryEvent, Fallback, TransitionEvent, Append, ToolRun, HookEvent,
    CompactionEvent, ResultEvent)}
assert tuple(PAYLOADS) == EVENT_KINDS, "one payload class per event kind, in EVENT_KINDS order"
for _payload_class in PAYLOADS.values():
    _fast_init(_payload_class)


def payload_from_data(kind: str, data: Mapping[str, Any]) -> Payload:
    """Read a payload back from its JSONL form; an unknown kind is a ValueError naming it."""
    for name, cls in PAYLOADS.items():
        if name == kind:
            return cls.from_data(data)
    raise ValueError(f"unknown event kind {kind!r}; expected one of {', '.join(EVENT_KINDS)}")
