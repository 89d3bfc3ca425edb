"""A model call with a deadline of its own, and a word when it has gone quiet.

The SDK's ``timeout`` bounds each wait for the server's next bytes, never the whole call: a server sending one
byte a second keeps a call going for as long as it likes. :func:`bounded_call` (and :func:`abounded_call` for
an async client) bounds the whole call, from sending the request to its last byte, by ``deadline_s``; the
call then fails as a ``timeout``, and is retried like one. When no data has come for ``notice_s`` seconds
(the whole answer of a call that does not stream, the next event of one that does), ``on_quiet(seconds)`` is
called once for that stretch of silence, so that the user hears of the wait before the deadline.

A sync call runs in a worker thread that the caller waits for; past the deadline it is left to end on its
own (it touches nothing of the caller's: its result is dropped), and its stream is closed where the call
registered one (``Progress.closer``). Workers are kept and reused (a new thread per call cost about 35 µs of
CPU, a kept one about 11); a worker still busy with an abandoned call is not handed another until it is done,
and a forked child starts with none (its parent's threads are not in it).
An async call is cancelled, which closes its connection.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .transitions import Failure

__all__ = ["Progress", "abounded_call", "bounded_call", "deadline_failure", "in_daemon_thread"]

T = TypeVar("T")


class Progress:
    """What a running call reports: data arrived (:meth:`tick`), and how to close it early (``closer``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last = clock()
        self.closer: Callable[[], Any] | None = None

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
                 on_quiet: Callable[[float], None] | None = None) -> T | Failure:
    """``call(progress)`` in a worker thread, waited for at most ``deadline_s`` in all (see the module)."""
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
    """A forked child has none of its parent's threads: the workers it inherited would never run its calls."""
    _Worker._idle = []
    _Worker._lock = threading.Lock()


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
