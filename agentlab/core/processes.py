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
import signal
import weakref
from collections.abc import Mapping
from typing import Any

import psutil

__all__ = ["TAG_PREFIX", "carrying", "kill_group", "kill_tree", "tag_of", "tagged", "tagged_env"]

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


def carrying(tag: str) -> list[psutil.Process]:
    """The live processes whose environment holds ``tag`` (those this user may read)."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if tag in proc.environ() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):  # gone, another user's, or a kernel thread
            continue
    return found


def _kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
