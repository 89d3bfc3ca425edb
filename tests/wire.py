"""An independent Messages API for the tests, written from the API's documented JSON and event shapes (not
from agentlab's scripted engine): canned messages, their SSE form, and a small HTTP server on 127.0.0.1 that
answers ``POST /v1/messages`` with canned replies in order and records every request it saw.

A reply is one of:
- a Message dict: sent as JSON, or as the SSE stream of that message when the request asked to stream;
- ``(status, body, headers)``: a JSON body with that status and extra response headers (an API error);
- a :class:`Raw`: bytes exactly as given, without a content length, so the body ends when the connection
  closes; ``stall`` sends the headers and the bytes, then holds the connection open until the server closes;
  ``dribble`` sends the body one byte at a time, that many seconds apart.
When the replies run out the server answers a 400 that says so.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SUMMARY = "Summary: the user asked for the weather in Oslo and Lima; both were fetched."


def message(content: list[dict[str, Any]], stop_reason: str | None = "end_turn", *, msg_id: str = "msg_canned",
            usage: dict[str, int] | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage or {"input_tokens": 25, "output_tokens": 10}, **extra}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def error(status: int, error_type: str, text: str, **headers: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    return status, {"type": "error", "error": {"type": error_type, "message": text}}, headers


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def sse_events(msg: dict[str, Any]) -> list[bytes]:
    """The whole event stream of a finished message, one element per SSE event."""
    start = {**msg, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**msg["usage"], "output_tokens": 1}}
    out = [event("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            out.append(event("content_block_start", {"type": "content_block_start", "index": i,
                                                     "content_block": {"type": "text", "text": ""}}))
            out.append(event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                     "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            out.append(event("content_block_start", {"type": "content_block_start", "index": i,
                                                     "content_block": {**block, "input": {}}}))
            out.append(event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        out.append(event("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(event("message_delta", {"type": "message_delta",
                                       "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                                       "usage": {"output_tokens": msg["usage"]["output_tokens"]}}))
    out.append(event("message_stop", {"type": "message_stop"}))
    return out


@dataclass
class Raw:
    """One reply exactly as sent; the body ends when the connection closes."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    stall: bool = False
    dribble: float | None = None  # seconds between bytes: the body is sent one byte at a time


def ok(msg: dict[str, Any]) -> Raw:
    return Raw(body=json.dumps(msg).encode())


def streamed(events: list[bytes]) -> Raw:
    return Raw(body=b"".join(events), content_type="text/event-stream")


def last_user_text(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            content = m["content"]
            if isinstance(content, str):
                return content
            return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def asks_for_a_summary(body: dict[str, Any]) -> bool:
    """A compaction summary request: no tools, and the last user text asks for a summary."""
    return "tools" not in body and "summar" in last_user_text(body).lower()


@dataclass
class Seen:
    body: dict[str, Any]
    headers: dict[str, str]
    summary: bool


@dataclass
class MessagesServer:
    """Answers each ``POST`` with the next reply. With ``summary`` set, a request it matches is answered with
    a canned compaction summary and uses no reply. Use as a context manager, or call :meth:`close`."""

    replies: list[Any]
    summary: Callable[[dict[str, Any]], bool] | None = None
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.replies = list(self.replies)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                is_summary = server.summary is not None and server.summary(body)
                server.seen.append(Seen(body, {k.lower(): v for k, v in self.headers.items()}, is_summary))
                if is_summary:
                    reply: Any = message([text(SUMMARY)])
                elif server.replies:
                    reply = server.replies.pop(0)
                else:
                    reply = error(400, "invalid_request_error", "no more canned replies")
                if isinstance(reply, Raw):
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.end_headers()
                    if reply.dribble is not None:
                        for i in range(len(reply.body)):  # ends early when the server closes or the client leaves
                            if server.release.wait(reply.dribble):
                                return
                            try:
                                self.wfile.write(reply.body[i:i + 1])
                                self.wfile.flush()
                            except OSError:
                                return
                    self.wfile.write(reply.body if reply.dribble is None else b"")
                    self.wfile.flush()
                    if reply.stall:
                        server.release.wait(30)
                    return
                status, payload, headers = (200, reply, {}) if isinstance(reply, dict) else reply
                if status == 200 and body.get("stream"):
                    data, ctype = b"".join(sse_events(payload)), "text/event-stream"
                else:
                    data, ctype = json.dumps(payload).encode(), "application/json"
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """Every request body, in order."""
        return [s.body for s in self.seen]

    @property
    def turns(self) -> list[dict[str, Any]]:
        """The request bodies that were not compaction summaries."""
        return [s.body for s in self.seen if not s.summary]

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> MessagesServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
