"""Replay a recorded client run (``data/observed``) as an agentlab trace.

A behaviour record (``agentlab.observatory.observe``) says, request by request, what a client sent and what the scripted
server answered. ``record_to_trace(record)`` turns it into the Events agentlab's own loop emits
(``request``, ``response`` or ``api_error``, ``transition``, ``append``, ``retry``, ``fallback``,
``compaction``, ``tool``, ``hook``, ``result``), so that the plots and the stepper's panes draw a foreign
client exactly as they draw agentlab:

- the response content is the scenario's scripted answer to that request (the step the record names; for a
  summary request, the scenario's summary), which is what the server sent;
- after each response, a ``transition`` names the branch of agentlab's decision table that matches what
  the client did next, read from the *next* request's action label (``continuation`` → ``max_tokens_continue``,
  ``retry`` → ``api_retry``, ``resume`` → ``pause_turn``, ``tool_results`` → ``tool_use``, ``nudge`` →
  ``empty_nudge``, a "Stop hook feedback" reprompt → ``stop_hook_block``, ``summary`` → ``context_compact``
  or ``prompt_too_long``, ...). After the last response, the transition is how the client ended;
- the ``append`` events are the messages the client added, as the record describes them (texts are cut to
  160 characters by the recorder).

What a record does not hold is estimated and marked ``estimated``: token counts come from the messages the
record describes, without the client's system prompt and tool definitions (Claude Code sends tens of KB of
those), so they are far below what the client really sent. The order of the calls, the messages added and
the decisions are exact.

Data only: ``agentlab.ui.widgets.ReplayStepper`` steps a replay in a notebook and
``agentlab.ui.plots.compare_paths`` draws it beside another run.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, replace
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentlab.backend.scenario import Reply, Scenario, load_scenario
from agentlab.backend.scripted import choose_reply, reply_slug, build_message
from agentlab.backend.models import model_limits
from agentlab.core.blocks import TOOL_CALL_TYPES
from agentlab.core.compaction import estimate_tokens
from agentlab.core.errors import ConfigError, ScenarioError
from agentlab.core.events import (
    Append,
    Purpose,
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
from agentlab.core.trace import Event, Trace
from agentlab.core.transitions import ROW_OF, Branch, Limits
from agentlab.observatory import record_types as rec
from agentlab.observatory.records import OBSERVED_DIR, load_records, outcome, version_key

CLIENT_DEFAULT = "claude-code"
# 2.1.197: "Stop hook feedback:\n<reason>"; 2.1.332 wraps it: "<system-reminder> Stop hook blocking error from …"
# (on claude-opus-5-5 2.1.332 sends that text as a system message of its own: read among the system texts)
_STOP_HOOK_TEXT = re.compile(r"^(<system-reminder>\s*)?Stop hook (feedback|blocking error)")


def is_stop_hook_text(text: str) -> bool:
    """A text a client added to feed a Stop hook's reason back to the model."""
    return bool(_STOP_HOOK_TEXT.match(text))

# Transition types, as agentlab's loop names them (the plots only need "End" for the ones that end a run).
BRANCH_TYPES: dict[Branch, str] = {
    "api_retry": "Retry", "api_fallback": "Retry", "prompt_too_long": "Compact", "context_compact": "Compact",
    "incomplete_tool_use": "Escalate", "max_tokens_escalate": "Escalate", "max_tokens_clamp": "Clamp",
    "tool_use": "RunTools", "max_tokens_continue": "ContinueTruncated", "pause_turn": "Resume",
    "empty_nudge": "Nudge", "refusal_fallback": "RetryOnModel", "stop_hook_block": "HookBlocked",
    "complete": "Complete", "stop_sequence": "Complete",
}
# result counters, as agentlab's Result names them, and the branches that add to each
COUNTED: dict[str, tuple[Branch, ...]] = {
    "escalations": ("max_tokens_escalate", "incomplete_tool_use"), "continuations": ("max_tokens_continue",),
    "compactions": ("context_compact", "prompt_too_long"), "retries": ("api_retry", "api_fallback"),
    "fallbacks": ("api_fallback", "refusal_fallback"), "pause_continuations": ("pause_turn",),
    "nudges": ("empty_nudge",), "stop_hook_blocks": ("stop_hook_block",),
}


# -- reading records -----------------------------------------------------------------------------------------

def load_record(spec: str | Path | dict[str, Any], *, client: str = CLIENT_DEFAULT,
                observed: str | Path | None = None) -> dict[str, Any]:
    """A behaviour record's data from a dict (returned as is), a JSON file, ``client/version/scenario`` under
    ``data/observed``, or a scenario name (the newest recorded version of ``client``). Data that is not a
    record (``record_types.parse_record``) is a ConfigError naming the field."""
    data, source = _read_record(spec, client, observed)
    typed_record(data, source)
    return data


def _read_record(spec: str | Path | dict[str, Any], client: str, observed: str | Path | None
                 ) -> tuple[dict[str, Any], str]:
    """The record's JSON data as ``load_record`` finds it, and what it came from (for an error)."""
    if isinstance(spec, dict):
        return spec, "the record given"
    if not isinstance(spec, str | Path):
        raise ConfigError(f"load_record: expected a record dict, a path or a scenario name, got {type(spec).__name__}")
    path = Path(spec)
    root = Path(observed) if observed else OBSERVED_DIR
    parts = str(spec).removesuffix(".json").split("/")
    if not (path.suffix == ".json" and path.exists()) and len(parts) == 3 and (root / f"{spec}.json").exists():
        path = root / f"{str(spec).removesuffix('.json')}.json"
    if path.suffix == ".json" and path.exists():
        try:
            return json.loads(path.read_text(encoding="utf-8")), str(path)
        except (OSError, ValueError, RecursionError) as exc:
            raise ConfigError(f"{path}: cannot read a behaviour record: {getattr(exc, 'strerror', None) or exc}"
                              ) from None
    if len(parts) == 1:
        records = load_records(root)
        versions = sorted((k for k in records if k[0] == client and spec in records[k]),
                          key=lambda k: version_key(k[1]))
        if versions:
            return records[versions[-1]][str(spec)], "/".join((*versions[-1], str(spec)))
    raise ConfigError(f"no behaviour record {str(spec)!r}: give a record, a .json path, client/version/scenario, "
                      f"or the name of a scenario recorded for {client} under {root}")


def typed_record(record: rec.Record | Mapping[str, Any], source: str = "the record given") -> rec.Record:
    """``record`` as a ``record_types.Record`` (a Record is returned as is); a ConfigError naming ``source`` and
    the first field that is not of the record format."""
    if isinstance(record, rec.Record):
        return record
    try:
        return rec.parse_record(record, source)
    except rec.RecordError as exc:
        raise ConfigError(str(exc)) from None


def client_label(record: rec.Record | Mapping[str, Any]) -> str:
    """The client as a sentence names it: "Claude Code 2.1.332"; a function graded by ``agentlab grade`` (its
    version is "graded") by its label alone: "your agent_loop"."""
    record = typed_record(record)
    names = {"claude-code": "Claude Code", "tool-runner": "tool runner", "agentlab": "agentlab"}
    name = names.get(record.client, record.client)
    return name if record.version == "graded" else f"{name} {record.version}"


def ending(record: rec.Record | Mapping[str, Any]) -> str:
    """How the client said the run ended, in one short label: its result subtype (with ", is_error" when it
    calls an error a success), else what was raised, else ``success`` or ``returned (stop_reason)``."""
    result = typed_record(record).result
    if result.timed_out:
        return "timed out"
    if result.subtype:
        return result.subtype + (", is_error" if result.subtype == "success" and result.is_error else "")
    if result.raised:
        return f"raised {result.raised}" + (f" {result.status}" if result.status else "")
    if result.is_error:
        return "error"
    stop = result.stop_reason
    return "success" if stop in (None, "end_turn", "stop_sequence") else f"returned ({stop})"


def client_limits(record: rec.Record | Mapping[str, Any], scenario: Scenario | None) -> dict[str, Any]:
    """The limits the client ran with, where the record or the client's known behaviour says; agentlab's
    defaults elsewhere (they only draw the limit lines of the recovery plots)."""
    record = typed_record(record)
    settings = record.settings
    command = [str(c) for c in settings.get("command") or []]
    limits = Limits(max_turns=settings.get("max_iterations") or (scenario.max_turns if scenario else None))
    if "--max-turns" in command[:-1]:
        limits = replace(limits, max_turns=int(command[command.index("--max-turns") + 1]))
    retries = (settings.get("env") or {}).get("CLAUDE_CODE_MAX_RETRIES", settings.get("max_retries"))
    if retries is not None:
        limits = replace(limits, max_api_retries=int(retries))
    if record.client == "claude-code":  # no max_tokens raise and no pause_turn branch were observed
        limits = replace(limits, max_escalations=0, max_pause_continuations=0)
    return asdict(limits)


# -- messages as the record describes them -------------------------------------------------------------------

def _blocks(described: rec.AppendedMessage, previous: list[dict[str, Any]],
            known: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Content blocks rebuilt from ``describe_message`` output; an assistant message that repeats the last
    response is that response's content (full texts and tool inputs); tool calls seen earlier in the run
    (``known``, by id) keep their input."""
    kinds = list(described.blocks)
    if described.role == "assistant" and kinds and [b.get("type") for b in previous] == kinds:
        return [dict(b) for b in previous]
    texts = iter(described.texts)
    uses = iter(described.tool_uses)
    results = iter(described.tool_results)
    by_id: dict[Any, dict[str, Any]] = {**(known or {}), **{b.get("id"): b for b in previous if b.get("id")}}
    out: list[dict[str, Any]] = []
    for kind in kinds:
        if kind == "text":
            out.append({"type": "text", "text": next(texts, "")})
        elif kind in TOOL_CALL_TYPES:
            use: dict[str, Any] = next(uses, {})
            out.append(dict(by_id[use.get("id")]) if use.get("id") in by_id else
                       {"type": kind, "id": use.get("id"), "name": use.get("name"), "input": {}})
        elif kind == "tool_result":
            res: dict[str, Any] = next(results, {})
            block = {"type": "tool_result", "tool_use_id": res.get("tool_use_id"), "content": res.get("content", "")}
            if res.get("is_error"):
                block["is_error"] = True
            out.append(block)
        else:
            same = [b for b in previous if b.get("type") == kind]
            out.append(dict(same[0]) if same else {"type": kind})
    return out


def _apply_diff(history: list[dict[str, Any]], diff: rec.Diff, previous: list[dict[str, Any]],
                known: dict[str, dict[str, Any]] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The next request's messages (approximately), and the messages appended, each with ``merged``."""
    history = [dict(m) for m in history[:diff.kept]]
    appended = []
    for described in diff.appended:
        message: dict[str, Any] = {"role": described.role, "content": _blocks(described, previous, known)}
        merged = described.extends_previous and bool(history)
        if merged:
            history[-1] = {**history[-1], "content": list(history[-1]["content"]) + message["content"]}
        else:
            history.append(message)
        appended.append({**message, "merged": merged})
    return history, appended


# -- the scenario's answer --------------------------------------------------------------------------------------

def _recorded_reply(request: rec.Request) -> rec.Reply:
    """What the request was answered, as recorded (no reply: status 0)."""
    return request.reply or rec.NO_REPLY


def _scripted(scenario: Scenario | None, request: rec.Request, n: int, body: dict[str, Any]
              ) -> dict[str, Any] | None:
    """The Message the scripted server sent for request ``n`` (None when the record holds too little)."""
    reply_info = _recorded_reply(request)
    if scenario is None:
        return None
    if request.kind == "summary":
        reply: Reply = Reply.model_validate({"content": [{"type": "text", "text": scenario.summary}],
                                             "stop_reason": "end_turn"})
        tag = f"summary{n - 1:03d}"
    elif request.step is not None and request.step < len(scenario.steps):
        step = scenario.steps[request.step]
        reply = _matching_case(step, reply_info, body)
        tag = f"{request.step:03d}"
    else:
        return None
    if reply.error is not None:
        return {"error": reply.error.model_dump()}
    message = build_message(reply, body, msg_id=f"msg_{reply_slug(scenario.name)}_{tag}")
    if 200 <= reply_info.status < 300 and (
            message.get("stop_reason") != reply_info.stop_reason
            or [b.get("type") for b in message.get("content") or []] != list(reply_info.blocks)):
        return None  # the server fitted the script to what the request offered (backend/offered.py): not this
    return message


def _matching_case(step: Any, reply_info: rec.Reply, body: dict[str, Any]) -> Reply:
    if not step.cases:
        return step
    for case in step.cases:
        kinds = [b.type for b in case.content or []]
        if case.error is None and case.stop_reason == reply_info.stop_reason and kinds == list(reply_info.blocks):
            return case
        if case.error is not None and case.error.status == reply_info.status:
            return case
    return choose_reply(step, body, bool(body.get("stream")))


def _placeholder(request: rec.Request) -> dict[str, Any]:
    info = _recorded_reply(request)
    content = [{"type": k, "text": "(not recorded)"} if k == "text" else {"type": k} for k in info.blocks]
    return {"model": request.model, "content": content, "stop_reason": info.stop_reason,
            "stop_sequence": None, "stop_details": None,
            "usage": {"input_tokens": 0, "output_tokens": estimate_tokens(content) if content else 0}}


def _error_message(request: rec.Request, n: int, scripted: dict[str, Any] | None, scenario: Scenario | None,
                   window: int) -> str:
    if scripted and "error" in scripted:
        return str(scripted["error"].get("message"))
    if request.kind == "prompt_too_long":
        return f"prompt is too long: over the {window} maximum (the request's size is not recorded)"
    if request.kind == "unexpected" and scenario is not None:
        return (f"scenario {scenario.name!r} has {len(scenario.steps)} step(s) and all were used; "
                f"request {n} was not expected")
    reply = _recorded_reply(request)
    return f"HTTP {reply.status} {reply.error or ''}".strip()


# -- what the client did next -------------------------------------------------------------------------------

@dataclass
class _Step:
    """What is known about one request of the record while replaying it."""

    request: rec.Request
    n: int                              # its call number
    message: dict[str, Any] | None      # the response, None when the call failed

    @property
    def reply(self) -> rec.Reply:
        return _recorded_reply(self.request)


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _next_branch(who: str, step: _Step, nxt: rec.Request) -> tuple[str, str]:
    """(branch, reason) for what the client did after ``step``, read from the next request ``nxt``."""
    action, diff = nxt.action, nxt.appended
    stop, status = step.reply.stop_reason, step.reply.status
    texts = list(diff.injected_user_texts) + list(diff.injected_system_texts)
    said = f": {_short(texts[-1])!r}" if texts else ""
    changed = diff.changed.get("max_tokens") or [None, None]
    if action == "compacted":
        branch = "prompt_too_long" if status >= 400 else "context_compact"
        return branch, f"{who} sent a shorter history ({diff.dropped} earlier message(s) dropped)"
    if action == "summary":
        branch = "prompt_too_long" if status >= 400 else "context_compact"
        cause = f"HTTP {status}" if status >= 400 else f"stop_reason {stop}"
        return branch, f"after {cause}, {who} asked the model to summarise the conversation (compaction)"
    if action == "retry":
        if changed and changed[1] is not None and changed[0] is not None and changed[1] < changed[0]:
            return "max_tokens_clamp", f"{who} resent with max_tokens {changed[0]} → {changed[1]}"
        return "api_retry", f"HTTP {status} ({step.reply.error}): {who} sent the same request again"
    if action == "fallback_model":
        model = diff.changed.get("model", [None, nxt.model])[1]
        if stop == "refusal":
            return "refusal_fallback", f"refusal: {who} sent the same request to {model}"
        return "api_fallback", f"HTTP {status}: {who} switched to {model} and sent the request again"
    if action == "escalate":
        branch = "incomplete_tool_use" if step.reply.blocks[-1:] == ("tool_use",) else "max_tokens_escalate"
        return branch, f"max_tokens: {who} sent the same request with max_tokens {changed[0]} → {changed[1]}"
    if action == "tool_results":
        label = "" if stop == "tool_use" else f" (the label was {stop})"
        return "tool_use", f"{who} ran the tool call(s) and sent {len(diff.tool_results)} " \
                           f"tool_result(s){label}"
    if action == "continuation":
        return "max_tokens_continue", f"{stop}: {who} kept the partial answer and added a user message{said}"
    if action == "resume":
        return "pause_turn", f"pause_turn: {who} sent the paused content back unchanged"
    if action == "nudge":
        return "empty_nudge", f"an empty reply: {who} added a user message{said}"
    if action == "reprompt":
        if any(is_stop_hook_text(t) for t in texts):
            return "stop_hook_block", f"its Stop hook blocked the end; {who} fed the reason back{said}"
        if stop == "refusal":
            return "refusal", (f"refusal: {who} asked the same model again{said} (agentlab never resends a "
                               "refused request to the same model)")
        if stop == "tool_use":
            return "empty_nudge", (f"a tool_use label without a tool_use block: {who} treated it as a malformed "
                                   f"tool call and asked again{said} (agentlab has no such branch; nearest: "
                                   "the one-time nudge of row 8)")
        return "reprompt", f"{who} added a user message{said}"
    if action == "resend":
        return "resend", f"{who} sent the same messages again"
    return str(action), f"{who}: {action}"


def _completion_reason(who: str, request: rec.Request) -> str:
    if _recorded_reply(request).stop_reason == "pause_turn":
        return f"pause_turn, but {who} did not send the content back: the turn counts as complete, the Stop hook runs"
    return "no tool_use block: the turn is complete, the Stop hook runs"


def _final_branches(who: str, record: rec.Record, scenario: Scenario | None, step: _Step,
                    hook_blocks: int) -> list[tuple[str, str]]:
    """The transition(s) after the last response: how the client ended the run."""
    result, reply = record.result, step.reply
    stop, status = reply.stop_reason, reply.status
    end = ending(record)
    text = f" ({_short(result.text, 120)!r})" if result.text else ""
    if result.subtype == "error_max_turns":
        return [("max_turns", f"{who} stopped at its turn limit: {end}")]
    if status >= 400:
        if step.request.kind == "prompt_too_long":
            return [("context_give_up", f"HTTP {status} prompt is too long: {who} ended without compacting: "
                                        f"{end}{text}")]
        return [("api_error", f"HTTP {status} ({reply.error}): {who} ended the run: {end}{text}")]
    if stop == "refusal":
        return [("refusal", f"refusal: {who} did not send the request again: {end}{text}")]
    if stop == "max_tokens" and result.is_error:
        return [("max_tokens_give_up", f"max_tokens again: {who} gave up: {end}{text}")]
    if stop == "model_context_window_exceeded" and result.is_error:
        return [("context_give_up", f"{stop} again: {who} gave up: {end}{text}")]
    if stop == "pause_turn":
        return [("complete", f"pause_turn not sent back: {who} ended the turn (no branch for it): {end}")]
    spec = scenario.stop_hook if scenario is not None else None
    blocking = spec is not None and (spec.times == "always" or hook_blocks < spec.times)
    # only a client that fed a block back is known to run the hook
    if blocking and hook_blocks and "tool_use" not in reply.blocks:
        return [("complete", _completion_reason(who, step.request)),
                ("stop_hook_cap", f"its Stop hook still blocks; after {hook_blocks} block(s) fed back {who} "
                                  f"ended the run: {end}")]
    return [("complete", f"{who} ended the run: {end}{text}")]


# -- the trace --------------------------------------------------------------------------------------------------

def record_to_trace(record: rec.Record | dict[str, Any] | str | Path) -> Trace:
    """The behaviour record (a ``record_types.Record``, its data, or where ``load_record`` finds it) as an
    agentlab Trace: one call per recorded request, a transition after each response naming the branch that
    matches what the client did next, then the client's result."""
    if not isinstance(record, rec.Record):
        record = typed_record(*_read_record(record, CLIENT_DEFAULT, None))
    return _Replay(record).run()


class _Replay:
    """One record being turned into a trace, request by request, and what is known so far.

    Each request's diff is relative to the last request that was not a summary request (the recorder's rule), so
    the history is rebuilt from that request's messages and its response (``base_history``, ``base_content``).
    """

    def __init__(self, record: rec.Record) -> None:
        self.record = record
        try:
            self.scenario: Scenario | None = load_scenario(record.scenario)
        except ScenarioError:
            self.scenario = None
        self.who = client_label(record)
        self.requests = record.requests
        # each request's call number: as recorded, else its place (from 1), as the grade rules read it
        self.calls = [i + 1 if r.n is None else r.n for i, r in enumerate(self.requests)]
        # the window the server answered with: the scenario's, else the requested model's (data/models.yaml)
        first_model = self.requests[0].model if self.requests else None
        self.window = (self.scenario.context_window if self.scenario else None) or \
            model_limits(first_model).context_window
        self.trace = Trace()
        self.history: list[dict[str, Any]] = []
        self.base_history: list[dict[str, Any]] = []
        self.base_content: list[dict[str, Any]] = []
        self.known: dict[str, dict[str, Any]] = {}   # every tool call answered so far, by id
        self.usage = {"input_tokens": 0, "output_tokens": 0}
        self.counts: dict[str, Any] = dict.fromkeys(COUNTED, 0)
        self.hook_blocks = self.attempts = self.num_turns = 0
        self.last_stop: str | None = None

    def run(self) -> Trace:
        self._start()
        requests = self.requests
        for i, request in enumerate(requests):
            purpose: Purpose = "summary" if request.action == "summary" and request.kind == "summary" \
                and not (i > 0 and requests[i - 1].kind == "summary") else "turn"
            message, content = self._call(request, self.calls[i], purpose)
            if i == 0 or not request.appended.summary_request:
                self.base_history, self.base_content = self.history, content
            step = _Step(request, self.calls[i], message)
            nxt = requests[i + 1] if i + 1 < len(requests) else None
            if nxt is None:
                self._ended(step)
                break
            if purpose == "summary":  # a summary call has no decision of its own: the history is compacted
                self._compacted(step.n, nxt)
            else:
                self._decided(step, nxt)
        self._result()
        return self.trace

    def _start(self) -> None:
        record, scenario = self.record, self.scenario
        first = self.requests[0] if self.requests else None
        self.trace.emit(Start(
            model=first.model if first else None, max_tokens=first.max_tokens if first else None,
            stream=first.stream if first else None, prompt=scenario.prompt if scenario else None,
            limits=client_limits(record, scenario), context_window=self.window, tools=[], compaction=[],
            extra={"client": record.client, "version": record.version, "scenario": record.scenario,
                   "replay": True}), 0)
        self.history, added = _apply_diff([], first.appended if first else rec.Diff(), [])
        self._append(0, added)

    def _transition(self, call: int, branch: str, reason: str, terminal: bool = False,
                    action: str | None = None) -> None:
        for name, counted in COUNTED.items():
            if branch in counted:
                self.counts[name] += 1
        self.trace.emit(TransitionEvent(
            branch=branch, row=ROW_OF.get(branch, "—"), reason=reason,
            type="End" if terminal else next((t for b, t in BRANCH_TYPES.items() if b == branch), "Other"),
            subtype=ending(self.record) if terminal else None, num_turns=self.num_turns,
            extra={"client_action": action, "replay": True}), call)

    def _append(self, call: int, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            blocks = ",".join(str(b.get("type")) for b in m["content"])
            self.trace.emit(Append(role=m["role"], merged=m["merged"], content=m["content"],
                                   blocks=blocks or "(empty)"), call)

    def _call(self, request: rec.Request, n: int, purpose: Purpose
              ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The request's events: the request, then its error or its response (the message and its content)."""
        window, diff, reply = self.window, request.appended, _recorded_reply(request)
        body = {"model": request.model, "max_tokens": request.max_tokens, "stream": request.stream,
                "messages": self.history}
        self.trace.emit(Request(
            model=request.model, max_tokens=request.max_tokens, stream=request.stream,
            messages=diff.messages_after if "messages_after" in diff.model_fields_set else len(self.history),
            context_tokens=estimate_tokens(self.history), context_window=window, purpose=purpose,
            extra={"estimated": True, "client_action": request.action}), n)
        scripted = _scripted(self.scenario, request, n, body)
        if reply.status >= 400:
            self.attempts += 1
            self.trace.emit(ApiError(
                status=reply.status, error_type=reply.error,
                message=_error_message(request, n, scripted, self.scenario, window), retry_after=None,
                attempt=self.attempts, purpose=purpose), n)
            return None, []
        self.attempts = 0
        message = scripted if scripted and "error" not in scripted else _placeholder(request)
        content = message.get("content") or []
        msg_usage = dict(message.get("usage") or {})
        for key in self.usage:
            self.usage[key] += int(msg_usage.get(key) or 0)
        if purpose == "turn":
            self.num_turns += 1
            self.last_stop = message.get("stop_reason")
        self.trace.emit(Response(
            purpose=purpose, model=message.get("model"), stop_reason=message.get("stop_reason"),
            stop_sequence=message.get("stop_sequence"), stop_details=message.get("stop_details"),
            blocks=",".join(b["type"] for b in content), content=content,
            input_tokens=int(msg_usage.get("input_tokens") or 0),
            output_tokens=int(msg_usage.get("output_tokens") or 0), usage=msg_usage,
            context_window=window, extra={"estimated": True}), n)
        self.known.update({b["id"]: b for b in content if b.get("id")})
        return message, content

    def _ended(self, step: _Step) -> None:
        """The transition(s) after the last response; the last is terminal unless the turn merely completed."""
        finals = _final_branches(self.who, self.record, self.scenario, step, self.hook_blocks)
        for k, (branch, reason) in enumerate(finals):
            self._transition(step.n, branch, reason, terminal=k == len(finals) - 1 and branch != "complete")

    def _compacted(self, n: int, nxt: rec.Request) -> None:
        """After a summary request: the history the client sent next, as a compaction."""
        appended = nxt.appended
        new_history, added = _apply_diff(self.base_history, appended, self.base_content, self.known)
        self.trace.emit(CompactionEvent(
            trigger="client", strategy=f"{self.record.client} summary",
            tokens_before=estimate_tokens(self.base_history), tokens_after=estimate_tokens(new_history),
            messages_before=appended.messages_before, messages_after=appended.messages_after,
            removed=appended.dropped, context_before=estimate_tokens(self.history),
            context_after=estimate_tokens(new_history), target=None, context_window=self.window,
            extra={"estimated": True}), n)
        self.history = new_history
        self._append(n, added)

    def _decided(self, step: _Step, nxt: rec.Request) -> None:
        """What the client did after a turn's reply, read from its next request: the branch and its events."""
        request, n = step.request, step.n
        branch, reason = _next_branch(self.who, step, nxt)
        if branch == "stop_hook_block":
            self._transition(n, "complete", _completion_reason(self.who, request))
        self._transition(n, branch, reason, action=nxt.action)
        if branch == "stop_hook_block":
            self.hook_blocks += 1
            diff = nxt.appended  # the reason is where the branch was read from: a user text, or a system one
            feedback = next(t for t in (*diff.injected_user_texts, *diff.injected_system_texts) if is_stop_hook_text(t))
            self.trace.emit(HookEvent(event="Stop", source=f"{self.record.client} Stop hook", decision="block",
                                      reason=feedback.split(":", 1)[-1].strip()), n)
        if branch in ("api_retry", "api_fallback", "max_tokens_clamp"):
            if branch == "api_fallback":
                self.trace.emit(Fallback(from_model=request.model, to_model=nxt.model, cause="overloaded"), n)
            self.trace.emit(RetryEvent(attempt=self.attempts, delay_s="?", model=nxt.model, reason=reason), n)
        if branch == "refusal_fallback":
            self.trace.emit(Fallback(from_model=request.model, to_model=nxt.model, cause="refusal"), n)
        self.history, added = _apply_diff(self.base_history, nxt.appended, self.base_content, self.known)
        self._tool_runs(n, added)
        self._append(n, added)

    def _tool_runs(self, n: int, added: list[dict[str, Any]]) -> None:
        """A ToolRun for each tool_result the client sent, with the call it answers."""
        for m in added:
            for block in m["content"]:
                if block.get("type") == "tool_result":
                    use = next((b for b in self.base_content if b.get("id") == block.get("tool_use_id")), {})
                    self.trace.emit(ToolRun(id=block.get("tool_use_id"), name=use.get("name"),
                                            input=use.get("input"), output=block.get("content"),
                                            is_error=bool(block.get("is_error")), denied_by=None), n)

    def _result(self) -> None:
        record, requests, result = self.record, self.requests, self.record.result
        self.trace.emit(ResultEvent(
            type="result", subtype=ending(record), is_error=outcome(record) == "error",
            num_turns=self.num_turns if result.num_turns is None else result.num_turns, stop_reason=self.last_stop,
            result="" if result.text is None else result.text, requests=len(requests), usage=self.usage,
            model=requests[-1].model if requests else None, **self.counts,
            extra={"client_stop_reason": result.stop_reason, "client": record.client,
                   "version": record.version, "client_subtype": result.subtype,
                   "exit_code": result.exit_code, "estimated_usage": True}),
            self.calls[-1] if requests else 0)


def replay_branches(trace: Trace | list[Event]) -> list[str]:
    """The branches of a (replayed) trace, in order: the path a plot draws."""
    return [e.payload.branch for e in trace if isinstance(e.payload, TransitionEvent)]


def step_ends(events: list[Event]) -> list[int]:
    """Where each step ends (exclusive): before the next request that follows a decision, and at the end."""
    ends: list[int] = []
    decided = False
    for i, e in enumerate(events):
        if e.kind == "request" and decided:
            ends.append(i)
            decided = False
        if e.kind == "transition":
            decided = True
    ends.append(len(events))
    return ends
