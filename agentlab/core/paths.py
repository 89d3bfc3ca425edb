"""Where agentlab's data lives, resolved in one place.

The scenarios, the example hooks, the sandbox files and the observed records are kept in ``data/`` at the top
of the repository, where readers find them. A built wheel carries the same folder as package data,
``agentlab/data/``, found with :mod:`importlib.resources`. In a checkout (an editable install) the package
has no ``data`` folder of its own and the repository's ``data/`` is used.

Every other module asks this one: :func:`data_dir` and the named folders below, and :func:`project_dir`,
the folder that holds ``data/`` (the ``$CLAUDE_PROJECT_DIR`` of the example hook settings). Input files a user
gives (a scenario, a settings file) are read with :func:`read_small_file`, which never reads past their bound.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from importlib.resources import files
from pathlib import Path
from typing import IO, Any

from .errors import ConfigError

__all__ = ["FileTooLarge", "NotAFile", "data_dir", "hooks_dir", "is_pipe", "observed_dir", "open_output",
           "project_dir", "read_small_file", "sandbox_dir", "sandbox_files", "scenarios_dir"]


def _package_dir() -> Path:
    package = files("agentlab")
    if not isinstance(package, Path):
        raise ConfigError(f"agentlab is installed as {package!r}, not as files on disk; its data (scenarios, "
                          "hook scripts) must be real files: install the wheel with pip, not a zipped copy")
    return package


@functools.cache
def project_dir() -> Path:
    """The folder that holds ``data/``: the installed package folder, or the repository in a checkout.

    Found once per process (the data does not move while agentlab runs). A data folder this user may not read
    (a checkout in another user's private folder) is a ``ConfigError`` of one line naming it, not a traceback."""
    package = _package_dir()
    checkout = package.resolve().parent
    for folder in (package, checkout):
        if _readable_dir(folder / "data"):
            return folder
    raise ConfigError(f"agentlab's data folder is missing: neither {package / 'data'} (an installed wheel) "
                      f"nor {checkout / 'data'} (a checkout) exists; reinstall agentlab")


def _readable_dir(path: Path) -> bool:
    """Whether ``path`` is a folder; a ``ConfigError`` when it, or a folder above it, may not be read by this user."""
    try:
        if not path.is_dir():
            return False
    except PermissionError:
        raise ConfigError(unreadable_data(path)) from None
    if not os.access(path, os.R_OK | os.X_OK):
        raise ConfigError(unreadable_data(path))
    return True


def unreadable_data(path: Path) -> str:
    """The one line that says agentlab's own data cannot be read by the user running it."""
    return (f"agentlab's data folder {path} cannot be read by this user (uid {os.geteuid()}): it, or a folder "
            "above it, is private to another user. Run agentlab as that user, or install it where this user can "
            "read it (a clone or a venv in a folder of this user's)")


def data_dir() -> Path:
    """``data/``: scenarios, hooks, sandbox and observed records."""
    return project_dir() / "data"


def scenarios_dir() -> Path:
    return data_dir() / "scenarios"


def hooks_dir() -> Path:
    return data_dir() / "hooks"


def sandbox_dir() -> Path:
    return data_dir() / "sandbox"


def observed_dir() -> Path:
    return data_dir() / "observed"


@functools.cache
def sandbox_files() -> tuple[str, ...]:
    """The files the demo tools read (listed once per process, like the data folder they live in)."""
    folder = sandbox_dir()
    try:
        return tuple(str(p) for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else ()
    except PermissionError:
        raise ConfigError(unreadable_data(folder)) from None


# -- reading a small input file (a scenario, a settings file) ---------------------------------------------

class FileTooLarge(OSError):
    """The file holds more bytes than the reader takes."""


class NotAFile(OSError):
    """The path is a device, a pipe or a socket, not a regular file."""


def read_small_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; never more than ``limit + 1`` bytes are read.

    Raises ``NotAFile`` for a device, pipe or socket (``/dev/zero`` would never end), ``FileTooLarge`` past the
    limit, and ``OSError`` when the file cannot be read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO would block an ordinary open until a writer came
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotAFile(os.fspath(path))
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(os.fspath(path))
    return data


def is_pipe(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a named pipe (a FIFO; ``/dev/fd/N`` of a shell's ``>(...)`` too)."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def open_output_fd(path: str | os.PathLike[str], flags: int, option: str) -> int:
    """``os.open`` of an output for writing with ``flags`` added, non-blocking (the caller sets it blocking
    again): a named pipe that no one reads is refused with a ``ConfigError`` naming ``option``."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO and is_pipe(path):
            raise ConfigError(f"{option} {path}: a named pipe that nothing reads; writing to it would wait for a "
                              "reader forever. Start its reader first, or give a regular file.") from None
        raise


def open_output(path: str | os.PathLike[str], mode: str, option: str) -> IO[str]:
    """Open an output file (``mode`` "w" or "a") as text, without ever waiting: a named pipe that no one reads
    is refused with a ``ConfigError`` naming ``option`` (opening it for writing would wait for a reader
    forever); one that is read is written as a file is. Other failures are the ``OSError`` of ``open``."""
    fd = open_output_fd(path, os.O_APPEND if mode == "a" else os.O_TRUNC, option)
    os.set_blocking(fd, True)
    # a lone surrogate (from a model or a hook) is written as its JSON escape, \udXXX
    return os.fdopen(fd, mode, encoding="utf-8", errors="backslashreplace")


def write_output(path: str | os.PathLike[str], data: str | bytes, option: str) -> None:
    """Write a whole output file (a report, a baseline, a figure) all or nothing, the one way agentlab writes them.

    A regular file, or a new name, is written to a temporary file in the same folder and renamed over it (through
    a symbolic link, onto the file it names), so a write that fails (a full disk, a file-size limit) leaves the
    previous file as it was and nothing beside it. Anything else (a named pipe, ``/dev/stdout``) is opened as
    :func:`open_output` opens it and written in place: a pipe no one reads is refused at once. Failures are a
    ``ConfigError`` naming ``option`` and ``path``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    target = os.path.realpath(path)
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot write it: {exc.strerror or exc}") from None
    try:
        if mode is not None and not stat.S_ISREG(mode):
            fd = open_output_fd(target, os.O_TRUNC, option)
            os.set_blocking(fd, True)
            with os.fdopen(fd, "wb") as out:
                out.write(raw)
        else:
            _replace_whole(target, raw, None if mode is None else stat.S_IMODE(mode))
    except OSError as exc:
        kept = "; the previous file is kept as it was" if mode is not None and stat.S_ISREG(mode) else ""
        raise ConfigError(f"{option} {path}: cannot write it: {exc.strerror or exc}{kept}") from None


def _replace_whole(target: str, raw: bytes, mode: int | None) -> None:
    """``raw`` into a new file beside ``target`` (the umask's permissions, or ``mode``, the old file's), synced,
    then renamed over ``target``; the new file is removed when any step fails."""
    import secrets

    folder, name = os.path.split(target)
    temporary = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` of ``text`` with libyaml's parser when PyYAML was built with it (the wheels are): the
    same documents and the same values, some five times faster on the claims files. The data files are read
    this way; a scenario file, which a learner writes, keeps its own bounded loader (backend/scenario.py)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_dated_table(path: str | os.PathLike[str], what: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """A YAML table that says when and where it was checked (``data/prices.yaml``, ``data/models.yaml``): a
    mapping with a ``models`` mapping and every one of ``keys`` set; a ConfigError naming the file otherwise."""
    import yaml

    try:
        raw = load_yaml(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("models"), dict):
        named = ", ".join(f"'{k}'" for k in keys)
        raise ConfigError(f"{path}: expected a mapping with {named} and 'models'")
    for key in keys:
        if not raw.get(key):
            raise ConfigError(f"{path}: '{key}' is missing: a {what} says when and where it was checked")
    return raw
