"""Time a Step in the notebook stepper: one model call, the decision after it, every pane and the plot.

    .venv/bin/python bench/stepper.py            # add --profile for where the time of a dashboard Step goes

A Stepper on the tour scenario is clicked through to the end (``step_button.click()``, the code path of a
click in JupyterLab, less the browser's own drawing), once with the default plot (the overview), once with
the dashboard and once with no plot, several runs each, and every Step is timed. Printed: median and 95th
percentile of the wall-clock time and of the process CPU time per Step, with the load average of the machine
while measuring: on a busy machine wall-clock time grows with the load while CPU time does not.
The budget: a Step with the overview plot within 150 ms at the 95th percentile, with the dashboard 400 ms.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import matplotlib
import numpy as np

from agentlab.widgets import Stepper

BUDGET_MS = {"overview": 150.0, "dashboard": 400.0}
SCENARIO = "tour"


def time_steps(plot: str | None, runs: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU milliseconds of every Step of ``runs`` runs through the scenario."""
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(runs):
        stepper = Stepper(SCENARIO, plot=plot or "overview", show_plots=plot is not None)
        while not stepper.step_button.disabled:
            w0, c0 = time.perf_counter(), time.process_time()
            stepper.step_button.click()
            wall.append((time.perf_counter() - w0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
    return wall, cpu


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs through the scenario per plot (default 8)")
    parser.add_argument("--profile", action="store_true", help="profile one run with the dashboard")
    args = parser.parse_args()
    time_steps("overview", 1)   # warm up: imports, fonts, the first figure
    time_steps("dashboard", 1)
    load_before = os.getloadavg()[0]
    print(f"stepper: scenario {SCENARIO}, {args.runs} runs per plot, python {platform.python_version()}, "
          f"matplotlib {matplotlib.__version__}, {os.cpu_count()} cores")
    failed = False
    for plot in ("overview", "dashboard", None):
        wall, cpu = time_steps(plot, args.runs)
        name = plot or "no plot"
        budget = BUDGET_MS.get(plot or "")
        verdict = ""
        if budget is not None:
            ok = p95(wall) <= budget or p95(cpu) <= budget
            failed |= not ok
            verdict = f"   budget p95 {budget:.0f} ms: {'met' if ok else 'NOT met'}"
        print(f"  Step with {name:<10} {len(wall):3d} steps  wall median {statistics.median(wall):6.1f} ms  "
              f"p95 {p95(wall):6.1f} ms  |  cpu median {statistics.median(cpu):6.1f} ms  p95 {p95(cpu):6.1f} ms"
              f"{verdict}")
    print(f"  load average (1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    if args.profile:
        import cProfile
        import pstats
        profiler = cProfile.Profile()
        profiler.enable()
        time_steps("dashboard", 1)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
