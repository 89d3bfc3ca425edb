"""The end-of-turn decision: a pure function from (what the model call gave, loop state, limits) to a Transition.

Nothing here calls a model, a tool or a hook. ``decide()`` reads one outcome (a Message, or a failed call)
and returns one small dataclass naming the branch of the decision table and what to do next; the loop in
``loop.py`` applies it. ``after_stop_hooks()`` and ``check_turns()`` are the two gates that follow (rows 10
and 9). Every branch is reachable by grepping its row name, e.g. ``"pause_turn"``.

Order of the checks after a message (see ROWS for the table):
refusal → incomplete tool_use on a truncated turn → tool_use blocks → max_tokens → context window →
pause_turn/compaction → stop_sequence → empty end_turn after tool results → complete (Stop hooks next).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import ConfigError

# The decision table, one entry per row: (row, branch, what happens). Shown by the widget and the lessons.
ROWS: tuple[tuple[str, str, str], ...] = (
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
    ("9", "max_turns", "max_turns model calls made: end with error_max_turns"),
    ("10", "stop_hook_block", "a Stop hook blocked: feed its reason back, run another iteration"),
    ("10", "stop_hook_cap", "a 9th Stop-hook block after 8 fed back: end with error_during_execution"),
    ("10", "hook_stop", "a hook said continue: false: end the run"),
    ("11", "complete", "no tool_use, nothing to recover, no Stop hook blocks: success"),
)
ROW_OF = {branch: row for row, branch, _ in ROWS}

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


@dataclass(frozen=True)
class Limits:
    """Every bound of the loop in one value (checked by decide(), never scattered)."""

    max_turns: int | None = None
    max_escalations: int = 1                  # resends with a higher max_tokens per run (rows 1, 3); 0 = never
    max_continuations: int = 3                # continuations in a row after max_tokens (row 3)
    escalated_max_tokens: int = 64_000
    max_tokens_ceiling: int = 128_000
    max_api_retries: int = 5                  # Claude Code allows 10; 5 keeps a dead server's worst case near 20 s
    overloads_before_fallback: int = 3
    fallback_model: str | None = None
    refusal_fallback_model: str | None = None
    max_compactions: int = 3                  # consecutive compactions without a successful call in between
    max_pause_continuations: int = 5
    max_empty_nudges: int = 1
    stop_hook_block_cap: int = 8
    backoff_base: float = 0.5
    backoff_cap: float = 32.0
    retry_after_cap: float = 60.0

    def __post_init__(self) -> None:
        """Refuse a bound that has no meaning, naming it (``Limits(max_turns=-1)`` raises at once)."""
        for name in ("max_escalations", "max_continuations", "max_api_retries", "overloads_before_fallback",
                     "max_compactions", "max_pause_continuations", "max_empty_nudges", "stop_hook_block_cap"):
            _check_count(name, getattr(self, name), 0)
        for name in ("escalated_max_tokens", "max_tokens_ceiling"):
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


def _check_count(name: str, value: Any, least: int, alternative: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"Limits.{name} must be {alternative}a whole number of at least {least}; got {value!r}")


@dataclass(frozen=True)
class LoopState:
    """What decide() needs to know about the run so far. Updated by the loop with dataclasses.replace."""

    model: str
    max_tokens: int
    num_turns: int = 0                 # model calls that returned a message
    escalations: int = 0               # resends with a higher max_tokens in this run (rows 1, 3)
    continuations: int = 0             # continuations in a row after max_tokens (row 3)
    consecutive_compactions: int = 0
    api_attempts: int = 0              # consecutive failed attempts of the current request
    consecutive_overloads: int = 0
    fallback_used: bool = False
    refusal_fallback_used: bool = False
    pause_continuations: int = 0
    nudges: int = 0
    after_tool_results: bool = False   # the last message appended was the tool_result message
    stop_hook_active: bool = False
    stop_hook_blocks: int = 0          # blocks fed back in this run (every one keeps the run from ending)


@dataclass(frozen=True)
class Failure:
    """A model call that did not return a message."""

    status: int | None                 # None for connection errors and timeouts
    error_type: str
    message: str
    retry_after: float | None = None
    should_retry: bool | None = None   # the x-should-retry header, when the server sent one


# --- transitions ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transition:
    branch: str
    reason: str

    @property
    def row(self) -> str:
        return ROW_OF[self.branch]

    @property
    def terminal(self) -> bool:
        return False


@dataclass(frozen=True)
class RunTools(Transition):
    tool_uses: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Retry(Transition):
    delay: float = 0.0                 # before jitter
    switch_model: str | None = None
    consecutive_overloads: int = 0     # 529s in a row, this one included (0 after any other error)


@dataclass(frozen=True)
class Escalate(Transition):
    max_tokens: int = 0


@dataclass(frozen=True)
class ContinueTruncated(Transition):
    text: str = CONTINUATION_TEXT


@dataclass(frozen=True)
class Compact(Transition):
    trigger: str = "reactive"


@dataclass(frozen=True)
class Resume(Transition):
    pass


@dataclass(frozen=True)
class Nudge(Transition):
    text: str = NUDGE_TEXT


@dataclass(frozen=True)
class RetryOnModel(Transition):
    model: str = ""


@dataclass(frozen=True)
class Complete(Transition):
    """No tool use and nothing to recover: the run may end, unless a Stop hook blocks."""

    stop_sequence: str | None = None


@dataclass(frozen=True)
class HookBlocked(Transition):
    feedback: str = ""


@dataclass(frozen=True)
class End(Transition):
    subtype: str = "success"
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return True


# --- reading a message ------------------------------------------------------------------------------------

def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    out = []
    for block in content or []:
        out.append(block if isinstance(block, dict) else block.to_dict())
    return out


def _field(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, dict) else getattr(message, name, None)


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

def decide(outcome: Any, state: LoopState, limits: Limits) -> Transition:
    """The branch for one model-call outcome: a Message (SDK object or dict) or a Failure."""
    if isinstance(outcome, Failure):
        return _decide_failure(outcome, state, limits)
    return _decide_message(outcome, state, limits)


_MAX_TOKENS_CEILING = re.compile(r"max_tokens:\s*(\d+)\s*>\s*(\d+)")


def _decide_failure(f: Failure, state: LoopState, limits: Limits) -> Transition:
    ceiling = _MAX_TOKENS_CEILING.search(f.message) if f.status == 400 else None
    if ceiling and 0 < int(ceiling.group(2)) < state.max_tokens:
        return Escalate("max_tokens_clamp", f"the model allows at most {ceiling.group(2)} output tokens: "
                        "resend with that", max_tokens=int(ceiling.group(2)))
    if f.status == 400 and "prompt is too long" in f.message.lower():
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


def _decide_message(message: Any, state: LoopState, limits: Limits) -> Transition:
    blocks = _blocks(message)
    stop_reason = _field(message, "stop_reason")
    uses = tool_uses(blocks)
    last_type = blocks[-1].get("type") if blocks else None

    if stop_reason == "refusal":                                                    # row 5
        model = limits.refusal_fallback_model
        if model and not state.refusal_fallback_used and model != state.model:
            return RetryOnModel("refusal_fallback", f"refusal on {state.model}: one retry on {model}", model=model)
        text = refusal_message(_field(message, "stop_details"))
        return End("refusal", text, subtype="error_refusal", message=text)

    if stop_reason in ("max_tokens", "model_context_window_exceeded") and last_type == "tool_use":
        if stop_reason == "max_tokens":                                             # row 1
            return _escalate_or_give_up("incomplete_tool_use", "the last tool_use block was cut off", state, limits)
        return _compact_or_give_up("the context window cut a tool_use block off", state, limits)

    if uses:                                                                        # row 2
        names = ", ".join(u.get("name", "?") for u in uses)
        label = f" (labelled {stop_reason!r})" if stop_reason != "tool_use" else ""
        return RunTools("tool_use", f"{len(uses)} tool_use block(s): {names}{label}", tool_uses=tuple(uses))

    if stop_reason == "max_tokens":                                                 # row 3
        target = min(limits.escalated_max_tokens, limits.max_tokens_ceiling)
        if state.escalations < limits.max_escalations and target > state.max_tokens:
            return Escalate("max_tokens_escalate",
                            f"max_tokens {state.max_tokens} hit: escalation {state.escalations + 1} of "
                            f"{limits.max_escalations}, resend with max_tokens {target}", max_tokens=target)
        if state.continuations >= limits.max_continuations:
            text = (f"The response hit max_tokens ({state.max_tokens}) again after "
                    f"{_count(state.escalations, 'escalation')} and {_count(state.continuations, 'continuation')}; "
                    "the limit is "
                    f"{_count(limits.max_continuations, 'continuation')} in a row.")
            return End("max_tokens_give_up", text, subtype="error_max_output_tokens", message=text)
        return ContinueTruncated("max_tokens_continue",
                                 f"max_tokens hit: continuation {state.continuations + 1} of "
                                 f"{limits.max_continuations}")

    if stop_reason == "model_context_window_exceeded":                              # row 4
        return _compact_or_give_up("model_context_window_exceeded", state, limits)

    if stop_reason in ("pause_turn", "compaction"):                                 # row 6
        if state.pause_continuations >= limits.max_pause_continuations:
            text = (f"{stop_reason}: continuing is switched off (max_pause_continuations=0)"
                    if limits.max_pause_continuations == 0 else
                    f"{stop_reason} {state.pause_continuations} times in a row; the turn never finished")
            return End("pause_give_up", text, subtype="error_during_execution", message=text)
        return Resume("pause_turn", f"{stop_reason}: send the content back unchanged "
                      f"({state.pause_continuations + 1} of {limits.max_pause_continuations})")

    if (stop_reason == "end_turn" and is_empty(blocks) and state.after_tool_results   # row 8
            and state.nudges < limits.max_empty_nudges):
        return Nudge("empty_nudge", "empty end_turn right after tool results: nudge once")

    if stop_reason == "stop_sequence":                                              # row 7
        sequence = _field(message, "stop_sequence")
        return Complete("stop_sequence", f"stop sequence {sequence!r} matched; no tool_use: complete",
                        stop_sequence=sequence)

    if stop_reason == "tool_use":
        reason = "labelled tool_use but no tool_use block: the content says the turn is complete"
    elif stop_reason not in ("end_turn", None):
        reason = f"unknown stop_reason {stop_reason!r}: no tool_use block, complete"
    elif stop_reason is None:
        reason = "no stop_reason: no tool_use block, complete"
    else:
        reason = "end_turn with no tool_use"
    return Complete("complete", reason)                                             # row 11


def _escalate_or_give_up(branch: str, why: str, state: LoopState, limits: Limits) -> Transition:
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


def _compact_or_give_up(why: str, state: LoopState, limits: Limits) -> Transition:
    if state.consecutive_compactions >= limits.max_compactions:
        text = f"{why} after {state.consecutive_compactions} compactions: the request cannot be made to fit"
        return End("context_give_up", text, subtype="error_context_window", message=text)
    return Compact("context_compact", f"{why}: compact the history and send again", trigger="context_window")


def after_stop_hooks(blocked: bool, reason: str | None, state: LoopState, limits: Limits) -> Transition:
    """Row 10: the Stop hooks' verdict on a completion."""
    if not blocked:
        return End("complete", "no Stop hook blocked", subtype="success")
    if state.stop_hook_blocks >= limits.stop_hook_block_cap:
        # Claude Code feeds 8 blocks back and ends at the 9th; it then reports success, agentlab an error.
        text = (f"Stop hooks blocked {state.stop_hook_blocks + 1} times in a row; {limits.stop_hook_block_cap} "
                f"were fed back (the cap), so the run ends without the hook's approval. Last reason: {reason}")
        return End("stop_hook_cap", text, subtype="error_during_execution", message=text)
    return HookBlocked("stop_hook_block", f"Stop hook blocked: {reason}",
                       feedback=STOP_HOOK_FEEDBACK.format(reason=reason or "(no reason given)"))


def check_turns(state: LoopState, limits: Limits) -> Transition | None:
    """Row 9, checked before every model call: the max_turns breaker."""
    if limits.max_turns is not None and state.num_turns >= limits.max_turns:
        text = f"Reached max_turns ({limits.max_turns}) model calls."
        return End("max_turns", text, subtype="error_max_turns", message=text)
    return None


def note_success(state: LoopState) -> LoopState:
    """A message came back: the consecutive-failure counters start over."""
    return replace(state, num_turns=state.num_turns + 1, api_attempts=0, consecutive_overloads=0)
