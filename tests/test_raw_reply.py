"""A whole reply is read from its JSON, not from the SDK's ``Message`` model.

``client.messages.create`` builds a ``Message`` from the reply's JSON, which the loop then turned straight back
into a dict; the loop now asks ``client.messages.with_raw_response.create`` for the same request and reads the
JSON itself. That may change nothing the loop does with a reply: for every body below, good or bad, with the
sync and the async client, the loop gets what it got through ``create`` (the same dict, or the same Failure).
On the wire the request is the same but for one SDK header, ``x-stainless-raw-response: raw``.

One difference is kept on purpose: a value the SDK's model turns into a Python object (a container's
``expires_at`` became a ``datetime``) stays the JSON text the API sent, so a reply dict is plain JSON throughout.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import anthropic
import httpx2
import pytest

from agentlab.core.wire import SEND_ERRORS, asend, check_message, failure_of, send

PARAMS = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "messages": [{"role": "user", "content": "Go."}]}
USAGE = {"input_tokens": 25, "output_tokens": 9, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
         "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
         "server_tool_use": {"web_search_requests": 1}, "service_tier": "standard"}


def reply(content: list[dict[str, Any]], stop_reason: str | None = "end_turn", **extra: Any) -> dict[str, Any]:
    return {"id": "msg_raw", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
            "content": content, "stop_reason": stop_reason, "stop_sequence": None, "usage": USAGE, **extra}


GOOD = {
    "text_and_tool": reply([{"type": "text", "text": "Let me add."},
                            {"type": "tool_use", "id": "toolu_1", "name": "calculator",
                             "input": {"z": 1, "expression": "1 + 2", "nested": {"b": [1, 2], "a": None}}}],
                           "tool_use"),
    "thinking": reply([{"type": "thinking", "thinking": "Step by step.", "signature": "c2ln"},
                       {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
                       {"type": "text", "text": "Done."}]),
    "server_tool": reply([
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "news"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
         "content": [{"type": "web_search_result", "url": "https://example.com", "title": "Example",
                      "encrypted_content": "ZW5j", "page_age": "1 day"}]},
        {"type": "text", "text": "It says so.",
         "citations": [{"type": "web_search_result_location", "url": "https://example.com", "title": "Example",
                        "encrypted_index": "aW5k", "cited_text": "so"}]}], "pause_turn"),
    "refusal": reply([], "refusal", stop_details={"type": "refusal", "category": "cyber",
                                                  "explanation": "The request could enable cyber harm."}),
    "stop_sequence": {**reply([{"type": "text", "text": "A list:"}], "stop_sequence"), "stop_sequence": "END"},
    "unknown_fields": reply([{"type": "text", "text": "x", "future_field": {"k": 1}},
                             {"type": "block_of_tomorrow", "payload": [1, "two"]}], future_top_level=True),
    "container": reply([{"type": "text", "text": "x"}], container={"id": "cntr_1", "expires_at": "2026-12-03"}),
}
BAD: dict[str, tuple[bytes, str]] = {
    "html_as_html": (b"<html>gateway</html>", "text/html"),
    "html_as_json": (b"<html>gateway</html>", "application/json"),
    "empty_as_json": (b"", "application/json"),
    "empty_as_text": (b"", "text/plain"),
    "null": (b"null", "application/json"),
    "a_list": (b"[1, 2]", "application/json"),
    "a_string": (b'"message"', "application/json"),
    "message_as_text": (json.dumps(reply([{"type": "text", "text": "x"}])).encode(), "text/plain; charset=utf-8"),
    "no_stop_reason": (json.dumps(reply([{"type": "text", "text": "x"}], None)).encode(), "application/json"),
    "wrong_types": (json.dumps(reply([{"type": "text", "text": "x"}], usage={"input_tokens": "x"})).encode(),
                    "application/json"),
    "tool_without_input": (json.dumps(reply([{"type": "tool_use", "id": "t", "name": "n"}], "tool_use")).encode(),
                           "application/json"),
    "deep": (b"[" * 50_000 + b"]" * 50_000, "application/json"),
}
BODIES = {**{name: (json.dumps(body).encode(), "application/json") for name, body in GOOD.items()}, **BAD}


def transport(body: bytes, content_type: str, seen: list[httpx2.Request]) -> httpx2.MockTransport:
    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, content=body, headers={"content-type": content_type})
    return httpx2.MockTransport(handler)


def as_sent(before: Any) -> Any:
    """``create``'s dict with the one value its model turned into a Python object put back as the JSON text."""
    if isinstance(before, dict) and isinstance(before.get("container"), dict):
        expires = before["container"]["expires_at"]
        assert isinstance(expires, datetime.datetime)
        return {**before, "container": {**before["container"], "expires_at": expires.date().isoformat()}}
    return before


def through_create(client: anthropic.Anthropic) -> Any:
    """What the loop got before: the SDK's Message from ``create``, turned into a dict (or the Failure)."""
    try:
        return check_message(client.messages.create(**PARAMS, timeout=30.0))
    except SEND_ERRORS as exc:
        return failure_of(exc, 30.0)


async def athrough_create(client: anthropic.AsyncAnthropic) -> Any:
    try:
        return check_message(await client.messages.create(**PARAMS, timeout=30.0))
    except SEND_ERRORS as exc:
        return failure_of(exc, 30.0)


def sync_client(body: bytes, content_type: str, seen: list, **options: Any) -> anthropic.Anthropic:
    http = httpx2.Client(transport=transport(body, content_type, seen))
    return anthropic.Anthropic(api_key="x", max_retries=0, http_client=http, **options)


@pytest.mark.parametrize("name", list(BODIES))
def test_the_loop_gets_what_create_gave_for_every_body(name):
    body, content_type = BODIES[name]
    seen: list[httpx2.Request] = []
    client = sync_client(body, content_type, seen)
    before, now = through_create(client), send(client, dict(PARAMS), False, 30.0)
    assert now == as_sent(before)
    if name in GOOD:
        assert now == GOOD[name]                         # every key and value the API sent, and nothing else
        assert list(now) == list(GOOD[name])             # in the API's own order
    create_request, raw_request = seen
    assert raw_request.content == create_request.content
    assert ({k: v for k, v in raw_request.headers.items() if k != "x-stainless-raw-response"}
            == dict(create_request.headers.items()))
    assert raw_request.headers["x-stainless-raw-response"] == "raw"


@pytest.mark.parametrize("name", list(BODIES))
def test_the_async_loop_gets_what_create_gave_for_every_body(name):
    body, content_type = BODIES[name]

    async def both() -> tuple[Any, Any]:
        http = httpx2.AsyncClient(transport=transport(body, content_type, []))
        async with anthropic.AsyncAnthropic(api_key="x", max_retries=0, http_client=http) as client:
            return await athrough_create(client), await asend(client, dict(PARAMS), False, 30.0)

    before, now = asyncio.run(both())
    assert now == as_sent(before)


def test_a_client_that_validates_replies_keeps_its_validation():
    """With ``_strict_response_validation`` the SDK checks a reply against its model; the loop lets it."""
    seen: list[httpx2.Request] = []
    body = json.dumps(reply([{"type": "text", "text": 3}])).encode()  # text is not a string
    client = sync_client(body, "application/json", seen, _strict_response_validation=True)
    failure = send(client, dict(PARAMS), False, 30.0)
    assert failure.error_type == "invalid_response" and "not a valid Message" in failure.message
    assert "x-stainless-raw-response" not in seen[0].headers


def test_a_client_that_is_not_the_sdks_is_called_through_create():
    class Messages:
        def create(self, **params: Any) -> dict[str, Any]:
            return GOOD["text_and_tool"]

    class Client:
        messages = Messages()

    assert send(Client(), dict(PARAMS), False, 30.0) == GOOD["text_and_tool"]


def test_replies_kept_side_by_side_share_their_keys():
    """A long run keeps thousands of replies (history, trace): their keys are one string each, not a copy a reply."""
    body = json.dumps(GOOD["text_and_tool"]).encode()
    first, second = (send(sync_client(body, "application/json", []), dict(PARAMS), False, 30.0) for _ in range(2))
    assert first == second and first is not second
    for a, b in ((first, second), (first["usage"], second["usage"]), (first["content"][1], second["content"][1])):
        assert all(x is y for x, y in zip(a, b, strict=True)), list(a)
