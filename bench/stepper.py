"""Time a Step in the notebook stepper: one model call, the decision after it, every pane and the plot.

    .venv/bin/python bench/stepper.py            # --profile: where a dashboard Step's time goes
    .venv/bin/python bench/stepper.py --baseline # also the plain way (a new figure and savefig per Step)
    .venv/bin/python bench/stepper.py --fresh    # also a new figure per Step on the caching canvas, interleaved
    .venv/bin/python bench/stepper.py --quick    # one run of a short scenario (the tests run it)

A full run writes its figures to bench/results/stepper.json.

A Stepper on the tour scenario is clicked through to the end (``step_button.click()``, the code path of a
click in JupyterLab, less the browser's own drawing), once with the default plot (the overview), once with
the dashboard and once with no plot, several runs each, and every Step is timed. Printed: median and 95th
percentile of the wall-clock time and of the process CPU time per Step, with the load average of the machine
while measuring: on a busy machine wall-clock time grows with the load while CPU time does not. Full
(generation 2) garbage collections that fell inside a Step are counted apart: they walk every object of
the process, so their cost depends on what else the process holds, and one lands in a Step now and then.
With ``--fresh`` every run of the kept figure (``LiveFigure`` drawing into the axes of its last drawing) is
followed by a run drawing a new figure per Step on the same caching canvas (how LiveFigure drew before it
kept its axes), so both see the same load, and the CPU ratios are printed.
With ``--baseline`` the same Steps are also timed with the plot drawn the plain way (a new figure per
Step, drawn by ``savefig``), as the stepper did before ``plots.LiveFigure``, and the ratios are printed.
The budget: a Step with the overview plot within 150 ms at the 95th percentile of the wall-clock time (what
the learner waits for), with the dashboard 400 ms; the CPU time is printed beside it to tell a slow Step from
a busy machine. The stepper freezes nothing: a full collection inside a Step walks the whole process, as it
would in the learner's kernel, and is counted as such.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import matplotlib
import numpy as np

from agentlab.ui import plots
from agentlab.ui.widgets import PLOT_DPI, Stepper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Printer, add_arguments, record  # noqa: E402

BUDGET_MS = {"overview": 150.0, "dashboard": 400.0}
SCENARIO = "tour"


class PlainStepper(Stepper):
    """The stepper drawing its plot the plain way: a new figure per Step, rendered by savefig."""

    def _render_plot(self) -> None:
        if not self.show_plots:
            self.plot_image.layout.display = "none"
            return
        kind = self.plot_picker.value
        events = self.loop.trace.events if self.loop is not None else []
        key = (id(self.loop), len(events), kind)
        if key == self._plot_key:
            return
        fig = plots.PLOTS[kind](list(events))
        self.plot_image.value = plots.to_png(fig, dpi=PLOT_DPI.get(kind, 60), compress_level=1)
        self._plot_key = key


class NewFigureEachStep(plots.LiveFigure):
    """LiveFigure drawing a new figure at every Step (its axes are never kept)."""

    def draw(self, source):
        self.figure = None
        return super().draw(source)


@contextmanager
def new_figure_each_step():
    """Steppers made inside draw their plots with NewFigureEachStep."""
    kept = plots.LiveFigure
    plots.LiveFigure = NewFigureEachStep   # type: ignore[misc]
    try:
        yield
    finally:
        plots.LiveFigure = kept   # type: ignore[misc]


class FullCollections:
    """Time spent in full (generation 2) garbage collections, read through gc.callbacks."""

    def __init__(self) -> None:
        self.ms = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._start = time.process_time()
        else:
            self.ms += (time.process_time() - self._start) * 1000


def time_steps(plot: str | None, runs: int, stepper: type[Stepper] = Stepper, scenario: str = SCENARIO
               ) -> tuple[list[float], list[float], list[float]]:
    """Wall-clock and CPU milliseconds of every Step of ``runs`` runs through the scenario, and the CPU
    milliseconds of full garbage collections in each."""
    wall: list[float] = []
    cpu: list[float] = []
    collections: list[float] = []
    full = FullCollections()
    gc.callbacks.append(full)
    try:
        for _ in range(runs):
            s = stepper(scenario, plot=plot or "overview", show_plots=plot is not None)
            while not s.step_button.disabled:
                full.ms = 0.0
                w0, c0 = time.perf_counter(), time.process_time()
                s.step_button.click()
                wall.append((time.perf_counter() - w0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
                collections.append(full.ms)
    finally:
        gc.callbacks.remove(full)
    return wall, cpu, collections


def interleaved(plot: str, runs: int, scenario: str
                ) -> tuple[list[float], list[float], list[float], tuple[list[float], list[float], list[float]]]:
    """``time_steps`` of the kept figure and of a new figure per Step, one run of each in turn."""
    kept: tuple[list[float], list[float], list[float]] = ([], [], [])
    new: tuple[list[float], list[float], list[float]] = ([], [], [])
    for _ in range(runs):
        for into, fresh in ((kept, False), (new, True)):
            with new_figure_each_step() if fresh else nullcontext():
                for total, part in zip(into, time_steps(plot, 1, scenario=scenario), strict=True):
                    total.extend(part)
    return (*kept, new)


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95))


def line(name: str, wall: list[float], cpu: list[float], collections: list[float], budget: float | None) -> str:
    verdict = ""
    if budget is not None:
        verdict = f"   budget wall p95 {budget:.0f} ms: {'met' if p95(wall) <= budget else 'NOT met'}"
    hit = [c for c in collections if c > 0]
    full = (f"\n{'':14}full garbage collections in {len(hit)} of {len(cpu)} steps, up to {max(hit):.0f} ms; "
            f"without them cpu p95 {p95([c - g for c, g in zip(cpu, collections, strict=True)]):.1f} ms"
            if hit else "")
    return (f"  Step with {name:<10} {len(wall):3d} steps  wall median {statistics.median(wall):6.1f} ms  "
            f"p95 {p95(wall):6.1f} ms  |  cpu median {statistics.median(cpu):6.1f} ms  p95 {p95(cpu):6.1f} ms"
            f"{verdict}{full}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs through the scenario per plot (default 8)")
    parser.add_argument("--profile", action="store_true", help="profile one run with the dashboard")
    parser.add_argument("--fresh", action="store_true",
                        help="also time a new figure per Step, run for run interleaved, and print the ratios")
    parser.add_argument("--baseline", action="store_true",
                        help="also time the plain way (a new figure per Step) and print the ratios")
    add_arguments(parser)
    args = parser.parse_args(argv)
    scenario, runs = ("tool_use", 1) if args.quick else (SCENARIO, args.runs)
    if not args.quick:
        time_steps("overview", 1)   # warm up: imports, fonts, the first figure
        time_steps("dashboard", 1)
    if args.baseline:
        time_steps("overview", 1, PlainStepper, scenario)
    load_before = os.getloadavg()[0]
    out = Printer()
    out(f"stepper: scenario {scenario}, {runs} runs per plot, python {platform.python_version()}, "
        f"matplotlib {matplotlib.__version__}, {os.cpu_count()} cores")
    failed = False
    figures: dict = {"scenario": scenario, "runs": runs, "plots": {}}
    for plot in ("overview", "dashboard", None):
        if args.fresh and plot is not None:
            wall, cpu, collections, old = interleaved(plot, runs, scenario)
        else:
            wall, cpu, collections = time_steps(plot, runs, scenario=scenario)
        budget = BUDGET_MS.get(plot or "")
        if budget is not None:
            failed |= p95(wall) > budget   # the learner waits for the wall-clock time
        out(line(plot or "no plot", wall, cpu, collections, budget))
        figures["plots"][plot or "none"] = {
            "steps": len(wall), "wall_median_ms": round(statistics.median(wall), 1), "wall_p95_ms": round(p95(wall), 1),
            "cpu_median_ms": round(statistics.median(cpu), 1), "cpu_p95_ms": round(p95(cpu), 1),
            "budget_wall_p95_ms": budget, "full_collections": sum(1 for c in collections if c > 0)}
        if args.fresh and plot is not None:
            out(line("(new fig.)", *old, None))
            out(f"{'':14}kept / new figure: cpu median {statistics.median(cpu) / statistics.median(old[1]):.2f}, "
                f"cpu p95 {p95(cpu) / p95(old[1]):.2f}")
            figures["plots"][plot]["new_figure_cpu_median_ms"] = round(statistics.median(old[1]), 1)
            figures["plots"][plot]["new_figure_cpu_p95_ms"] = round(p95(old[1]), 1)
        if args.baseline and plot is not None:
            old_wall, old_cpu, old_collections = time_steps(plot, runs, PlainStepper, scenario)
            out(line("(plain)", old_wall, old_cpu, old_collections, None))
            out(f"{'':14}new / plain: cpu median {statistics.median(cpu) / statistics.median(old_cpu):.2f}, "
                f"cpu p95 {p95(cpu) / p95(old_cpu):.2f}, wall p95 {p95(wall) / p95(old_wall):.2f}")
    out(f"  load average (1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    if args.profile:
        import cProfile
        import pstats
        profiler = cProfile.Profile()
        profiler.enable()
        time_steps("dashboard", 1, scenario=scenario)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    record("stepper", figures, out.text, args=args, command="bench/stepper.py" + (" --quick" if args.quick else
                                                                               f" --runs {runs}"))
    return 1 if failed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
