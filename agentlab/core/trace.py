"""The one event stream: every step of the loop is an Event; a Trace keeps them, writes JSONL, makes a DataFrame.

An Event is an envelope (sequence number, model call, measured wall time) around a typed payload from
``events.py``. Payloads are deterministic (no timestamps, no addresses); the optional ``wall_ms`` is the only
measured value and is kept apart so that two runs of a scenario produce identical payloads.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO, Any

from .errors import ConfigError
from .paths import is_pipe, open_output_fd
from .events import EVENT_KINDS, EventKind, Payload, payload_from_data
from .guard import SECRET_PATTERN, lock_for_writing, redact, redact_value

__all__ = ["EVENT_KINDS", "LONE_SURROGATE", "Event", "Trace", "TraceWriteWarning", "events_to_frame", "redact",
           "surrogate_note", "without_lone_surrogates"]

LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # text that cannot be encoded as UTF-8
REPLACEMENT_CHARACTER = "\ufffd"


def without_lone_surrogates(value: Any) -> tuple[Any, int]:
    """``value`` with every lone surrogate in its strings (keys too, through dicts and lists) replaced by
    U+FFFD, and how many were replaced. Such text cannot be encoded as UTF-8, so a request holding it could
    never be sent; a value without any comes back as it is (the same object)."""
    if isinstance(value, str):
        return LONE_SURROGATE.subn(REPLACEMENT_CHARACTER, value)
    if isinstance(value, dict | list | tuple) and not _may_hold_lone_surrogates(value):
        return value, 0
    return _replace_lone_surrogates(value)


# repr() writes a lone surrogate as its escape (it is not printable): \ud800 to \udfff
_SURROGATE_ESCAPE = re.compile(r"\\ud[89a-f]")


def _may_hold_lone_surrogates(value: Any) -> bool:
    """False when ``value`` surely holds no lone surrogate: its ``repr`` (one pass in C, about twice as fast as
    JSON) escapes every one as ``\\udXXX`` and has no such escape. True when it has one (a text holding a
    literal backslash-u-d8 too: the exact walk then finds none), or when the repr fails."""
    try:
        text = repr(value)
    except (RecursionError, ValueError, TypeError):
        return True
    return _SURROGATE_ESCAPE.search(text) is not None


def _replace_lone_surrogates(value: Any) -> tuple[Any, int]:
    if isinstance(value, str):
        return LONE_SURROGATE.subn(REPLACEMENT_CHARACTER, value)
    if isinstance(value, dict):
        count, items = 0, []
        for key, item in value.items():
            new_key, n_key = _replace_lone_surrogates(key)
            new_item, n_item = _replace_lone_surrogates(item)
            count += n_key + n_item
            items.append((new_key, new_item))
        return (dict(items), count) if count else (value, 0)
    if isinstance(value, list | tuple):
        pairs = [_replace_lone_surrogates(item) for item in value]
        count = sum(n for _, n in pairs)
        return (type(value)(item for item, _ in pairs), count) if count else (value, 0)
    return value, 0


def surrogate_note(replaced: int) -> dict[str, str]:
    """The ``note`` an event carries when its text came in with lone surrogates (none: no note)."""
    if not replaced:
        return {}
    return {"note": f"{replaced} lone surrogate(s) (text that is not valid Unicode) replaced with U+FFFD"}


@dataclass(frozen=True)
class Event:
    seq: int
    call: int  # the model call this event belongs to (0 before the first call)
    payload: Payload
    wall_ms: float | None = None

    @property
    def kind(self) -> EventKind:
        return self.payload.kind

    @cached_property
    def data(self) -> dict[str, Any]:
        """The payload's JSONL form, made once per event (plots and tables read it on every redraw); read it,
        never change it: the payload is the event."""
        return self.payload.to_data()

    def to_json(self) -> str:
        return json.dumps({"call": self.call, "data": self.data, "kind": self.kind, "seq": self.seq,
                           "wall_ms": self.wall_ms}, ensure_ascii=False, sort_keys=True, default=str)


class TraceWriteWarning(UserWarning):
    """The trace file could not be written to its end (a full disk, a file another run holds): the run's events
    are all in memory (``loop.trace.events``), the file stops where the message says."""


def _caller_outside_agentlab() -> tuple[str, int]:
    """The file and line of the first frame that is not agentlab's own: where a learner's call started."""
    frame = sys._getframe(1)
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith("agentlab."):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


class Trace:
    """Collects events in memory and, when given a path, appends each one to a JSONL file at once.

    Every line is flushed as soon as the event happens (and fsync'd with ``fsync=True``), so a run that is
    killed keeps every completed call. Listeners (the widget, the CLI) are called with each event as it is
    emitted. Configured secrets (the loop adds its client's API key) and any ``sk-ant-…`` token are
    redacted from events before they are kept, written or shown.

    The run's ``result`` event closes the file (and frees its lock for the next run). When the file could not
    be written to that end, the result event also warns (:class:`TraceWriteWarning`, naming the file and why),
    unless ``warn=False`` (the CLI says it in its own words); ``write_error`` keeps the reason either way.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, secrets: tuple[str, ...] = (),
                 fsync: bool = False, keep: bool = True, warn: bool = True) -> None:
        self.events: list[Event] = []
        self.keep = keep  # False: events go to the file and the listeners only (constant memory on long runs)
        self._count = 0
        self.path = Path(path) if path is not None else None
        self._secrets = tuple(s for s in secrets if s)
        self._fsync = fsync
        self._listeners: list[Callable[[Event], None]] = []
        self._file: IO[str] | None = None
        self.write_error: str | None = None  # why the file stopped being written (the events are still kept)
        self._warn = warn
        self._opened = False  # opened once already: a later opening appends (it never empties the file again)
        if self.path is not None:
            if os.path.isdir(self.path):  # False for a name the system refuses (too long): opening it says why
                raise ConfigError(f"trace {self.path}: is a folder, not a file")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"trace {self.path}: cannot create its folder: {exc.strerror or exc}") from None
            if is_pipe(self.path):  # nothing in a pipe to keep: opened now, so that one no one reads is refused now
                self.open()

    def add_secret(self, secret: str | None) -> None:
        """A value that must never appear in an event (an API key): events are scanned and redacted."""
        if secret and secret not in self._secrets:
            self._secrets = (*self._secrets, secret)

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        self._listeners.append(listener)

    def emit(self, payload: Payload, call: int, wall_ms: float | None = None) -> Event:
        kind = payload.kind
        encoded = None
        if self._secrets or self.path is not None:  # with no secret to hide and no file, nothing to encode
            encoded = json.dumps(payload.to_data(), ensure_ascii=False, sort_keys=True, default=str)
            if self._may_hold_a_secret(encoded):  # redacted on the values, before any encoding
                cleaned = redact_value(payload.to_data(), self._secrets)
                payload = payload_from_data(kind, cleaned)
                encoded = json.dumps(payload.to_data(), ensure_ascii=False, sort_keys=True, default=str)
        event = Event(self._count, call, payload, wall_ms)
        self._count += 1
        if self.keep:
            self.events.append(event)
        if self.path is not None and self.write_error is None:
            self._write(event, encoded)
        if kind == "result" and self.path is not None:
            self._end_of_run()
        for listener in self._listeners:
            listener(event)
        return event

    def _end_of_run(self) -> None:
        """The run ended: the file is closed (its lock freed), and a file cut short is said as a warning."""
        self.close()
        if self.write_error is None or not self._warn:
            return
        filename, line = _caller_outside_agentlab()
        # no registry: shown at every run that loses its file, not only the first one from this line
        warnings.warn_explicit(f"trace {self.path}: {self.write_error}. Every event of the run is still in "
                               "loop.trace.events; only the file is incomplete.", TraceWriteWarning, filename, line)

    def _may_hold_a_secret(self, encoded: str) -> bool:
        """Whether the encoded payload may hold a secret: JSON escapes a string character by character, so a
        secret in a value shows in the encoding as its own escaped form (a fast test before the walk)."""
        return SECRET_PATTERN.search(encoded) is not None or any(
            json.dumps(secret, ensure_ascii=False)[1:-1] in encoded for secret in self._secrets)

    def open(self) -> None:
        """Open the file now (an old one replaced), under an exclusive lock: ``FileBusy`` (a ConfigError) when
        another run is writing it. The CLI calls this as the run starts; otherwise the first event does."""
        if self._file is not None or self.path is None:
            return
        # non-blocking: a FIFO without a reader is refused at once instead of blocking the run
        fd = open_output_fd(self.path, os.O_APPEND if self._opened else 0, "trace")
        try:
            lock_for_writing(fd, f"trace {self.path}")
            os.set_blocking(fd, True)
            if stat.S_ISREG(os.fstat(fd).st_mode) and not self._opened:
                os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        # a lone surrogate (from a model or a hook) is written as its JSON escape, \udXXX
        self._file = os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")
        self._opened = True

    def check_writable(self) -> None:
        """Refuse now (a ConfigError naming the file and why) a path this trace could not write: a folder that
        refuses it, a file another run holds, a pipe no one reads. The file is opened to see and closed again
        (created empty if it was not there, never emptied); the run opens it at its first event."""
        if self.path is None or self._file is not None:
            return
        try:
            fd = open_output_fd(self.path, 0, "trace")
        except OSError as exc:
            raise ConfigError(f"trace {self.path}: cannot open it for writing: {exc.strerror or exc}") from None
        try:
            lock_for_writing(fd, f"trace {self.path}")
        finally:
            os.close(fd)

    def _write(self, event: Event, encoded: str | None) -> None:
        """Append one line; the file is opened (an old one replaced) at the first event, not before.

        A write that fails (disk full, file removed, permission taken away) stops the writing, not the run:
        ``write_error`` says why, and every event stays in memory and goes to the listeners.
        """
        head = json.dumps({"call": event.call, "kind": event.kind, "seq": event.seq})[:-1]
        line = f'{head}, "data": {encoded}, "wall_ms": {json.dumps(event.wall_ms)}}}\n'
        try:
            if self._file is None:
                self.open()
            assert self._file is not None
            self._file.write(line)
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())
        except ConfigError as exc:  # another run holds the file
            self.write_error = f"could not write event {event.seq} ({event.kind}): {exc}; the file stops there"
        except OSError as exc:
            self.write_error = (f"could not write event {event.seq} ({event.kind}): {exc.strerror or exc}; "
                                "the file stops there")
            self._close_quietly()

    def _close_quietly(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self.write_error = self.write_error or f"could not write the end of the file: {exc.strerror or exc}"
            self._file = None

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        """Events emitted so far (also when they are not kept in memory)."""
        return self._count

    def of_kind(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]

    def to_frame(self) -> Any:  # a pandas DataFrame
        """One row per event: seq, kind, call, wall_ms, then the payload's scalar fields as columns."""
        return events_to_frame(self.events)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trace:
        """Read a JSONL trace back; a half-written last line (a killed run) is skipped, nothing else is lost."""
        trace = cls()
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                if number == len(lines):
                    break
                raise ValueError(f"{path}: line {number} is not JSON: {exc}") from None
            except (RecursionError, ValueError) as exc:  # nested too deeply, a 5,000-digit number
                problem = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
                raise ValueError(f"{path}: line {number} is not JSON that can be read: {problem}") from None
            trace.events.append(_event_from_line(raw, f"{path}: line {number}"))
        return trace


def _event_from_line(raw: Any, where: str) -> Event:
    """One line of a JSONL trace as an Event; a ValueError naming the line when it is not one."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not an event: expected an object, got {type(raw).__name__}")
    for name in ("seq", "call"):
        if isinstance(raw.get(name), bool) or not isinstance(raw.get(name), int):
            raise ValueError(f"{where} is not an event: {name!r} should be a whole number, got {raw.get(name)!r}"
                             [:300])
    data = raw.get("data") or {}
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not an event: 'data' should be an object, got {type(data).__name__}")
    wall_ms = raw.get("wall_ms")
    if wall_ms is not None and (isinstance(wall_ms, bool) or not isinstance(wall_ms, int | float)):
        raise ValueError(f"{where} is not an event: 'wall_ms' should be a number, got {wall_ms!r}"[:300])
    try:
        payload = payload_from_data(raw["kind"], data)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        shown = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{where} is not an event: {shown}"[:300]) from None
    return Event(seq=raw["seq"], call=raw["call"], payload=payload, wall_ms=wall_ms)


def frame_rows(frame: Any) -> list[dict[str, Any]]:
    """The rows of a DataFrame as dicts of Python values, what ``frame.to_dict("records")`` gives, built from
    whole columns instead of a Series per row (ten times faster on a trace's frame)."""
    names = [str(c) for c in frame.columns]
    return [dict(zip(names, values, strict=True))
            for values in zip(*(frame[c].tolist() for c in frame.columns), strict=True)]


def events_to_frame(events: list[Event]) -> Any:  # a pandas DataFrame
    from .extras import require

    pd = require("pandas", "Trace.to_frame()")

    rows = []
    for e in events:
        row: dict[str, Any] = {"seq": e.seq, "kind": e.kind, "call": e.call, "wall_ms": e.wall_ms}
        for key, value in e.data.items():
            if isinstance(value, (str, int, float, bool)) or value is None:
                row.setdefault(key, value)
            elif key == "usage" and isinstance(value, dict):
                for k, v in value.items():
                    if isinstance(v, (int, float)) or v is None:
                        row[k] = v
        row["data"] = e.data
        rows.append(row)
    columns = ["seq", "kind", "call", "wall_ms"]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=columns + ["data"])
    return frame
