"""The wire: one Messages API call, or one count_tokens call, through the SDK, and what came back classified.

Nothing here raises for API trouble. Every answer is a Message (as a dict, read from the reply's JSON) or a
token count, or a ``Failure`` (transitions.py) that says what went wrong in the API's own terms: an HTTP status
and error type, a timeout, a dropped connection, a stream cut before ``message_stop``, a body that is not a
whole Message. ``decide()`` reads that Failure (retry, compact, end). Bad *input* is another matter: that is a
``ConfigError`` (errors.py), raised before anything is sent.

The sync and async calls differ only where the SDK does: ``await``, ``async with`` and ``async for``. What a
reply means is read once, by the same functions, for both.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import httpx2

from .calls import Progress
from .errors import sdk_error_text
from .sdk import anthropic
from .transitions import Failure

__all__ = ["CREDIT_BETA", "NONSTREAMING_MAX_TOKENS", "SEND_ERRORS", "STATUS_OF_ERROR_TYPE", "acount", "asend",
           "check_message", "count", "failure_of", "needs_streaming", "read_reply", "request_params", "send"]

Message = dict[str, Any]

# The SDK's documented rule, used when its private check is not there (a newer or older SDK): it plans with
# 128,000 output tokens an hour and refuses a non-streaming request over 10 minutes, so over 21,333 tokens.
NONSTREAMING_MAX_TOKENS = 600 * 128_000 // 3600

# What a call may raise that is a failed call, not a bug of the loop: the SDK's errors, the transport's, and a
# reply the SDK could not read (a ValueError from JSON, a KeyError from a missing field, ...).
SEND_ERRORS = (anthropic.AnthropicError, httpx2.HTTPError, ValueError, TypeError, KeyError, AttributeError,
               RecursionError)

# The HTTP status each API error type comes with; an SSE ``event: error`` arrives inside a 200 stream, so its
# type alone says whether it is retried (overloaded_error as a 529, api_error as a 500, ...).
STATUS_OF_ERROR_TYPE = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
    "timeout_error": 504, "overloaded_error": 529,
}
# The beta headers of the API's own recoveries (docs: "Refusals and fallback", "Fallback credit", "Compaction",
# "Context editing"; the names are the SDK's AnthropicBetaParam and its refusal-fallback middleware's default)
CREDIT_BETA = "fallback-credit-2026-07-01"          # a refusal carries fallback_credit_token; {token, mode} accepted
SERVER_FALLBACK_BETA = "server-side-fallback-2026-07-01"
COMPACT_BETA = "compact-2026-01-12"
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"

_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def needs_streaming(client: Any, params: dict[str, Any]) -> bool:
    """The SDK's own rule: a non-streaming request whose max_tokens implies more than 10 minutes of
    generation (or more than the model's non-streaming ceiling) is refused unless a timeout is forced.

    Asked of the SDK itself (``_calculate_nonstreaming_timeout`` and ``anthropic._constants``, both private);
    when an SDK client lacks either, or its check takes other arguments, the documented threshold
    ``NONSTREAMING_MAX_TOKENS`` decides. A client that is not the SDK's has no such rule: never streamed for it.
    """
    check = getattr(client, "_calculate_nonstreaming_timeout", None)
    if not callable(check):
        is_sdk = isinstance(client, anthropic.Anthropic | anthropic.AsyncAnthropic)
        return is_sdk and int(params["max_tokens"]) > NONSTREAMING_MAX_TOKENS
    try:
        from anthropic._constants import MODEL_NONSTREAMING_TOKENS
        ceilings: dict[str, int] = dict(MODEL_NONSTREAMING_TOKENS)
    except (ImportError, TypeError, ValueError):
        ceilings = {}
    try:
        check(params["max_tokens"], ceilings.get(params["model"]))
    except (ValueError, OverflowError):  # OverflowError: a max_tokens too large for the SDK's float arithmetic
        return True
    except TypeError:  # the private check changed its arguments: the documented threshold
        return int(params["max_tokens"]) > NONSTREAMING_MAX_TOKENS
    return False


def request_params(model: str, max_tokens: int, messages: list[Message], *, system: Any = None,
                   tools: list[dict[str, Any]] | None = None,
                   stop_sequences: Sequence[str] | None = None) -> dict[str, Any]:
    """The body of a Messages API request: model, max_tokens and messages, and system, tools and
    stop_sequences when set (an empty one is left out)."""
    params: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if system:
        params["system"] = system
    if tools:
        params["tools"] = tools
    if stop_sequences:
        params["stop_sequences"] = list(stop_sequences)
    return params


def _messages(client: Any, params: dict[str, Any]) -> Any:
    """Where a request goes: ``client.beta.messages`` when it names betas (``params["betas"]``, sent as the
    ``anthropic-beta`` header, the beta fields then accepted), else ``client.messages``."""
    return client.beta.messages if "betas" in params else client.messages


# --- one model call ---------------------------------------------------------------------------------------------

def send(client: anthropic.Anthropic, params: dict[str, Any], stream: bool, timeout: float,
         progress: Progress | None = None) -> Message | Failure:
    """One request through the SDK; the Message as a dict (read from the reply's JSON), or a Failure.

    Never raises for API trouble: every HTTP error, timeout and connection problem is a Failure, and so
    is a reply that is not a whole message (a stream cut before ``message_stop``, a body that is not a
    Message, a message without ``stop_reason``). Failures without an HTTP status are retried like
    connection errors, so a half-received answer is never taken for the answer, nor its tool calls run.
    ``progress`` hears of each streamed event, and may close the stream (the call's deadline).
    """
    try:
        if stream:
            return _streamed(client, params, timeout, progress)
        return _read(_create(client, params)(**params, timeout=timeout))
    except SEND_ERRORS as exc:
        return failure_of(exc, timeout)


async def asend(client: anthropic.AsyncAnthropic, params: dict[str, Any], stream: bool, timeout: float,
                progress: Progress | None = None) -> Message | Failure:
    """``send`` with an AsyncAnthropic client: the same request, the same answer or Failure."""
    try:
        if stream:
            return await _astreamed(client, params, timeout, progress)
        return _read(await _create(client, params)(**params, timeout=timeout))
    except SEND_ERRORS as exc:
        return failure_of(exc, timeout)


def _create(client: Any, params: dict[str, Any]) -> Any:
    """``messages.with_raw_response.create`` (of ``client.messages`` or ``client.beta.messages``, see
    ``_messages``) when ``client`` is the SDK's and builds no typed model of its
    own accord (``_strict_response_validation`` off, the default), else ``client.messages.create``.

    The loop keeps a reply as a dict; ``create`` would build the SDK's ``Message`` from the JSON (about a
    seventh of a call on an in-process transport) only for the loop to turn it back into a dict. The raw
    response runs the same request (same body, retries, errors raised for a status), and its JSON is the
    dict: the same keys and values ``Message.to_dict()`` gave, in the API's own order, with every value as
    sent (``to_dict`` made a ``datetime`` of a container's ``expires_at``). The request carries one more
    header of the SDK's, ``x-stainless-raw-response: raw``, which the API ignores. A stream is still put
    together by the SDK (``get_final_message``). tests/test_raw_reply.py holds both to ``create``."""
    messages = _messages(client, params)
    if not getattr(client, "_strict_response_validation", True):  # validates: keep its check (and non-SDK clients)
        raw = getattr(getattr(messages, "with_raw_response", None), "create", None)
        if raw is not None:
            return raw
    return messages.create


def _read(reply: Any) -> Message | Failure:
    """A reply of ``_create``'s call (a raw response, or a Message built by ``create``) as a checked Message."""
    return check_message(read_reply(reply) if hasattr(reply, "http_response") else reply)


def read_reply(response: Any) -> Any:
    """What ``create`` would have built its Message from, read as the SDK reads it: JSON for a JSON
    content type (a body that is not JSON raises, as there), else JSON if it parses, else the text."""
    http = response.http_response
    try:
        return http.json(object_pairs_hook=_shared_keys)
    except ValueError:
        if http.headers.get("content-type", "*").split(";")[0].lower().endswith("json"):
            raise
        return http.text


def _shared_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict whose keys are interned: every reply kept in the history and the trace then
    shares its ``"type"``, ``"text"``, ``"input_tokens"`` ... with the others (as the SDK's field names were
    shared), where the decoder would give each reply its own copies (about 1 kB a reply)."""
    return {sys.intern(key): value for key, value in pairs}


# --- a streamed call --------------------------------------------------------------------------------------------

@contextmanager
def _quiet_serializer() -> Iterator[None]:
    """The SDK re-serialises what it parsed, and a field of the wrong type (``usage.input_tokens: "x"``) makes
    pydantic warn on stderr; ``check_message`` reports that reply as a failed call instead, without a warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Pydantic serializer warnings")
        yield


class _Watch:
    """What a stream carried so far: the event types seen (a whole stream runs from ``message_start`` to
    ``message_stop``), each one told to the call's ``progress``."""

    def __init__(self, progress: Progress | None) -> None:
        self.seen: set[str] = set()
        self.progress = progress

    def saw(self, event: Any) -> None:
        self.seen.add(event.type)
        if self.progress is not None:
            self.progress.tick()

    def cut(self) -> Failure | None:
        """A stream that did not run from ``message_start`` to ``message_stop`` is a failed call."""
        if "message_start" not in self.seen:
            return Failure(None, "incomplete_stream", "the stream carried no message_start event")
        if "message_stop" not in self.seen:
            return Failure(None, "incomplete_stream", "the stream ended before message_stop: the connection was "
                           "cut mid-answer")
        if self.progress is not None:  # a message put together from events (a tool's input from pieces of JSON,
            self.progress.surrogate_escapes = None  # an escape maybe cut between two): its bytes do not settle it
        return None


def _out_of_order(exc: RuntimeError) -> Failure:  # the SDK's accumulator: an event before message_start
    return Failure(None, "incomplete_stream", f"the stream did not begin with message_start ({exc})")


def _streamed(client: anthropic.Anthropic, params: dict[str, Any], timeout: float,
              progress: Progress | None) -> Message | Failure:
    watch = _Watch(progress)
    with _quiet_serializer(), _messages(client, params).stream(**params, timeout=timeout) as events:
        if progress is not None:
            progress.closer = events.close  # the call's deadline may close it
        try:
            for event in events:
                watch.saw(event)
        except RuntimeError as exc:
            return _out_of_order(exc)
        return watch.cut() or check_message(events.get_final_message())


async def _astreamed(client: anthropic.AsyncAnthropic, params: dict[str, Any], timeout: float,
                     progress: Progress | None) -> Message | Failure:
    watch = _Watch(progress)
    with _quiet_serializer():
        async with _messages(client, params).stream(**params, timeout=timeout) as events:
            try:
                async for event in events:
                    watch.saw(event)
            except RuntimeError as exc:
                return _out_of_order(exc)
            return watch.cut() or check_message(await events.get_final_message())


# --- count_tokens -----------------------------------------------------------------------------------------------

def count(client: anthropic.Anthropic, params: dict[str, Any], timeout: float) -> int | Failure:
    """One count_tokens call, bounded by the request timeout; the count, or a Failure classified as ``send``
    classifies one (never an exception)."""
    try:
        with _quiet_serializer():
            return _counted(client.messages.count_tokens(**params, timeout=timeout))
    except SEND_ERRORS as exc:
        return failure_of(exc, timeout)


async def acount(client: anthropic.AsyncAnthropic, params: dict[str, Any], timeout: float) -> int | Failure:
    """``count`` with an AsyncAnthropic client."""
    try:
        with _quiet_serializer():
            return _counted(await client.messages.count_tokens(**params, timeout=timeout))
    except SEND_ERRORS as exc:
        return failure_of(exc, timeout)


def _counted(reply: Any) -> int | Failure:
    tokens = getattr(reply, "input_tokens", None)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens < 10**12:
        return Failure(None, "invalid_response",
                       f"the count_tokens reply has no token count: input_tokens is {_clip(repr(tokens), 80)}")
    return tokens


# --- what went wrong --------------------------------------------------------------------------------------------

def failure_of(exc: BaseException, timeout: float) -> Failure:
    """An exception of a call (one of ``SEND_ERRORS``) as the Failure ``decide()`` reads."""
    if isinstance(exc, anthropic.APIStatusError):
        return _failure_from_status(exc)
    if isinstance(exc, anthropic.APITimeoutError):
        return Failure(None, "timeout", sdk_error_text(exc))
    if isinstance(exc, anthropic.APIConnectionError):
        return Failure(None, "connection_error", sdk_error_text(exc))
    if isinstance(exc, anthropic.APIResponseValidationError):
        return Failure(None, "invalid_response", f"the reply is not a valid Message: {exc}")
    if isinstance(exc, httpx2.TimeoutException):
        return Failure(None, "timeout", f"no data from the server within {timeout:g} s ({exc})")
    if isinstance(exc, httpx2.TransportError):
        return Failure(None, "connection_error", f"the connection failed mid-answer: {exc or type(exc).__name__}")
    return Failure(None, "invalid_response",
                   f"the reply could not be read as a Message: {type(exc).__name__}: {_clip(str(exc))}")


def _failure_from_status(exc: anthropic.APIStatusError) -> Failure:
    body: dict[str, Any] = exc.body if isinstance(exc.body, dict) else {}
    error: dict[str, Any] = body["error"] if isinstance(body.get("error"), dict) else {}
    # from the body, not exc.message: the SDK's wording of that changes between releases
    text = exc.body.strip() if isinstance(exc.body, str) else ""
    message = str(error.get("message") or text or f"HTTP {exc.status_code}")
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


def check_message(message: Any) -> Message | Failure:
    """The message dict when it is a whole Message the loop can act on, else a Failure naming the problem."""
    if hasattr(message, "to_dict"):  # an SDK Message, converted once; a bad field is reported below, not warned of
        message = message.to_dict(warnings=False)
    if not isinstance(message, dict) or message.get("type", "message") != "message":
        return _not_whole(f"expected an object of type 'message', got {_clip(repr(message), 120)}")
    why = _bad_content(message.get("content"))
    if why is not None:
        return _not_whole(why)
    if message.get("stop_reason") is None:
        return _not_whole("stop_reason is null (the answer did not finish)", "incomplete_response")
    if not isinstance(message.get("stop_reason"), str):
        return _not_whole(f"stop_reason is not a string: {_clip(repr(message.get('stop_reason')), 80)}")
    usage = message.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return _not_whole("usage is not an object")
    for key in _USAGE_KEYS:
        value = (usage or {}).get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 10**12):
            return _not_whole(f"usage.{key} is not a token count: {_clip(repr(value), 80)}")
    return cast(Message, message)


def _bad_content(content: Any) -> str | None:
    if not isinstance(content, list):
        return "content is not a list of blocks with a type"
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            return "content is not a list of blocks with a type"
        if kind == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                                       and isinstance(block.get("input"), dict)):
            return "a tool_use block lacks a string id, a string name or an object input"
    return None


def _not_whole(why: str, kind: str = "invalid_response") -> Failure:
    return Failure(None, kind, f"the reply is not a whole Message: {why}")


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"

