"""``agentlab serve``: a scenario behind a real HTTP server on 127.0.0.1 that speaks the Messages API.

Any client that lets you set its base URL (``ANTHROPIC_BASE_URL``, ``base_url=``, ``--base-url``) can be
pointed at it: the scenario answers each request as the live API would, as JSON or as an SSE stream, with
real statuses and ``retry-after`` headers for its errors. Every request is recorded (``server.exchanges``
pairs each with its answer; ``server.engine.requests`` is the engine's own list) and, with ``record=``,
appended to a JSONL file as it arrives. Requests that use a server-held ``thread`` (as the SDK's tool
runner does) get their stored conversation put back in front before the scenario sees them.

From Python (tests, notebooks)::

    with ScenarioServer("max_tokens_give_up") as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x")
        ...
        server.engine.requests      # what the client sent

The routing and the answers are the engine's (``scripted.ScenarioEngine.handle``); this module only puts
them on the wire.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import tornado.httpserver
import tornado.iostream
import tornado.netutil
import tornado.web

from ..core.errors import ConfigError
from ..core.guard import check_outputs, lock_for_writing
from ..core.paths import open_output_fd
from .scenario import Scenario
from .scripted import ERROR_TYPES, RecordedRequest, ScenarioEngine, WireReply, thread_error
from .threads import HeldThreads, reply_message, thread_of  # noqa: F401  (reply_message: re-exported)
from .validate import field_problem

HOST = "127.0.0.1"
REASONS = {529: "Overloaded"}  # statuses the HTTP tables do not name


@dataclass
class Exchange:
    """One request and its answer. ``sent`` is the body as the client sent it when it used a server-held
    thread (``request.body`` then holds the whole conversation the scenario saw); ``thread`` is its field.
    ``at`` is when the request arrived (``time.monotonic()``), so the pauses between requests can be read."""

    request: RecordedRequest
    reply: WireReply
    sent: dict[str, Any] | None = None
    thread: dict[str, Any] | None = None
    at: float = 0.0


def request_record(request: RecordedRequest, reply_body: bytes | None = None,
                   thread: dict[str, Any] | None = None, *, index: int | None = None) -> dict[str, Any]:
    """One line of the ``--record`` JSONL file: what was asked and how it was answered.

    ``index`` is the request's place among every request the server received (unique, in arrival order)."""
    line: dict[str, Any] = {
        "index": request.index if index is None else index, "method": request.method, "path": request.path,
        "stream": request.stream,
        "step": request.step, "status": request.status, "kind": request.kind, "stop_reason": request.stop_reason,
    }
    if thread is not None:
        line["thread"] = thread
    if request.status >= 400 and reply_body:
        try:
            line["error"] = json.loads(reply_body)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            line["error"] = reply_body[:300].decode("utf-8", "replace")
    line["body"] = request.body
    return line


_UNREADABLE = object()  # a body that is not JSON (the engine says what is wrong with it)
_TOO_DEEP = object()     # JSON nested too deeply to read


def _read_body(method: str, path: str, body: bytes | None) -> Any:
    """A Messages or count_tokens body parsed once for the checks before the engine: the JSON value,
    ``_UNREADABLE``, ``_TOO_DEEP``, or None for a request without a body to judge."""
    if method != "POST" or path.split("?", 1)[0].rstrip("/") not in _SERVED or not body:
        return None
    try:
        return json.loads(body)
    except RecursionError:
        return _TOO_DEEP
    except ValueError:
        return _UNREADABLE





MAX_BODY_BYTES = 32 * 1024 * 1024  # the Messages API's own request size limit
_SERVED = ("/v1/messages", "/v1/messages/count_tokens")
def _body_problem(request: Any) -> str | None:
    """What the API would refuse in a Messages or count_tokens body (``_read_body``'s value) before the engine
    looks at it: JSON nested too deeply to read, and fields or content blocks of the wrong type
    (:func:`~agentlab.backend.validate.field_problem`). None when the engine may judge it."""
    if request is _TOO_DEEP:
        return "request body is not JSON: nested too deeply"
    return field_problem(request)


def _json_error(status: int, error_type: str, message: str, kind: str, **headers: str) -> WireReply:
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return WireReply(status, {"content-type": "application/json", **headers}, json.dumps(body).encode(), kind)


@tornado.web.stream_request_body
class _Handler(tornado.web.RequestHandler):
    """Every method and path goes to the engine, which answers or explains (404, 400) why it cannot.

    What the engine never sees is answered in the API's JSON error shape here: a body over 32 MB (413), a
    method no route serves (405), and a request that made the server itself fail (500). Every one of them
    is recorded like any other request.
    """

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

    def initialize(self, server: ScenarioServer) -> None:
        self.server = server
        self._chunks: list[bytes] = []
        self._size = 0
        self._refused = False

    def compute_etag(self) -> None:
        return None

    def set_default_headers(self) -> None:
        self.clear_header("Server")
        self.clear_header("Content-Type")

    def prepare(self) -> None:
        refusal = self.server.refusal(self.request.host, self.request.headers.get("Origin"),
                                      self.request.headers.get("Sec-Fetch-Site"))
        if refusal is not None:
            self._refuse_foreign(refusal)
            return
        length = self.request.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            self._refuse_too_large(int(length))
            return
        # Tornado's own limit answers a bare 400 to a chunked body that passes it: set it above the point where
        # data_received (chunks of at most 64 KB) refuses with the API's JSON 413
        self.request.connection.set_max_body_size(2**62)  # type: ignore[union-attr]

    def data_received(self, chunk: bytes) -> None:
        if self._refused:
            return
        self._size += len(chunk)
        if self._size > MAX_BODY_BYTES:
            self._refuse_too_large(self._size)
            return
        self._chunks.append(chunk)

    def _refuse_too_large(self, size: int) -> Any:
        self._refused = True
        shown = f"{size} bytes" if self.request.headers.get("Content-Length", "").isdigit() else \
            f"over {MAX_BODY_BYTES} bytes"
        reply = _json_error(413, "request_too_large", f"request body is {shown}; the limit is {MAX_BODY_BYTES} "
                            "bytes", "too_large", connection="close")
        self.server.record_refused(self.request.method or "POST", self.request.uri or "/", reply)
        self._send(reply)
        finished = self.finish()
        # the rest of the body is not read: the connection ends once the answer is out
        finished.add_done_callback(lambda _: self.request.connection.close())  # type: ignore[union-attr]
        return None

    def _refuse_foreign(self, refusal: str) -> None:
        """A request from another site (a web page's, through DNS rebinding or a cross-origin POST): a 403,
        said on the log, never answered by the scenario nor recorded."""
        self._refused = True
        self._send(_json_error(403, "permission_error", refusal, "forbidden", connection="close"))
        if self.server.log is not None:
            self.server.log(f"refused {self.request.method} {self.request.uri}: {refusal}"[:500])
        finished = self.finish()
        finished.add_done_callback(lambda _: self.request.connection.close())  # type: ignore[union-attr]

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors Tornado raises itself (an unknown method: 405) get the API's JSON shape too."""
        self.clear()
        self.clear_header("Server")
        if status_code == 405:
            reply = _json_error(405, "invalid_request_error",
                                f"method {self.request.method} is not served; agentlab serves POST /v1/messages",
                                "method_not_allowed", allow="POST")
        else:
            reply = _json_error(status_code, ERROR_TYPES.get(status_code, "api_error"),
                                f"HTTP {status_code}: {self._reason}", "error")
        self.server.record_refused(self.request.method or "?", self.request.uri or "/", reply)
        self._send(reply)
        self.finish()

    def _send(self, reply: WireReply) -> None:
        self.set_status(reply.status, REASONS.get(reply.status))
        for name, value in reply.headers.items():
            self.set_header(name, value)
        if self.request.method != "HEAD":
            self.write(reply.body)

    async def _answer(self, *args: Any) -> None:
        if self._refused:
            return
        body = b"".join(self._chunks)
        reply = self.server.answer(self.request.method or "GET", self.request.uri or "/", body,
                                   dict(self.request.headers))
        self.set_status(reply.status, REASONS.get(reply.status))
        for name, value in reply.headers.items():
            self.set_header(name, value)
        if reply.kind == "stream" and reply.status == 200:
            try:
                for event in reply.body.split(b"\n\n"):
                    if event:
                        self.write(event + b"\n\n")
                        await self.flush()
            except tornado.iostream.StreamClosedError:
                return  # the client hung up mid-stream; the request is already recorded
            self.finish()
            return
        if self.request.method != "HEAD":
            self.write(reply.body)
        self.finish()

    get = head = post = put = patch = delete = options = _answer


class ScenarioServer:
    """A scenario served on 127.0.0.1 from a background thread; ``start()`` returns the base URL.

    ``scenario`` is a name, a path, a loaded Scenario or a ready ScenarioEngine. ``port=0`` picks a free
    port. ``record`` appends each request to a JSONL file; ``log`` gets one line per request.

    Only requests addressed to the loopback (``Host`` 127.0.0.1, localhost or ::1, or a name in
    ``allow_hosts``) and not sent by a web page of another origin (an ``Origin`` header other than the server's
    own) are answered; the others get a 403, as a web page must not drive a local server.
    """

    def __init__(self, scenario: str | Path | Scenario | ScenarioEngine, *, port: int = 0,
                 record: str | Path | None = None, log: Callable[[str], None] | None = None,
                 allow_hosts: tuple[str, ...] | list[str] = ()) -> None:
        if isinstance(scenario, ScenarioEngine):
            self.engine = scenario
        elif isinstance(scenario, Scenario):
            self.engine = ScenarioEngine(scenario)
        else:
            self.engine = ScenarioEngine.from_name(str(scenario))
        self.port = port
        self.record_path = Path(record) if record is not None else None
        self.log = log
        self.allow_hosts = frozenset(h.strip().lower().rstrip(".") for h in allow_hosts if h.strip())
        self.exchanges: list[Exchange] = []  # every request and its answer, in order
        self._threads = HeldThreads()  # the conversations held for clients that thread
        self._record_file: IO[str] | None = None
        self.record_error: str | None = None  # why --record stopped, when a write failed
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._lock = threading.Lock()

    @property
    def scenario(self) -> Scenario:
        return self.engine.scenario

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- answering ----------------------------------------------------------------------------------------
    def _own_origin(self, origin: str) -> bool:
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(origin.strip())
            port = parts.port
        except ValueError:
            return False
        name = (parts.hostname or "").rstrip(".")
        return parts.scheme == "http" and port == self.port and (_is_loopback(name) or name in self.allow_hosts)

    def refusal(self, host: str, origin: str | None, fetch_site: str | None = None) -> str | None:
        """Why a request with this ``Host``, ``Origin`` and ``Sec-Fetch-Site`` is refused (None: it is answered).
        A browser sends ``Sec-Fetch-Site`` with every request, a GET without ``Origin`` included (an image);
        ``cross-site`` and ``same-site`` there mean that another site's page made it."""
        name = _host_name(host)
        if name is None or not (_is_loopback(name) or name in self.allow_hosts):
            return (f"Host {host[:100]!r} is not this server's: agentlab serve answers 127.0.0.1, localhost and "
                    f"::1 (add a name with --allow-host NAME)")
        if origin is not None and not self._own_origin(origin):
            return (f"Origin {origin[:100]!r}: a web page of another site may not call agentlab serve "
                    f"(only {self.base_url} may)")
        if fetch_site is not None and fetch_site.strip().lower() not in ("same-origin", "none"):
            return (f"Sec-Fetch-Site {fetch_site[:40]!r}: a web page of another site may not call agentlab serve "
                    f"(only {self.base_url} may)")
        return None

    def answer(self, method: str, path: str, body: bytes | None,
               headers: dict[str, str] | None = None) -> WireReply:
        """Answer one request with the engine and record it (called on the server thread). ``headers`` reach
        the engine: their ``anthropic-beta`` values decide the beta fields a reply carries.

        A request the engine fails on is answered with the API's JSON 500 and recorded all the same."""
        arrived = time.monotonic()
        with self._lock:
            request = _read_body(method, path, body)
            problem = _body_problem(request)
            if problem is not None:  # answered as the API does, and no scenario step is used up
                reply = _json_error(400, "invalid_request_error", problem, "invalid_request")
                recorded = RecordedRequest(index=len(self.exchanges), method=method, path=path,
                                           body=_parsed_or_none(body), stream=False, step=None, status=400,
                                           kind="invalid_request")
                self._keep(recorded, reply, None, None, arrived)
                return reply
            thread = thread_of(path, request)
            sent = request if thread is not None else {}
            count = len(self.engine.requests)
            try:
                if thread is None:
                    reply = self.engine.handle(method, path, body, headers)
                    recorded = self.engine.requests[-1]
                else:
                    reply, recorded = self._answer_threaded(method, path, sent, thread, headers)
            except Exception as exc:  # noqa: BLE001 - the client gets an answer, the record keeps the request
                reply = _json_error(500, "api_error", f"agentlab serve failed on this request: "
                                                      f"{type(exc).__name__}: {exc}"[:500], "server_error")
                recorded = self.engine.requests[-1] if len(self.engine.requests) > count else RecordedRequest(
                    index=len(self.exchanges), method=method, path=path, body=_parsed_or_none(body), stream=False,
                    step=None, status=500, kind="server_error")
                recorded = RecordedRequest(**{**recorded.__dict__, "status": 500, "kind": "server_error"})
            self._keep(recorded, reply, sent if thread is not None else None, thread, arrived)
        return reply

    def record_refused(self, method: str, path: str, reply: WireReply) -> None:
        """A request answered before the engine saw it (too large, a method not served): recorded too."""
        with self._lock:
            recorded = RecordedRequest(index=len(self.exchanges), method=method, path=path, body=None, stream=False,
                                       step=None, status=reply.status, kind=reply.kind)
            self._keep(recorded, reply, None, None)

    def _keep(self, recorded: RecordedRequest, reply: WireReply, sent: dict[str, Any] | None,
              thread: dict[str, Any] | None, arrived: float | None = None) -> None:
        """Append to the exchanges and to the --record file (under the lock: one index per request)."""
        index = len(self.exchanges)
        reply.headers.setdefault("request-id", f"req_agentlab_{index:04d}")  # every response has one, as the API's
        self.exchanges.append(Exchange(recorded, reply, sent, thread,
                                      time.monotonic() if arrived is None else arrived))
        if self._record_file is not None:
            try:
                self._record_file.write(json.dumps(request_record(recorded, reply.body, thread, index=index),
                                                   default=str) + "\n")
                self._record_file.flush()
            except OSError as exc:  # disk full, /dev/full: said once, then the server goes on without recording
                self.record_error = (f"--record {self.record_path}: could not write request {index + 1}: "
                                     f"{exc.strerror or exc}; requests are no longer recorded")
                self._close_record()
                if self.log is not None:
                    self.log(self.record_error)
        if self.log is not None:
            self.log(_log_line(recorded, index))

    def _answer_threaded(self, method: str, path: str, sent: dict[str, Any], thread: dict[str, Any],
                         headers: dict[str, str] | None = None) -> tuple[WireReply, RecordedRequest]:
        """A request with a ``thread`` field: the held conversation put back in front (:mod:`.threads`)."""
        reply, code = self._threads.answer(lambda full: self.engine.handle(method, path, full, headers),
                                          thread_error,
                                          sent, thread)
        if code is not None:
            return reply, RecordedRequest(index=len(self.exchanges), method=method, path=path, body=sent,
                                          stream=bool(sent.get("stream")), step=None, status=reply.status, kind=code)
        return reply, self.engine.requests[-1]

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> str:
        if self.running:
            return self.base_url
        check_outputs({"--record": self.record_path}, {"the scenario file": self.scenario.source})
        try:
            sockets = tornado.netutil.bind_sockets(self.port, HOST, family=socket.AF_INET)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {HOST}:{self.port}: {exc.strerror or exc}") from None
        self.port = sockets[0].getsockname()[1]
        if self.record_path is not None:
            try:
                self.record_path.parent.mkdir(parents=True, exist_ok=True)
                self._record_file = _open_record(self.record_path)
            except (OSError, ConfigError) as exc:
                for sock in sockets:
                    sock.close()
                if isinstance(exc, ConfigError):
                    raise
                raise ConfigError(f"--record {self.record_path}: cannot open for appending: "
                                  f"{exc.strerror or exc}") from None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(sockets, ready), daemon=True,
                                        name=f"agentlab-serve-{self.port}")
        self._thread.start()
        ready.wait()
        return self.base_url

    def _run(self, sockets: list[socket.socket], ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop

        async def main() -> None:
            app = tornado.web.Application([(r".*", _Handler, {"server": self})], log_function=lambda handler: None)
            http = tornado.httpserver.HTTPServer(app)
            http.add_sockets(sockets)
            self._stopping = asyncio.Event()
            ready.set()
            await self._stopping.wait()
            http.stop()
            await http.close_all_connections()

        try:
            loop.run_until_complete(main())
        finally:
            ready.set()
            loop.close()

    def stop(self) -> None:
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is not None and loop is not None and stopping is not None and thread.is_alive():
            loop.call_soon_threadsafe(stopping.set)
            thread.join(timeout=10)
        self._thread = None
        self._close_record()

    def _close_record(self) -> None:
        record, self._record_file = self._record_file, None
        if record is not None:
            try:
                record.close()
            except OSError:  # what could not be flushed was reported when its write failed
                pass

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C raises KeyboardInterrupt here)."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=0.5)

    def __enter__(self) -> ScenarioServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _host_name(host: str) -> str | None:
    """The name of a ``Host`` header (``name:port``, ``[v6]:port``), lower-case; None when it is not one."""
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 address
        end = host.find("]")
        rest = host[end + 1:] if end > 0 else "?"
        return host[1:end] if rest == "" or (rest[:1] == ":" and rest[1:].isdigit()) else None
    name, _, port = host.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _is_loopback(name: str) -> bool:
    import ipaddress

    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _log_line(r: RecordedRequest, index: int | None = None) -> str:
    what = f" step {r.step}" if r.step is not None else ""
    stop = f" {r.stop_reason}" if r.stop_reason else ""
    return f"#{(r.index if index is None else index) + 1} {r.method} {r.path} -> {r.status} {r.kind}{what}{stop}"


def _open_record(path: Path) -> IO[str]:
    """The --record file, opened for appending under an exclusive lock (another server recording into it is
    refused: their lines would mix); a FIFO without a reader is refused at once instead of blocking."""
    fd = open_output_fd(path, os.O_APPEND, "--record")
    try:
        lock_for_writing(fd, f"--record {path}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "a", encoding="utf-8")


def _parsed_or_none(body: bytes | None) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body or b"")
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def serve_main(args: Any, engine: ScenarioEngine | None = None) -> int:
    """``agentlab serve SCENARIO [--port N] [--record FILE]``: serve until interrupted (``engine``: one built
    for another serving mode, ``--mode grade``)."""
    if engine is None:
        engine = ScenarioEngine.from_name(args.scenario)  # ScenarioError (exit 2) when missing or malformed
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port: expected 0-65535, got {args.port}")
    server = ScenarioServer(engine, port=args.port, record=args.record, allow_hosts=args.allow_host or (),
                            log=lambda line: print(f"agentlab serve: {line}", file=sys.stderr, flush=True))
    server.start()
    mode = "" if getattr(args, "mode", "strict") == "strict" else f", served as {args.mode} serves it"
    print(f"agentlab serve: {server.base_url} (scenario {engine.scenario.name}{mode})", flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        failures = len(engine.failures)
        print(f"agentlab serve: stopped after {len(engine.requests)} request(s), "
              f"{failures} unexpected", file=sys.stderr, flush=True)
    return 0
