"""A model call with a deadline of its own, and a word when it has gone quiet.

The SDK's ``timeout`` bounds each wait for the server's next bytes, never the whole call: a server sending one
byte a second keeps a call going for as long as it likes. :func:`bounded_call` (and :func:`abounded_call` for
an async client) bounds the whole call, from sending the request to its last byte, by ``deadline_s``; the
call then fails as a ``timeout``, and is retried like one. When no data has come for ``notice_s`` seconds
(the whole answer of a call that does not stream, the next event of one that does), ``on_quiet(seconds)`` is
called once for that stretch of silence, so that the user hears of the wait before the deadline.

A sync call through the SDK (an ``httpx2.Client`` underneath) runs in the caller's own thread: an httpx response
hook reads its reply under the deadline, checked at every chunk, and one watchdog thread for all calls closes
the reply when the deadline passes and says when a call has gone quiet. Any other sync call runs in a kept
worker thread that the caller waits for (a forked child starts with none); past the deadline it is left to end on
its own, its result dropped and its stream closed where the call registered one (``Progress.closer``). An async
call is cancelled, which closes its connection.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import queue
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx2

from .transitions import Failure

__all__ = ["Progress", "abounded_call", "bounded_call", "deadline_failure", "in_daemon_thread"]

T = TypeVar("T")


class Progress:
    """What a running call reports: data arrived (:meth:`tick`), and how to close it early (``closer``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last = clock()
        self.closer: Callable[[], Any] | None = None
        self.deadline = float("inf")  # when the call must have ended (the inline path checks it at every chunk)
        self.expired = False          # the deadline passed while the reply came in
        # whether the reply's bytes hold a JSON escape of a surrogate (\\ud800 to \\udfff), the only way JSON can
        # carry a lone one; None when its bytes were not seen (any call but a sync one through httpx2)
        self.surrogate_escapes: bool | None = None

    def tick(self) -> None:
        self.last = self.clock()

    def close(self) -> None:
        closer = self.closer
        if closer is not None:
            try:
                closer()
            except Exception:  # noqa: BLE001 - best effort: the call is being abandoned
                pass


def deadline_failure(deadline_s: float) -> Failure:
    return Failure(None, "timeout", f"the call took more than {deadline_s:g} s in all (its deadline, the request "
                                    "timeout); the server was still sending or holding it")


def bounded_call(call: Callable[[Progress], T], *, deadline_s: float, notice_s: float | None,
                 on_quiet: Callable[[float], None] | None = None, http_client: Any = None) -> T | Failure:
    """``call(progress)``, bounded by ``deadline_s`` in all (see the module): in the caller's thread when the
    call goes through ``http_client`` (an ``httpx2.Client``, whose replies are then read under the deadline),
    else in a worker thread that the caller waits for."""
    if isinstance(http_client, httpx2.Client):
        return _inline(call, http_client, deadline_s, notice_s, on_quiet)
    progress = Progress()
    box: dict[str, Any] = {}
    finished = threading.Event()

    def work() -> None:
        try:
            box["value"] = call(progress)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    _Worker.run(work, finished)
    deadline = progress.clock() + deadline_s
    quiet = _Quiet(progress, notice_s, on_quiet)
    try:
        while not finished.wait(max(0.0, min(deadline, quiet.next_at()) - progress.clock())):
            quiet.check()  # first: a silence that reached the notice is said, even when the deadline has passed
            if progress.clock() >= deadline:
                progress.close()
                return deadline_failure(deadline_s)
    except BaseException:  # Ctrl-C while waiting: the call is left, its stream closed
        progress.close()
        raise
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


# -- in the caller's thread: the reply read under the deadline ---------------------------------------------------

_CURRENT: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("agentlab_call", default=None)


class _DeadlineStream(httpx2.SyncByteStream):
    """A reply's bytes, each chunk a sign of life (``Progress.tick``) and a point where a passed deadline ends it."""

    def __init__(self, inner: Any, progress: Progress) -> None:
        self._inner, self._progress = inner, progress

    def __iter__(self) -> Iterator[bytes]:
        progress = self._progress
        tail = b""  # an escape cut in two by a chunk's end is found in the next chunk's window
        for chunk in self._inner:
            progress.tick()
            if progress.last > progress.deadline:
                progress.expired = True
                raise httpx2.ReadTimeout("the call's deadline passed while the reply came in")
            if not progress.surrogate_escapes and SURROGATE_ESCAPE.search(tail + chunk):
                progress.surrogate_escapes = True
            tail = chunk[-5:]
            yield chunk

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


# a JSON escape of a surrogate code point, \ud800 to \udfff: a reply without one cannot hold a lone surrogate
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def _bound_reply(response: httpx2.Response) -> None:
    """An httpx response hook: a reply to a bounded call is read under its deadline (any other passes as it is),
    and its bytes are looked at for surrogate escapes (``Progress.surrogate_escapes``) as they pass."""
    progress = _CURRENT.get()
    if progress is None:
        return
    try:  # a reply whose body is already in memory (an in-process transport): nothing left to wait for
        body = response.content
    except httpx2.ResponseNotRead:
        progress.surrogate_escapes = False  # so far: the stream below says when it sees one
        response.stream = _DeadlineStream(response.stream, progress)
        if progress.closer is None:
            progress.closer = response.close  # the watchdog closes it at the deadline
        return
    progress.surrogate_escapes = SURROGATE_ESCAPE.search(body) is not None


def _hooked(http_client: httpx2.Client) -> None:
    hooks = http_client.event_hooks
    if _bound_reply not in hooks.get("response", []):
        http_client.event_hooks = {**hooks, "response": [*hooks.get("response", []), _bound_reply]}


def _inline(call: Callable[[Progress], T], http_client: httpx2.Client, deadline_s: float, notice_s: float | None,
            on_quiet: Callable[[float], None] | None) -> T | Failure:
    """The call in the caller's thread: no thread handed the work (a worker cost about 15 % of a scripted call's
    CPU in ``bench/overhead.py``); the watchdog says when it has gone quiet."""
    _hooked(http_client)
    progress = Progress()
    progress.deadline = progress.clock() + deadline_s
    watch = _WATCHDOG.watch(progress, notice_s, on_quiet)
    token = _CURRENT.set(progress)
    try:
        value = call(progress)
    finally:
        _CURRENT.reset(token)
        _WATCHDOG.forget(watch)
    if progress.expired:
        return deadline_failure(deadline_s)
    return value


class _Watchdog:
    """One thread for every bounded call in the caller's thread: it says when a call has gone quiet, and closes
    its reply at its deadline (the reading thread then fails at once). It sleeps until the earliest of these is
    due, and is woken by a new call only when that call's comes first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # taken as it is by watch and forget (a Condition's own enter is slower)
        self._cond = threading.Condition(self._lock)
        self._watches: dict[int, _Quiet] = {}
        self._count = 0
        self._wake_at: float | None = None  # when the thread wakes next (None: it waits for a watch)
        self._thread: threading.Thread | None = None

    def watch(self, progress: Progress, notice_s: float | None, on_quiet: Callable[[float], None] | None) -> int:
        quiet = _Quiet(progress, notice_s, on_quiet)
        with self._lock:
            self._count += 1
            self._watches[self._count] = quiet
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, daemon=True, name="agentlab-watchdog")
                self._thread.start()
            if self._wake_at is None or self._due(quiet) < self._wake_at:
                self._cond.notify()
            return self._count

    @staticmethod
    def _due(quiet: _Quiet) -> float:
        return min(quiet.next_at(), quiet.progress.deadline)

    def forget(self, key: int) -> None:
        with self._lock:
            self._watches.pop(key, None)

    def _serve(self) -> None:
        with self._cond:
            while True:
                for quiet in list(self._watches.values()):
                    quiet.check()
                    if not quiet.progress.expired and quiet.progress.clock() >= quiet.progress.deadline:
                        quiet.progress.expired = True
                        quiet.progress.close()
                due = [self._due(quiet) for quiet in self._watches.values() if not quiet.progress.expired]
                self._wake_at = min(due) if due else None
                self._cond.wait(None if self._wake_at is None else max(0.0, self._wake_at - time.monotonic()))


_WATCHDOG = _Watchdog()


async def abounded_call(call: Callable[[Progress], Awaitable[T]], *, deadline_s: float, notice_s: float | None,
                        on_quiet: Callable[[float], None] | None = None) -> T | Failure:
    """:func:`bounded_call` for a coroutine: cancelled at the deadline (its connection closed)."""
    progress = Progress()
    task = asyncio.ensure_future(call(progress))
    deadline = progress.clock() + deadline_s
    quiet = _Quiet(progress, notice_s, on_quiet)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, min(deadline, quiet.next_at()) - progress.clock()))
            if done:
                return task.result()
            quiet.check()
            if progress.clock() >= deadline:
                return deadline_failure(deadline_s)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class _Worker:
    """A daemon thread that runs the calls handed to it, one at a time, and offers itself again when idle."""

    _idle: list[_Worker] = []
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, daemon=True, name="agentlab-call").start()

    @classmethod
    def run(cls, job: Callable[[], None], done: threading.Event) -> None:
        """``job()`` on an idle worker (a new one when none is idle), then ``done`` set; returns at once."""
        with cls._lock:
            worker = cls._idle.pop() if cls._idle else None
        (worker or cls())._jobs.put((job, done))

    def _serve(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                job()  # the job catches what it raises (bounded_call's work)
            finally:
                with self._lock:
                    self._idle.append(self)  # idle again before the caller hears: its next call reuses it
                done.set()


def _forget_workers_after_fork() -> None:
    """A forked child has none of its parent's threads: the workers (and the watchdog) it inherited would never
    run."""
    global _WATCHDOG
    _Worker._idle = []
    _Worker._lock = threading.Lock()
    _WATCHDOG = _Watchdog()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers_after_fork)


class _Quiet:
    """Says once per stretch of silence that the call has had no data for ``notice_s`` seconds."""

    def __init__(self, progress: Progress, notice_s: float | None, on_quiet: Callable[[float], None] | None) -> None:
        self.progress, self.notice_s, self.on_quiet = progress, notice_s, on_quiet
        self.said_for: float | None = None  # the ``progress.last`` of the silence already reported

    def next_at(self) -> float:
        if self.notice_s is None or self.on_quiet is None:
            return float("inf")
        if self.said_for == self.progress.last:  # reported: wake at the next check only if data comes
            return self.progress.clock() + self.notice_s
        return self.progress.last + self.notice_s

    def check(self) -> None:
        if self.notice_s is None or self.on_quiet is None or self.said_for == self.progress.last:
            return
        if self.progress.clock() - self.progress.last >= self.notice_s:
            self.said_for = self.progress.last
            self.on_quiet(self.notice_s)


async def in_daemon_thread(fn: Callable[..., T], *args: Any) -> T:
    """``await asyncio.to_thread(fn, *args)`` on a daemon thread of its own: cancelled (Ctrl-C), the await ends
    at once and the thread, left to end on its own, neither holds ``asyncio.run``'s shutdown (which waits for
    the default executor's threads) nor the process's exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        try:
            value, error = fn(*args), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            value, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the event loop has closed: nobody waits for this any more
            pass

    threading.Thread(target=work, daemon=True, name="agentlab-tools").start()
    return await future
