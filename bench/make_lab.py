"""Time from a fresh clone to an open JupyterLab with ``make lab``.

    .venv/bin/python bench/make_lab.py [--repo URL_OR_PATH]   # writes bench/results/make_lab.json
    .venv/bin/python bench/make_lab.py --quick    # the clone and a dry run of `make lab` (the tests run it)

Clones the repository (this checkout's committed HEAD by default) into a temporary folder, runs
``make lab`` there (it creates .venv, installs the project and starts JupyterLab), and stops the clock when
the JupyterLab page answers: ``GET /lab`` returns 200. Prints the time of each phase. pip's own download cache
is used as it is on the machine (say so when quoting the figure: a first install ever also downloads).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Printer, add_arguments, record  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(REPO), help="what to clone (default: this checkout)")
    parser.add_argument("--timeout", type=float, default=1800)
    add_arguments(parser)
    args = parser.parse_args(argv)
    port, token = free_port(), secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="agentlab-fresh-") as tmp:
        clone = Path(tmp) / "agentlab"
        started = time.monotonic()
        subprocess.run(["git", "clone", "--quiet", args.repo, str(clone)], check=True)
        cloned = time.monotonic()
        if args.quick:
            return dry_run(clone, cloned - started, args)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env.update(JUPYTER_CONFIG_DIR=f"{tmp}/jcfg", JUPYTER_DATA_DIR=f"{tmp}/jdata",
                   JUPYTER_RUNTIME_DIR=f"{tmp}/jrun", JUPYTERLAB_WORKSPACES_DIR=f"{tmp}/jws")
        lab_args = (f"--no-browser --port={port} --ServerApp.port_retries=0 --ServerApp.ip=127.0.0.1 "
                    f"--IdentityProvider.token={token} --LabApp.news_url=None")
        log = open(Path(tmp) / "make-lab.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(["make", "-C", str(clone), "lab", f"LAB_ARGS={lab_args}"], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
        installed = None
        try:
            while True:
                if installed is None and (clone / ".venv" / ".installed").exists():
                    installed = time.monotonic()
                if answers(f"http://127.0.0.1:{port}/lab?token={token}"):
                    opened = time.monotonic()
                    break
                if proc.poll() is not None:
                    print((Path(tmp) / "make-lab.log").read_text()[-3000:], file=sys.stderr)
                    print(f"make lab exited with {proc.returncode} before JupyterLab answered", file=sys.stderr)
                    return 1
                if time.monotonic() - started > args.timeout:
                    print("JupyterLab did not answer in time", file=sys.stderr)
                    return 1
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
            log.close()
    installed = installed or opened
    out = Printer()
    out(f"fresh clone to open JupyterLab: {opened - started:.0f} s (clone {cloned - started:.1f} s, "
        f"venv + install {installed - cloned:.0f} s, JupyterLab start {opened - installed:.1f} s); "
        f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    record("make_lab", {"total_s": round(opened - started, 1), "clone_s": round(cloned - started, 2),
                        "install_s": round(installed - cloned, 1), "start_s": round(opened - installed, 1)},
           out.text, args=args, command="bench/make_lab.py")
    return 0


def dry_run(clone: Path, clone_s: float, args: argparse.Namespace) -> int:
    """--quick: what `make lab` would run in the fresh clone (it must create the venv and start JupyterLab)."""
    plan = subprocess.run(["make", "-n", "-C", str(clone), "lab"], capture_output=True, text=True, check=True).stdout
    missing = [step for step in ("venv", "jupyter lab") if step not in plan]
    out = Printer()
    out(f"fresh clone in {clone_s:.1f} s; `make -n lab` plans {len(plan.splitlines())} commands"
        + (f", but none with {', '.join(missing)}" if missing else " (venv, install, jupyter lab)"))
    record("make_lab", {"total_s": None, "clone_s": round(clone_s, 2), "install_s": None, "start_s": None},
           out.text, args=args, command="bench/make_lab.py --quick")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
