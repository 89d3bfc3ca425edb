"""tests/forked_agent.py: the command the grader runs is a process of its own whose agent script runs, forked from a
server that imported the SDK once, with that process's argv, environment, folder, stdin, stdout and stderr, and whose
exit is the agent's; a killed command takes its agent with it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import textwrap

import pytest
from forked import as_from_a_terminal
from forked_agent import command, preloaded

AGENT = textwrap.dedent("""
    import os, sys
    print("argv", sys.argv[1:], "preloaded", "anthropic" in sys.modules, "main", __name__)
    print("env", os.environ["AGENT_TEST"], "cwd", os.getcwd(), "stdin", sys.stdin.read())
    print("to stderr", file=sys.stderr)
    if os.environ.get("AGENT_STARTED"):
        with open(os.environ["AGENT_STARTED"], "w") as started:  # the test reads this: the agent is running
            started.write(str(os.getpid()))
        import time
        time.sleep(3600)  # until it is killed
    sys.exit(int(os.environ.get("AGENT_EXIT", "0")))
""")


@pytest.fixture(scope="module")
def server():
    with preloaded() as address:
        yield address


def test_the_agent_runs_with_the_commands_argv_environment_folder_and_stdio(server, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(AGENT, encoding="utf-8")
    env = {**os.environ, "AGENT_TEST": "x y", "AGENT_EXIT": "3"}
    done = subprocess.run(command(server, script, "--flag", "a prompt"), cwd=tmp_path, env=env, input="typed",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["argv ['--flag', 'a prompt'] preloaded True main __main__",
                                        f"env x y cwd {tmp_path} stdin typed"]
    assert done.stderr == "to stderr\n"


def test_an_agent_killed_by_a_signal_is_a_command_killed_by_it(server, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", encoding="utf-8")
    done = subprocess.run(command(server, script), capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr


def test_a_killed_command_takes_its_agent_with_it(server, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(AGENT, encoding="utf-8")
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    env = {**os.environ, "AGENT_TEST": "", "AGENT_STARTED": str(fifo)}
    proc = subprocess.Popen(command(server, script), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        assert select.select([reader], [], [], 60)[0], "the agent never started"
        agent = int(os.read(reader, 100))
        watch = os.pidfd_open(agent)
        proc.kill()
        proc.wait(timeout=30)
        assert select.select([watch], [], [], 30)[0], "the agent outlived its command"
    finally:
        os.close(reader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_module_runs_as_python_m_runs_it(server, tmp_path):
    (tmp_path / "agent_module.py").write_text("import sys\nprint(__name__, sys.argv[1:])\nsys.exit(4)\n")
    done = subprocess.run(command(server, "-m", "agent_module", "a", "b"), cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (4, "__main__ ['a', 'b']\n"), done.stderr


INTERRUPTIBLE = textwrap.dedent("""
    import os, sys, time
    try:   # the line below tells the test the agent runs: from then on, an interrupt is caught here
        print("parent", os.environ.get("JPY_PARENT_PID") == str(os.getppid()), flush=True)
        time.sleep(3600)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(5)
""")


@pytest.mark.parametrize("forward", [True, False])
def test_an_interrupt_reaches_the_agent_only_when_the_command_forwards_it(server, tmp_path, forward):
    """As jupyter_client interrupts a kernel: a SIGINT to the command. Forwarded, the agent's KeyboardInterrupt
    handler runs and its exit is the command's; not forwarded, the command ends and takes the agent with it."""
    script = tmp_path / "agent.py"
    script.write_text(INTERRUPTIBLE, encoding="utf-8")
    # SIGINT at its default, as under a JupyterLab started from a terminal: a make test started in the background
    # hands its processes SIGINT ignored, and a client not forwarding would then ignore the interrupt (a hang)
    proc = subprocess.Popen(command(server, script, forward_interrupt=forward), stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "JPY_PARENT_PID": "1"}, preexec_fn=as_from_a_terminal)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "parent True\n"   # the parent a kernel watches is alive, the watcher
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if forward:
        assert (proc.returncode, rest) == (5, "interrupted\n")
    else:
        assert proc.returncode != 0 and "interrupted" not in rest
