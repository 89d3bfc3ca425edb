"""The behaviour record's format, as types: what ``agentlab observe`` and ``agentlab grade`` write
(data/observed/<client>/<version>/<scenario>.json, and the records of a grading run), and what the grade rules,
the replay and the serving read.

A record is a ``Record``: the client, its version and the scenario, the ``requests`` the client sent in order
(each a ``Request``: what it asked for, the ``Reply`` it got, and the ``Diff`` of its messages against the
request before), how the run ended (``Result``) and its ``Timing``. ``parse_record()`` reads one from JSON data
and refuses bad input with one line naming the file and the field (``RecordError``). The models are frozen;
a field this format does not name yet is kept, readable as an attribute, so nothing recorded is lost.
Defaults are what a missing field means: no reply reads as status 0, a missing list as empty.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentlab.core.errors import AgentlabError


class RecordError(AgentlabError):
    """A record that cannot be read: the message names the file (or what the record came from) and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _null_is_missing(cls, value: Any) -> Any:
        """A null in a field of the format reads as the field missing (``"reply": null`` is no reply)."""
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if v is not None or k not in cls.model_fields}
        return value


class AppendedMessage(_Model):
    """One message a request added to the history, described (types of its blocks, texts cut short)."""

    role: str | None = None
    blocks: tuple[str | None, ...] = ()
    texts: tuple[str, ...] = ()
    tool_uses: tuple[dict[str, Any], ...] = ()
    tool_results: tuple[dict[str, Any], ...] = ()
    extends_previous: bool = False      # the assistant message continues the one before (a resumed pause)
    merged: bool = False
    compactions: tuple[str, ...] = ()   # digests of its compaction blocks (records.compaction_digest)


class Diff(_Model):
    """A request's messages against the request before it (records.diff_requests)."""

    messages_before: int = 0
    messages_after: int = 0
    kept: int = 0
    dropped: int = 0
    extended_last: bool = False
    merged_last: bool = False
    same_messages: bool = False
    summary_request: bool = False
    ends_with: str | None = None
    appended: tuple[AppendedMessage, ...] = ()
    injected_user_texts: tuple[str, ...] = ()
    injected_system_texts: tuple[str, ...] = ()
    tool_results: tuple[dict[str, Any], ...] = ()
    assistant_blocks: tuple[str | None, ...] = ()
    changed: dict[str, Any] = Field(default_factory=dict)


class Reply(_Model):
    """What a request was answered: a message (``stop_reason``, the ``blocks``' types) or an error."""

    status: int = 0                     # 0: no reply (none was sent, or only the server's placeholder)
    stop_reason: str | None = None
    blocks: tuple[str | None, ...] = ()
    error: str | None = None            # the error type
    headers: dict[str, Any] | None = None
    credit_token: bool = False          # a refusal offered a fallback credit token (never recorded itself)
    prefill_claim: bool = False
    recommended_model: str | None = None
    compactions: tuple[str, ...] = ()   # digests of its compaction blocks (records.compaction_digest)


NO_REPLY = Reply()


class Request(_Model):
    """One request the client sent, and what it was answered."""

    n: int | None = None
    path: str | None = None
    model: Any = None                   # what the client sent, whatever its type (the rules judge it)
    max_tokens: Any = None
    stream: bool = False
    step: int | None = None             # the scenario step that answered
    kind: str | None = None             # message, error, prompt_too_long, summary, scenario_error, ...
    action: str = "other"               # what the request did (records.classify)
    reply: Reply | None = None
    appended: Diff = Field(default_factory=Diff)
    error: str | None = None            # an error reply's message
    headers: dict[str, Any] | None = None
    placeholder_reply: bool = False
    credit_token: str | None = None     # "echoed" or "other": the request carried a fallback credit token
    fallbacks: str | list[Any] | None = None
    final_answer_call: str | None = None    # the tool a forced tool_choice made the server call for an answer
    api_would_refuse: str | None = None     # why the live API would refuse this request that was answered

    @property
    def answer(self) -> Reply:
        """The reply, as the rules read it. A reply the server had to replace by its own text (nothing of the
        scripted reply could be sent: ``placeholder_reply``) is no model's answer: it reads as no reply."""
        if self.placeholder_reply or self.reply is None:
            return NO_REPLY
        return self.reply

    @property
    def is_summary(self) -> bool:
        return self.action == "summary" or self.kind == "summary"


class Result(_Model):
    """How the client's run ended, as far as it said."""

    exit_code: int | None = None
    is_error: bool = False
    subtype: str | None = None
    stop_reason: str | None = None
    text: str | None = None
    raised: str | None = None
    status: int | None = None           # the HTTP status of the error raised
    num_turns: int | None = None        # the turns the client counted
    timed_out: bool = False
    timeout_s: float | None = None
    signal: Any = None
    stderr: str | None = None

    @property
    def failed(self) -> bool:
        """The run ended in error as the client reported it: is_error, a raised error, a timeout, a non-zero exit."""
        return self.is_error or bool(self.raised) or self.timed_out or self.exit_code not in (0, None)


class Timing(_Model):
    wall_s: float | None = None
    request_s: tuple[float, ...] | None = None


class Record(_Model):
    """One client's behaviour on one scenario."""

    client: str                         # who ran: "claude-code", "tool-runner", a graded command's label
    version: str
    scenario: str
    format: int | None = None
    row: str | None = None
    description: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    requests: tuple[Request, ...] = ()
    summary: dict[str, Any] = Field(default_factory=dict)
    result: Result = Field(default_factory=Result)
    timing: Timing = Field(default_factory=Timing)


def parse_record(data: Any, source: str = "record") -> Record:
    """``data`` (a record's JSON) as a Record; RecordError naming ``source`` and the first bad field otherwise."""
    if not isinstance(data, dict):
        raise RecordError(f"{source}: a record is a JSON object, got {type(data).__name__}")
    try:
        return Record.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"]).lstrip(".")
        said = "missing" if error["type"] == "missing" else f"{error['msg']} (got {repr(error.get('input'))[:80]})"
        raise RecordError(f"{source}: {where or 'the record'}: {said}") from None
