"""The end-of-turn decision: pure functions from (what the model call gave, loop state, limits) to a Transition,
and from (state, transition) to the next state.

Nothing here calls a model, a tool or a hook. ``decide()`` reads one outcome (a Message, or a failed call)
and returns one small frozen dataclass naming the branch of the decision table and what to do next; the loop
in ``loop.py`` performs it. ``check_turns()`` (row 9, before every call) and ``after_stop_hooks()`` (row 10,
after a completion) are the two gates around it; ``completion_stands()``, ``stop_hook_said_stop()``,
``prompt_hook_stop()``, ``tool_hook_stop()`` and ``context_give_up()`` are the ends that a hook or a failed
compaction causes, and ``proactive_compaction_due()``, ``compaction_target()`` and ``compaction_enough()``
say when and how far to compact. ``advance()`` and the other ``after_*`` functions own every counter of
``LoopState``: the loop never counts for itself, and its ``Result`` is read off the final state.
Stop reasons, branches, rows and result subtypes are ``Literal`` types: a branch name that is not in the
table, or a transition kind the loop does not handle, is a type error. Every branch is reachable by grepping
its name, e.g. ``"pause_turn"``.

Order of the checks after a message (see ROWS for the table):
refusal → max_tokens or context window cutting a tool_use block → tool_use blocks → max_tokens →
context window → pause_turn/compaction → empty end_turn after tool results → stop_sequence → complete
(Stop hooks next).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias, assert_never, get_args

from .compaction import message_blocks, text_blocks
from .errors import ConfigError



def _default_model() -> tuple[str, int, int]:
    """The ``default`` of the model table (data/models.yaml), where the project's model names and limits live,
    with its context window and output ceiling."""
    from .paths import data_dir, read_dated_table

    path = data_dir() / "models.yaml"
    table = read_dated_table(path, "model table", ("checked", "source", "default"))
    name = str(table["default"])
    row = (table.get("models") or {}).get(name)
    values = [row.get(k) if isinstance(row, dict) else None for k in ("context_window", "max_output")]
    limits = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if len(limits) != 2:
        raise ConfigError(f"{path}: default {name!r} needs a row under models with context_window and max_output, "
                          "whole numbers above 0")
    return name, limits[0], limits[1]


# the model a run uses unless told otherwise, and the window and output ceiling a loop plans with unless told
DEFAULT_MODEL, DEFAULT_WINDOW, DEFAULT_MAX_OUTPUT = _default_model()

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal",
                     "model_context_window_exceeded", "compaction"]
STOP_REASONS: tuple[StopReason, ...] = get_args(StopReason)

Row = Literal["0", "0b", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"]

RetryBranch = Literal["api_retry", "api_fallback"]
CompactBranch = Literal["prompt_too_long", "context_compact"]
EscalateBranch = Literal["incomplete_tool_use", "max_tokens_escalate"]
CompleteBranch = Literal["stop_sequence", "complete"]
EndBranch = Literal["api_error", "max_tokens_give_up", "context_give_up", "refusal", "pause_give_up", "max_turns",
                    "stop_hook_cap", "hook_stop"]
Branch = Literal[RetryBranch, CompactBranch, EscalateBranch, CompleteBranch, EndBranch, "tool_use",
                 "max_tokens_continue", "max_tokens_clamp", "refusal_fallback", "pause_turn", "empty_nudge",
                 "stop_hook_block"]

Subtype = Literal["success", "error_max_turns", "error_max_output_tokens", "error_refusal", "error_context_window",
                  "error_api", "error_during_execution"]
SUBTYPES: tuple[Subtype, ...] = get_args(Subtype)

CompactTrigger = Literal["proactive", "prompt_too_long", "context_window"]

# The decision table, one entry per branch: (row, branch, what happens). Shown by the widget and the lessons.
TABLE: tuple[tuple[Row, Branch, str], ...] = (
    ("0", "api_retry", "429 / 529 / 5xx / connection error: wait with exponential backoff, send again"),
    ("0", "api_fallback", "repeated 529 overloaded: switch to the fallback model"),
    ("0", "api_error", "other 4xx, or retries exhausted: end with error_api"),
    ("0b", "prompt_too_long", "400 'prompt is too long': compact the history, send again"),
    ("1", "incomplete_tool_use", "max_tokens cut a tool_use block: escalate (same request, higher max_tokens)"),
    ("2", "tool_use", "content has tool_use blocks: run tools, append results, call again"),
    ("3", "max_tokens_escalate", "max_tokens: escalate once (same request, higher max_tokens)"),
    ("3", "max_tokens_continue", "max_tokens after the escalation: keep the text, ask to continue"),
    ("3", "max_tokens_clamp", "400 'max_tokens: N > M': the model's ceiling is lower; resend with M"),
    ("3", "max_tokens_give_up", "max_tokens after 3 continuations: end with error_max_output_tokens"),
    ("4", "context_compact", "model_context_window_exceeded: compact the history, send again"),
    ("4", "context_give_up", "compaction cannot make it fit: end with error_context_window"),
    ("5", "refusal", "refusal: end with error_refusal, explain, never resend to the same model"),
    ("5", "refusal_fallback", "refusal with a refusal-fallback model set: one retry on that model"),
    ("6", "pause_turn", "pause_turn: append the content as is and call again to let it finish"),
    ("6", "pause_give_up", "pause_turn too many times in a row: end with error_during_execution"),
    ("7", "stop_sequence", "stop_sequence: record which one matched, then the content check"),
    ("8", "empty_nudge", "empty end_turn right after tool results: one 'please continue' nudge"),
    ("9", "max_turns", "max_turns turns answered: end with error_max_turns"),
    ("10", "stop_hook_block", "a Stop hook blocked: feed its reason back, run another iteration"),
    ("10", "stop_hook_cap", "a 9th Stop-hook block after 8 fed back: end with error_during_execution"),
    ("10", "hook_stop", "a hook said continue: false: end the run"),
    ("11", "complete", "no tool_use, nothing to recover, no Stop hook blocks: success"),
)
ROWS = TABLE
BRANCHES: tuple[Branch, ...] = tuple(branch for _, branch, _ in TABLE)
ROW_OF: dict[str, Row] = {branch: row for row, branch, _ in TABLE}
assert sorted(BRANCHES) == sorted(get_args(Branch)), "every branch has exactly one row in the table"

# Every stop reason the API sends (anthropic's StopReason and BetaStopReason: tests/test_transitions.py checks
# this table against both) and the branch decide() takes for it when the content holds no tool_use block. A
# refusal is read before the content; a tool_use block cut off by max_tokens or the context window is row 1
# or 4. An unknown or missing stop_reason completes, recorded in the reason ("complete" below).
StopBranch = Literal["refusal", "max_tokens_escalate", "context_compact", "pause_turn", "empty_nudge",
                     "stop_sequence", "complete"]
STOP_REASON_BRANCH: dict[StopReason, StopBranch] = {
    "refusal": "refusal",                                 # row 5 (a fallback model first, if one is set)
    "max_tokens": "max_tokens_escalate",                  # row 1 or 3 (then continuations, then giving up)
    "model_context_window_exceeded": "context_compact",   # row 4 (or giving up)
    "pause_turn": "pause_turn",                           # row 6
    "compaction": "pause_turn",                           # row 6: the beta API's server-side compaction paused
    "end_turn": "empty_nudge",                            # row 8 when empty right after tool results, else 11
    "stop_sequence": "stop_sequence",                     # row 7
    "tool_use": "complete",                               # row 2 if the content agrees, else 11
}
assert sorted(STOP_REASON_BRANCH) == sorted(STOP_REASONS), "every stop reason has exactly one branch"
# the stop reasons whose reply is not the turn's answer: the loop recovers, resumes or refuses (rows 1-6)
RECOVERY_STOP_REASONS: frozenset[StopReason] = frozenset(
    r for r, b in STOP_REASON_BRANCH.items() if b not in ("empty_nudge", "stop_sequence", "complete"))

CONTINUATION_TEXT = (
    "[Output token limit hit] Continue exactly where your previous message stopped. "
    "Do not apologise or repeat what you already wrote.")
NUDGE_TEXT = "Please continue."
STOP_HOOK_FEEDBACK = "Stop hook feedback:\n{reason}"
MAX_TURNS_MARKER = "[max_turns_reached]"

TRANSIENT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


# The two recoveries from a reply cut off by max_tokens (rows 1 and 3), each with its own count and limit:
#
# - an ESCALATION sends the same request again with a higher max_tokens; the cut reply is thrown away.
#   Counted per run (max_tokens stays raised), at most ``Limits.max_escalations`` (1, as Claude Code's
#   source does). Cut text and a cut tool_use block both escalate first; 0 switches escalation off.
# - a CONTINUATION keeps the cut text and appends a user message asking the model to go on; the answer
#   is then assembled from the pieces. Only text is continued (a cut tool call cannot be). Counted in a
#   row (a reply that is not cut starts the count over), at most ``Limits.max_continuations`` (3,
#   MAX_OUTPUT_TOKENS_RECOVERY_LIMIT in Claude Code).
#
# Cut text past both limits, and a cut tool call past the escalation limit (or at the max_tokens
# ceiling), end the run with error_max_output_tokens. Result, the end message, the stepper and the plots
# use these two words and these two counts, never a sum of them.

# The largest max_tokens (and thinking budget) a run takes: far above any model's output (128,000 tokens is
# max_tokens_ceiling below), and well below where the SDK's float arithmetic on it overflows (about 10^300)
MAX_TOKENS_BOUND = 1_000_000_000


@dataclass(frozen=True)
class Limits:
    """Every bound of the loop in one value: decide() checks them, the loop reads its sizes and timeouts here."""

    max_turns: int | None = None
    max_escalations: int = 1                  # resends with a higher max_tokens per run (rows 1, 3); 0 = never
    max_continuations: int = 3                # continuations in a row after max_tokens (row 3)
    escalated_max_tokens: int = 64_000
    max_tokens_ceiling: int = DEFAULT_MAX_OUTPUT  # the default model's (data/models.yaml); a 400 names another's
    max_api_retries: int = 5                  # Claude Code allows 10; 5 keeps a dead server's worst case near 20 s
    overloads_before_fallback: int = 3
    fallback_model: str | None = None
    refusal_fallback_model: str | None = None
    max_compactions: int = 3                  # consecutive compactions without a successful call in between
    max_pause_continuations: int = 5          # in a row
    max_empty_nudges: int = 1
    stop_hook_block_cap: int = 8
    backoff_base: float = 0.5
    backoff_cap: float = 32.0
    retry_after_cap: float = 60.0
    backoff_jitter: float = 0.25              # a retry waits its delay times 1 to 1 + this (random, seeded)
    context_window: int = DEFAULT_WINDOW      # tokens the loop plans with: the default model's (data/models.yaml)
    compact_threshold: float | None = None    # compact before a call once the context is this full (None: never)
    reactive_shrink: float = 0.5              # after a "does not fit": keep at most this share of the history...
    compact_margin: float = 0.9               # ...times this margin (and the share the server's error says fits)
    proactive_target: float = 0.6             # a proactive compaction aims at this share of the threshold...
    proactive_enough: float = 0.9             # ...and stops once the context is under this share of it
    request_timeout: float = 600.0            # seconds: a whole call (streamed or not), and every wait in it
    quiet_notice_s: float | None = 30.0       # a call without data this long (at most half the timeout) is said
                                              # to be waiting, in the trace and on stderr (None: never)
    max_steps: int = 1000                     # a driver running to the end gives up after this many steps

    def __post_init__(self) -> None:
        """Refuse a bound that has no meaning, naming it (``Limits(max_turns=-1)`` raises at once)."""
        for name in ("max_escalations", "max_continuations", "max_api_retries", "overloads_before_fallback",
                     "max_compactions", "max_pause_continuations", "max_empty_nudges", "stop_hook_block_cap"):
            _check_count(name, getattr(self, name), 0)
        for name in ("escalated_max_tokens", "max_tokens_ceiling", "context_window", "max_steps"):
            _check_count(name, getattr(self, name), 1)
        if self.max_turns is not None:
            _check_count("max_turns", self.max_turns, 1, "None (no limit) or ")
        for name in ("backoff_base", "backoff_cap", "retry_after_cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise ConfigError(f"Limits.{name} must be a finite number of seconds, 0 or more; got {value!r}")
        for name in ("fallback_model", "refusal_fallback_model"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"Limits.{name} must be None or a model name; got {value!r}")
        jitter = self.backoff_jitter
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter < float("inf"):
            raise ConfigError(f"Limits.backoff_jitter must be a finite share of the delay, 0 or more; got {jitter!r}")
        for name in ("reactive_shrink", "compact_margin", "proactive_target", "proactive_enough"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                raise ConfigError(f"Limits.{name} must be a share above 0 and at most 1; got {value!r}")
        share = self.compact_threshold
        if share is not None and (isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1):
            raise ConfigError(f"Limits.compact_threshold must be None (no proactive compaction) or a share of the "
                              f"window above 0 and at most 1; got {share!r}")
        timeout = self.request_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
            raise ConfigError(f"Limits.request_timeout must be a finite number of seconds above 0; got {timeout!r}")
        notice = self.quiet_notice_s
        if notice is not None and (isinstance(notice, bool) or not isinstance(notice, int | float)
                                   or not 0 < notice < float("inf")):
            raise ConfigError(f"Limits.quiet_notice_s must be None or a finite number of seconds above 0; "
                              f"got {notice!r}")


def _check_count(name: str, value: Any, least: int, alternative: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"Limits.{name} must be {alternative}a whole number of at least {least}; got {value!r}")


USAGE_KEYS: tuple[str, ...] = ("input_tokens", "output_tokens", "cache_read_input_tokens",
                               "cache_creation_input_tokens")


@dataclass(frozen=True)
class LoopState:
    """Everything decide() needs to know about the run so far, and every count the Result reports.

    Only the pure functions of this module make a new state (``note_request``, ``note_usage``,
    ``note_success``, ``advance``, ``after_append``, ``after_compaction``, ``after_stop_hooks``, ``finish``);
    the loop keeps the latest one.
    """

    model: str
    max_tokens: int
    num_turns: int = 0                 # model calls that returned a message
    escalations: int = 0               # resends with a higher max_tokens in this run (rows 1, 3)
    continuations_in_a_row: int = 0    # continuations since the last reply not cut by max_tokens (row 3)
    consecutive_compactions: int = 0
    api_attempts: int = 0              # consecutive failed attempts of the current request
    consecutive_overloads: int = 0
    fallback_used: bool = False
    refusal_fallback_used: bool = False
    pauses_in_a_row: int = 0           # pause_turn continuations since the last other reply
    nudges: int = 0
    after_tool_results: bool = False   # the last message appended was the tool_result message
    stop_hook_active: bool = False
    stop_hook_blocks: int = 0          # blocks fed back in this run (every one keeps the run from ending)
    # totals for the Result
    requests: int = 0                  # HTTP requests sent, summary requests included
    continuations: int = 0             # in total
    compactions: int = 0
    retries: int = 0
    fallbacks: int = 0
    pause_continuations: int = 0       # in total
    usage: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_KEYS, 0))
    cost_usd: float = 0.0              # what the priced calls cost, in US dollars
    unpriced_models: tuple[str, ...] = ()  # models called that have no price: the run's cost is unknown
    stop_reason: str | None = None     # of the last message
    stop_sequence: str | None = None
    final_text: str = ""
    pieces: tuple[str, ...] = ()       # text of the cut replies kept by continuations, for the answer
    # set once the run has ended
    subtype: Subtype | None = None
    end_text: str = ""

    @property
    def run_cost(self) -> float | None:
        """The run's cost so far in US dollars; None once a call was made with a model that has no price."""
        return None if self.unpriced_models else round(self.cost_usd, 8)

    @property
    def done(self) -> bool:
        return self.subtype is not None


@dataclass(frozen=True)
class Failure:
    """A model call that did not return a message."""

    status: int | None                 # None for connection errors and timeouts
    error_type: str
    message: str
    retry_after: float | None = None
    should_retry: bool | None = None   # the x-should-retry header, when the server sent one


Message = Mapping[str, Any]
Outcome: TypeAlias = "Message | Failure"


# --- transitions: a closed union, one frozen dataclass per kind ---------------------------------------------

@dataclass(frozen=True)
class _Base:
    """What every transition has: ``branch`` (its row in the table) and ``reason`` (why, for the trace)."""

    @property
    def row(self) -> Row:
        return ROW_OF[self.branch]  # type: ignore[attr-defined]  # every subclass declares its branch

    @property
    def terminal(self) -> bool:
        return False


@dataclass(frozen=True)
class RunTools(_Base):
    """Row 2: run the tool_use blocks, answer each one, call again."""

    branch: Literal["tool_use"] = "tool_use"
    reason: str = ""
    tool_uses: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Retry(_Base):
    """Row 0: wait, then send the same request again (on the fallback model after repeated 529s)."""

    branch: RetryBranch = "api_retry"
    reason: str = ""
    delay: float = 0.0                 # before jitter
    switch_model: str | None = None
    consecutive_overloads: int = 0     # 529s in a row, this one included (0 after any other error)


@dataclass(frozen=True)
class Escalate(_Base):
    """Rows 1 and 3: send the same request again with a higher max_tokens."""

    branch: EscalateBranch = "max_tokens_escalate"
    reason: str = ""
    max_tokens: int = 0


@dataclass(frozen=True)
class Clamp(_Base):
    """Row 3: the model's output ceiling is below max_tokens; send the same request with the ceiling."""

    branch: Literal["max_tokens_clamp"] = "max_tokens_clamp"
    reason: str = ""
    max_tokens: int = 0


@dataclass(frozen=True)
class ContinueTruncated(_Base):
    """Row 3: keep the partial text and ask the model to continue."""

    branch: Literal["max_tokens_continue"] = "max_tokens_continue"
    reason: str = ""
    text: str = CONTINUATION_TEXT


@dataclass(frozen=True)
class Compact(_Base):
    """Rows 0b and 4: compact the history before the next call."""

    branch: CompactBranch = "context_compact"
    reason: str = ""
    trigger: CompactTrigger = "context_window"


@dataclass(frozen=True)
class Resume(_Base):
    """Row 6: append the paused content unchanged and call again."""

    branch: Literal["pause_turn"] = "pause_turn"
    reason: str = ""


@dataclass(frozen=True)
class Nudge(_Base):
    """Row 8: one "please continue" after an empty end_turn that followed tool results."""

    branch: Literal["empty_nudge"] = "empty_nudge"
    reason: str = ""
    text: str = NUDGE_TEXT


@dataclass(frozen=True)
class RetryOnModel(_Base):
    """Row 5: one retry of a refusal on the refusal-fallback model."""

    branch: Literal["refusal_fallback"] = "refusal_fallback"
    reason: str = ""
    model: str = ""


@dataclass(frozen=True)
class Complete(_Base):
    """Rows 7 and 11: no tool use and nothing to recover; the run ends unless a Stop hook blocks."""

    branch: CompleteBranch = "complete"
    reason: str = ""
    stop_sequence: str | None = None


@dataclass(frozen=True)
class HookBlocked(_Base):
    """Row 10: a Stop hook blocked; its reason goes back to the model."""

    branch: Literal["stop_hook_block"] = "stop_hook_block"
    reason: str = ""
    feedback: str = ""


@dataclass(frozen=True)
class End(_Base):
    """The run ends with an error result (or, for a hook's continue: false after a completion, success)."""

    branch: EndBranch = "api_error"
    reason: str = ""
    subtype: Subtype = "error_during_execution"
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return True


Transition: TypeAlias = (RunTools | Retry | Escalate | Clamp | ContinueTruncated | Compact | Resume | Nudge
                         | RetryOnModel | Complete | HookBlocked | End)


# --- reading a message ------------------------------------------------------------------------------------

def tool_uses(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in blocks if b.get("type") == "tool_use"]


def is_empty(blocks: list[dict[str, Any]]) -> bool:
    """No content, or only blank text: what the API docs call an empty response."""
    return all(b.get("type") == "text" and not str(b.get("text", "")).strip() for b in blocks)


def refusal_message(details: Any) -> str:
    category = explanation = None
    if isinstance(details, dict):
        category, explanation = details.get("category"), details.get("explanation")
    elif details is not None:
        category, explanation = getattr(details, "category", None), getattr(details, "explanation", None)
    text = "The model declined to continue (stop_reason: refusal)"
    if category:
        text += f", category {category}"
    text += "."
    if explanation:
        text += f" {explanation}"
    return text + " Resending the same request to the same model will not help: rephrase it, or try another model."


# --- the decision -----------------------------------------------------------------------------------------

def decide(outcome: Message | Failure, state: LoopState, limits: Limits) -> Transition:
    """The branch for one model-call outcome: a Message (the reply as a dict) or a Failure."""
    if isinstance(outcome, Failure):
        return _decide_failure(outcome, state, limits)
    return _decide_message(outcome, state, limits)


# What a 400 says when max_tokens is above the model's ceiling: "max_tokens: 64000 > 4096, which is the maximum ..."
MAX_TOKENS_OVER_CEILING = re.compile(r"max_tokens:\s*(\d+)\s*>\s*(\d+)")


def max_tokens_ceiling(status: int | None, message: str) -> int | None:
    """The model's output ceiling that an error names (a 400 "max_tokens: 64000 > 4096, ..." gives 4096), or None."""
    match = MAX_TOKENS_OVER_CEILING.search(message) if status == 400 else None
    return int(match.group(2)) if match else None


def is_prompt_too_long(status: int | None, message: str) -> bool:
    """A 400 "prompt is too long: N tokens > M maximum": the request does not fit the context window (row 0b)."""
    return status == 400 and "prompt is too long" in message.lower()


def _decide_failure(f: Failure, state: LoopState, limits: Limits) -> Transition:
    ceiling = max_tokens_ceiling(f.status, f.message)
    if ceiling is not None and 0 < ceiling < state.max_tokens:
        return Clamp("max_tokens_clamp", f"the model allows at most {ceiling} output tokens: "
                     "resend with that", max_tokens=ceiling)
    if is_prompt_too_long(f.status, f.message):
        if state.consecutive_compactions >= limits.max_compactions:
            return End("context_give_up", f"still too long after {state.consecutive_compactions} compactions",
                       subtype="error_context_window", message=f.message)
        return Compact("prompt_too_long", f"400: {f.message}", trigger="prompt_too_long")
    transient = f.status is None or f.status in TRANSIENT_STATUSES
    if not transient or f.should_retry is False:
        why = "the server said not to retry" if f.should_retry is False else f"HTTP {f.status} is not retried"
        return End("api_error", f"{why}: {f.message}", subtype="error_api", message=f.message,
                   details={"status": f.status, "error_type": f.error_type})
    if state.api_attempts >= limits.max_api_retries:
        return End("api_error", f"gave up after {state.api_attempts} retries: {f.message}", subtype="error_api",
                   message=f.message, details={"status": f.status, "error_type": f.error_type})
    delay = min(limits.backoff_cap, limits.backoff_base * 2.0 ** min(state.api_attempts, 64))
    if f.retry_after is not None:
        delay = min(limits.retry_after_cap, f.retry_after)
    overloads = state.consecutive_overloads + 1 if f.status == 529 else 0
    if (f.status == 529 and limits.fallback_model and not state.fallback_used
            and overloads >= limits.overloads_before_fallback and state.model != limits.fallback_model):
        return Retry("api_fallback", f"{overloads} consecutive 529 overloaded: switching to {limits.fallback_model}",
                     delay=0.0, switch_model=limits.fallback_model, consecutive_overloads=overloads)
    label = "connection error" if f.status is None else f"HTTP {f.status}"
    return Retry("api_retry", f"{label} ({f.error_type}), attempt {state.api_attempts + 1} of "
                 f"{limits.max_api_retries}: retry in {delay:g}s", delay=delay, consecutive_overloads=overloads)


def _decide_message(message: Message, state: LoopState, limits: Limits) -> Transition:
    blocks = message_blocks(message)
    raw = message.get("stop_reason")                  # what the server sent, a value the API may add later too
    stop_reason: StopReason | None = raw if raw in STOP_REASONS else None
    branch: StopBranch = "complete" if stop_reason is None else STOP_REASON_BRANCH[stop_reason]
    uses = tool_uses(blocks)
    last_type = blocks[-1].get("type") if blocks else None

    if branch == "refusal":                                                         # row 5
        return _refusal(message, state, limits)
    if branch in ("max_tokens_escalate", "context_compact") and last_type == "tool_use":
        if branch == "max_tokens_escalate":                                         # row 1
            return _escalate_or_give_up("incomplete_tool_use", "the last tool_use block was cut off", state, limits)
        return _compact_or_give_up("the context window cut a tool_use block off", state, limits)

    if uses:                                                                        # row 2
        names = ", ".join(u.get("name", "?") for u in uses)
        label = f" (labelled {raw!r})" if stop_reason != "tool_use" else ""
        return RunTools("tool_use", f"{len(uses)} tool_use block(s): {names}{label}", tool_uses=tuple(uses))

    match branch:
        case "max_tokens_escalate":                                                 # row 3
            return _cut_text(state, limits)
        case "context_compact":                                                     # row 4
            return _compact_or_give_up("model_context_window_exceeded", state, limits)
        case "pause_turn":                                                          # row 6
            return _resume_or_give_up(str(raw), state, limits)
        case "empty_nudge" if is_empty(blocks) and state.after_tool_results and state.nudges < limits.max_empty_nudges:
            return Nudge("empty_nudge", "empty end_turn right after tool results: nudge once")       # row 8
        case "empty_nudge":
            return Complete("complete", "end_turn with no tool_use")               # row 11
        case "stop_sequence":                                                       # row 7
            sequence = message.get("stop_sequence")
            return Complete("stop_sequence", f"stop sequence {sequence!r} matched; no tool_use: complete",
                            stop_sequence=sequence)
        case "complete":
            return Complete("complete", _completion_reason(stop_reason, raw))       # row 11
        case _:
            assert_never(branch)


def _completion_reason(stop_reason: StopReason | None, raw: Any) -> str:
    """Row 11 for a tool_use label without a tool_use block, an unknown stop_reason, or none."""
    if stop_reason == "tool_use":
        return "labelled tool_use but no tool_use block: the content says the turn is complete"
    if stop_reason is None and raw is not None:
        return f"unknown stop_reason {raw!r}: no tool_use block, complete"
    return "no stop_reason: no tool_use block, complete"


RECOMMENDED = "recommended"  # Limits.refusal_fallback_model: retry on the refusal's stop_details.recommended_model


def _refusal(message: Message, state: LoopState, limits: Limits) -> RetryOnModel | End:
    """Row 5: one retry on the refusal-fallback model, if one is set and not used yet; else the run ends.

    ``refusal_fallback_model="recommended"`` retries on the model the refusal itself names in
    ``stop_details.recommended_model``: "the server's suggested retry target for this refusal", set "when a
    fallback attempt could not be made (the fallback model's rate limit was exhausted, or it was overloaded)"
    and null otherwise (the SDK's ``BetaRefusalStopDetails.recommended_model``; docs: "Refusals and fallback",
    platform.claude.com/docs/en/build-with-claude/refusals-and-fallback, and "Fallback credit",
    .../fallback-credit, whose token the retry echoes). No model named, or the one that refused: the run ends,
    saying so."""
    details = message.get("stop_details")
    model = limits.refusal_fallback_model
    if model == RECOMMENDED:
        model = details.get("recommended_model") if isinstance(details, dict) else None
    if model and not state.refusal_fallback_used and model != state.model:
        return RetryOnModel("refusal_fallback", f"refusal on {state.model}: one retry on {model}", model=model)
    text = refusal_message(details)
    if limits.refusal_fallback_model == RECOMMENDED and not state.refusal_fallback_used:
        text += (" No retry: the refusal's stop_details name no recommended_model"
                 + (" other than the model that refused." if model else "."))
    return End("refusal", text, subtype="error_refusal", message=text)


def _cut_text(state: LoopState, limits: Limits) -> Escalate | ContinueTruncated | End:
    """Row 3: text cut off by max_tokens: escalate, then continue, then give up."""
    target = min(limits.escalated_max_tokens, limits.max_tokens_ceiling)
    if state.escalations < limits.max_escalations and target > state.max_tokens:
        return Escalate("max_tokens_escalate",
                        f"max_tokens {state.max_tokens} hit: escalation {state.escalations + 1} of "
                        f"{limits.max_escalations}, resend with max_tokens {target}", max_tokens=target)
    if state.continuations_in_a_row >= limits.max_continuations:
        text = (f"The response hit max_tokens ({state.max_tokens}) again after "
                f"{_count(state.escalations, 'escalation')} and "
                f"{_count(state.continuations_in_a_row, 'continuation')}; the limit is "
                f"{_count(limits.max_continuations, 'continuation')} in a row.")
        return End("max_tokens_give_up", text, subtype="error_max_output_tokens", message=text)
    return ContinueTruncated("max_tokens_continue",
                             f"max_tokens hit: continuation {state.continuations_in_a_row + 1} of "
                             f"{limits.max_continuations}")


def _resume_or_give_up(stop_reason: str, state: LoopState, limits: Limits) -> Resume | End:
    """Row 6: pause_turn (or the beta API's compaction): send the content back, at most so many times in a row."""
    if state.pauses_in_a_row >= limits.max_pause_continuations:
        text = (f"{stop_reason}: continuing is switched off (max_pause_continuations=0)"
                if limits.max_pause_continuations == 0 else
                f"{stop_reason} {state.pauses_in_a_row} times in a row; the turn never finished")
        return End("pause_give_up", text, subtype="error_during_execution", message=text)
    return Resume("pause_turn", f"{stop_reason}: send the content back unchanged "
                  f"({state.pauses_in_a_row + 1} of {limits.max_pause_continuations})")


def _escalate_or_give_up(branch: EscalateBranch, why: str, state: LoopState, limits: Limits) -> Escalate | End:
    """Row 1: a cut tool call cannot be continued; escalate while an escalation is left, else give up."""
    target = min(max(state.max_tokens * 2, limits.escalated_max_tokens), limits.max_tokens_ceiling)
    if state.escalations < limits.max_escalations and target > state.max_tokens:
        return Escalate(branch, f"{why}: escalation {state.escalations + 1} of {limits.max_escalations}, "
                        f"resend unchanged with max_tokens {target}", max_tokens=target)
    if target <= state.max_tokens:
        cause = f"max_tokens cannot be raised above {state.max_tokens}"
    else:
        cause = f"{_count(state.escalations, 'escalation')} used of {limits.max_escalations}"
    text = (f"The response hit max_tokens ({state.max_tokens}) inside a tool call, which cannot be continued, "
            f"and {cause}.")
    return End("max_tokens_give_up", text, subtype="error_max_output_tokens", message=text)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _compact_or_give_up(why: str, state: LoopState, limits: Limits) -> Compact | End:
    if state.consecutive_compactions >= limits.max_compactions:
        text = f"{why} after {state.consecutive_compactions} compactions: the request cannot be made to fit"
        return End("context_give_up", text, subtype="error_context_window", message=text)
    return Compact("context_compact", f"{why}: compact the history and send again", trigger="context_window")


def after_stop_hooks(blocked: bool, reason: str | None, state: LoopState, limits: Limits) -> HookBlocked | End | None:
    """Row 10: the Stop hooks' verdict on a completion; None when nothing blocked and the completion stands."""
    if not blocked:
        return None
    if state.stop_hook_blocks >= limits.stop_hook_block_cap:
        # Claude Code feeds 8 blocks back and ends at the 9th; it then reports success, agentlab an error.
        text = (f"Stop hooks blocked {state.stop_hook_blocks + 1} times in this run; {limits.stop_hook_block_cap} "
                f"were fed back (the cap), so the run ends without the hook's approval. Last reason: {reason}")
        return End("stop_hook_cap", text, subtype="error_during_execution", message=text)
    return HookBlocked("stop_hook_block", f"Stop hook blocked: {reason}",
                       feedback=STOP_HOOK_FEEDBACK.format(reason=reason or "(no reason given)"))


def stop_hook_said_stop(reason: str | None) -> End:
    """Row 10: a Stop hook answered ``continue: false``: the run ends, and the completion it followed stands."""
    return End("hook_stop", f"a Stop hook said continue: false: {reason}", subtype="success", message=reason or "")


def completion_stands(last: Transition | None) -> Complete | None:
    """Row 11 after the Stop hooks let a completion stand: the ``complete`` transition, unless the step's own
    transition was that already (a ``stop_sequence`` completion, or one that followed a Stop-hook block)."""
    if last is not None and last.branch == "complete":
        return None
    return Complete("complete", "no Stop hook blocked")


def prompt_hook_stop(why: str) -> End:
    """A UserPromptSubmit hook blocked the prompt or said continue: false: the run ends before any call."""
    return End("hook_stop", f"UserPromptSubmit hook stopped the prompt: {why}", subtype="error_during_execution",
               message=f"Prompt blocked by a hook: {why}")


def tool_hook_stop(why: str) -> End:
    """A PreToolUse or PostToolUse hook said continue: false: the run ends once the tool results are in."""
    return End("hook_stop", f"a hook ended the run: {why}", subtype="error_during_execution",
               message=f"Stopped by a hook: {why}")


def context_give_up(reason: str) -> End:
    """Rows 0b and 4: compaction could not make the request fit (nothing to shrink, or a hook forbade it)."""
    return End("context_give_up", reason, subtype="error_context_window",
               message="The conversation does not fit the context window and cannot be compacted further.")


# --- compaction: when, and how far ---------------------------------------------------------------------------

# The sizes a "prompt is too long" 400 gives: "prompt is too long: 250000 tokens > 200000 maximum"
PROMPT_TOO_LONG_SIZES = re.compile(r"(\d+)\s*tokens\s*>\s*(\d+)")


def fit_ratio(message: str) -> float:
    """From "prompt is too long: 250000 tokens > 200000 maximum", the share that fits (0.8); 0.5 if unknown."""
    match = PROMPT_TOO_LONG_SIZES.search(message)
    if not match or int(match.group(1)) == 0:
        return 0.5
    return int(match.group(2)) / int(match.group(1))


def proactive_compaction_due(context_tokens: int, messages: int, gave_up_at: int, limits: Limits) -> bool:
    """Before a call: compact first, because the context passed ``compact_threshold`` of the window? Never
    with no threshold, under three messages, or when nothing was added since a compaction found nothing to do
    at ``gave_up_at`` messages."""
    if limits.compact_threshold is None or messages < 3 or messages == gave_up_at:
        return False
    return context_tokens > limits.compact_threshold * limits.context_window


def compaction_target(trigger: CompactTrigger, history_tokens: int, failure_message: str, limits: Limits) -> int:
    """The history size (estimated tokens) a compaction aims for: after a reactive trigger, what the server
    said fits and at most ``reactive_shrink`` of the history, less a margin; after a proactive one, a share of
    the threshold."""
    if trigger != "proactive":
        return int(history_tokens * min(limits.reactive_shrink, fit_ratio(failure_message)) * limits.compact_margin)
    return int(limits.context_window * (limits.compact_threshold or 1.0) * limits.proactive_target)


def compaction_enough(trigger: CompactTrigger, history_tokens: int, target: int, context_tokens: int,
                      limits: Limits) -> bool:
    """After one strategy: stop going down the chain? Reactive: the history is under the target; proactive: the
    context is under ``proactive_enough`` of the threshold."""
    if trigger != "proactive":
        return history_tokens <= target
    threshold = limits.compact_threshold
    return threshold is None or context_tokens <= limits.proactive_enough * threshold * limits.context_window


def check_turns(state: LoopState, limits: Limits) -> End | None:
    """Row 9, checked before every model call: the max_turns breaker."""
    if limits.max_turns is not None and state.num_turns >= limits.max_turns:
        text = (f"Reached max_turns ({limits.max_turns}): {_count(state.num_turns, 'turn')} answered by the model "
                f"(retried and summary requests are not turns).")
        return End("max_turns", text, subtype="error_max_turns", message=text)
    return None


# --- the state updates: every counter changes here and nowhere else ----------------------------------------

def _evolve(state: LoopState, **changes: Any) -> LoopState:
    """A new state: ``state`` with ``changes`` (``dataclasses.replace``: a name that is not a field is a TypeError).
    About five per model call, 19 us each: 0.1 ms of bench/overhead.py's 4.4 ms call (tools replayed)."""
    return replace(state, **changes)


def note_request(state: LoopState) -> LoopState:
    """An HTTP request is about to go out (a turn or a summary request)."""
    return _evolve(state, requests=state.requests + 1)


def note_usage(state: LoopState, usage: Mapping[str, Any] | None, model: str, cost: float | None) -> LoopState:
    """A message of ``model`` came back (any purpose): its usage joins the totals, and its cost (None: the model
    has no price, so the run's cost is unknown from now on)."""
    usage = usage or {}
    totals = {k: state.usage.get(k, 0) + int(usage.get(k) or 0) for k in USAGE_KEYS}
    if cost is not None:
        return _evolve(state, usage=totals, cost_usd=state.cost_usd + cost)
    if model in state.unpriced_models:
        return _evolve(state, usage=totals)
    return _evolve(state, usage=totals, unpriced_models=(*state.unpriced_models, model))


def note_success(state: LoopState, message: Message | None = None) -> LoopState:
    """A turn's message came back: one more turn, and the consecutive-failure counters start over."""
    if message is None:
        return _evolve(state, num_turns=state.num_turns + 1, api_attempts=0, consecutive_overloads=0)
    return _evolve(state, num_turns=state.num_turns + 1, api_attempts=0, consecutive_overloads=0,
                   stop_reason=message.get("stop_reason"), stop_sequence=message.get("stop_sequence"))


def advance(state: LoopState, t: Transition, outcome: Message | Failure | None) -> LoopState:
    """The state after ``t`` was decided for ``outcome``: resets of the in-a-row counters, then the counts of
    the branch. Effects that change the state on their own (appending, compacting, Stop hooks) have their own
    functions below."""
    message = None if isinstance(outcome, Failure) else outcome
    resets: dict[str, Any] = {}  # counters of consecutive events that this outcome interrupts
    if not isinstance(t, Compact) and message is not None and state.consecutive_compactions:
        resets["consecutive_compactions"] = 0
    if not isinstance(t, Resume) and state.pauses_in_a_row:
        resets["pauses_in_a_row"] = 0
    if message is not None and message.get("stop_reason") != "max_tokens" and state.continuations_in_a_row:
        resets["continuations_in_a_row"] = 0
    if resets:
        state = _evolve(state, **resets)
    match t:
        case Retry(switch_model=str(model)):
            return _evolve(state, model=model, fallback_used=True, consecutive_overloads=0,
                           api_attempts=state.api_attempts + 1, fallbacks=state.fallbacks + 1,
                           retries=state.retries + 1)
        case Retry():
            return _evolve(state, api_attempts=state.api_attempts + 1, consecutive_overloads=t.consecutive_overloads,
                           retries=state.retries + 1)
        case Escalate():
            return _evolve(state, max_tokens=t.max_tokens, escalations=state.escalations + 1)
        case Clamp():  # lowered to the model's ceiling: not an escalation
            return _evolve(state, max_tokens=t.max_tokens)
        case ContinueTruncated():
            return _evolve(state, continuations_in_a_row=state.continuations_in_a_row + 1,
                           continuations=state.continuations + 1,
                           pieces=(*state.pieces, text_of(message_blocks(message))))
        case Resume():
            return _evolve(state, pauses_in_a_row=state.pauses_in_a_row + 1,
                           pause_continuations=state.pause_continuations + 1)
        case Nudge():
            return _evolve(state, nudges=state.nudges + 1)
        case RetryOnModel():
            return _evolve(state, model=t.model, refusal_fallback_used=True, fallbacks=state.fallbacks + 1)
        case Complete():  # the answer: the pieces kept by continuations, then this reply
            return _evolve(state, final_text="".join(state.pieces) + text_of(message_blocks(message)), pieces=())
        case HookBlocked():
            return _evolve(state, stop_hook_active=True, stop_hook_blocks=state.stop_hook_blocks + 1)
        case End():
            if t.branch == "stop_hook_cap":  # the 9th block was counted too, though not fed back
                state = _evolve(state, stop_hook_blocks=state.stop_hook_blocks + 1)
            return finish(state, t.subtype, t.message or t.reason)
        case RunTools():
            return _evolve(state, pieces=()) if state.pieces else state
        case Compact():
            return state
        case _:
            assert_never(t)


def text_of(blocks: list[dict[str, Any]]) -> str:
    """The text of a reply's text blocks, joined."""
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


def after_append(state: LoopState, message: Message) -> LoopState:
    """A message joined the history: is it the tool_result message?"""
    blocks = text_blocks(message["content"])
    after_tool_results = message["role"] == "user" and bool(blocks) and all(b.get("type") == "tool_result"
                                                                           for b in blocks)
    return state if after_tool_results == state.after_tool_results else _evolve(
        state, after_tool_results=after_tool_results)


def after_compaction(state: LoopState, applied: int) -> LoopState:
    """``applied`` strategies changed the history (0: nothing could)."""
    if not applied:
        return state
    return _evolve(state, consecutive_compactions=state.consecutive_compactions + 1,
                   compactions=state.compactions + applied)


def finish(state: LoopState, subtype: Subtype, text: str = "") -> LoopState:
    """The run ends: the result's subtype and text (a success reports the last completion's text)."""
    return _evolve(state, subtype=subtype, end_text=state.final_text if subtype == "success" else text)
