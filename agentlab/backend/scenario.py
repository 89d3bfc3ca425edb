"""Scenario files: what the scripted "model" answers, call by call.

A scenario is a YAML or JSON file in ``data/scenarios/`` (or any path). Its ``steps`` are consumed one per
model request; a step is a response (content blocks, stop_reason, usage) or an HTTP error, may pick between
``cases`` by looking at the request (``when``), and may ``expect`` things of the request, failing loudly
when the client sent something else. Loading validates everything and names the file, the step and the
field of the first problem.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..core.errors import ScenarioError
from ..core.paths import FileTooLarge, NotAFile, read_small_file, scenarios_dir
from ..core.transitions import DEFAULT_MODEL, MAX_TOKENS_BOUND, STOP_REASONS
from .offered import thinking_enabled

SCENARIO_DIR = scenarios_dir()

# the categories of a refusal's stop_details (the SDK's BetaRefusalStopDetails.category; "Refusals and fallback")
REFUSAL_CATEGORIES = ("cyber", "bio", "frontier_llm", "reasoning_extraction", "general_harms")
# the refusal's fields the server fills in itself (data/models.yaml and the request's beta headers decide them)
SERVER_STOP_DETAILS = ("fallback_credit_token", "fallback_has_prefill_claim", "recommended_model")
KNOWN_STOP_REASONS = STOP_REASONS   # the core's Literal; unknown_stop_reason: true lets a scenario send another


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextBlock(_Strict):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Strict):
    type: Literal["tool_use"]
    id: str | None = None
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    # When streaming, send this raw JSON text as the tool input instead of ``input`` (e.g. cut off mid-way).
    partial_json: str | None = None
    # Any tool will do for this step's branch: a request that does not offer ``name`` gets a call to a tool it
    # offers instead (see backend/offered.py); without it, the call is left out and the branch not reached.
    interchangeable: bool = False
    # The scripted model calls ``name`` although the request does not offer it (a model can name a tool it was
    # not given): sent as written under ``auto`` tool choice, so that a run shows the loop's answer to a tool
    # that does not exist (an error tool_result). Without it such a call is left out, as above.
    unoffered: bool = False


class ServerToolUseBlock(_Strict):
    type: Literal["server_tool_use"]
    id: str | None = None
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class WebSearchResultBlock(_Strict):
    type: Literal["web_search_tool_result"]
    tool_use_id: str
    content: list[dict[str, Any]] | dict[str, Any] = Field(default_factory=list)


class StandIn(_Strict):
    """The call that stands in for a scripted tool call when the request does not offer that tool: ``name`` is
    a tool the client offers, ``input`` its input, where ``{field}`` is the scripted call's input field."""

    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ThinkingBlock(_Strict):
    type: Literal["thinking"]
    thinking: str
    # Left out, the scripted backend signs the text itself (and rejects a thinking block sent back changed).
    signature: str | None = None


class RedactedThinkingBlock(_Strict):
    type: Literal["redacted_thinking"]
    data: str = Field(min_length=1)  # opaque: sent back exactly as received


Block = Annotated[
    TextBlock | ToolUseBlock | ServerToolUseBlock | WebSearchResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class Predicate(_Strict):
    """Conditions on a request; every field given must hold."""

    max_tokens_at_least: int | None = None
    max_tokens_below: int | None = None
    model: str | None = None
    stream: bool | None = None
    last_role: Literal["user", "assistant"] | None = None
    last_user_text_contains: str | None = None
    any_text_contains: str | None = None
    no_text_contains: str | None = None
    has_tool_result: bool | None = None
    tool_result_error: bool | None = None
    tokens_over: int | None = None
    tokens_at_most: int | None = None
    messages_at_most: int | None = None
    messages_at_least: int | None = None
    smaller_than_previous: bool | None = None  # fewer estimated tokens than the previous message request
    thinking: bool | None = None  # the request enables extended thinking
    cache_control: bool | None = None  # the request carries cache_control breakpoints
    tools_include: str | None = None  # a tool (client or server tool) of this name is offered in ``tools``
    # max_tokens above the output ceiling of the model the request asks for (data/models.yaml)
    max_tokens_over_ceiling: bool | None = None
    # the request sends a field beyond the required model, messages and max_tokens (``{sent_field}`` names one)
    optional_field: bool | None = None

    def failures(self, request: dict[str, Any], stream: bool, previous_tokens: int | None = None) -> list[str]:
        """What does not hold, in words; empty when the request matches."""

        out: list[str] = []
        messages = request.get("messages") or []
        max_tokens = request.get("max_tokens")
        last = messages[-1] if messages else {}
        last_user: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        if self.max_tokens_at_least is not None and not (max_tokens or 0) >= self.max_tokens_at_least:
            out.append(f"max_tokens >= {self.max_tokens_at_least}, got {max_tokens}")
        if self.max_tokens_below is not None and not (max_tokens or 0) < self.max_tokens_below:
            out.append(f"max_tokens < {self.max_tokens_below}, got {max_tokens}")
        if self.model is not None and request.get("model") != self.model:
            out.append(f"model {self.model!r}, got {request.get('model')!r}")
        if self.stream is not None and stream != self.stream:
            out.append(f"stream={self.stream}, got stream={stream}")
        if self.last_role is not None and last.get("role") != self.last_role:
            out.append(f"last message role {self.last_role!r}, got {last.get('role')!r}")
        if self.last_user_text_contains is not None:
            text = message_text(last_user)
            if self.last_user_text_contains.lower() not in text.lower():
                out.append(f"last user message containing {self.last_user_text_contains!r}, got {text[:80]!r}")
        everything = "\n".join(message_text(m) for m in messages) + "\n" + _system_text(request)
        if self.any_text_contains is not None and self.any_text_contains.lower() not in everything.lower():
            out.append(f"some text containing {self.any_text_contains!r}")
        if self.no_text_contains is not None and self.no_text_contains.lower() in everything.lower():
            out.append(f"no text containing {self.no_text_contains!r}")
        content = last_user.get("content")
        blocks: list[Any] = content if isinstance(content, list) else []
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        if self.has_tool_result is not None and bool(results) != self.has_tool_result:
            out.append(f"last user message {'with' if self.has_tool_result else 'without'} tool_result blocks")
        if self.tool_result_error is not None and any(bool(b.get("is_error")) for b in results) != \
                self.tool_result_error:
            out.append(f"a tool_result with is_error={self.tool_result_error}")
        if self.tokens_over is not None or self.tokens_at_most is not None:
            tokens = request_tokens(request)
            if self.tokens_over is not None and not tokens > self.tokens_over:
                out.append(f"a request over {self.tokens_over} tokens, got {tokens}")
            if self.tokens_at_most is not None and not tokens <= self.tokens_at_most:
                out.append(f"a request of at most {self.tokens_at_most} tokens, got {tokens}")
        if self.smaller_than_previous and previous_tokens is not None:
            tokens = request_tokens(request)
            if not tokens < previous_tokens:
                out.append(f"a request smaller than the previous one ({previous_tokens} tokens), got {tokens}")
        if self.thinking is not None:
            if thinking_enabled(request) != self.thinking:  # type "enabled" or "adaptive": both are served thinking
                out.append(f"a request {'with' if self.thinking else 'without'} thinking enabled")
        if self.cache_control is not None and ("cache_control" in json.dumps(request)) != self.cache_control:
            out.append(f"a request {'with' if self.cache_control else 'without'} cache_control breakpoints")
        if self.tools_include is not None:
            names = [t.get("name") for t in request.get("tools") or [] if isinstance(t, dict)]
            if self.tools_include not in names:
                out.append(f"a tool named {self.tools_include!r} in tools, got {names or 'none'}")
        if self.max_tokens_over_ceiling is not None:
            from .models import model_limits

            ceiling = model_limits(request.get("model")).max_output
            if ((max_tokens or 0) > ceiling) != self.max_tokens_over_ceiling:
                relation = "above" if self.max_tokens_over_ceiling else "at most"
                out.append(f"max_tokens {relation} {request.get('model')}'s ceiling {ceiling}, got {max_tokens}")
        if self.optional_field is not None and (sent_field(request) is not None) != self.optional_field:
            out.append(f"a request {'with' if self.optional_field else 'without'} a field beyond model, messages "
                       "and max_tokens")
        if self.messages_at_most is not None and len(messages) > self.messages_at_most:
            out.append(f"at most {self.messages_at_most} messages, got {len(messages)}")
        if self.messages_at_least is not None and len(messages) < self.messages_at_least:
            out.append(f"at least {self.messages_at_least} messages, got {len(messages)}")
        return out


class Usage(_Strict):
    """Usage a step reports instead of the estimate from the request. ``staged: true`` says the numbers are
    set on purpose to something the request does not account for (e.g. a nearly full context window)."""

    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    cache_read_input_tokens: int | None = Field(default=None, ge=0)
    cache_creation_input_tokens: int | None = Field(default=None, ge=0)
    # input_tokens as this share of the context window of the model the request asks for (data/models.yaml):
    # "the window is nearly full" holds for a 200k and for a 1M window alike
    window_share: float | None = Field(default=None, gt=0, le=1)
    # input_tokens that fill the requested model's window with this reply's output_tokens (input + output = the
    # window), as a model_context_window_exceeded stop has them
    fills_window: bool = False
    staged: bool = False

    @model_validator(mode="after")
    def _one_window(self) -> Usage:
        given = [name for name in ("input_tokens", "window_share") if getattr(self, name) is not None]
        if self.fills_window and given:
            raise ValueError(f"'fills_window' sets input_tokens; leave out {' and '.join(given)}")
        return self


class ErrorSpec(_Strict):
    """An HTTP error reply. ``headers`` are sent with it (``retry_after`` adds ``retry-after``);
    ``api_headers`` says which of the headers that steer retries (``x-should-retry``, ``retry-after``) the
    real API sends in this case, so a record can show whether the client saw what it would see live.
    ``{max_tokens}`` and ``{model}`` in ``message`` are replaced by the request's values, ``{ceiling}`` and
    ``{window}`` by the requested model's output ceiling and context window (data/models.yaml),
    ``{over_window}`` by a prompt size a quarter above that window, ``{sent_field}`` by a field the request
    sends beyond the required ones (:func:`sent_field`)."""

    status: int = Field(ge=400, le=599)
    type: str = "api_error"
    message: str = "scripted error"
    retry_after: float | None = Field(default=None, ge=0)
    headers: dict[str, str] = Field(default_factory=dict)
    api_headers: dict[str, str] | None = None

    def sent_headers(self) -> dict[str, str]:
        headers = {k.lower(): v for k, v in self.headers.items()}
        if self.retry_after is not None:
            headers["retry-after"] = f"{self.retry_after:g}"
        return headers


class Reply(_Strict):
    """One answer: a message, or an HTTP error."""

    when: Predicate | None = None
    content: list[Block] | None = None
    stop_reason: str | None = "end_turn"
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    usage: Usage | None = None
    model: str | None = None
    unknown_stop_reason: bool = False  # set to send a stop_reason the API does not (yet) document
    error: ErrorSpec | None = None
    # Why this reply's usage is staged on purpose (a number the request and the reply do not give); without
    # it, usage must agree with the request and the reply (see data/scenarios/README.md).
    staged: str | None = None
    # A case that answers a request the scenario's branch cannot reach (a request with nothing such a server
    # could refuse): why, in words; the record marks the request not reached with it, so no grade passes it.
    not_reached: str | None = None
    # A refusal's fallbacks: what each fallback model answers to the same request, when a server-side
    # ``fallbacks`` chain reaches it or the client retries the refusal on it (a credited retry or not). A reply
    # here may refuse too (the chain goes on; the last refusal is final) or be an ``error`` (the fallback
    # attempt could not run: the refusal names it in ``stop_details.recommended_model``). See
    # data/scenarios/README.md, "Refusal fallbacks".
    fallback_replies: dict[str, Reply] | None = None

    @model_validator(mode="after")
    def _check_refusal(self) -> Reply:
        """A refusal's ``stop_details`` in the API's shape (BetaRefusalStopDetails: ``type: refusal``, a
        ``category`` of the documented five or null); ``fallback_replies`` only on a refusal, naming models."""
        details = self.stop_details
        if details is not None and self.stop_reason == "refusal":
            if details.get("type", "refusal") != "refusal":
                raise ValueError(f"stop_details.type of a refusal is 'refusal', got {details.get('type')!r}")
            category = details.get("category")
            if category is not None and category not in REFUSAL_CATEGORIES:
                raise ValueError(f"stop_details.category {category!r} is not one of "
                                 f"{', '.join(REFUSAL_CATEGORIES)} (or null)")
            minted = [k for k in SERVER_STOP_DETAILS if k in details]
            if minted:
                raise ValueError(f"stop_details.{minted[0]} is the server's to fill in (from data/models.yaml and "
                                 "the request): leave it out")
        if self.fallback_replies is not None:
            if self.stop_reason != "refusal":
                raise ValueError("'fallback_replies' belongs to a refusal (stop_reason: refusal)")
            if not self.fallback_replies or any(not str(k).strip() for k in self.fallback_replies):
                raise ValueError("'fallback_replies' maps model names to replies; it cannot be empty")
            nested = [k for k, r in self.fallback_replies.items() if r.fallback_replies or r.when is not None]
            if nested:
                raise ValueError(f"fallback_replies.{nested[0]}: a fallback's reply has no 'when' and no "
                                 "'fallback_replies' of its own (the chain is one list, in the request's order)")
        return self

    @model_validator(mode="after")
    def _check(self) -> Reply:
        if self.error is not None and self.content is not None:
            raise ValueError("a reply has either 'error' or 'content', not both")
        if self.staged is not None:
            if not self.staged.strip():
                raise ValueError("'staged' says why a number is staged; it cannot be empty")
            if self.usage is None and self.error is None:
                raise ValueError("'staged' needs the 'usage' or the 'error' whose numbers it stages")
        if self.not_reached is not None and not self.not_reached.strip():
            raise ValueError("'not_reached' says why the branch is not reached; it cannot be empty")
        elif (self.usage is not None and not self.usage.staged and self.stop_reason == "max_tokens"
              and self.usage.output_tokens is not None):
            raise ValueError("a max_tokens reply reports the request's max_tokens as output_tokens; leave "
                             "usage.output_tokens out (or say why it is staged with 'staged')")
        if self.error is None and self.content is None:
            self.content = []
        if self.error is None and self.stop_reason == "model_context_window_exceeded" and not (
                self.usage is not None and (self.usage.fills_window or self.usage.window_share is not None)):
            raise ValueError("a model_context_window_exceeded reply fills the requested model's window: give it "
                             "usage: {fills_window: true} (or a window_share)")
        if (self.error is None and self.stop_reason is not None
                and self.stop_reason not in KNOWN_STOP_REASONS and not self.unknown_stop_reason):
            raise ValueError(
                f"stop_reason {self.stop_reason!r} is not one of {', '.join(KNOWN_STOP_REASONS)} "
                "(set unknown_stop_reason: true to send it on purpose)")
        return self


class Step(Reply):
    """A reply, or ``cases`` (the first whose ``when`` matches answers), plus what the request must satisfy."""

    cases: list[Reply] | None = None
    expect: Predicate | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _check_cases(self) -> Step:
        if self.cases is not None:
            if self.error is not None or self.content:
                raise ValueError("a step with 'cases' has no 'content' or 'error' of its own")
            if not self.cases:
                raise ValueError("'cases' is empty")
            if any(c.when is None for c in self.cases[:-1]):
                raise ValueError("only the last case may leave out 'when'")
        return self


class StopHookSpec(_Strict):
    """A built-in Stop hook for the scenario: blocks ``times`` times (or always) with ``reason``."""

    times: int | Literal["always"] = 1
    reason: str = "Not done yet: run the tests before finishing."


class Expected(_Strict):
    """What agentlab's own loop ends with on this scenario (checked by the test suite)."""

    subtype: str
    num_turns: int | None = None
    requests: int | None = None
    stop_reason: str | None = None


# The demo tools' stand-ins, for a scenario with ``tools: demo`` that gives none of its own: a client that
# offers none of the demo tools but a shell (Claude Code's Bash) gets each scripted call as a Bash command that
# does the same, so the step's branch (a tool round trip) is reached with a tool the client has.
DEMO_STAND_INS: dict[str, dict[str, Any]] = {
    "read_file": {"name": "Bash", "input": {"command": "cat {path}", "description": "Read {path}"}},
    "get_weather": {"name": "Bash", "input": {"command": "echo 'Weather in {location}: 18 C, partly cloudy'",
                                              "description": "Weather in {location}"}},
    "calculator": {"name": "Bash", "input": {"command": "python3 -c 'print({expression})'",
                                             "description": "Calculate {expression}"}},
    "run_tests": {"name": "Bash", "input": {"command": "echo '12 passed, 0 failed'", "description": "Run the tests"}},
}


class Scenario(_Strict):
    name: str
    description: str
    row: str | None = None
    prompt: str = "Hello"
    system: str | None = None
    model: str = DEFAULT_MODEL
    max_tokens: int = Field(default=1024, ge=1, le=MAX_TOKENS_BOUND)
    # extended thinking budget_tokens for runs of this scenario
    thinking: int | None = Field(default=None, ge=1024, le=MAX_TOKENS_BOUND)
    cache_min_tokens: int = Field(default=1024, ge=0)  # the shortest prefix the scripted prompt cache keeps
    max_turns: int | None = Field(default=None, ge=1)
    stop_sequences: list[str] | None = None
    fallback_model: str | None = None
    refusal_fallback_model: str | None = None
    context_window: int | None = Field(default=None, ge=1)
    compact_threshold: float | None = Field(default=None, gt=0, le=1)
    compaction: str | None = None
    tools: Literal["demo", "none"] = "none"
    # server tools the scripted model uses (e.g. {type: web_search_20250305, name: web_search}): a client
    # must offer them in ``tools`` for the API to answer with their blocks, so clients enable them
    server_tools: list[dict[str, Any]] = Field(default_factory=list)
    # tool name -> the call that stands in for it when a request does not offer that tool (a client with tools
    # of its own, such as Claude Code's Bash): the step's branch is reached with a tool the client has
    stand_ins: dict[str, StandIn] = Field(default_factory=dict)
    tests_pass_after: int | None = None  # run_tests fails this many times, then passes
    stop_hook: StopHookSpec | None = None
    facts: dict[str, str] = Field(default_factory=dict)
    summary: str = ("Summary of the earlier conversation: the user asked for help with a task and the "
                    "assistant worked on it with tools.")
    expect: Expected | None = None
    steps: list[Step]
    source: str | None = None

    @model_validator(mode="after")
    def _check_steps(self) -> Scenario:
        if not self.steps:
            raise ValueError("a scenario needs at least one step")
        if self.tools == "demo" and "stand_ins" not in self.model_fields_set:
            self.stand_ins = {k: StandIn.model_validate(v) for k, v in DEMO_STAND_INS.items()}
        if self.thinking is not None and self.thinking >= self.max_tokens:
            raise ValueError(f"thinking budget {self.thinking} must be below max_tokens {self.max_tokens}")
        return self


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("TextBlock", "ToolUseBlock", "text", "tool_use", "server_tool_use",
                      "web_search_tool_result", "thinking", "redacted_thinking") and out.endswith("]"):
            continue  # discriminator names pydantic inserts into the path
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def parse_scenario(raw: Any, source: str) -> Scenario:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    raw = dict(raw)
    raw.setdefault("name", Path(source).stem)
    raw["source"] = source
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _format_loc(tuple(first["loc"]))
        message = first["msg"].removeprefix("Value error, ")
        got = first.get("input")
        shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {_clip(repr(got))})"
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise ScenarioError(f"{source}: {where}: {message}{shown}{more}") from None


# A scenario is small data: bounds that no real scenario comes near, and that stop a hostile file early.
MAX_SCENARIO_BYTES = 1_000_000
MAX_NESTING = 64            # mappings and lists inside each other
MAX_EXPANDED_NODES = 100_000  # YAML nodes once every alias is expanded (a "billion laughs" file has 10^9)


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a scenario by name (a file in data/scenarios) or by path; raise ScenarioError when malformed."""
    path = _find(name_or_path)
    shown = str(path)
    if path.is_dir():
        raise ScenarioError(f"{shown}: is a folder, not a scenario file")
    try:
        data = read_small_file(path, MAX_SCENARIO_BYTES)
    except FileTooLarge:
        raise ScenarioError(f"{shown}: more than {MAX_SCENARIO_BYTES} bytes; a scenario file is at most "
                            f"{MAX_SCENARIO_BYTES} bytes") from None
    except NotAFile:
        raise ScenarioError(f"{shown}: not a regular file (a device or a pipe); give a scenario file") from None
    except OSError as exc:
        raise ScenarioError(f"{shown}: cannot read the scenario file: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{shown}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x})") from None
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        raw = _parsed(kind, text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{shown}: not valid {kind}: {_one_line(exc)}") from None
    except RecursionError:
        raise ScenarioError(f"{shown}: nested too deeply (a scenario nests at most {MAX_NESTING} levels)") from None
    except DuplicateKey as exc:
        raise ScenarioError(f"{shown}: {exc}") from None
    _check_nesting(raw, shown)
    return parse_scenario(raw, shown)


def _find(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if _exists(path):
        return path
    name = str(name_or_path)
    found = [c for c in (SCENARIO_DIR / f"{name}{ext}" for ext in (".yaml", ".yml", ".json")) if _exists(c)]
    if not found:
        known = ", ".join(scenario_names()) or "(none)"
        raise ScenarioError(f"no scenario {_clip(name)!r}: not a file, and not one of: {known}")
    return found[0]


def _one_line(exc: Exception) -> str:
    """A parser error as one line: the problem and where (PyYAML's own text spans several lines)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class _BoundedLoader(yaml.SafeLoader):
    """safe_load with bounded nesting, and a bound on the document's size once aliases are expanded."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        self._depth += 1
        if self._depth > MAX_NESTING:
            raise yaml.YAMLError(f"nested more than {MAX_NESTING} levels deep "
                                 f"(line {self.peek_event().start_mark.line + 1})")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN201 - PyYAML's signature
        """A key given twice in one mapping is refused (PyYAML keeps the last one silently); a key that
        overrides one merged in with ``<<`` is YAML's own rule and is kept."""
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in first:
                        raise DuplicateKey(key, key_node.start_mark.line + 1, first[key])
                    first[key] = key_node.start_mark.line + 1
                except TypeError:  # an unhashable key: the constructor says what is wrong with it
                    continue
        return super().construct_mapping(node, deep=deep)


class DuplicateKey(ValueError):
    """A key given twice in one mapping of a scenario file."""

    def __init__(self, key: Any, line: int, first: int) -> None:
        super().__init__(f"duplicate key {str(key)[:80]!r} at line {line} (first given at line {first}); a key "
                         "may appear once in a mapping")


def _json_duplicate_key(text: str) -> DuplicateKey | None:
    """The first key given twice in one JSON object, with its lines; None when there is none. Walks the text
    only between strings and brackets (called once a duplicate is known to be there)."""
    from json.decoder import scanstring  # type: ignore[attr-defined]

    stack: list[dict[str, int] | None] = []  # per open bracket: an object's keys and their lines, or None
    tokens = re.compile(r'["{}\[\]]')
    found = tokens.search(text)
    while found is not None:
        at, char = found.start(), found.group()
        if char == '"':
            key, end = scanstring(text, at + 1)
            after = re.compile(r"\s*").match(text, end)
            is_key = after is not None and text[after.end():after.end() + 1] == ":"
            top = stack[-1] if stack else None
            if is_key and top is not None:
                line = text.count("\n", 0, at) + 1
                if key in top:
                    return DuplicateKey(key, line, top[key])
                top[key] = line
            found = tokens.search(text, end)
            continue
        if char == "{":
            stack.append({})
        elif char == "[":
            stack.append(None)
        elif stack:
            stack.pop()
        found = tokens.search(text, at + 1)
    return None


def _json_loads(text: str) -> Any:
    """``json.loads`` that refuses a key given twice in one object (it would keep the last one silently)."""
    duplicated = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal duplicated
        value = dict(items)
        duplicated = duplicated or len(value) != len(items)
        return value

    value = json.loads(text, object_pairs_hook=pairs)
    if duplicated:
        problem = _json_duplicate_key(text)
        if problem is not None:
            raise problem
    return value


# Parsing is most of what loading a scenario costs (PyYAML in Python: about 4 ms for a scenario here, against
# 0.1 ms for the rest), and the same few files are loaded again and again: by every run, every Stepper
# choice, every replayed record. So the parse of a text is kept, keyed by the text itself: a changed file
# is a new key, and the file is still read and checked each time. A caller gets its own copy; a text that
# fails to parse is not kept, so it fails the same way each time.
_CACHED_TEXT_CHARS = 200_000


@functools.lru_cache(maxsize=64)
def _parsed_text(kind: str, text: str) -> Any:
    return _json_loads(text) if kind == "JSON" else _bounded_yaml(text)


def _parsed(kind: str, text: str) -> Any:
    if len(text) > _CACHED_TEXT_CHARS:
        return _parsed_text.__wrapped__(kind, text)
    return copy.deepcopy(_parsed_text(kind, text))


def _bounded_yaml(text: str) -> Any:
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_expanded_size(root: yaml.Node) -> None:
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1  # a node that refers to itself counts once
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        total = min(total, MAX_EXPANDED_NODES + 1)
        sizes[id(node)] = total
        return total

    if size(root) > MAX_EXPANDED_NODES:
        raise yaml.YAMLError(f"more than {MAX_EXPANDED_NODES} values once its aliases are expanded; "
                             "a scenario is small data")


def _check_nesting(raw: Any, source: str) -> None:
    stack = [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ScenarioError(f"{source}: nested more than {MAX_NESTING} levels deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def scenario_names() -> list[str]:
    if not SCENARIO_DIR.is_dir():
        return []
    return sorted(p.stem for p in SCENARIO_DIR.iterdir() if p.suffix in (".yaml", ".yml", ".json"))


def list_scenarios() -> list[Scenario]:
    """Every scenario in data/scenarios; raises ScenarioError for the first broken one."""
    return [load_scenario(n) for n in scenario_names()]


def scan_scenarios() -> tuple[list[Scenario], list[ScenarioError]]:
    """Every scenario that loads, and an error (naming its file) for each one that does not."""
    loaded: list[Scenario] = []
    broken: list[ScenarioError] = []
    for name in scenario_names():
        try:
            loaded.append(load_scenario(name))
        except ScenarioError as exc:
            broken.append(exc)
    return loaded, broken


# --- reading requests ------------------------------------------------------------------------------------

def message_text(message: dict[str, Any]) -> str:
    """All the text a message carries (text blocks, tool inputs and results), for matching."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            if isinstance(inner, list):
                parts.extend(str(b.get("text", "")) for b in inner if isinstance(b, dict))
            elif inner is not None:
                parts.append(str(inner))
        elif block.get("type") in ("tool_use", "server_tool_use"):
            parts.append(json.dumps(block.get("input", {}), sort_keys=True))
    return "\n".join(parts)


# the optional fields of a Messages request, the newest first: the one a gateway or an older API version is
# likeliest not to know is the one its 400 names
OPTIONAL_FIELDS = ("context_management", "output_config", "container", "mcp_servers", "service_tier", "thinking",
                   "tool_choice", "metadata", "top_k", "top_p", "temperature", "stop_sequences", "tools", "system",
                   "stream")
REQUIRED_FIELDS = ("model", "messages", "max_tokens")


def sent_field(request: dict[str, Any]) -> str | None:
    """A field the request sends beyond model, messages and max_tokens, the newest first (``OPTIONAL_FIELDS``,
    then any other in the request's order); None when it sends none."""
    sent = [k for k in request if k not in REQUIRED_FIELDS and request[k] is not None]
    return next((k for k in OPTIONAL_FIELDS if k in sent), sent[0] if sent else None)


def _system_text(request: dict[str, Any]) -> str:
    system = request.get("system")
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return str(system or "")


def request_payload(request: dict[str, Any]) -> dict[str, Any]:
    """The part of a request that fills the context window (cache_control markers are not part of it)."""
    from ..core.caching import without_breakpoints

    return without_breakpoints(_marked_payload(request))


def request_tokens(request: dict[str, Any]) -> int:
    """``estimate_tokens(request_payload(request))``, from one encoding of the request (no copy of it)."""
    from ..core.caching import chars_without_breakpoints

    return math.ceil(chars_without_breakpoints(_marked_payload(request)) / 4)


def _marked_payload(request: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {k: request.get(k) for k in ("system", "tools", "messages")
                               if request.get(k) is not None}
    # a text the loop turned into one marked block to carry its breakpoint counts as the text it was
    if _one_marked_text(payload.get("system")):
        payload["system"] = payload["system"][0]["text"]
    if isinstance(payload.get("messages"), list) and any(
            isinstance(m, dict) and _one_marked_text(m.get("content")) for m in payload["messages"]):
        payload["messages"] = [{**m, "content": m["content"][0]["text"]}
                               if isinstance(m, dict) and _one_marked_text(m.get("content")) else m
                               for m in payload["messages"]]
    return payload


def _one_marked_text(content: Any) -> bool:
    return (isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict)
            and content[0].keys() == {"type", "text", "cache_control"} and content[0]["type"] == "text")


# A request that *asks* for a summary ("create a detailed summary of the conversation", "summarize the
# conversation"), not one that quotes a summary ("the conversation is summarized below").
_SUMMARY_ASK = re.compile(
    r"\b(create|write|produce|provide|generate|give)\b[^.\n]{0,60}\bsummary\b[^.\n]{0,80}\bconversation\b"
    r"|\bsummari[sz]e\b[^.\n]{0,40}\bconversation\b",
    re.IGNORECASE)


def is_summary_request(request: dict[str, Any]) -> bool:
    """A compaction request, recognised by what it asks (a summary of the conversation), not by position."""
    messages = request.get("messages") or []
    if not messages:
        return False
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last_user is None:
        return False
    content = last_user.get("content")
    if isinstance(content, str):
        text = content
    else:  # only what the client wrote itself: a tool result that mentions a summary is not a summary request
        text = "\n".join(str(b.get("text", "")) for b in content or []
                         if isinstance(b, dict) and b.get("type") == "text")
    return bool(_SUMMARY_ASK.search(text[-4000:]))


# Side traffic: requests a client makes beside its loop, recognised by their shape. They are answered without
# using a scripted step, and a record lists them apart from the loop's requests.
_TITLE_ASK = re.compile(
    r"\b(generate|write|create|extract|suggest|give)\b[^.\n]{0,80}\b(title|topic)\b|\bnew conversation topic\b"
    r"|\bisNewTopic\b", re.IGNORECASE)


def side_request(request: dict[str, Any], main_model: str | None = None) -> str | None:
    """What kind of side request ``request`` is, or None for a request of the agent's loop:

    - ``title``: asks, in its system prompt, for a title or a topic of the conversation, with no tools offered
      (the Claude Agent SDK's session title, Claude Code's topic detection);
    - ``quota``: a one-message request with ``max_tokens: 1`` (Claude Code's quota probe);
    - ``summary``: asks for a summary of the conversation on another model than the loop's (a summary on the
      loop's own model is compaction, which the scenario answers and the rules judge).
    """
    messages = request.get("messages") or []
    if not request.get("tools") and _TITLE_ASK.search(_system_text(request)[:4000]):
        return "title"
    if request.get("max_tokens") == 1 and len(messages) == 1:
        return "quota"
    if main_model is not None and request.get("model") != main_model and is_summary_request(request):
        return "summary"
    return None


def side_reply_text(kind: str, request: dict[str, Any]) -> str:
    """A short answer of the kind the side request asks for."""
    if kind == "title":
        return '{"isNewTopic": false, "title": null}' if "isnewtopic" in _system_text(request).lower() \
            else "Scripted conversation"
    if kind == "summary":
        return summary_text()
    return "ok"


def summary_text() -> str:
    return "Summary: the conversation so far, in a few words."
