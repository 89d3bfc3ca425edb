"""One JupyterLab for every browser test of a run, and what the browser test files share to drive it in Chromium.

``make test`` runs the browser test files on several xdist workers at once. Each used to start a JupyterLab
of its own (about 5 s of CPU each, measured from start to stop of a server no page used); now the first worker
that needs one starts it and writes where it is to a file in the run's shared temporary directory, under a file
lock, and the others use it. Each worker that used it says so in that file; the last one to finish stops it.
Without xdist the lab belongs to the one pytest process, as before.

The lab serves a copy of notebooks/ (the English lessons, the Chinese ones in zh/, the glossaries) for the link
tests, and the stepper test's notebook in a folder of its own (``_stepper/``, neither a lesson nor in zh/). The
link tests open the lessons without a kernel: the lab offers one kernel only, ``agentlab-stepper``, which the
stepper's notebook names; its language is not "python", so JupyterLab does not take it for a lesson's python3
kernel either, and a lesson opens with "No Kernel". Each test page uses a workspace of its own, so two pages open
at once do not save their layout over each other's.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

CHROMIUM = os.environ.get("AGENTLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
STEPPER_NOTEBOOK = Path(__file__).with_name("browser_stepper.ipynb")
STEPPER_DIR = "_stepper"
STEPPER_KERNEL = "agentlab-stepper"
TOKEN = "agentlab-browser-test"
PRIVATE_DIRS = ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
                "JUPYTERLAB_WORKSPACES_DIR", "IPYTHONDIR", "MPLCONFIGDIR")
SETTINGS = {"apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
            # every cell in the page, so every markdown cell is drawn and its links can be found
            "notebook-extension/tracker": {"windowingMode": "none"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is needed for the browser test and is not at {CHROMIUM}: install it with "
                    "`apt-get install -y chromium` (.ci/run does this), or set AGENTLAB_CHROMIUM to its path.")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the browser test needs the playwright package: pip install -e '.[test]'")
    return sync_playwright


def page_url(lab: dict, workspace: str, path: str = "") -> str:
    """The lab's address in a workspace of its own (reset: nothing restored from an earlier page), at ``path``."""
    tree = f"/tree/{path}" if path else ""
    return f"{lab['url']}/lab/workspaces/{workspace}{tree}?reset&token={lab['token']}"


def _shared_dir(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's temporary directory: the one the xdist workers' own are in, this process's own without xdist."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if hasattr(config, "workerinput") else base) / "jupyterlab"
    shared.mkdir(exist_ok=True)
    return shared


@contextmanager
def _locked(shared: Path) -> Iterator[None]:
    with (shared / "lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="session")
def jupyterlab(request, tmp_path_factory):
    """The run's one JupyterLab: {"url", "token", "root", "pid", "users"}, started by its first user."""
    shared, me = _shared_dir(request.config, tmp_path_factory), str(os.getpid())
    lab = acquire(shared, me)
    try:
        yield lab
    finally:
        release(shared, me)


def acquire(shared: Path, user: str, start: Callable[[Path], dict] | None = None) -> dict:
    """The lab ``shared/state.json`` describes, ``user`` (a worker's pid) added to its users; started
    (``start``) when there is none or its server has exited."""
    state = shared / "state.json"
    with _locked(shared):
        lab = json.loads(state.read_text()) if state.exists() else None
        if lab is None or not _alive(lab["pid"]):
            lab = (start or _start)(shared)
        lab["users"].append(user)
        state.write_text(json.dumps(lab))
    return lab


def release(shared: Path, user: str, stop: Callable[[int], None] | None = None) -> None:
    """``user`` (a worker's pid) is done with the lab; the last user alive stops it (``stop``) and removes its
    state."""
    state = shared / "state.json"
    with _locked(shared):
        lab = json.loads(state.read_text())
        # a worker that died (xdist starts another) never says it is done: its pid is left out too
        lab["users"] = [u for u in lab["users"] if u != user and _alive(int(u))]
        if lab["users"]:
            state.write_text(json.dumps(lab))
            return
        state.unlink()
    (stop or _stop)(lab["pid"])


def _prepare(base: Path) -> tuple[Path, dict[str, str]]:
    """The lab's root (notebooks/ and the stepper's notebook) and its environment (private dirs, one kernel)."""
    root = base / "root"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    (root / STEPPER_DIR).mkdir()
    stepper = json.loads(STEPPER_NOTEBOOK.read_text(encoding="utf-8"))
    stepper["metadata"]["kernelspec"] = {"name": STEPPER_KERNEL, "display_name": "Python 3 (the stepper test's)"}
    (root / STEPPER_DIR / STEPPER_NOTEBOOK.name).write_text(json.dumps(stepper, indent=1), encoding="utf-8")
    env = dict(os.environ)
    for name in PRIVATE_DIRS:
        (base / name.lower()).mkdir()
        env[name] = str(base / name.lower())
    settings = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab"
    for plugin, values in SETTINGS.items():
        (settings / plugin).parent.mkdir(parents=True, exist_ok=True)
        (settings / f"{plugin}.jupyterlab-settings").write_text(json.dumps(values))
    kernel = Path(env["JUPYTER_DATA_DIR"]) / "kernels" / STEPPER_KERNEL
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (the stepper test's)", "language": "python-stepper-test"}))
    return root, env


def _start(shared: Path) -> dict:
    jupyter_lab = Path(sys.executable).with_name("jupyter-lab")
    if not jupyter_lab.exists():
        pytest.fail(f"jupyter-lab is not installed next to {sys.executable}: pip install -e '.[test]'")
    base = shared / f"lab-{time.time_ns()}"
    base.mkdir()
    root, env = _prepare(base)
    port, log = free_port(), base / "jupyter.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [str(jupyter_lab), "--no-browser", "--allow-root", f"--port={port}", "--ServerApp.port_retries=0",
             "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}",
             "--LabApp.news_url=None", "--LabApp.extension_manager=readonly", "--LabApp.expose_app_in_browser=True",
             "--KernelSpecManager.ensure_native_kernel=False",
             f"--KernelSpecManager.allowed_kernelspecs={STEPPER_KERNEL}"],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(server, f"{url}/api/status?token={TOKEN}", log)
    except BaseException:
        _stop(server.pid)
        raise
    return {"url": url, "token": TOKEN, "root": str(root), "pid": server.pid, "users": []}


def _wait_for(server: subprocess.Popen, status_url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter-lab exited with {server.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(status_url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    pytest.fail("jupyter-lab did not answer /api/status within 60 s")


def _stop(pid: int) -> None:
    """SIGTERM (JupyterLab shuts its kernels down), SIGKILL if it is still there after 20 s. The server may be
    another worker's child: it is gone when it has exited (a zombie its parent has not reaped yet counts)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            psutil.Process(pid).send_signal(sig)
        except psutil.NoSuchProcess:
            return
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        _reap(pid)
        if not _alive(pid):
            return


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:       # another worker's child: its parent reaps it
        pass
