"""The processes a command starts, found and ended: a hook's command, an agent run by ``agentlab grade``.

A command is started in a new session (its own process group) with an environment variable of its own, a
*tag* (``AGENTLAB_PROCESS_<hex>=1``) that every process it starts inherits. Ending it (:func:`kill_tree`) kills
its process group, every descendant still attached to it, and every process that carries its tag: that last
one reaches what left both the group and the tree, such as a ``setsid`` child of a subshell that has exited
(reparented to the init process, in a session of its own). It needs no privilege: ``/proc/PID/environ`` of
one's own processes is readable as any user (as root, of every process), and tags are unique per command.

What escapes: a process that replaced its whole environment (``env -i``) after leaving the group and the tree.
On macOS psutil reads the environment of one's own processes too; where the environment cannot be read
(another user's process, an OS without it), the group and the descendants are still killed.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import subprocess
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any, cast

import psutil

__all__ = ["TAG_PREFIX", "Talk", "carrying", "kill_carrying", "kill_group", "kill_tree", "tag_of", "tagged",
           "tagged_env", "talk"]

TAG_PREFIX = "AGENTLAB_PROCESS_"
_TAGS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_ROUNDS = 5  # a tagged process may fork while it is being killed: look again, at most this many times


def tagged_env(env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """``env`` with a fresh tag added, and the tag's variable name."""
    name = TAG_PREFIX + secrets.token_hex(8)
    return {**env, name: "1"}, name


def tagged(proc: Any, tag: str) -> Any:
    """Remember ``proc``'s tag (a ``subprocess.Popen`` or an asyncio process) for :func:`kill_tree`."""
    _TAGS[proc] = tag
    return proc


def tag_of(proc: Any) -> str | None:
    return _TAGS.get(proc)


def kill_group(proc: Any) -> None:
    """SIGKILL to the process group ``proc`` leads (it was started in a new session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(proc: Any) -> None:
    """Kill ``proc`` with every process it started: its process group, its descendants, and every process
    that carries its tag (see the module's docstring)."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    kill_group(proc)
    _kill_all(descendants)
    tag = tag_of(proc)
    if tag is None:
        return
    for _ in range(_ROUNDS):
        found = carrying(tag)
        if not found:
            return
        _kill_all(found)


def carrying(tag: str | set[str]) -> list[psutil.Process]:
    """The live processes whose environment holds ``tag`` (or any of a set of tags), those this user may read."""
    tags = {tag} if isinstance(tag, str) else tag
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if not tags.isdisjoint(proc.environ()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):  # gone, another user's, or a kernel thread
            continue
    return found


def kill_carrying(tags: set[str]) -> int:
    """Kill every process carrying one of ``tags`` (what commands that have exited left running); how many."""
    killed = 0
    for _ in range(_ROUNDS if tags else 0):
        found = carrying(tags)
        if not found:
            break
        _kill_all(found)
        killed += len(found)
    return killed


def _kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


# -- talking to a command: its input in, its output read until it exits --------------------------------------

@dataclass
class Talk:
    """What a command printed (at most ``max_bytes`` of each), whether its timeout passed, what was cut."""

    stdout: bytes
    stderr: bytes
    timed_out: bool
    overflow: list[str]


def talk(proc: subprocess.Popen[bytes], data: bytes, timeout: float, *, max_bytes: int = 1_000_000,
         drain_s: float = 0.5, poll_s: float = 0.05, leftovers: Callable[[Any], None] = kill_group) -> Talk:
    """Feed ``proc`` its stdin and read what it prints until it exits or ``timeout`` passes.

    What it printed is taken when the process itself exits, even when something it started in the background
    still holds its output pipes: that leftover is killed (``leftovers(proc)``: its process group, or with
    :func:`kill_tree` everything it started), and what is still buffered is read for at most ``drain_s``
    seconds. On timeout the whole tree is killed (:func:`kill_tree`).
    """
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # all PIPEs
    deadline = time.monotonic() + timeout
    out = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    names = {proc.stdout: "stdout", proc.stderr: "stderr"}
    overflow: list[str] = []
    sel = selectors.DefaultSelector()
    for pipe in out:
        sel.register(pipe, selectors.EVENT_READ)
    feed = _Feed(proc.stdin, data, sel)
    timed_out = False
    drain_until: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if drain_until is None and proc.poll() is not None:
                leftovers(proc)  # it has exited; what it left running goes with it
                drain_until = now + drain_s
            if drain_until is not None and now >= drain_until:
                break  # something outside the group still holds the pipes: stop listening
            if drain_until is None and now >= deadline:
                timed_out = True
                kill_tree(proc)
                drain_until = time.monotonic() + drain_s
                continue
            limit = (drain_until if drain_until is not None else deadline) - now
            for key, _ in sel.select(min(poll_s, max(limit, 0.0))):
                pipe = cast(IO[bytes], key.fileobj)
                if pipe is proc.stdin:
                    feed.write()
                    continue
                chunk = os.read(pipe.fileno(), 65536)
                if not chunk:
                    sel.unregister(pipe)
                    continue
                room = max_bytes - len(out[pipe])
                if len(chunk) > room and names[pipe] not in overflow:
                    overflow.append(names[pipe])
                out[pipe] += chunk[:max(room, 0)]
    finally:
        sel.close()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()
    if drain_until is None:  # its pipes closed before it was seen to exit: it answers when it exits
        timed_out = _exits_by(proc, deadline, leftovers)
    proc.wait()
    return Talk(bytes(out[proc.stdout]), bytes(out[proc.stderr]), timed_out, overflow)


def _exits_by(proc: subprocess.Popen[bytes], deadline: float, leftovers: Callable[[Any], None]) -> bool:
    """Wait for ``proc`` to exit until ``deadline``; True (and its whole tree killed) if it did not.

    A process's pipes close as it exits, a moment before it can be reaped, and a command may close them itself
    and go on: either way it has not answered yet, and killing its tree now would take its daemons with it."""
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        return True
    leftovers(proc)
    return False


class _Feed:
    """A command's stdin written as it can take it, then closed (a command that does not read it is fine)."""

    def __init__(self, stdin: IO[bytes], data: bytes, sel: selectors.BaseSelector) -> None:
        self.stdin, self.data, self.sel, self.offset = stdin, data, sel, 0
        if data:
            sel.register(stdin, selectors.EVENT_WRITE)
        else:
            stdin.close()

    def write(self) -> None:
        try:
            self.offset += os.write(self.stdin.fileno(), self.data[self.offset:self.offset + 65536])
        except OSError:  # BrokenPipeError among them: the command does not read its input
            self.offset = len(self.data)
        if self.offset >= len(self.data):
            self.sel.unregister(self.stdin)
            self.stdin.close()
