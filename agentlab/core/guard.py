"""Guards shared by every command: what may reach a terminal, which secrets never leave, which files a run may
write, and one writer per file.

- :func:`printable` shows text as ``cat -v`` does (``ESC`` as ``^[``): a model's reply, a server's error or a
  hook's output can neither retitle nor clear the user's terminal. :func:`terminal_safe` wraps a stream so that
  everything written to a terminal goes through it; what goes to a file or a pipe (a CI log, which a browser
  renders as a terminal) loses its escape sequences whole (:func:`agentlab.core.text.printable`). The trace keeps
  the real text, and a JSON document printed keeps it too, escaped (:func:`agentlab.core.text.json_text`).
- :func:`redact_value` removes secrets from a JSON-like value before it is encoded, so a key holding ``"``,
  ``\\`` or a control character is found whatever the encoding does to it.
- :func:`check_outputs` refuses an output path that is one of the run's inputs (by any path, a link too).
- :func:`lock_for_writing` takes an exclusive, non-blocking ``flock`` on a file a run writes (a trace, a
  ``--record`` file): a second run refuses it instead of mixing its lines in.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

from .errors import ConfigError
from .text import caret as printable
from .text import printable as without_escapes

__all__ = ["SECRET_PATTERN", "SHORT_SECRET", "FileBusy", "check_outputs", "lock_for_writing", "printable",
           "redact", "redact_value", "same_file", "terminal_safe"]

# -- the terminal ----------------------------------------------------------------------------------------------

class _TerminalSafe:
    """A text stream whose writes reach the terminal printable-only (``shown``: :func:`printable` by default);
    everything else is the stream's own."""

    def __init__(self, stream: IO[str], shown: Callable[[str], str] = printable) -> None:
        self._stream = stream
        self._shown = shown

    def write(self, text: str) -> int:
        self._stream.write(self._shown(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


@contextmanager
def terminal_safe() -> Iterator[None]:
    """While inside, ``sys.stdout`` and ``sys.stderr`` show only printable text: on a terminal as ``cat -v``
    shows it, in a file or a pipe without escape sequences (a CI log is rendered as a terminal too)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (_TerminalSafe(stream) if _is_terminal(stream) else _TerminalSafe(stream, without_escapes)
                              for stream in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


# -- secrets ---------------------------------------------------------------------------------------------------

SECRET_PATTERN = re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}")  # any Anthropic key, configured or not
SHORT_SECRET = 8  # a secret shorter than this is redacted only where it stands as a whole word (see redact)
REDACTED = "[redacted]"


def _short(secret: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])" + re.escape(secret) + r"(?![\w-])")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without API keys: any ``sk-ant-…`` token and every configured secret.

    A secret of at least ``SHORT_SECRET`` (8) characters is replaced wherever it occurs. A shorter one is
    replaced where it stands as a whole word (not next to a letter, a digit, ``_`` or ``-``): a key ``k3y`` is
    hidden in ``key k3y refused`` and in ``"k3y"``, but the word ``k3yboard`` is left alone, so that a short key
    cannot blank out every word that contains it."""
    for secret in secrets:
        if not secret:
            continue
        if len(secret) >= SHORT_SECRET:
            text = text.replace(secret, REDACTED)
        elif secret in text:
            text = _short(secret).sub(REDACTED, text)
    return SECRET_PATTERN.sub(REDACTED, text)


def redact_value(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``value`` (strings, dicts, lists, as JSON holds them) with :func:`redact` applied to every string, keys
    too, before any encoding; the same object when nothing was secret."""
    secrets = tuple(s for s in secrets if s)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        items = [(redact_value(k, secrets), redact_value(v, secrets)) for k, v in value.items()]
        changed = any(nk is not k or nv is not v for (nk, nv), (k, v) in zip(items, value.items(), strict=True))
        return dict(items) if changed else value
    if isinstance(value, list | tuple):
        new = [redact_value(item, secrets) for item in value]
        changed = any(n is not o for n, o in zip(new, value, strict=True))
        return type(value)(new) if changed else value
    return value


# -- files a run writes ----------------------------------------------------------------------------------------

def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """The same file on disk: the same path once links are resolved, or the same inode (a hard link)."""
    try:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one does not exist (it cannot be a hard link), a NUL byte in a name
        return False


def check_outputs(outputs: Mapping[str, str | os.PathLike[str] | None],
                  inputs: Mapping[str, Iterable[str | os.PathLike[str]] | str | os.PathLike[str] | None]) -> None:
    """Refuse (ConfigError) an output that is one of the inputs, or another output: ``outputs`` maps an option
    (``--trace``) to its path, ``inputs`` names what the run reads (``the scenario``, ``a hook script``) and
    its path or paths."""
    read = [(what, path) for what, paths in inputs.items() for path in _paths(paths)]
    named = [(option, path) for option, path in outputs.items() if path is not None]
    for k, (option, path) in enumerate(named):
        for what, source in read:
            if same_file(source, path):
                raise ConfigError(f"{option} {os.fspath(path)}: is {what} ({os.fspath(source)}) that this run "
                                  "reads; writing there would overwrite it. Choose another name.")
        for other, other_path in named[:k]:
            if same_file(other_path, path):
                raise ConfigError(f"{option} {os.fspath(path)}: is also the file of {other}; give each its own "
                                  "file")


def _paths(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] | None) -> list[str | os.PathLike[str]]:
    if paths is None:
        return []
    if isinstance(paths, str | os.PathLike):
        return [paths]
    return [p for p in paths if p]


class FileBusy(ConfigError):
    """Another process holds the file's lock: it is writing it now."""


def lock_for_writing(fd: int, shown: str) -> None:
    """An exclusive, non-blocking ``flock`` on ``fd``, held until it is closed. ``FileBusy`` when another run
    holds it; a file system without locks (some network mounts, a device) is written unlocked."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise FileBusy(f"{shown}: another run is writing this file now (it holds its lock); wait for it to "
                           "end or choose another name") from None
        # ENOLCK, EINVAL, EOPNOTSUPP: no locks here; the file is written as before
