"""Time a warm `make test`: several runs, the median, and how fast the machine was while they ran.

    .venv/bin/python bench/make_test.py [--runs 3] [--workers N]

Before each run the script times a fixed piece of work, `import anthropic` in a new interpreter (the start
of every kernel, CLI run and worker of the suite), five times, and keeps the median. The same machine is
not always as fast (here the reference went from 1.5 to 1.9 s in one afternoon), so each run is printed with
its ratio to that reference, and the median of the runs is compared with the budget. The CPU is the user and
system time of `make` and everything it waited for.

Exit status 1 when the median wall time is over the budget (120 s) or a run failed.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"
BUDGET_S = 120.0
LOGS = REPO / "build" / "bench"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reference_seconds(repeat: int = 5) -> float:
    """Median wall time of `import anthropic` in a new interpreter (bytecode cached)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run([str(PYTHON), "-c", "import anthropic"], check=True, env={**os.environ,
                       "PYTHONDONTWRITEBYTECODE": ""})
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def one_run(workers: int | None) -> dict:
    command = ["make", "--no-print-directory", "test"] + ([f"WORKERS={workers}"] if workers else [])
    cpu_before = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    cpu = children_cpu() - cpu_before
    if done.returncode != 0:   # keep what a failed run printed: its failures are the point
        LOGS.mkdir(parents=True, exist_ok=True)
        log = LOGS / f"make-test-{time.strftime('%Y%m%d-%H%M%S')}.log"
        log.write_text(done.stdout + done.stderr, encoding="utf-8")
        print(f"  the output of this run: {log}")
    lines = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    last = (lines or done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return {"wall": wall, "cpu": cpu, "status": done.returncode, "summary": last.strip("= ")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="WORKERS for make test (default: the Makefile's)")
    args = parser.parse_args(argv)
    with open("/proc/loadavg", encoding="ascii") as f:
        print(f"load average before: {' '.join(f.read().split()[:3])}")
    walls, failed = [], False
    for n in range(1, args.runs + 1):
        reference = reference_seconds()
        run = one_run(args.workers)
        walls.append(run["wall"])
        failed |= run["status"] != 0
        print(f"run {n}: {run['wall']:6.1f} s wall, {run['cpu']:6.1f} s CPU, reference {reference:.2f} s "
              f"(wall / reference {run['wall'] / reference:5.1f}), exit {run['status']}: {run['summary']}",
              flush=True)
    median = statistics.median(walls)
    verdict = "met" if median <= BUDGET_S else "NOT met"
    print(f"median of {len(walls)}: {median:.1f} s wall; budget {BUDGET_S:.0f} s {verdict}")
    return 1 if failed or median > BUDGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
