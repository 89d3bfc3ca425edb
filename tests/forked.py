"""Run the ``agentlab`` command in a fork of the test process.

A child made by ``os.fork()`` is the command as a user runs it: its own process, environment, working folder,
stdin, stdout and stderr (file descriptors 0-2, not Python objects swapped in a shared process), and exit
status. What it does not pay again is starting Python and importing the SDK (about 3 s of CPU each time on a
2-core machine), because the parent imported ``agentlab.cli`` before forking. A few commands whose
behaviour depends on being started fresh (a closed stdout before the first write, signals from a shell)
keep a real ``python -m agentlab`` subprocess in their tests.
"""

from __future__ import annotations

import io
import os
import selectors
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import agentlab.cli
import agentlab.core.sdk  # noqa: F401  (agentlab.cli loads the SDK only when a command needs it: here, once for every fork)

REPO = Path(__file__).resolve().parents[1]


def as_from_a_terminal() -> None:
    """``preexec_fn`` for a ``python -m agentlab`` subprocess that a test stops with SIGINT (Ctrl-C).

    A command started in the background (``make test &``, nohup, some CI runners) inherits SIGINT ignored,
    and Python then keeps ignoring it, as it should: such a process is not meant to see a terminal's Ctrl-C.
    The child gets SIGINT back at its default, as a command typed in a terminal has it, so that Python
    installs its KeyboardInterrupt handler and the test's Ctrl-C is the one a user would press."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str


def _child(args: list[str], env: dict[str, str], cwd: Path, out_w: int, err_w: int,
           preexec: Callable[[], None] | None = None) -> None:
    """In the forked child: become ``python -m agentlab ARGS``; never returns."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (null, out_w, err_w):
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        tempfile.tempdir = None  # the parent's cached temporary folder would hide the child's TMPDIR
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
        sys.argv = ["agentlab", *args]
        if preexec is not None:
            preexec()
        try:
            result = agentlab.cli.main(args)
            code = result if isinstance(result, int) else 0
        except SystemExit as exc:  # argparse's usage errors, as `python -m agentlab` would exit
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:  # a stdout the command could not write to: as at interpreter exit
                code = code or 120
    finally:
        os._exit(code)


def run_forked(args: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
               timeout: float = 180.0, preexec: Callable[[], None] | None = None) -> Ran:
    """``agentlab ARGS`` with the test process's environment less any API key or model, plus ``env``; in
    ``cwd`` (the repository by default); ``preexec``, when given, is called in the child just before the command
    (as subprocess's ``preexec_fn``: a resource limit, say). A child still running after ``timeout`` seconds is
    killed and the run fails the test that asked for it."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_MODEL")}
    full_env.update(env or {})
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(out_r)
        os.close(err_r)
        _child(list(args), full_env, cwd or REPO, out_w, err_w, preexec)
    os.close(out_w)
    os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                for fd in chunks:
                    os.close(fd)
                raise TimeoutError(f"agentlab {' '.join(args)} still running after {timeout} s")
            for key, _ in sel.select(left):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
    for fd in chunks:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return Ran(code, b"".join(chunks[out_r]).decode("utf-8", "replace"),
               b"".join(chunks[err_r]).decode("utf-8", "replace"))
