"""The run's one JupyterLab (tests/browser_lab.py): started by its first user, shared, stopped by its last."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from browser_lab import acquire, release


class Server:
    """Stands for jupyter-lab: counts starts and stops; its pid is a live process (this one) unless told."""

    def __init__(self, pid: int = os.getpid()) -> None:
        self.pid, self.started, self.stopped = pid, 0, []

    def start(self, shared):
        self.started += 1
        return {"url": f"http://127.0.0.1:{self.started}", "pid": self.pid, "users": []}

    def stop(self, pid):
        self.stopped.append(pid)


def exited_pid() -> str:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return done.stdout.strip()


def test_the_first_user_starts_the_lab_the_others_share_it_and_the_last_stops_it(tmp_path):
    server, one, other = Server(), str(os.getpid()), str(os.getppid())      # two live processes
    first = acquire(tmp_path, one, server.start)
    second = acquire(tmp_path, other, server.start)
    assert server.started == 1 and second["url"] == first["url"]
    assert json.loads((tmp_path / "state.json").read_text())["users"] == [one, other]
    release(tmp_path, one, server.stop)
    assert server.stopped == [] and (tmp_path / "state.json").exists()
    release(tmp_path, other, server.stop)
    assert server.stopped == [os.getpid()] and not (tmp_path / "state.json").exists()
    acquire(tmp_path, one, server.start)                    # a user after the last one left: a new lab
    assert server.started == 2


def test_a_user_that_died_does_not_keep_the_lab_running(tmp_path):
    server = Server()
    acquire(tmp_path, exited_pid(), server.start)           # a worker that died without saying it was done
    acquire(tmp_path, str(os.getpid()), server.start)
    release(tmp_path, str(os.getpid()), server.stop)
    assert server.stopped == [os.getpid()] and not (tmp_path / "state.json").exists()


def test_a_lab_whose_server_has_exited_is_started_again(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"url": "old", "pid": int(exited_pid()), "users": ["1"]}))
    server = Server()
    lab = acquire(tmp_path, str(os.getpid()), server.start)
    assert server.started == 1 and lab["url"] != "old" and lab["users"] == [str(os.getpid())]
