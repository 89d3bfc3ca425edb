"""Conversations the server holds between turns: requests with a ``thread`` field.

A client that threads (the SDK's tool runner does, by default) sends ``thread: {"type": "create"}`` with the
whole conversation, then ``{"type": "continue", "previous_message_id": ID}`` with only the new messages and
without the create-only fields (``system``, ``tools``): the server keeps the conversation under the reply's id
and puts it back in front. :class:`HeldThreads` does that for ``agentlab serve`` and for the in-process
transport alike, so the scenario always sees the whole conversation, as the model behind the live API does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol, TypeVar


__all__ = ["HeldThreads", "Reply", "reply_message", "thread_of"]


class Reply(Protocol):
    """What is read of a reply (the scripted engine's ``Reply``)."""

    status: int
    headers: dict[str, str]
    body: bytes


def thread_of(path: str, request: Any) -> dict[str, Any] | None:
    """The ``thread`` field of a Messages request that has one; None otherwise."""
    if path.split("?", 1)[0].rstrip("/") != "/v1/messages" or not isinstance(request, dict) \
            or not isinstance(request.get("thread"), dict):
        return None
    thread: dict[str, Any] = request["thread"]
    return thread


R = TypeVar("R", bound=Reply)


class HeldThreads:
    """The conversations held under the id of the reply that ended them, and the ids already continued."""

    def __init__(self) -> None:
        self._threads: dict[str, dict[str, Any]] = {}  # message id -> the conversation the server holds
        self._continued: set[str] = set()

    def expand(self, sent: dict[str, Any], thread: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The whole request a threaded one stands for, and the error code when it cannot be continued."""
        full = dict(sent)
        if thread.get("type") != "continue":
            return full, None
        previous = str(thread.get("previous_message_id"))
        held = self._threads.get(previous)
        if held is None:
            return full, "thread_not_found"
        if previous in self._continued:
            return full, "thread_already_continued"
        full["messages"] = [*held["messages"], *(sent.get("messages") or [])]
        for key in ("system", "tools"):
            if key not in full and held.get(key) is not None:
                full[key] = held[key]
        return full, None

    def keep(self, thread: dict[str, Any], full: dict[str, Any], reply: Reply) -> None:
        """After the answer: hold the conversation with the reply under the reply's id."""
        message = reply_message(reply)
        if reply.status != 200 or message is None:
            return
        if thread.get("type") == "continue":
            self._continued.add(str(thread.get("previous_message_id")))
        self._threads[message["id"]] = {
            "messages": [*full.get("messages", []), {"role": "assistant", "content": message["content"]}],
            "system": full.get("system"), "tools": full.get("tools")}

    def answer(self, handle: Callable[[bytes], R], refuse: Callable[[str, str], R], sent: dict[str, Any],
               thread: dict[str, Any]) -> tuple[R, str | None]:
        """``handle(body)`` on the whole request; the reply, and the error code when the thread is refused: the
        request then never reaches ``handle``, and the reply is ``refuse(code, previous_message_id)``."""
        full, code = self.expand(sent, thread)
        if code is not None:
            return refuse(code, str(thread.get("previous_message_id"))), code
        reply = handle(json.dumps(full).encode())
        self.keep(thread, full, reply)
        return reply, None


def reply_message(reply: Reply) -> dict[str, Any] | None:
    """The Message a 200 reply carries, rebuilt from its SSE events when it streamed; None otherwise."""
    if reply.status != 200 or not reply.body:
        return None
    if not reply.headers.get("content-type", "").startswith("text/event-stream"):
        try:
            whole = json.loads(reply.body)
        except ValueError:
            return None
        return whole if isinstance(whole, dict) and whole.get("type") == "message" else None
    message: dict[str, Any] | None = None
    partial: dict[int, str] = {}
    for chunk in reply.body.decode("utf-8").split("\n\n"):
        data = next((line[6:] for line in chunk.splitlines() if line.startswith("data: ")), None)
        if data is None:
            continue
        event = json.loads(data)
        kind = event.get("type")
        if kind == "message_start":
            message = {**event["message"], "content": []}
        elif message is None:
            continue
        elif kind == "content_block_start":
            message["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
        elif kind == "content_block_stop" and event["index"] in partial:
            try:
                message["content"][event["index"]]["input"] = json.loads(partial[event["index"]])
            except ValueError:
                pass  # a tool call cut off by max_tokens keeps its empty input
        elif kind == "message_delta":
            message.update({k: v for k, v in event["delta"].items() if k != "type"})
    return message
