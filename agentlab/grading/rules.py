"""The careful-loop rules ``agentlab grade`` checks: each a pure function of a behaviour record (the requests
a client sent, what each was answered, when it arrived) and of its scenario.

Each rule belongs to one branch of the decision table and applies only where its branch was reached (a
``pause_turn`` reply for ``pause_turn_resume``, a transient error for ``retry_with_backoff``, ...); where it
applies it holds (✓) or fails (✗), always with the reason, naming the requests. ``RULES`` lists them in the
order of the decision table; docs/conformance.md describes the same rules under the same names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.backend.scenario import Scenario
from agentlab.core.transitions import (
    RECOVERY_STOP_REASONS,
    STOP_REASON_BRANCH,
    TRANSIENT_STATUSES,
    Limits,
    is_prompt_too_long,
    max_tokens_ceiling,
)
from agentlab.grading.verdict import UNIVERSAL, Check, Verdict  # noqa: F401  (UNIVERSAL: re-exported)
from agentlab.observatory.record_types import (
    NO_REPLY, AppendedMessage, Diff, Record, Reply, Request, Result, parse_record)

# -- the bounds the rules use -------------------------------------------------------------------------------

MIN_RETRIES = 3            # a transient error is retried at least this many times in a row before giving up
MIN_BACKOFF_S = 0.25       # the shortest pause before a retry that still counts as backing off
RETRY_AFTER_SLACK = 0.9    # a retry may come this fraction of retry-after early (clock granularity)
MIN_RECOVERIES = 3         # max_tokens: recoveries (escalations + continuations) before giving up is allowed
# the reference loop's bounds: agentlab's own loop with the default Limits
_REFERENCE = Limits()
MAX_CONTINUATIONS = _REFERENCE.max_continuations              # max_tokens: "please continue" messages in a row
OVERLOADS_BEFORE_FALLBACK = _REFERENCE.overloads_before_fallback
MAX_COMPACTIONS = _REFERENCE.max_compactions                  # compactions in a row that do not fit, at most
MAX_PAUSE_RESUMES = _REFERENCE.max_pause_continuations        # pause_turn: resumes in a row, at most
MAX_STOP_BLOCKS = _REFERENCE.stop_hook_block_cap              # Stop hook: blocks fed back, at most
RECOVERY_STOPS = RECOVERY_STOP_REASONS   # a reply with one of these stop reasons is no final answer
RESUME_STOP_REASONS = frozenset(r for r, branch in STOP_REASON_BRANCH.items() if branch == "pause_turn")

Status = Verdict  # what a check found: pass, fail, policy or not_reached (grade_verdict says what each counts as)
# the builtin exceptions that are a bug in the loop's own code, not an ending it chose (ends_cleanly)
CRASHES = frozenset({"AttributeError", "AssertionError", "IndexError", "KeyError", "NameError", "RecursionError",
                     "TypeError", "UnboundLocalError", "ZeroDivisionError", "ImportError", "ModuleNotFoundError",
                     "NotImplementedError", "UnicodeDecodeError", "JSONDecodeError"})
SERVER_FAULTS = frozenset({"server_error", "scenario_error"})  # replies where the server failed, not the client


@dataclass(frozen=True)
class Rule:
    """A careful-loop rule: its name, the row of the decision table it belongs to, a short branch label (the
    heatmap's column), what a careful loop does, and the check (None where the branch was not reached)."""

    name: str
    row: str
    branch: str
    statement: str
    check: Callable[[Run], Check | None]


# -- reading a record -----------------------------------------------------------------------------------------

class Run:
    """A behaviour record with the questions the rules ask of it. ``record`` is a Record, or its JSON data
    (read with :func:`parse_record`: bad data raises RecordError naming the record and the field)."""

    def __init__(self, record: Record | Mapping[str, Any], scenario: Scenario | None) -> None:
        self.record = record if isinstance(record, Record) else parse_record(record, _name_of(record))
        self.scenario = scenario
        self.requests: list[Request] = list(self.record.requests)
        times = self.record.timing.request_s
        self.times: list[float] | None = list(times) if times is not None and len(times) == len(
            self.requests) else None
        self.main = [i for i, r in enumerate(self.requests) if not r.is_summary]

    @property
    def result(self) -> Result:
        return self.record.result

    @property
    def ended(self) -> str:
        """How the run ended, for a failure message: "the run ended", or, when the client raised, the error
        and its message ("the loop raised ValueError (Streaming is required …) and ended")."""
        raised = self.result.raised
        if not raised:
            return "the run ended"
        text = str(self.result.text or "").strip()
        return f"the loop raised {raised}" + (f" ({text})" if text else "") + " and ended"

    def next_main(self, i: int) -> int | None:
        """The index of the next request after ``i`` that is not a summary request."""
        return next((j for j in self.main if j > i), None)

    def n(self, i: int) -> int:
        n = self.requests[i].n
        return i + 1 if n is None else n

    def step(self, i: int) -> Any:
        """The scenario step that answered request ``i`` (its one reply when it has no ``cases``), or None."""
        index = self.requests[i].step
        if self.scenario is None or index is None or not 0 <= index < len(self.scenario.steps):
            return None
        return self.scenario.steps[index]

    def message_replies(self, upto: int | None = None) -> int:
        """How many main requests (up to and including index ``upto``) were answered with a message."""
        return sum(1 for i in self.main if (upto is None or i <= upto) and _reply(self.requests[i]).status == 200)


def _name_of(record: Mapping[str, Any]) -> str:
    """A record's name in an error: its client, version and scenario, as far as it has them."""
    parts = [str(record[k]) for k in ("client", "version", "scenario") if isinstance(record, dict) and record.get(k)]
    return f"the record of {' '.join(parts)}" if parts else "the record"


def _reply(r: Request) -> Reply:
    """What request ``r`` was answered (a placeholder of the server's reads as no reply: ``Request.answer``), so
    only the rules that judge that reply are left without it, not every rule of the run."""
    return r.answer


def _model_ceiling(r: Request) -> int | None:
    """The output ceiling of the model request ``r`` asked for (data/models.yaml), None when it is not listed."""
    from agentlab.backend.models import model_limits

    limits = model_limits(r.model)
    return limits.max_output if limits.known else None


def _at_ceiling(r: Request) -> bool:
    """Whether request ``r`` already asked for its model's whole output ceiling: no escalation is left."""
    ceiling = _model_ceiling(r)
    return ceiling is not None and isinstance(r.max_tokens, int) and r.max_tokens >= ceiling


def _blocks(r: Request) -> list[str]:
    return [str(b) for b in _reply(r).blocks]


def _got(r: Request) -> str:
    """What request ``r`` was answered: "max_tokens [text]", "529 overloaded_error"."""
    reply = _reply(r)
    if reply.status >= 400:
        return f"{reply.status} {reply.error or 'error'}"
    blocks = _blocks(r)
    return f"{reply.stop_reason} [{', '.join(blocks) if blocks else 'empty'}]"


def _diff(r: Request) -> Diff:
    return r.appended


def _said(r: Request) -> str:
    """What a request did, in words, from its action label."""
    action = r.action
    words = {"retry": "sent the same messages again", "resend": "sent the same messages again",
             "escalate": "sent the same messages with a higher max_tokens",
             "tool_results": "sent tool results", "continuation": "asked the model to continue",
             "resume": "sent the assistant content back", "nudge": "sent a 'please continue' message",
             "reprompt": "added a user message", "summary": "asked for a summary",
             "compacted": "sent a rewritten (compacted) history",
             "fallback_model": "sent the request to another model"}
    return words.get(action, "sent another request")


def plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _too_long(r: Request) -> bool:
    return is_prompt_too_long(_reply(r).status, r.error or "")


def _ceiling(r: Request) -> int | None:
    """The model's max_tokens ceiling a 400 names ("max_tokens: 64000 > 4096, ..."), or None."""
    return max_tokens_ceiling(_reply(r).status, r.error or "")


def _scripted_error(r: Request) -> bool:
    """An error the scenario sends on purpose (not a request beyond the script, not the server's checks)."""
    return _reply(r).status >= 400 and r.kind in ("error", "prompt_too_long")


def _retry_after(run: Run, i: int) -> float | None:
    r = run.requests[i]
    headers = {str(k).lower(): v for k, v in ((r.headers or _reply(r).headers or {}).items())}
    raw = headers.get("retry-after")
    step = run.step(i)
    if raw is None and step is not None and step.error is not None:
        raw = step.error.retry_after if step.error.retry_after is not None else step.error.headers.get("retry-after")
    try:
        return None if raw is None else float(raw)
    except (TypeError, ValueError):
        return None


def _pass(rule: str, why: str) -> Check:
    return Check(rule, "pass", why)


def _fail(rule: str, why: str) -> Check:
    return Check(rule, "fail", why)


def _policy(rule: str, why: str, behaviour: str) -> Check:
    """A choice where careful loops differ, not the reference loop's: ``behaviour`` names it in words that are
    the same on every scenario it is seen in (the summary lists it once)."""
    return Check(rule, "policy", why, behaviour)


# -- the rules, in the order of the decision table -------------------------------------------------------------

def sends_the_prompt(run: Run) -> Check | None:
    """Every run: the client sends at least one request, and the first one carries the scenario's prompt."""
    name = "sends_the_prompt"
    if not run.requests:
        posted = [p for p in run.record.probes if str(p).startswith("POST ")
                  and str(p).split(" ", 1)[1].endswith("/messages") and "/v1/" not in str(p)]
        if posted:
            return _fail(name, f"no request reached /v1/messages: the client posted to {posted[0].split(' ', 1)[1]} "
                               f"({ending(run.record)}); it expects a base URL that ends in /v1: grade it with "
                               "--base-url-suffix /v1")
        return _fail(name, f"no request reached the server ({ending(run.record)})")
    if run.scenario is None:
        return None
    words = " ".join(run.scenario.prompt.split())[:100]
    texts = _diff(run.requests[0]).injected_user_texts
    if not any(words in " ".join(t.split()) for t in texts):
        return _fail(name, f"request 1 does not carry the scenario's prompt ({words!r})")
    return _pass(name, "request 1 carries the scenario's prompt")


def retry_with_backoff(run: Run) -> Check | None:
    """Row 0: a transient error (408, 409, 429, 5xx, 529) is sent again with the same messages after a pause
    (at least retry-after when the error gives one), at least MIN_RETRIES times in a row before giving up.

    A switch to the scenario's fallback model after an overload is not a resend: it ends the streak of retries
    and ``fallback_after_overload`` judges it (when it may come, to which model); it needs no pause here, as a
    different model is not the overloaded one. A switch to any other model is not a retry and fails."""
    name = "retry_with_backoff"
    found = [i for i in run.main if _scripted_error(run.requests[i])
             and _reply(run.requests[i]).status in TRANSIENT_STATUSES]
    if not found:
        return None
    fallback = run.scenario.fallback_model if run.scenario is not None else None
    waits: list[str] = []
    streak = 0
    gave_up = ""
    switched = ""
    switches = 0
    for i in run.main:
        r = run.requests[i]
        if i not in found:
            streak = 0
            continue
        streak += 1
        j = run.next_main(i)
        if j is None:
            if streak == 1:
                return _fail(name, f"request {run.n(i)} got {_got(r)}; {run.ended} without a retry — send a "
                                   "transient error again, with backoff, before giving up")
            if streak - 1 < MIN_RETRIES:
                return _policy(name, f"request {run.n(i)} got {_got(r)}; {run.ended} after "
                                     f"{plural(streak - 1, 'retry', 'retries')}; the reference loop retries a "
                                     f"transient error at least {MIN_RETRIES} times before giving up",
                               f"gives up on a transient error after {plural(streak - 1, 'retry', 'retries')} "
                               f"(the reference loop: at least {MIN_RETRIES})")
            gave_up = f", then gave up after {streak - 1} retries"
            break
        nxt = run.requests[j]
        model = nxt.model
        if model != r.model:  # before the messages: a fallback model's request is not a resend of this one
            if not fallback or model != fallback:
                return _fail(name, f"request {run.n(i)} got {_got(r)}; request {run.n(j)} went to {model} instead "
                                   f"of {r.model} — a retry sends the same request; only a configured "
                                   "fallback model may take over")
            switched = f"; request {run.n(j)} switched to the fallback model {fallback} (not a retry: " \
                       "fallback_after_overload judges it)"
            switches += 1
            streak = 0
            continue
        if not _diff(nxt).same_messages:
            return _fail(name, f"request {run.n(i)} got {_got(r)}; request {run.n(j)} {_said(nxt)} instead of "
                               "sending the same messages again")
        if run.times is None:
            continue
        wait = run.times[j] - run.times[i]
        after = _retry_after(run, i)
        need = after * RETRY_AFTER_SLACK if after is not None else MIN_BACKOFF_S
        if wait < need:
            asked = f"the error asked for retry-after {after:g} s" if after is not None else \
                f"back off at least {MIN_BACKOFF_S:g} s"
            return _fail(name, f"request {run.n(i)} got {_got(r)}; request {run.n(j)} came {wait:.2f} s later — "
                               f"{asked}")
        waits.append(f"{wait:.1f} s" + (f" (retry-after {after:g} s)" if after is not None else ""))
    pause = f" (waits {', '.join(waits)})" if waits else " (pauses not judged: the record has no request times)" \
        if run.times is None else ""
    resent = len(found) - switches
    if resent == 0:
        return _pass(name, f"{plural(len(found), 'transient error')}{switched}")
    each = "each " if resent > 1 else ""
    return _pass(name, f"{plural(resent, 'transient error')}, {each}sent again with the same "
                       f"messages{pause}{gave_up}{switched}")


def fallback_after_overload(run: Run) -> Check | None:
    """Row 0, with a fallback model set: after OVERLOADS_BEFORE_FALLBACK 529s in a row, the next request
    goes to the fallback model."""
    name = "fallback_after_overload"
    fallback = run.scenario.fallback_model if run.scenario is not None else None
    if not fallback:
        return None
    streak = 0
    for i in run.main:
        r = run.requests[i]
        if _reply(r).status == 529 and _scripted_error(r):
            streak += 1
            if streak == OVERLOADS_BEFORE_FALLBACK:
                j = run.next_main(i)
                if j is None:
                    return _policy(name, f"request {run.n(i)} was the {streak}rd 529 in a row; {run.ended} instead "
                                         f"of switching to the fallback model {fallback}",
                                   f"ends after {OVERLOADS_BEFORE_FALLBACK} 529s in a row without switching to the "
                                   "fallback model")
                model = run.requests[j].model
                if model != fallback:
                    return _policy(name, f"after {streak} 529s in a row, request {run.n(j)} still went to {model}, "
                                         f"not to the fallback model {fallback}",
                                   f"keeps the overloaded model after {OVERLOADS_BEFORE_FALLBACK} 529s in a row "
                                   f"(the reference loop then switches to the fallback model)")
                return _pass(name, f"after {streak} 529s in a row, request {run.n(j)} went to {fallback}")
        else:
            if streak and r.model == fallback:
                return _policy(name, f"after {plural(streak, '529')} in a row, request {run.n(i)} went to the "
                                     f"fallback model {fallback}; the reference loop switches after "
                                     f"{OVERLOADS_BEFORE_FALLBACK}",
                               f"switches to the fallback model after {plural(streak, '529')} in a row (the "
                               f"reference loop: after {OVERLOADS_BEFORE_FALLBACK})")
            streak = 0
    return None


def no_retry_on_fatal(run: Run) -> Check | None:
    """Row 0: a request error that is not transient (401, 403, 404, a 400 other than "prompt is too long" or a
    max_tokens ceiling) is not sent again unchanged."""
    name = "no_retry_on_fatal"
    found = [i for i in run.main if _scripted_error(run.requests[i])
             and _reply(run.requests[i]).status < 500
             and _reply(run.requests[i]).status not in TRANSIENT_STATUSES
             and not _too_long(run.requests[i]) and _ceiling(run.requests[i]) is None]
    if not found:
        return None
    for i in found:
        r = run.requests[i]
        j = run.next_main(i)
        if j is not None and _diff(run.requests[j]).same_messages \
                and run.requests[j].model == r.model:
            return _fail(name, f"request {run.n(i)} got {_got(r)}, which no retry can fix; request {run.n(j)} "
                               "sent the same messages to the same model again")
    i = found[0]
    j = run.next_main(i)
    return _pass(name, f"the {_got(run.requests[i])} ended the run" if j is None else
                 f"request {run.n(i)} got {_got(run.requests[i])}; request {run.n(j)} {_said(run.requests[j])}, "
                 "not the same request")


def _turns(r: Request) -> int:
    """How many turns a request's history holds: its messages less the ``role: system`` items a client may
    send among them (records.diff_requests reads those as the system prompt, not as turns). Counted where the
    diff describes every message (a first request, or one that kept nothing of the one before); elsewhere the
    messages are counted as they are."""
    diff = _diff(r)
    if diff.kept == 0 and len(diff.appended) == diff.messages_after:
        return sum(1 for m in diff.appended if m.role != "system")
    return diff.messages_after


def _only_the_prompt(r: Request) -> bool:
    """A compacted request whose history is the first user message alone, unchanged: nothing of the work kept."""
    diff = _diff(r)
    return diff.messages_after == 1 and diff.kept == 1 and not diff.appended


def bounded_compaction(run: Run) -> Check | None:
    """Rows 0b and 4: after HTTP 400 "prompt is too long" or ``model_context_window_exceeded``, the next request
    carries a compacted history (never the same one again), and at most MAX_COMPACTIONS compactions in a row
    that still do not fit, then the run ends."""
    name = "bounded_compaction"
    streak = 0
    judged = 0
    skipped = ""
    ended = ""
    for i in run.main:
        r = run.requests[i]
        if r.action == "compacted":
            streak += 1
            if streak > MAX_COMPACTIONS:
                return _policy(name, f"request {run.n(i)} is compaction number {streak} in a row; the reference "
                                     f"loop gives up after {MAX_COMPACTIONS} that do not fit",
                               f"compacts more than {MAX_COMPACTIONS} times in a row (the reference loop gives up "
                               f"after {MAX_COMPACTIONS})")
        overflow = _too_long(r) or _reply(r).stop_reason == "model_context_window_exceeded"
        if not overflow:
            if _reply(r).status == 200:
                streak = 0
            continue
        if _turns(r) <= 1 and streak == 0:
            skipped = (f"request {run.n(i)} already exceeds the window with nothing but the prompt in its history: "
                       "nothing to compact")
            continue
        judged += 1
        j = run.next_main(i)
        if j is None:
            if streak == 0:
                return _fail(name, f"request {run.n(i)} got {_got(r)}; {run.ended} without compacting the history")
            ended = f"; after {plural(streak, 'compaction')} that did not fit, the run ended"
            break
        nxt = run.requests[j]
        if _diff(nxt).same_messages:
            return _fail(name, f"request {run.n(i)} got {_got(r)}; request {run.n(j)} sent the same history again")
        if nxt.action != "compacted":
            return _fail(name, f"request {run.n(i)} got {_got(r)}; request {run.n(j)} {_said(nxt)} instead of "
                               "compacting the history")
        if _only_the_prompt(nxt):
            return _fail(name, f"request {run.n(i)} got {_got(r)}; request {run.n(j)} kept nothing but the prompt: "
                               "all the work so far was thrown away. Keep a summary of it, or the latest turns")
    if not judged:
        return Check(name, "not_reached", skipped) if skipped else None
    summaries = sum(1 for r in run.requests if r.is_summary)
    how = f" (with {plural(summaries, 'summary request')})" if summaries else ""
    each = "each " if judged > 1 else ""
    return _pass(name, f"{plural(judged, 'overflow')}, {each}followed by a compacted history{how}{ended}")


def escalate_cut_tool_call(run: Run) -> Check | None:
    """Row 1: a reply cut off by ``max_tokens`` in the middle of a ``tool_use`` block is asked for again with the
    same messages and a higher ``max_tokens``; the cut-off call is never run."""
    name = "escalate_cut_tool_call"
    found = [i for i in run.main if _reply(run.requests[i]).stop_reason == "max_tokens"
             and _blocks(run.requests[i])[-1:] == ["tool_use"]]
    if not found:
        return None
    for i in found:
        r = run.requests[i]
        j = run.next_main(i)
        if j is None and _at_ceiling(r):
            return _pass(name, f"request {run.n(i)} was cut off in the middle of a tool call at max_tokens "
                               f"{r.max_tokens}, its model's ceiling: no higher max_tokens is left, and the "
                               "run ended without running the cut call")
        if j is None:
            return _fail(name, f"request {run.n(i)} was cut off in the middle of a tool call ({_got(r)}); "
                               f"{run.ended} there instead of asking again with a higher max_tokens")
        nxt = run.requests[j]
        old, new = _diff(nxt).changed.get("max_tokens", [r.max_tokens, nxt.max_tokens])
        if _diff(nxt).same_messages and isinstance(old, int) and isinstance(new, int) and new > old:
            continue
        if nxt.action == "tool_results":
            return _fail(name, f"request {run.n(i)} was cut off in the middle of a tool call; request {run.n(j)} ran "
                               "the cut-off call (sent a tool_result for it) instead of asking again with a higher "
                               "max_tokens")
        return _fail(name, f"request {run.n(i)} was cut off in the middle of a tool call; request {run.n(j)} "
                           f"{_said(nxt)} (max_tokens {old} → {new}) instead of the same messages with a higher "
                           "max_tokens")
    j = run.next_main(found[-1])
    assert j is not None
    return _pass(name, f"the cut-off tool call was asked for again with max_tokens "
                       f"{run.requests[found[-1]].max_tokens} → {run.requests[j].max_tokens}")


def _tool_use_ids(entry: AppendedMessage) -> list[str]:
    """The ids of the ``tool_use`` blocks (not ``server_tool_use``) in a described message, in order."""
    uses = iter(entry.tool_uses)
    ids = []
    for kind in entry.blocks:
        if kind in ("tool_use", "server_tool_use"):
            use: dict[str, Any] = next(uses, {})
            if kind == "tool_use":
                ids.append(str(use.get("id")))
    return ids


def _called_names(run: Run, i: int) -> set[str]:
    """The names of the tools the scripted reply to request ``i`` calls (empty when the scenario is unknown)."""
    step = run.step(i)
    replies = [step, *(step.cases or [])] if step is not None else []
    return {b.name for reply in replies for b in reply.content or [] if b.type == "tool_use"}


def _told_as_text(run: Run, i: int, entries: list[AppendedMessage]) -> bool:
    """Whether the client sent the tool calls of request ``i``'s reply back as text ("Calling tools: ..." in
    the assistant message, then "Observation: ..." in a user message, as smolagents does): no tool_use block
    left for the API to pair, an assistant text that names a called tool, and a user text after it."""
    assistant, rest = entries[0], entries[1:]
    texts = " ".join(assistant.texts)
    names = _called_names(run, i)
    if not texts or (names and not any(n in texts for n in names)):
        return False
    return any(e.role == "user" and e.texts and not e.tool_results for e in rest)


def tool_result_pairing(run: Run) -> Check | None:
    """Row 2: every reply with ``tool_use`` blocks (whatever its stop_reason) is followed by the assistant
    message with those calls and ONE user message holding only ``tool_result`` blocks, one per call, each id
    answered once, nothing after them."""
    name = "tool_result_pairing"
    found = [i for i in run.main if _reply(run.requests[i]).status == 200 and "tool_use" in _blocks(run.requests[i])
             and not (_reply(run.requests[i]).stop_reason == "max_tokens"
                      and _blocks(run.requests[i])[-1:] == ["tool_use"])]
    if not found:
        return None
    answered = told = 0
    notes: list[str] = []
    max_turns = run.scenario.max_turns if run.scenario is not None else None
    for i in found:
        r = run.requests[i]
        want = _blocks(r).count("tool_use")
        label = _reply(r).stop_reason
        j = run.next_main(i)
        if j is None:
            if max_turns and run.message_replies(i) >= max_turns:
                notes.append(f"request {run.n(i)}'s calls left unanswered at max_turns")
                continue
            if r.final_answer_call and want == 1:
                notes.append(f"request {run.n(i)}'s call of {r.final_answer_call} is the final answer (the "
                             "server's call of it for a finished reply, under a forced tool_choice); the run ended "
                             "on it")
                continue
            labelled = f" (labelled {label})" if label != "tool_use" else ""
            return _fail(name, f"request {run.n(i)}'s reply asked for {plural(want, 'tool call')}{labelled}; "
                               f"{run.ended} without sending the results")
        nxt = run.requests[j]
        diff = _diff(nxt)
        if diff.dropped > 0:
            notes.append(f"request {run.n(j)} rewrote the history: not judged there")
            continue
        if diff.same_messages:
            return _fail(name, f"request {run.n(i)}'s reply asked for {plural(want, 'tool call')}; request "
                               f"{run.n(j)} sent the same messages again instead of the results")
        entries = list(diff.appended)
        at = next((k for k, e in enumerate(entries) if e.role == "assistant"), None)
        if at is None:
            return _fail(name, f"request {run.n(j)} did not send back the assistant message with the "
                               f"{plural(want, 'tool call')} of request {run.n(i)}'s reply")
        ids = _tool_use_ids(entries[at])
        if not ids and _told_as_text(run, i, entries[at:]):
            told += want
            continue
        if len(ids) != want:
            return _fail(name, f"request {run.n(j)} sent back {len(ids)} of the {want} tool_use block(s) of "
                               f"request {run.n(i)}'s reply")
        rest = entries[at + 1:]
        if not rest or rest[0].role != "user" or not rest[0].tool_results:
            return _fail(name, f"request {run.n(j)}: no user message of tool_result blocks follows the tool calls "
                               f"({', '.join(ids)})")
        user = rest[0]
        got = [str(t.get("tool_use_id")) for t in user.tool_results]
        missing = [x for x in ids if x not in got]
        extra = sorted({x for x in got if x not in ids})
        twice = sorted({x for x in got if got.count(x) > 1})
        if missing or extra or twice:
            parts = ([f"no result for {', '.join(missing)}"] if missing else []) + \
                    ([f"results for unknown ids {', '.join(extra)}"] if extra else []) + \
                    ([f"{', '.join(twice)} answered more than once"] if twice else [])
            return _fail(name, f"request {run.n(j)}: {'; '.join(parts)}")
        others = [str(b) for b in user.blocks if b != "tool_result"]
        if others:
            return _fail(name, f"request {run.n(j)}: the tool results share their message with "
                               f"{', '.join(others)} block(s); send only the tool_result blocks")
        if any(e.tool_results for e in rest[1:]):
            return _fail(name, f"request {run.n(j)}: the tool results are split over several messages")
        answered += want
    if not answered and not told:
        return Check(name, "not_reached", "; ".join(notes)) if notes else None
    labels = sorted({str(_reply(run.requests[i]).stop_reason) for i in found} - {"tool_use"})
    extra_note = f" (also under the label {', '.join(labels)})" if labels else ""
    if told:  # the API accepts a history with no tool_use blocks; the texts tell the calls and their results
        notes.insert(0, f"{plural(told, 'tool call')} sent back as text (the call, then its result in a user "
                        "message), which the API accepts")
    said = (f"{plural(answered, 'tool call')} answered{extra_note}: each id once, in one message of results, "
            "nothing after them") if answered else f"every tool call answered{extra_note}"
    return _pass(name, said + (f"; {'; '.join(notes)}" if notes else ""))


def bounded_max_tokens_recovery(run: Run) -> Check | None:
    """Row 3: a text reply cut off by ``max_tokens`` is recovered — the same messages with a higher
    ``max_tokens``, or the partial answer kept and a user message asking to continue — at least MIN_RECOVERIES
    times before giving up, never a resend at the same limit, at most MAX_CONTINUATIONS continuations in a row."""
    name = "bounded_max_tokens_recovery"
    found = [i for i in run.main if _reply(run.requests[i]).stop_reason == "max_tokens"
             and _blocks(run.requests[i])[-1:] != ["tool_use"]]
    if not found:
        return None
    escalations = continuations = 0
    ended = ""
    for i in run.main:
        r = run.requests[i]
        if i not in found:
            if _reply(r).status == 200:
                escalations = continuations = 0
            continue
        j = run.next_main(i)
        recoveries = escalations + continuations
        if j is None:
            if 0 < recoveries < MIN_RECOVERIES:
                return _policy(name, f"request {run.n(i)} was cut off ({_got(r)}); {run.ended} after "
                                     f"{plural(escalations, 'escalation')} and {plural(continuations, 'continuation')}"
                                     f"; the reference loop recovers at least {MIN_RECOVERIES} times before giving up",
                               f"gives up on a cut-off reply after {plural(recoveries, 'recovery', 'recoveries')} "
                               f"(the reference loop: at least {MIN_RECOVERIES})")
            if recoveries < MIN_RECOVERIES:
                remedy = ("ask the model to continue (max_tokens is already its model's ceiling)"
                          if _at_ceiling(r) else "raise max_tokens or ask the model to continue")
                return _fail(name, f"request {run.n(i)} was cut off ({_got(r)}); {run.ended} after "
                                   f"{plural(escalations, 'escalation')} and {plural(continuations, 'continuation')}"
                                   f" — {remedy}, at least {MIN_RECOVERIES} times in all, before giving up")
            ended = "; then gave up"
            break
        nxt = run.requests[j]
        diff = _diff(nxt)
        if diff.same_messages:
            old, new = diff.changed.get("max_tokens", [r.max_tokens, nxt.max_tokens])
            if isinstance(old, int) and isinstance(new, int) and new > old:
                escalations += 1
                continue
            return _fail(name, f"request {run.n(i)} was cut off; request {run.n(j)} sent it again at the same "
                               f"max_tokens ({new}) — it will be cut off again")
        if nxt.action == "continuation":
            kept = any(e.role == "assistant" for e in diff.appended)
            if not kept:
                return _fail(name, f"request {run.n(j)} asked to continue without sending back the partial answer "
                                   f"of request {run.n(i)}")
            continuations += 1
            if continuations > MAX_CONTINUATIONS:
                return _policy(name, f"request {run.n(j)} asks to continue for the {continuations}th time in a "
                                     f"row; the reference loop stops after {MAX_CONTINUATIONS}",
                               f"asks to continue more than {MAX_CONTINUATIONS} times in a row (the reference loop: "
                               f"at most {MAX_CONTINUATIONS})")
            continue
        return _fail(name, f"request {run.n(i)} was cut off ({_got(r)}); request {run.n(j)} {_said(nxt)} instead of "
                           "raising max_tokens or asking to continue")
    how = []
    total_esc = sum(1 for i in run.main if run.requests[i].action == "escalate")
    total_cont = sum(1 for i in run.main if run.requests[i].action == "continuation")
    if total_esc:
        how.append(plural(total_esc, "escalation"))
    if total_cont:
        how.append(plural(total_cont, "continuation"))
    return _pass(name, f"{plural(len(found), 'cut-off reply', 'cut-off replies')} recovered by "
                       f"{' and '.join(how) or 'nothing'}{ended}")


def clamp_max_tokens(run: Run) -> Check | None:
    """Row 3: a 400 that names the model's ``max_tokens`` ceiling (for a request above it) is answered by the
    same messages with ``max_tokens`` at or below the ceiling."""
    name = "clamp_max_tokens"
    found = [i for i in run.main if (c := _ceiling(run.requests[i])) is not None
             and isinstance(run.requests[i].max_tokens, int) and run.requests[i].max_tokens > c]
    if not found:
        return None
    for i in found:
        r = run.requests[i]
        ceiling = _ceiling(r)
        assert ceiling is not None  # found holds only the requests whose 400 named one
        j = run.next_main(i)
        if j is None:
            return _fail(name, f"request {run.n(i)} asked for max_tokens {r.max_tokens}; the 400 named the "
                               f"model's ceiling ({ceiling}) and {run.ended} instead of sending it again within it")
        nxt = run.requests[j]
        if not _diff(nxt).same_messages or not isinstance(nxt.max_tokens, int) \
                or nxt.max_tokens > ceiling:
            return _fail(name, f"the 400 to request {run.n(i)} named the ceiling {ceiling}; request {run.n(j)} "
                               f"{_said(nxt)} with max_tokens {nxt.max_tokens}")
    j = run.next_main(found[-1])
    assert j is not None
    return _pass(name, f"sent again with max_tokens {run.requests[j].max_tokens}, the ceiling the 400 named")


def no_resend_after_refusal(run: Run) -> Check | None:
    """Row 5: after a ``refusal`` the model that refused is not asked again without a reset context, "you must
    reset the conversation context before continuing. You can remove or rephrase the turn that triggered the
    refusal, or clear the conversation history entirely" ("Handle streaming refusals"); another model may be
    tried. The context was reset when some message of the refused request is gone or rewritten in the next one
    (its ``dropped``); a note appended after the refused turn, or merged into it, leaves that turn as it was."""
    name = "no_resend_after_refusal"
    found = [i for i in run.main if _reply(run.requests[i]).stop_reason == "refusal"]
    if not found:
        return None
    for i in found:
        j = run.next_main(i)
        if j is not None and run.requests[j].model == run.requests[i].model and not run.requests[j].appended.dropped:
            return _fail(name, f"request {run.n(i)} was refused; request {run.n(j)} {_said(run.requests[j])} to "
                               f"{run.requests[j].model}, the model that refused, with the turn that triggered "
                               "the refusal left as it was (the context not reset)")
    return _pass(name, _after_refusal(run, found[0]))


def _after_refusal(run: Run, i: int) -> str:
    """What followed the (first) refusal, for a passing no_resend_after_refusal."""
    j = run.next_main(i)
    if j is None:
        return "the refusal ended the run"
    if run.requests[j].model != run.requests[i].model:
        return f"after the refusal, request {run.n(j)} went to {run.requests[j].model}, another model"
    dropped = run.requests[j].appended.dropped
    return (f"after the refusal, request {run.n(j)} asked {run.requests[j].model} again with "
            f"{plural(dropped, 'message')} of the refused request removed or rewritten (the context reset)")


def _before(run: Run, j: int) -> int | None:
    """The index of the main request before ``j`` (None for the first)."""
    return max((i for i in run.main if i < j), default=None)


def credit_token_retry(run: Run) -> Check | None:
    """Row 5, a fallback retry the client builds ("Fallback credit"; the SDK's ``BetaRefusalStopDetails``): a
    request that echoes a refusal's ``fallback_credit_token`` goes to another model with the refused request's
    body unchanged, or with one assistant message appended that continues the partial answer, where the refusal's
    ``fallback_has_prefill_claim`` allows it. (Retrying without the token is allowed: it is billed as a cache
    write.)"""
    name = "credit_token_retry"
    echoing = [j for j in run.main if run.requests[j].credit_token]
    if not echoing:
        retried = [(i, j) for i in run.main if _reply(run.requests[i]).credit_token
                   and (j := run.next_main(i)) is not None and run.requests[j].model != run.requests[i].model]
        if not retried:
            return None
        refusal, retry = retried[0]
        return _pass(name, f"request {run.n(retry)} retried the refusal of request {run.n(refusal)} on "
                           f"{run.requests[retry].model} without its credit token (allowed: billed as a cache "
                           "write)")
    for j in echoing:
        r = run.requests[j]
        i = _before(run, j)
        refused = _reply(run.requests[i]) if i is not None else NO_REPLY
        if r.credit_token != "echoed" or refused.stop_reason != "refusal":
            return _fail(name, f"request {run.n(j)} sends a fallback_credit_token that the reply before it did not "
                               "give: a token is echoed on the retry of the refusal that carried it")
        assert i is not None
        if r.model == run.requests[i].model:
            return _fail(name, f"request {run.n(j)} echoes the credit token to {r.model}, the model that "
                               "refused: the token is redeemed on a fallback model")
        diff = _diff(r)
        changed = sorted(k for k in diff.changed if k in ("system", "tools"))
        entries = list(diff.appended)
        continued = (len(entries) == 1 and entries[0].role == "assistant" and not entries[0].extends_previous
                     and diff.kept == diff.messages_before and not diff.dropped)
        if changed or not (diff.same_messages or continued):
            what = f"its {' and '.join(changed)} changed" if changed else _said(r)
            return _fail(name, f"request {run.n(j)} echoes the credit token of request {run.n(i)}'s refusal but "
                               f"{what}: the retry sends the refused body unchanged, or with one assistant message "
                               "that continues the partial answer")
        if continued and not refused.prefill_claim:
            return _fail(name, f"request {run.n(j)} echoes the credit token with the partial answer appended, "
                               f"but request {run.n(i)}'s refusal has no prefill claim: send the body unchanged")
    how = "the same body" if all(_diff(run.requests[j]).same_messages for j in echoing) else \
        "the partial answer appended as one assistant message"
    return _pass(name, f"{plural(len(echoing), 'retry', 'retries')} echoed the credit token to "
                       f"{run.requests[echoing[-1]].model} with {how}")


def stop_after_chain_refusal(run: Run) -> Check | None:
    """Row 5, with server-side ``fallbacks`` ("Refusals and fallback"; the SDK's ``BetaFallbacksParam``: "Tried in
    order: if the first entry also declines, the second is tried"): a refusal to a request that named fallbacks is
    the whole chain's, and the run ends there; only a refusal that names a ``recommended_model`` (its fallback
    could not run) may be retried, once, directly on that model."""
    name = "stop_after_chain_refusal"
    found = [i for i in run.main if _reply(run.requests[i]).stop_reason == "refusal"
             and run.requests[i].fallbacks]
    if not found:
        return None
    for i in found:
        r = run.requests[i]
        j = run.next_main(i)
        if j is None:
            continue
        recommended = _reply(r).recommended_model
        nxt = run.requests[j]
        if recommended and nxt.model == recommended and not nxt.fallbacks:
            continue
        chain = r.fallbacks if isinstance(r.fallbacks, str) else ", ".join(map(str, r.fallbacks or []))
        return _fail(name, f"request {run.n(i)} named fallbacks ({chain}) and was refused: the whole chain "
                           f"declined; request {run.n(j)} {_said(nxt)} to {nxt.model} instead of ending the run")
    i = found[-1]
    j = run.next_main(i)
    return _pass(name, "the refusal of the whole fallback chain ended the run" if j is None else
                 f"request {run.n(j)} retried once on {run.requests[j].model}, the refusal's recommended_model")


def keep_fallback_block(run: Run) -> Check | None:
    """Row 5: an answer served by a fallback model carries a ``fallback`` block; when that assistant turn is sent
    back, the block is kept, the blocks after it unchanged (the SDK's ``BetaFallbackBlockParam``: "When you send the
    assistant turn back, keep this block in its original position")."""
    name = "keep_fallback_block"
    judged = 0
    for i in run.main:
        want = _blocks(run.requests[i])
        j = run.next_main(i)
        if "fallback" not in want or j is None or _reply(run.requests[i]).status != 200:
            continue
        sent = [b for e in _diff(run.requests[j]).appended if e.role == "assistant"
                for b in map(str, e.blocks)]
        if not sent:
            continue
        judged += 1
        after = want[len(want) - want[::-1].index("fallback"):]
        if "fallback" not in sent:
            return _fail(name, f"request {run.n(j)} sent request {run.n(i)}'s answer back without its fallback "
                               "block: keep it in its original position")
        if sent[len(sent) - sent[::-1].index("fallback"):] != after:
            return _fail(name, f"request {run.n(j)} moved the fallback block of request {run.n(i)}'s answer: the "
                               f"blocks after it were [{', '.join(after)}]")
    if not judged:
        return None
    return _pass(name, f"{plural(judged, 'answer')} served by a fallback sent back with the fallback block in place")


def compaction_block_unchanged(run: Run) -> Check | None:
    """The beta ``compaction`` stop reason (server-side compaction): each ``compaction`` block of a reply goes back
    in the next request unchanged (the SDK's ``BetaCompactionBlock``: encrypted content and signature "to be
    round-tripped verbatim", tool changes "Send the block back unchanged"). That a ``compaction`` stop is resumed at
    all is ``pause_turn_resume``'s to judge."""
    name = "compaction_block_unchanged"
    judged = 0
    for i in run.main:
        want = list(_reply(run.requests[i]).compactions or [])
        j = run.next_main(i)
        if not want or j is None:
            continue
        judged += 1
        sent = [d for e in _diff(run.requests[j]).appended for d in e.compactions]
        missing = [d for d in want if d not in sent]
        if missing and sent:
            return _fail(name, f"request {run.n(j)} sent request {run.n(i)}'s compaction block back changed (its "
                               "content, signature, encrypted content or tool changes differ): send it unchanged")
        if missing:
            return _fail(name, f"request {run.n(j)} left out the compaction block of request {run.n(i)}'s reply: "
                               "send it back unchanged")
    if not judged:
        return None
    return _pass(name, f"{plural(judged, 'compaction block')} sent back unchanged")


def pause_turn_resume(run: Run) -> Check | None:
    """Row 6: after ``pause_turn`` the next request sends the assistant content back unchanged as the last
    message (no user message after it), at most MAX_PAUSE_RESUMES times in a row."""
    name = "pause_turn_resume"
    found = [i for i in run.main if _reply(run.requests[i]).stop_reason in RESUME_STOP_REASONS]
    if not found:
        return None
    streak = 0
    for i in run.main:
        r = run.requests[i]
        if i not in found:
            if _reply(r).status == 200:
                streak = 0
            continue
        j = run.next_main(i)
        if j is None:
            return _fail(name, f"request {run.n(i)} was paused ({_got(r)}); {run.ended} there, with the "
                               "server tool unfinished")
        nxt = run.requests[j]
        diff = _diff(nxt)
        entries = list(diff.appended)
        if diff.same_messages:
            return _fail(name, f"request {run.n(j)} sent the same messages again without the paused content")
        if any(e.role == "user" for e in entries):
            return _fail(name, f"request {run.n(j)} added a user message after the paused content; send the "
                               f"content back as the last message, nothing after it ({_said(nxt)})")
        sent = [e for e in entries if e.role == "assistant"]
        if not sent or diff.dropped > 0:
            return _fail(name, f"request {run.n(j)} did not send the paused content back ({_said(nxt)})")
        got = [str(b) for e in sent for b in e.blocks]
        want = _blocks(r)
        if got != want:
            return _fail(name, f"request {run.n(j)} sent back [{', '.join(got)}] instead of the paused content "
                               f"[{', '.join(want)}] unchanged")
        step = run.step(i)
        if step is not None and not step.cases and step.content:
            from agentlab.observatory.records import describe_message

            expected = describe_message({"role": "assistant", "content": [dict(b) for b in step.content]})
            mine = {"texts": [t for e in sent for t in e.texts],
                    "tool_uses": [u for e in sent for u in e.tool_uses]}
            if mine["texts"] != expected.get("texts", []) or mine["tool_uses"] != expected.get("tool_uses", []):
                return _fail(name, f"request {run.n(j)} changed the paused content (its texts or tool ids differ "
                                   "from the reply's)")
        streak += 1
        if streak > MAX_PAUSE_RESUMES:
            return _policy(name, f"request {run.n(j)} resumes a paused answer for the {streak}th time in a row; "
                                 f"the reference loop stops after {MAX_PAUSE_RESUMES}",
                           f"resumes a paused turn more than {MAX_PAUSE_RESUMES} times in a row (the reference "
                           f"loop: at most {MAX_PAUSE_RESUMES})")
    return _pass(name, f"{plural(len(found), 'paused answer')} sent back unchanged, nothing after "
                       f"{'it' if len(found) == 1 else 'them'}")


def stop_when_done(run: Run) -> Check | None:
    """Rows 7 and 11: a final answer (text, no ``tool_use`` block, nothing to recover — ``end_turn``,
    ``stop_sequence``, a ``tool_use`` label on text, an unknown stop_reason) ends the run: no request follows.
    (With a Stop hook, ``stop_hook_feedback`` judges instead.)"""
    name = "stop_when_done"
    if run.scenario is not None and run.scenario.stop_hook is not None:
        return None
    found = [i for i in run.main if _reply(run.requests[i]).status == 200 and _blocks(run.requests[i])
             and "tool_use" not in _blocks(run.requests[i])
             and _reply(run.requests[i]).stop_reason not in RECOVERY_STOPS]
    if not found:
        return None
    for i in found:
        j = run.next_main(i)
        if j is not None:
            return _fail(name, f"request {run.n(i)} got a final answer ({_got(run.requests[i])}); request "
                               f"{run.n(j)} {_said(run.requests[j])} anyway")
    last = run.requests[found[-1]]
    if run.result.timed_out:
        return _fail(name, f"request {run.n(found[-1])} got a final answer ({_got(last)}); the client sent nothing "
                           "more but did not end: it was still running at the timeout")
    return _pass(name, f"the final answer ({_got(last)}) ended the run")


def nudge_empty_turn(run: Run) -> Check | None:
    """Row 8: an empty ``end_turn`` right after tool results gets one "please continue" user message — never
    a bare resend, never a second nudge, never silence."""
    name = "nudge_empty_turn"
    found = [i for i in run.main if _reply(run.requests[i]).status == 200 and not _blocks(run.requests[i])
             and _reply(run.requests[i]).stop_reason == "end_turn"
             and run.requests[i].action == "tool_results"]
    if not found:
        return None
    for i in found:
        j = run.next_main(i)
        if j is None:
            return _fail(name, f"request {run.n(i)}, right after the tool results, came back empty "
                               f"({_got(run.requests[i])}); {run.ended} with no answer — send one 'please "
                               "continue' message")
        nxt = run.requests[j]
        if _diff(nxt).same_messages:
            return _fail(name, f"request {run.n(i)} came back empty; request {run.n(j)} sent the same messages again "
                               "(a bare resend) instead of one 'please continue' message")
        if nxt.action != "nudge":
            return _fail(name, f"request {run.n(i)} came back empty; request {run.n(j)} {_said(nxt)} instead of one "
                               "'please continue' message")
        k = run.next_main(j)
        if k is not None and not _blocks(nxt) and run.requests[k].action == "nudge":
            return _fail(name, f"request {run.n(k)} nudges a second time; one 'please continue' is the limit")
    j = run.next_main(found[-1])
    assert j is not None
    texts = _diff(run.requests[j]).injected_user_texts or [""]
    return _pass(name, f"one nudge after the empty reply: {texts[-1]!r}")


def stop_at_max_turns(run: Run) -> Check | None:
    """Row 9, with a turn limit set: no more model calls that return a message than ``max_turns``."""
    name = "stop_at_max_turns"
    limit = run.scenario.max_turns if run.scenario is not None else None
    if not limit:
        return None
    calls = run.message_replies()
    if calls > limit:
        return _fail(name, f"{calls} model calls returned a message; the limit is max_turns {limit}")
    return _pass(name, f"{calls} model call(s) returned a message, within max_turns {limit}")


def stop_hook_feedback(run: Run) -> Check | None:
    """Row 10, with a Stop hook set: the hook's reason is sent back (a user message carrying it) once per block,
    at most MAX_STOP_BLOCKS times, and nothing else follows a final answer. A record keeps the first 160
    characters of each text, so a message that names the Stop hook counts too (Claude Code 2.1.332 puts the
    hook's command line before its reason)."""
    name = "stop_hook_feedback"
    spec = run.scenario.stop_hook if run.scenario is not None else None
    if spec is None:
        return None
    reason = " ".join(spec.reason.split())[:40].lower()

    def carries_reason(j: int) -> bool:
        diff = _diff(run.requests[j])
        texts = (diff.injected_user_texts) + (diff.injected_system_texts)
        return any(reason in " ".join(t.split()).lower() or "stop hook" in t.lower() for t in texts)

    feedback = [j for j in run.main if run.requests[j].action != "first" and carries_reason(j)]
    finals = [i for i in run.main if _reply(run.requests[i]).status == 200 and _blocks(run.requests[i])
              and "tool_use" not in _blocks(run.requests[i])
              and _reply(run.requests[i]).stop_reason not in RECOVERY_STOPS]
    if not finals and not feedback:
        return None
    blocks = MAX_STOP_BLOCKS if spec.times == "always" else min(int(spec.times), MAX_STOP_BLOCKS)
    for i in finals:
        j = run.next_main(i)
        if j is not None and j not in feedback:
            return _fail(name, f"request {run.n(i)} got a final answer; request {run.n(j)} {_said(run.requests[j])} "
                               "without the hook's reason — only a blocking Stop hook's reason may follow a final "
                               "answer")
    if spec.times == "always" and feedback and len(feedback) != blocks:
        return _policy(name, f"the Stop hook always blocks; its reason was sent back "
                             f"{plural(len(feedback), 'time')}, then the run ended; the reference loop stops after "
                             f"{MAX_STOP_BLOCKS}",
                       f"stops feeding back a Stop hook that always blocks after {plural(len(feedback), 'time')} "
                       f"(the reference loop: after {MAX_STOP_BLOCKS})")
    if len(feedback) < blocks:
        return _fail(name, f"the Stop hook blocks {plural(blocks, 'time')}; its reason was sent back "
                           f"{plural(len(feedback), 'time')}, then the run ended")
    if len(feedback) > blocks:
        cap = f" (a careful loop stops after {MAX_STOP_BLOCKS})" if spec.times == "always" else ""
        return _fail(name, f"the hook's reason was sent back {plural(len(feedback), 'time')}; it blocks "
                           f"{plural(blocks, 'time')}{cap}")
    capped = ", the cap; then the run ended" if spec.times == "always" else ", then the run ended"
    return _pass(name, f"the hook's reason was sent back {plural(len(feedback), 'time')}{capped}")


def ends_on_its_own(run: Run) -> Check | None:
    """Every run: the client ends by itself within the time allowed (a client stopped at the timeout fails)."""
    name = "ends_on_its_own"
    result = run.result
    if result.timed_out:
        limit = result.timeout_s
        within = f" within {limit:g} s" if isinstance(limit, int | float) else ""
        return _fail(name, f"did not end{within}; stopped after {plural(len(run.requests), 'request')}")
    return _pass(name, f"ended by itself ({ending(run.record)})")


def _error_ending(result: Result) -> str | None:
    """How a run ended with an error, in words ("the loop raised KeyError ('id')", "the command exited with
    status 1"), or None when it did not (it returned, exited 0, or was stopped at the timeout)."""
    if result.timed_out:
        return None
    if result.raised:
        text = " ".join(str(result.text or "").split())
        return f"the loop raised {result.raised}" + (f" ({text})" if text else "")
    if result.signal:
        return f"the command was killed by signal {result.signal}"
    code = result.exit_code
    return f"the command exited with status {code}" if isinstance(code, int) and code != 0 else None


def _crashed(result: Result) -> str | None:
    """The builtin exception (a bug in the loop's own code) the run ended on: the one a function raised, or the
    one a command's last line of stderr names (``KeyError: 'id'``, ``TypeError: x is not a function``)."""
    raised = str(result.raised or "")
    if raised in CRASHES:
        return raised
    lines = str(result.stderr or "").strip().splitlines()
    match = re.match(r"\s*(?:Uncaught\s+)?([A-Za-z]+)(?::|$)", lines[-1]) if lines else None
    return match.group(1) if match and match.group(1) in CRASHES and result.exit_code else None


def ends_cleanly(run: Run) -> Check | None:
    """Every run that ends with an error (a raise, a nonzero exit, a signal): only where a careful loop ends with
    one — after an error reply of the script (a 401 / 403 / 404 / other 400 no retry fixes; a transient error,
    an overflow or a ceiling, where the branch's rule judges whether the loop tried enough first), a refusal, a
    reply it could not recover (max_tokens, an overflow), or at max_turns. Ending with an error after a final
    answer, after a reply the script did not send (the server refused a malformed request as the live API
    would), or on a bug in the loop's own code (a KeyError, a TypeError, ...) is a crash and fails."""
    name = "ends_cleanly"
    error = _error_ending(run.result)
    if error is None or not run.main:
        return None
    i = run.main[-1]
    r = run.requests[i]
    reply = _reply(r)
    got = f"request {run.n(i)} got {_got(r)}"
    bug = _crashed(run.result)
    if bug:
        return _fail(name, f"{got}; {error}: a {bug} is a bug in the loop's own code, not an ending it chose")
    if r.kind in SERVER_FAULTS or r.placeholder_reply:
        return Check(name, "not_reached", f"{got}, the server's own failure; {error}, which is not judged")
    if _scripted_error(r):
        if reply.status in TRANSIENT_STATUSES or _too_long(r) or _ceiling(r) is not None:
            return _pass(name, f"{error} after {got}: giving up there is its branch's ending (the branch's rule "
                               "judges whether the loop tried enough first)")
        return _pass(name, f"{error} after {got}, which no retry can fix: ending with an error is right")
    if reply.status >= 400:
        said = " ".join(str(r.error or "").split())[:200]
        return _fail(name, f"{got}{f' ({said})' if said else ''}, which the scenario did not send: the server "
                           f"refused the request, as the live API would; {error} on its own malformed request")
    stop = reply.stop_reason
    limit = run.scenario.max_turns if run.scenario is not None else None
    if stop == "refusal":
        return _pass(name, f"{error} after {got}: ending with an error result after a refusal is right")
    if stop in RECOVERY_STOPS:   # refusal, the other one, was judged above
        return _pass(name, f"{error} after {got}: ending there is its branch's to judge (the branch's rule says "
                           "whether the loop tried enough first)")
    if limit and run.message_replies() >= limit:
        return _pass(name, f"{error} at max_turns {limit}: ending with an error result there is right")
    if "tool_use" in _blocks(r):
        return _fail(name, f"{got}; {error} with its tool calls unanswered")
    if run.scenario is not None and run.scenario.stop_hook is not None:
        return _pass(name, f"{error} after {got}, a final answer its Stop hook blocks: ending without the hook's "
                           "approval is the hook branch's ending (stop_hook_feedback judges it)")
    return _fail(name, f"{got}, a final answer; {error} — a run that has its answer ends by returning it")


RULES: tuple[Rule, ...] = (
    Rule("sends_the_prompt", "—", "the prompt",
         "sends the scenario's prompt in its first request", sends_the_prompt),
    Rule("retry_with_backoff", "0", "transient error",
         "sends a 429 / 5xx / 529 again with the same messages after a pause (retry-after when given), "
         f"at least {MIN_RETRIES} times before giving up", retry_with_backoff),
    Rule("fallback_after_overload", "0", "overload fallback",
         f"with a fallback model set, switches to it after {OVERLOADS_BEFORE_FALLBACK} 529s in a row",
         fallback_after_overload),
    Rule("no_retry_on_fatal", "0", "fatal error",
         "does not send a 401 / 403 / 404 / other 400 again unchanged", no_retry_on_fatal),
    Rule("bounded_compaction", "0b, 4", "context overflow",
         "compacts the history after 'prompt is too long' or model_context_window_exceeded (keeping more than the "
         f"prompt), never resends it as is, and ends after {MAX_COMPACTIONS} compactions in a row that do not fit",
         bounded_compaction),
    Rule("escalate_cut_tool_call", "1", "cut-off tool call",
         "asks again with a higher max_tokens when max_tokens cut a tool_use block off; never runs the cut call",
         escalate_cut_tool_call),
    Rule("tool_result_pairing", "2", "tool calls",
         "answers every tool_use block (whatever the label) with one user message of tool_result blocks, each id "
         "once, nothing after them", tool_result_pairing),
    Rule("bounded_max_tokens_recovery", "3", "max_tokens",
         f"raises max_tokens or keeps the partial answer and asks to continue, at least {MIN_RECOVERIES} times "
         f"before giving up, at most {MAX_CONTINUATIONS} continuations in a row", bounded_max_tokens_recovery),
    Rule("clamp_max_tokens", "3", "max_tokens ceiling",
         "sends the request again within the ceiling a 400 names", clamp_max_tokens),
    Rule("no_resend_after_refusal", "5", "refusal",
         "never asks the model that refused again without resetting the context (the turn that triggered the "
         "refusal removed or rephrased); another model may be tried", no_resend_after_refusal),
    Rule("credit_token_retry", "5", "credit token",
         "echoes a refusal's fallback credit token only on a retry to another model, with the refused body unchanged "
         "or one assistant message continuing the partial answer", credit_token_retry),
    Rule("stop_after_chain_refusal", "5", "fallback chain",
         "ends the run when a request with server-side fallbacks is refused (the whole chain declined), but for one "
         "retry on the refusal's recommended_model", stop_after_chain_refusal),
    Rule("keep_fallback_block", "5", "fallback block",
         "keeps the fallback block of an answer a fallback model served when it sends that turn back",
         keep_fallback_block),
    Rule("pause_turn_resume", "6", "pause_turn",
         "sends the paused assistant content back unchanged as the last message, at most "
         f"{MAX_PAUSE_RESUMES} times in a row", pause_turn_resume),
    Rule("compaction_block_unchanged", "6", "compaction block",
         "sends each compaction block of a reply back unchanged in the next request", compaction_block_unchanged),
    Rule("stop_when_done", "7, 11", "final answer",
         "ends the run on a final answer (no tool_use block, nothing to recover), whatever its label",
         stop_when_done),
    Rule("nudge_empty_turn", "8", "empty turn",
         "answers an empty end_turn right after tool results with one 'please continue' message",
         nudge_empty_turn),
    Rule("stop_at_max_turns", "9", "max_turns",
         "makes no more model calls than max_turns", stop_at_max_turns),
    Rule("stop_hook_feedback", "10", "Stop hook",
         f"sends a blocking Stop hook's reason back and runs again, at most {MAX_STOP_BLOCKS} times",
         stop_hook_feedback),
    Rule("ends_on_its_own", "—", "ends on its own",
         "ends by itself, within the time allowed", ends_on_its_own),
    Rule("ends_cleanly", "—", "error ending",
         "ends with an error (a raise, a nonzero exit) only where a careful loop does: after an error no retry "
         "fixes, a refusal, a reply it gave up recovering, or at max_turns; never after a final answer",
         ends_cleanly),
)
RULE_NAMES = tuple(rule.name for rule in RULES)


def ending(record: Record | Mapping[str, Any]) -> str:
    """How a run ended, in a few words: "exit 0", "raised BadRequestError", "returned", "timed out"."""
    result = (record if isinstance(record, Record) else parse_record(record, _name_of(record))).result
    if result.timed_out:
        return "timed out"
    if result.raised:
        return f"raised {result.raised}"
    parts = []
    if result.subtype:
        parts.append(str(result.subtype))
    if result.exit_code is not None:
        parts.append(f"exit {result.exit_code}")
    if not parts:
        parts.append("returned")
    return ", ".join(parts)


def record_from_requests(requests: Sequence[dict[str, Any]], scenario: str = "?", *,
                         result: dict[str, Any] | None = None, times: Sequence[float] | None = None,
                         client: str = "hand-built") -> dict[str, Any]:
    """A behaviour record from requests given by hand (or read from another tool's log), for
    :func:`grade_record`: each item has the request ``body`` and its ``reply`` (``status``, and ``stop_reason``
    and ``blocks`` — the content block types — for a message, or ``error`` — the error type — and ``message``
    for an error; or the message's ``content`` itself, and its ``stop_details``), optionally the scenario ``step``
    that answered and the reply ``kind`` ("error" for an error the scenario sends on purpose, the default for
    errors). What each request appended and its action label
    are computed as ``agentlab observe`` computes them, and a request the live API would refuse (the validator
    ``agentlab serve`` answers with) is marked ``api_would_refuse``, which the report notes."""
    from agentlab.backend.scenario import is_summary_request
    from agentlab.backend.scripted import normalise_request
    from agentlab.backend.validate import request_problem
    from agentlab.observatory.records import (
        classify, compaction_digest, credit_token_of, diff_requests, refusal_facts, request_fallback_facts)

    out: list[dict[str, Any]] = []
    prev_body: dict[str, Any] | None = None
    prev_reply: dict[str, Any] | None = None
    refused_token: str | None = None
    for n, item in enumerate(requests, 1):
        body = item["body"]
        reply = dict(item.get("reply") or {"status": 200, "stop_reason": "end_turn", "blocks": ["text"]})
        reply.setdefault("status", 200)
        message = reply.pop("message", None)
        details = reply.pop("stop_details", None)
        reply.update(refusal_facts(details))
        content = reply.pop("content", None)
        if isinstance(content, list):
            reply["blocks"] = [b.get("type") for b in content]
            digests = [compaction_digest(b) for b in content if b.get("type") == "compaction"]
            reply.update({"compactions": digests} if digests else {})
        diff = diff_requests(prev_body, body)
        entry: dict[str, Any] = {
            "n": n, "model": body.get("model"), "max_tokens": body.get("max_tokens"),
            "stream": bool(body.get("stream")), "step": item.get("step"),
            "kind": item.get("kind") or ("error" if reply["status"] >= 400 else
                                         "summary" if is_summary_request(normalise_request(body)) else "message"),
            "action": classify(diff, prev_reply), "reply": reply, "appended": diff,
            **request_fallback_facts(body, refused_token)}
        if message is not None:
            entry["error"] = message
        refused = request_problem(body) if reply["status"] < 400 else None
        if refused is not None:  # answered in the log, though the live API answers it with a 400
            entry["api_would_refuse"] = refused
        out.append(entry)
        if prev_body is None or not diff["summary_request"]:
            prev_body, prev_reply = body, reply
            refused_token = credit_token_of((details or {}).get("fallback_credit_token"))
    record: dict[str, Any] = {"client": client, "version": "-", "scenario": scenario, "requests": out,
                              "result": dict(result or {"exit_code": 0})}
    if times is not None:
        record["timing"] = {"request_s": list(times)}
    return record


