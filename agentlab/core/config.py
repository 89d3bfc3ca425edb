"""A run's settings as one frozen value that checks itself: ``RunConfig``. The loop is built from a client and
this value (``AgentLoop(client, config)``); what lives while the run lives (the trace, the hooks, the clock,
the sleeps) is given to the loop beside it.

Each bound is set one way: the bounds of the decision table live in ``limits`` (a ``Limits``), the request's
own settings here. ``RunConfig.of(prompt=..., max_turns=5, context_window=...)`` takes both kinds of names flat
and puts each where it belongs; ``config.with_overrides(...)`` does the same on a copy.

A bad value is refused when the value is made, in one line naming the field: a loop is never built from a
configuration that could only fail later on the wire. Two tools of one name (a registry tool and a server tool,
or two server tools) are refused here too: the API answers such a request with 400 "tools: Tool names must be
unique."
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .compaction import DEFAULT_CHAIN, STRATEGIES
from .cost import PriceTable
from .errors import ConfigError
from .tools import ToolRegistry
from .transitions import DEFAULT_MODEL, MAX_TOKENS_BOUND, Limits

__all__ = ["EDIT_TYPES", "RunConfig", "ServerCompaction"]

Message = dict[str, Any]

_LIMIT_NAMES = frozenset(f.name for f in dataclasses.fields(Limits))
_ALIASES = {"max_retries": "max_api_retries"}  # the CLI's --max-retries


def _fail(name: str, expected: str, got: Any) -> ConfigError:
    return ConfigError(f"RunConfig({name}=...): expected {expected}, got {got!r}"[:300])


@dataclass(frozen=True)
class RunConfig:
    """Everything one run is made of but its live objects: exactly one of ``prompt`` (the user's request) or
    ``messages`` (a history to go on from), the request's settings, and the bounds (``limits``)."""

    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    model: str = DEFAULT_MODEL
    system: str | None = None
    tools: ToolRegistry | None = None                  # the tools the loop runs
    server_tools: tuple[dict[str, Any], ...] = ()      # tools the API runs (web_search, ...), offered as they are
    max_tokens: int = 1024
    limits: Limits = field(default_factory=Limits)
    stream: bool = False                               # stream every request (large max_tokens stream anyway)
    stop_sequences: tuple[str, ...] | None = None
    compaction: tuple[str, ...] = DEFAULT_CHAIN        # "auto", a strategy name or names: the chain, in order
    count_tokens: bool = False                         # ask count_tokens before each call (live use)
    thinking: int | None = None                        # extended thinking budget_tokens; None: thinking off
    cache: bool = True                                 # cache_control breakpoints on tools, system, latest message
    prices: PriceTable | None = None                   # the price table for cost_usd (None: data/prices.yaml)
    # the API's own recoveries, asked for in the request (beta): see ServerSide below
    fallbacks: tuple[str, ...] | str | None = None     # server-side fallbacks: models in order, or "default"
    server_compaction: ServerCompaction | None = None  # compaction and context editing done by the API

    def __post_init__(self) -> None:
        """Normalise the sequences to tuples (the value stays frozen) and refuse what has no meaning."""
        set_ = object.__setattr__  # the dataclass way of settling a field of a frozen instance
        if self.messages is not None:
            set_(self, "messages", _messages(self.messages))
        set_(self, "server_tools", _server_tools(self.server_tools))
        if self.stop_sequences is not None:
            set_(self, "stop_sequences", _strings("stop_sequences", self.stop_sequences))
        set_(self, "compaction", _chain(self.compaction))
        set_(self, "fallbacks", _fallbacks(self.fallbacks))
        if self.server_compaction is not None and not isinstance(self.server_compaction, ServerCompaction):
            raise _fail("server_compaction", "a ServerCompaction (agentlab.core.config) or None",
                        self.server_compaction)
        if (self.prompt is None) == (self.messages is None):
            raise ConfigError("RunConfig: a run needs exactly one of prompt= or messages=")
        _check_request(self)
        _check_tool_names(self.tools, self.server_tools)

    @classmethod
    def of(cls, **settings: Any) -> RunConfig:
        """A RunConfig from flat names: its own fields and the ``Limits`` bounds (``max_turns=5``) alike."""
        own, bounds = _split(settings)
        limits = own.pop("limits", None) or Limits()
        return cls(**own, limits=dataclasses.replace(limits, **bounds) if bounds else limits)

    def with_overrides(self, **overrides: Any) -> RunConfig:
        """A copy with fields and ``Limits`` bounds replaced, named flat as in :meth:`of`. A new ``prompt``
        replaces ``messages`` and the other way round."""
        own, bounds = _split(overrides)
        if "prompt" in own and "messages" not in own:
            own["messages"] = None
        elif "messages" in own and "prompt" not in own:
            own["prompt"] = None
        limits = own.pop("limits", self.limits)
        return dataclasses.replace(self, **own, limits=dataclasses.replace(limits, **bounds) if bounds else limits)

    def tool_schemas(self) -> list[dict[str, Any]] | None:
        """The request's ``tools``: the registry's schemas, then the server tools; None when there are none."""
        schemas = [*(self.tools.schemas() if self.tools is not None else []), *self.server_tools]
        return schemas or None


@dataclass(frozen=True)
class ServerCompaction:
    """Compaction and context editing done by the API (beta), one more compaction strategy beside the loop's own.

    ``edits`` are the ``context_management`` edits sent with every request, in order: ``"compact"`` (the
    compact_20260112 edit: at ``trigger_tokens`` input tokens the server summarises the older context into a
    ``compaction`` block; with ``pause_after_compaction`` the reply is that block alone, ``stop_reason:
    "compaction"``, and the loop sends it back unchanged and goes on), ``"clear_tool_uses"`` (the
    clear_tool_uses_20250919 edit) and ``"clear_thinking"`` (clear_thinking_20251015). ``on_demand`` instead
    makes each of the loop's own compactions one request with ``compaction={"type": "summarize"}`` (it cannot be
    combined with ``context_management``). Docs: "Compaction", "Context editing".
    """

    edits: tuple[str, ...] = ("compact",)
    trigger_tokens: int | None = None         # compact_20260112's trigger (None: the API's default, 150,000)
    pause_after_compaction: bool = True
    on_demand: bool = False

    def __post_init__(self) -> None:
        unknown = [e for e in self.edits if e not in EDIT_TYPES]
        if isinstance(self.edits, str) or unknown:
            raise ConfigError(f"ServerCompaction(edits=...): expected names from {', '.join(EDIT_TYPES)}, "
                              f"got {self.edits!r}"[:300])
        if self.trigger_tokens is not None and not _whole(self.trigger_tokens):
            raise ConfigError(f"ServerCompaction(trigger_tokens=...): expected a whole number of tokens or None, "
                              f"got {self.trigger_tokens!r}")
        if self.on_demand and self.edits:
            raise ConfigError("ServerCompaction: on_demand compaction cannot be combined with context_management "
                              "edits (the API refuses both in one request); give edits=() with on_demand=True")

    def context_management(self) -> dict[str, Any] | None:
        """The request's ``context_management``, or None when no edit is asked for."""
        edits = []
        for name in self.edits:
            edit: dict[str, Any] = {"type": EDIT_TYPES[name]}
            if name == "compact":
                edit["pause_after_compaction"] = self.pause_after_compaction
                if self.trigger_tokens is not None:
                    edit["trigger"] = {"type": "input_tokens", "value": self.trigger_tokens}
            edits.append(edit)
        return {"edits": edits} if edits else None


EDIT_TYPES = {"compact": "compact_20260112", "clear_tool_uses": "clear_tool_uses_20250919",
              "clear_thinking": "clear_thinking_20251015"}


def _fallbacks(fallbacks: Any) -> tuple[str, ...] | str | None:
    if fallbacks is None:
        return None
    if fallbacks == "default":
        return "default"
    names = (fallbacks,) if isinstance(fallbacks, str) else fallbacks
    if not isinstance(names, Sequence) or not names or not all(isinstance(m, str) and m.strip() for m in names):
        raise _fail("fallbacks", '"default" or a list of model names', fallbacks)
    return tuple(names)


def _split(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Flat names sorted into RunConfig fields and Limits bounds; an unknown name is refused, naming the known."""
    own_names = {f.name for f in dataclasses.fields(RunConfig)}
    own: dict[str, Any] = {}
    bounds: dict[str, Any] = {}
    for name, value in settings.items():
        name = _ALIASES.get(name, name)
        if name in own_names:
            own[name] = value
        elif name in _LIMIT_NAMES:
            bounds[name] = value
        else:
            raise ConfigError(f"unknown run setting {name!r}; expected one of "
                              + ", ".join(sorted(own_names | _LIMIT_NAMES | set(_ALIASES))))
    return own, bounds


def _messages(messages: Any) -> tuple[Message, ...]:
    if not (isinstance(messages, Sequence) and not isinstance(messages, str) and messages
            and all(isinstance(m, dict) and m.get("role") in ("user", "assistant") and "content" in m
                    for m in messages)):
        raise ConfigError("RunConfig(messages=...): expected a non-empty list of {'role': 'user'|'assistant', "
                          "'content': ...} dicts")
    return tuple(dict(m) for m in messages)


def _server_tools(tools: Any) -> tuple[dict[str, Any], ...]:
    if tools is None:
        return ()
    if isinstance(tools, dict | str) or not isinstance(tools, Sequence) or not all(
            isinstance(t, dict) and isinstance(t.get("type"), str) and isinstance(t.get("name"), str) for t in tools):
        raise _fail("server_tools", "a list of tool definitions with a type and a name", tools)
    return tuple(dict(t) for t in tools)


def _strings(name: str, values: Any) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence) or not all(isinstance(v, str) for v in values):
        raise _fail(name, "a list of strings", values)
    return tuple(values)


def _chain(compaction: Any) -> tuple[str, ...]:
    """The compaction strategies in the order they are tried: "auto" (or None) is the default chain."""
    if compaction is None or compaction == "auto":
        return tuple(DEFAULT_CHAIN)
    names = (compaction,) if isinstance(compaction, str) else tuple(compaction)
    for name in names:
        if name not in STRATEGIES:
            raise ConfigError(f"unknown compaction strategy {name!r}; choose from auto, " + ", ".join(STRATEGIES))
    if not names:
        raise _fail("compaction", "auto or at least one strategy", compaction)
    return names


def _whole(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def _check_request(c: RunConfig) -> None:
    """The request's own settings: each refused in one line naming it."""
    if c.prompt is not None and not isinstance(c.prompt, str):
        raise ConfigError(f"RunConfig(prompt=...): expected a string, got {type(c.prompt).__name__}")
    if not isinstance(c.model, str) or not c.model.strip():
        raise _fail("model", "a model name (a non-empty string)", c.model)
    if c.system is not None and not isinstance(c.system, str):
        raise ConfigError(f"RunConfig(system=...): expected a string or None, got {type(c.system).__name__}")
    for name in ("stream", "count_tokens", "cache"):
        if not isinstance(getattr(c, name), bool):
            raise _fail(name, "True or False", getattr(c, name))
    if not _whole(c.max_tokens):
        raise _fail("max_tokens", "a whole number of at least 1", c.max_tokens)
    if c.max_tokens > MAX_TOKENS_BOUND:
        shown = str(c.max_tokens)
        raise ConfigError(f"RunConfig(max_tokens=...): expected at most {MAX_TOKENS_BOUND:,} tokens, got "
                          f"{shown[:30]}{'…' if len(shown) > 30 else ''}")
    if not isinstance(c.limits, Limits):
        raise ConfigError(f"RunConfig(limits=...): expected a Limits, got {type(c.limits).__name__}")
    if c.tools is not None and not isinstance(c.tools, ToolRegistry):
        raise _fail("tools", "a ToolRegistry (agentlab.core.tools) or None", c.tools)
    if c.prices is not None and not isinstance(c.prices, PriceTable):
        raise _fail("prices", "a PriceTable (agentlab.core.cost.load_prices) or None", c.prices)
    _check_thinking(c.thinking, c.max_tokens)


def _check_thinking(thinking: Any, max_tokens: int) -> None:
    if thinking is None:
        return
    if not _whole(thinking) or not 1024 <= thinking <= MAX_TOKENS_BOUND:
        raise ConfigError(f"RunConfig(thinking=...): a budget of at least 1024 tokens (the API's minimum) and at "
                          f"most {MAX_TOKENS_BOUND:,}, got {str(thinking)[:30]}")
    if thinking >= max_tokens:
        raise ConfigError(f"RunConfig(thinking=...): the budget ({thinking}) must be below max_tokens ({max_tokens})")


def _check_tool_names(tools: ToolRegistry | None, server_tools: tuple[dict[str, Any], ...]) -> None:
    """Every tool of a request has a name of its own: the API refuses the request otherwise (400 "tools: Tool
    names must be unique."), so the run is refused before it starts."""
    seen = {name: "the tool registry" for name in (tools.names() if tools is not None else [])}
    for tool in server_tools:
        name = tool["name"]
        if name in seen:
            raise ConfigError(f"RunConfig: two tools are named {name!r} ({seen[name]} and the server tool "
                              f"{tool['type']}); the API refuses a request whose tool names are not unique")
        seen[name] = f"the server tool {tool['type']}"
