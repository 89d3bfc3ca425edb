"""Hook commands as processes: the answer is taken when the hook exits, and nothing a hook started outlives it.

Each test has a hook write the pids of what it started to a file, then checks those processes are gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agentlab.core.hooks import MAX_KEPT_CHARS, Hooks
from forked import as_from_a_terminal

REPO = Path(__file__).resolve().parent.parent


def settings(command: str, timeout: float = 30, event: str = "Stop") -> dict:
    return {"hooks": {event: [{"hooks": [{"type": "command", "command": command, "timeout": timeout}]}]}}


def gone(pid: int, within: float = 10) -> bool:
    """The process has ended within ``within`` seconds (a zombie waiting for its parent counts as ended).

    The state is looked at every 50 ms rather than waiting for the pid to disappear: a killed process that was
    reparented stays a zombie until the init process reaps it, which can take seconds in some containers."""
    try:
        proc = psutil.Process(pid)
        deadline = time.monotonic() + within
        while proc.status() != psutil.STATUS_ZOMBIE:
            try:
                proc.wait(timeout=0.05)
                return True
            except psutil.TimeoutExpired:
                if time.monotonic() > deadline:
                    return False
    except psutil.NoSuchProcess:
        return True
    return True


def running(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()]


def test_a_stop_hook_that_answers_while_its_background_child_holds_the_pipes(tmp_path) -> None:
    """Today's failure: the hook is waited on until its timeout, marked timed out, and its block dropped."""
    pidfile = tmp_path / "pids"
    hook = (f"sleep 300 & echo $! > {pidfile}; "
            "echo '{\"decision\": \"block\", \"reason\": \"tests still fail\"}'")
    outcome = Hooks(settings(hook, timeout=20)).run("Stop", {"stop_hook_active": False})
    run = outcome.runs[0]
    assert run.timed_out is False and run.error is None, run
    assert outcome.blocked and outcome.reason == "tests still fail"
    assert gone(pids(pidfile)[0]), "the background child outlived the hook"


def test_a_timed_out_hook_is_killed_with_a_grandchild_that_left_its_parent(tmp_path) -> None:
    """Only the process-group kill reaches the grandchild: its parent (a subshell) has already exited, so it is
    no longer anyone's descendant. Replacing the group kill by a plain kill of the hook fails this test."""
    pidfile = tmp_path / "pids"
    hook = f"(sleep 300 & echo $! > {pidfile}); sleep 300"
    outcome = Hooks(settings(hook, timeout=1)).run("Stop", {})
    assert outcome.runs[0].timed_out is True
    assert gone(pids(pidfile)[0]), "the hook's grandchild survived the timeout"


def test_a_timed_out_hook_is_killed_with_a_child_that_escaped_with_setsid(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    hook = f"setsid sleep 300 & echo $! > {pidfile}; wait"
    outcome = Hooks(settings(hook, timeout=1)).run("Stop", {})
    assert outcome.runs[0].timed_out is True
    pid = pids(pidfile)[0]
    assert gone(pid), "a child in a session of its own survived the hook's timeout"


def test_a_timed_out_hook_is_killed_with_a_setsid_grandchild_whose_parent_exited(tmp_path) -> None:
    """Neither in the hook's group (setsid) nor its descendant (its parent, a subshell, has exited): only the
    hook's tag in its environment finds it."""
    pidfile = tmp_path / "pids"
    hook = f"(setsid sleep 300 > /dev/null 2>&1 & echo $! > {pidfile}); sleep 300"
    outcome = Hooks(settings(hook, timeout=1)).run("Stop", {})
    assert outcome.runs[0].timed_out is True
    assert gone(pids(pidfile)[0]), "a setsid grandchild survived the hook's timeout"


def test_hook_output_and_reasons_are_capped_and_the_event_says_so() -> None:
    reason = "x" * (MAX_KEPT_CHARS * 5)
    program = f"import json; print(json.dumps({{'decision': 'block', 'reason': 'x' * {len(reason)}}}))"
    hook = f'{sys.executable} -c "{program}"'
    outcome = Hooks(settings(hook)).run("Stop", {})
    run = outcome.runs[0]
    assert outcome.blocked
    assert len(outcome.reason) < MAX_KEPT_CHARS + 100 and outcome.reason.startswith("xxx")
    assert "more characters not kept" in outcome.reason
    assert len(run.stdout) < MAX_KEPT_CHARS + 100 and len(run.reason) < MAX_KEPT_CHARS + 100
    assert "cut" in (run.error or "")


def test_a_python_hook_reason_is_capped_too() -> None:
    hooks = Hooks()
    hooks.on("Stop", lambda payload: {"decision": "block", "reason": "y" * (MAX_KEPT_CHARS * 3)})
    outcome = hooks.run("Stop", {})
    assert outcome.blocked and len(outcome.reason) < MAX_KEPT_CHARS + 100
    assert "cut" in (outcome.runs[0].error or "")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_while_a_hook_runs_kills_the_hook_and_what_it_started(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    ready = tmp_path / "ready"
    settings_file = tmp_path / "settings.json"
    hook = f"sleep 300 & echo $$ $! > {pidfile}; touch {ready}; wait"
    settings_file.write_text(json.dumps(settings(hook, timeout=600)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    proc = subprocess.Popen([sys.executable, "-m", "agentlab", "run", "end_turn", "--settings", str(settings_file),
                             "--trace", str(tmp_path / "trace.jsonl")], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal)
    try:
        while not ready.exists():  # the hook is running once it has written its pids
            if proc.poll() is not None:
                pytest.fail(f"agentlab ended before the hook ran: {proc.communicate()}")
            psutil.wait_procs([psutil.Process(proc.pid)], timeout=0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "Traceback" not in err
    shell, child = pids(pidfile)
    assert gone(shell) and gone(child), "the hook or its child outlived Ctrl-C"


# --- the same with asyncio subprocesses (Hooks.arun, used by AgentLoop.arun) ------------------------------------

def arun(hooks: Hooks, event: str = "Stop", payload: dict | None = None, bound: float = 30):
    import asyncio

    async def fire():
        return await asyncio.wait_for(hooks.arun(event, payload or {}), bound)

    return asyncio.run(fire())


def test_async_a_stop_hook_that_answers_while_its_background_child_holds_the_pipes(tmp_path) -> None:
    import time

    pidfile = tmp_path / "pids"
    hook = (f"sleep 300 & echo $! > {pidfile}; "
            "echo '{\"decision\": \"block\", \"reason\": \"tests still fail\"}'")
    started = time.monotonic()
    outcome = arun(Hooks(settings(hook, timeout=20)), payload={"stop_hook_active": False})
    assert time.monotonic() - started < 10, "the hook was waited on past its answer"
    run = outcome.runs[0]
    assert run.timed_out is False and run.error is None and run.exit_code == 0, run
    assert outcome.blocked and outcome.reason == "tests still fail"
    assert gone(pids(pidfile)[0]), "the background child outlived the hook"


def test_async_a_timed_out_hook_is_killed_with_its_process_group(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    hook = f"(sleep 300 & echo $! > {pidfile}); sleep 300"
    outcome = arun(Hooks(settings(hook, timeout=1)))
    run = outcome.runs[0]
    assert run.timed_out is True and "timed out after 1 s" in run.error
    assert gone(pids(pidfile)[0]), "the hook's grandchild survived the timeout"


def test_async_a_timed_out_hook_is_killed_with_a_child_that_escaped_with_setsid(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    hook = f"setsid sleep 300 & echo $! > {pidfile}; wait"
    outcome = arun(Hooks(settings(hook, timeout=1)))
    assert outcome.runs[0].timed_out is True
    assert gone(pids(pidfile)[0]), "a child in a session of its own survived the hook's timeout"


def test_async_a_timed_out_hook_is_killed_with_a_setsid_grandchild_whose_parent_exited(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    hook = f"(setsid sleep 300 > /dev/null 2>&1 & echo $! > {pidfile}); sleep 300"
    outcome = arun(Hooks(settings(hook, timeout=1)))
    assert outcome.runs[0].timed_out is True
    assert gone(pids(pidfile)[0]), "a setsid grandchild survived the hook's timeout"


def test_async_a_cancelled_hook_is_killed_with_what_it_started(tmp_path) -> None:
    import asyncio

    pidfile = tmp_path / "pids"
    ready = tmp_path / "ready"
    hook = f"sleep 300 & echo $$ $! > {pidfile}; touch {ready}; wait"
    hooks = Hooks(settings(hook, timeout=600))

    async def fire_then_cancel() -> None:
        task = asyncio.ensure_future(hooks.arun("Stop", {}))
        for _ in range(600):  # the hook is running once it has written its pids (at most 30 s)
            if ready.exists():
                break
            await asyncio.wait([task], timeout=0.05)
        assert ready.exists() and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)

    asyncio.run(fire_then_cancel())
    shell, child = pids(pidfile)
    assert gone(shell) and gone(child), "the hook or its child outlived the cancellation"


def _daemon_hook(pidfile: Path) -> str:
    """A hook that answers at once and leaves a daemon: a ``setsid`` process, its pipes its own, outside the
    hook's group and (its parent, a subshell, has exited) outside its tree."""
    return (f"(setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' </dev/null >/dev/null 2>&1 &); "
            f"while [ ! -s {pidfile} ]; do sleep 0.01; done; exit 0")  # it answers once the daemon is on its own


def test_a_daemon_a_hook_left_is_ended_with_the_run(tmp_path) -> None:
    from agentlab import scenario_loop

    pidfile = tmp_path / "pids"
    loop = scenario_loop("tool_use", hooks=Hooks(settings(_daemon_hook(pidfile), event="PostToolUse")))
    loop.step()  # the tool ran, then its PostToolUse hook, which answered and left the daemon
    daemon = pids(pidfile)[0]
    assert running(daemon), "the daemon lives while the run does"
    result = loop.run()
    assert result.subtype == "success"
    assert gone(daemon), "a hook's setsid daemon outlived the run"


def test_a_hook_that_closes_its_pipes_answers_when_it_exits(tmp_path) -> None:
    """Its output ends before it does: it is waited for (not killed as if it hung) and its exit code read."""
    hook = "exec >&- 2>&-; sleep 0.3; exit 3"
    outcome = Hooks(settings(hook, timeout=20)).run("Stop", {"stop_hook_active": False})
    run = outcome.runs[0]
    assert run.timed_out is False and run.exit_code == 3, run


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_a_daemon_a_hook_left_is_ended_when_the_run_stops_on_an_exception(tmp_path, stop) -> None:
    from agentlab import scenario_loop

    pidfile = tmp_path / "pids"
    loop = scenario_loop("tool_use", hooks=Hooks(settings(_daemon_hook(pidfile), event="PostToolUse")))
    loop.step()  # the tool ran, then its PostToolUse hook, which answered and left the daemon
    daemon = pids(pidfile)[0]
    assert running(daemon), "the daemon lives while the run does"

    def interrupted(effect):  # Ctrl-C (or a bug) during the next model call
        raise stop("stopped")

    loop._perform = interrupted
    with pytest.raises(stop):
        loop.run()
    assert not loop.done and gone(daemon), "a hook's setsid daemon outlived a run stopped by an exception"


def test_async_a_daemon_a_hook_left_is_ended_with_the_run(tmp_path) -> None:
    import asyncio

    from agentlab import scenario_loop

    pidfile = tmp_path / "pids"
    loop = scenario_loop("end_turn", hooks=Hooks(settings(_daemon_hook(pidfile))), asynchronous=True)
    result = asyncio.run(loop.arun())
    assert result.subtype == "success"
    assert gone(pids(pidfile)[0]), "a hook's setsid daemon outlived the run"


def test_hooks_that_left_nothing_cost_no_look_at_the_process_table() -> None:
    hooks = Hooks(settings("exit 0"))
    assert hooks.end_leftovers() == 0  # no hook has run: nothing to look for
    hooks.run("Stop", {})
    assert hooks.end_leftovers() == 0 and hooks._answered == set()


def test_a_hook_that_closes_its_pipes_and_hangs_is_timed_out(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    outcome = Hooks(settings(f"echo $$ > {pidfile}; exec >&- 2>&-; sleep 300", timeout=1)).run("Stop", {})
    assert outcome.runs[0].timed_out is True
    assert gone(pids(pidfile)[0]), "the hook outlived its timeout"
