"""A graded agent command that does not start Python and import the SDK again for each scenario.

``agentlab grade --command CMD`` starts CMD once per scenario, and examples/naive_loop.py, the agent the grade
tests grade, spends about 3 s of CPU importing the anthropic SDK each time, most of what a graded scenario costs.
Here a server (:func:`preloaded`) imports the SDK once; the command the grader runs is :data:`CLIENT`, a small
stdlib-only Python (``-I -S``: no site-packages, started in some 20 ms) that hands the server its argv, environment,
working folder and its stdin, stdout and stderr themselves (the file descriptors, over a Unix socket), and exits as
the agent exits. The server forks a child that becomes the agent script (``runpy``, as ``python SCRIPT ARGS`` runs
it) with those: the grader still starts a process of its own per scenario, feeds its stdin, reads its stdout and
stderr and judges its exit status, and the agent's code is the script's own. A client that is killed (the
grade's timeout, Ctrl-C) takes its agent with it: the fork watching the agent kills its process group when the
client's end of the socket closes.

What a fresh ``python examples/naive_loop.py`` proves beyond this, that the script starts on its own, is proved
by the grades that still run it so (tests/test_grade_ci.py's ``naive`` fixture).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

CLIENT = str(Path(__file__).resolve())
INTERRUPT = b"SIGINT"  # what a client that forwards interrupts sends its watcher


def command(address: str, script: Path | str, *args: str, python: str = sys.executable,
            forward_interrupt: bool = False) -> list[str]:
    """The command line that runs ``python SCRIPT ARGS`` in a fork of the server at ``address`` (``script`` "-m" and
    a module's name as the first of ``args``: ``python -m MODULE ARGS``). The client is run by ``python``, any Python
    3.11, with no site-packages. With ``forward_interrupt``, a SIGINT the client gets is sent on to the agent (as
    jupyter_client interrupts a kernel); otherwise it ends the client, and so the agent, as a kill does."""
    return [python, "-I", "-S", CLIENT, "client-int" if forward_interrupt else "client", address, str(script), *args]


@contextlib.contextmanager
def preloaded(preload: tuple[str, ...] = ("anthropic",), python: str = sys.executable,
              env: dict[str, str] | None = None) -> Iterator[str]:
    """A server run by ``python`` (in ``env``, this process's by default) whose forks run agent scripts, with the
    modules ``preload`` imported; yields its address (an abstract Unix socket's name) for :func:`command`. Stopped
    (with any agent still running) when the block ends."""
    address = f"agentlab-agents-{os.getpid()}-{os.urandom(4).hex()}"
    server = subprocess.Popen([python, CLIENT, "serve", address, ",".join(preload)], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        ready = server.stdout.readline() if server.stdout else ""
        if ready.strip() != "ready":
            raise RuntimeError(f"the preloaded agent server did not start (exit {server.wait()})")
        yield address
    finally:
        server.terminate()
        server.wait(timeout=30)


# -- the server ------------------------------------------------------------------------------------------------------

def serve(address: str, preload: str) -> None:
    for module in preload.split(","):
        __import__(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind("\0" + address)
    listener.listen(16)
    signal.signal(signal.SIGCHLD, _reap)                 # the forks that watch an agent, as each ends: so the CPU
    #                                                      they and their agents used counts as this server's
    if os.getpgid(0) != os.getpid():                     # a group of its own, which SIGTERM stops whole
        os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, _stop_server)
    parent = os.getppid()
    listener.settimeout(2)
    print("ready", flush=True)
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:               # the test process is gone without stopping it
                _stop_server()
            continue
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os._exit(_watch(conn))
        conn.close()


def _reap(*_: object) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _stop_server(*_: object) -> None:
    """SIGTERM: the forks that watch an agent are told too (each kills its agent), then the server exits."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    os._exit(0)


def _watch(conn: socket.socket) -> int:
    """In a fork of the server: start the agent the client asked for, send the client its wait status when it
    ends, or kill it when the client is gone first."""
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _become_agent(request, fds)
    for fd in fds:
        os.close(fd)
    signal.signal(signal.SIGTERM, lambda *_: (os.killpg(pid, signal.SIGKILL), os._exit(1)))
    pidfd = os.pidfd_open(pid)
    with selectors.DefaultSelector() as sel:
        sel.register(pidfd, selectors.EVENT_READ)
        sel.register(conn, selectors.EVENT_READ)
        while True:
            ready = {key.fileobj for key, _ in sel.select()}
            if pidfd in ready:
                break
            if conn.recv(16) != INTERRUPT:   # the client's end closed (it was killed): so is its agent
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGINT)
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps({"status": status}).encode())
    return 0


def _become_agent(request: dict, fds: list[int]) -> None:
    """In the agent's fork: ``python SCRIPT ARGS`` with the client's stdio, environment and folder; never returns."""
    import io
    import runpy
    import tempfile
    import traceback

    code = 1
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(request["env"])
        if "JPY_PARENT_PID" in os.environ:   # a kernel exits when this parent is gone: its parent here is the fork
            os.environ["JPY_PARENT_PID"] = str(os.getppid())   # watching it, which lives as long as the client
        os.chdir(request["cwd"])
        tempfile.tempdir = None
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
        argv = list(request["argv"])
        try:
            if argv[0] == "-m":                      # python -m MODULE ARGS
                sys.argv, sys.path[0] = argv[1:], os.getcwd()
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv, sys.path[0] = argv, str(Path(argv[0]).resolve().parent)
                runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:
                code = code or 120
    finally:
        os._exit(code)


# -- the client (run as ``python -I -S forked_agent.py client ADDRESS SCRIPT ARGS``: the standard library only) ------

def client(address: str, argv: list[str], forward_interrupt: bool = False) -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect("\0" + address)
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
    if forward_interrupt:   # held from before the agent can start: no interrupt meant for it ends this process
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    if forward_interrupt:   # the request is sent: an interrupt now, or one held meanwhile, goes to the agent
        signal.signal(signal.SIGINT, lambda *_: conn.send(INTERRUPT))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    reply = conn.recv(1 << 16)
    if not reply:
        sys.exit(f"{CLIENT}: the preloaded agent server closed the connection")
    code = os.waitstatus_to_exitcode(json.loads(reply)["status"])
    if code < 0:                                         # the agent was killed by a signal: so is this process
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    else:
        client(sys.argv[2], sys.argv[3:], forward_interrupt=sys.argv[1] == "client-int")
