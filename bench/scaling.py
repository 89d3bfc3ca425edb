"""Does the cost of a model call stay flat as a run grows? 1,000 and 10,000 scripted turns, compaction on.

The scenario is built in code: N tool_use steps (calculator, weather, a short and a long file, in turn)
and a final end_turn, against a small context window with a proactive threshold, so the loop compacts
every few dozen turns for the whole run. Each size is timed several times, the two sizes interleaved in
one process. Peak memory is measured in a child process per size (one run each): the peak growth of the
process's anonymous resident memory (RssAnon: the heap, not mapped files) over a warmed-up baseline,
sampled at every trace event. tracemalloc would count Python allocations exactly, but it slows the loop
down about tenfold, too slow for 10,000 turns.

    .venv/bin/python bench/scaling.py              # 5 runs of 1,000 turns, 3 of 10,000; bench/results/scaling.json
    .venv/bin/python bench/scaling.py --profile    # plus a cProfile of one 10,000-turn run
    .venv/bin/python bench/scaling.py --quick      # 20 and 60 turns, once each (the tests run it)

Time per call is the wall time of the run divided by the requests the loop sent (turns plus summary
calls). Flat cost gives a ratio time-per-call(10k)/time-per-call(1k) near 1; cost growing with the
length of the run would push it towards 10. The time per call over the first and the last 500 calls of
the same run is printed too: it compares the start and the end of one run, free of drift between runs.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from agentlab.backend.scenario import Scenario, parse_scenario
from agentlab.backend.scripted import ScenarioEngine
from agentlab.core.trace import Trace
from agentlab.lab import scenario_loop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Printer, add_arguments, record  # noqa: E402

WINDOW = 6_000
THRESHOLD = 0.75


def build_scenario(turns: int) -> Scenario:
    """``turns`` tool_use steps and a final answer, answered by the scripted server."""
    calls = (
        ("calculator", lambda i: {"expression": f"{i} * 7 + 3"}),
        ("get_weather", lambda i: {"location": ("Oslo", "Lima", "Cairo", "Hamburg")[i % 4]}),
        ("read_file", lambda i: {"path": "notes.txt"}),
        ("read_file", lambda i: {"path": "handbook.txt"}),
    )
    steps = []
    for i in range(turns):
        name, make_input = calls[i % len(calls)]
        steps.append({
            "content": [{"type": "text", "text": f"Step {i + 1} of {turns}: calling {name}."},
                        {"type": "tool_use", "id": f"toolu_{i:06d}", "name": name, "input": make_input(i)}],
            "stop_reason": "tool_use"})
    steps.append({"content": [{"type": "text", "text": f"Done after {turns} tool calls."}],
                  "stop_reason": "end_turn"})
    return parse_scenario({
        "name": f"scaling_{turns}", "description": f"{turns} tool turns with compaction on",
        "prompt": "Work through the checklist one tool call at a time.", "tools": "demo",
        "context_window": WINDOW, "compact_threshold": THRESHOLD,
        "summary": "Earlier steps of the checklist were done with tool calls; keep going.",
        "steps": steps}, f"<scaling {turns}>")


class LeanEngine(ScenarioEngine):
    """The scripted server without its request log's bodies: a benchmark of the loop, not of the test server.

    ScenarioEngine keeps every request body it received (the tests read them); over 10,000 turns that log
    alone would dominate the memory figure.
    """

    def _record(self, method, path, body, *args, **kwargs):
        return super()._record(method, path, None, *args, **kwargs)


@dataclass
class Run:
    turns: int
    seconds: float
    requests: int
    compactions: int
    strategies: Counter
    events: int
    subtype: str
    first_block_ms: float  # time per call over the first BLOCK calls of the run
    last_block_ms: float  # ... and over the last BLOCK calls
    cpu_seconds: float = 0.0  # the process's CPU time over the run

    @property
    def cpu_per_call_ms(self) -> float:
        return self.cpu_seconds * 1000 / self.requests


    @property
    def per_call_ms(self) -> float:
        return self.seconds * 1000 / self.requests


BLOCK = 500


def lean_loop(scenario: Scenario, **overrides):
    """The loop on the lean server, allowed the steps a long run takes (the default cap is 1,000 steps)."""
    return scenario_loop(scenario, engine=LeanEngine(scenario), max_steps=4 * len(scenario.steps) + 100, **overrides)


def run_once(scenario: Scenario) -> Run:
    loop = lean_loop(scenario)
    stamps: list[float] = []  # when each request was about to be sent
    loop.trace.subscribe(lambda event: stamps.append(time.perf_counter()) if event.kind == "request" else None)
    started, cpu_started = time.perf_counter(), time.process_time()
    result = loop.run()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    block = min(BLOCK, len(stamps) - 1)
    first = (stamps[block] - stamps[0]) * 1000 / block
    last = (stamps[-1] - stamps[-1 - block]) * 1000 / block
    if result.subtype != "success" or loop.engine.failures:
        sys.exit(f"{scenario.name}: the run ended with {result.subtype}: {loop.engine.failures[:1]}")
    strategies = Counter(e.data["strategy"] for e in loop.trace.of_kind("compaction"))
    return Run(len(scenario.steps) - 1, seconds, result.requests, result.compactions, strategies,
               len(loop.trace), result.subtype, first, last, cpu)


def _anon_bytes() -> int | None:
    """Anonymous resident memory of this process (the heap, not mapped files), from /proc; None elsewhere."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _peak_memory_child(turns: int, keep: bool = True) -> None:
    """In a fresh process: warm up, then print how far one run of ``turns`` raised anonymous memory at its peak.

    Memory is sampled at every trace event of the run (several per model call); on systems without
    /proc the figure is the growth of the peak resident set instead.
    """
    scenario = build_scenario(turns)
    run_once(build_scenario(20))
    gc.collect()
    baseline = _anon_bytes()
    if baseline is None:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        run_once(scenario)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)  # kB on Linux
        return
    peak = [baseline]

    def sample(_event) -> None:
        now = _anon_bytes() or 0
        if now > peak[0]:
            peak[0] = now

    loop = lean_loop(scenario, trace=Trace(keep=keep))
    loop.trace.subscribe(sample)
    loop.run()
    print(peak[0] - baseline)


def peak_memory(turns: int, keep: bool = True) -> int:
    """Peak memory growth of one run of ``turns``, measured in a child process (bytes).

    ``keep=False`` runs with ``Trace(keep=False)``: events reach listeners (and a JSONL file, if any) but are
    not held in memory, which is how a long unattended run would be traced.
    """
    flags = [] if keep else ["--streamed-trace"]
    child = subprocess.run([sys.executable, "-W", "ignore", __file__, "--memory-child", str(turns), *flags],
                           capture_output=True, text=True, check=True)
    return int(child.stdout.split()[-1])


def profile(scenario: Scenario, top: int = 15) -> str:
    profiler = cProfile.Profile()
    loop = lean_loop(scenario)
    profiler.enable()
    loop.run()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).sort_stats("tottime")
    stats.print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--small-runs", type=int, default=5)
    parser.add_argument("--large-runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="also profile one large run with cProfile")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--streamed-trace", action="store_true", help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.memory_child:
        _peak_memory_child(args.memory_child, keep=not args.streamed_trace)
        return None
    if args.quick:
        args.small, args.large, args.small_runs, args.large_runs = 20, 60, 1, 1
    small, large = build_scenario(args.small), build_scenario(args.large)
    runs: dict[int, list[Run]] = {args.small: [], args.large: []}
    run_once(small)  # warm-up: imports, pydantic schemas, the SDK client
    # interleave: a large run, then small runs, so both sizes see the same machine state
    order = []
    for i in range(max(args.small_runs, args.large_runs)):
        if i < args.large_runs:
            order.append(large)
        if i < args.small_runs:
            order.append(small)
    sequence = [(len(scenario.steps) - 1, run_once(scenario)) for scenario in order]  # (size, run) as they ran
    for size, run in sequence:
        runs[size].append(run)
    out = Printer()
    figures = report(runs, args, out)
    paired = {clock: paired_ratio(sequence, args.large, attribute)
              for clock, attribute in (("wall", "per_call_ms"), ("cpu", "cpu_per_call_ms"))}
    if paired["wall"] is not None and paired["cpu"] is not None:
        out(f"  paired: each {args.large:,}-turn run against the {args.small:,}-turn runs just before and after it, "
            f"median ratio {paired['wall']:.2f} wall, {paired['cpu']:.2f} cpu (the figure the goal is judged on; "
            "goal <= 1.10)")
        figures["paired_time_per_call_ratio"] = round(paired["wall"], 3)
        figures["paired_cpu_time_per_call_ratio"] = round(paired["cpu"], 3)
    if args.profile:
        out(f"\ncProfile of one {args.large:,}-turn run, top functions by own time:")
        out(profile(large))
    return record("scaling", figures, out.text, args=args,
                  command="bench/scaling.py" + (" --quick" if args.quick else ""))


def paired_ratio(sequence: list[tuple[int, Run]], large: int, attribute: str = "per_call_ms") -> float | None:
    """The median, over the large runs, of a large run's time per call over that of the small runs that ran just
    before and after it: a run of 10,000 turns lasts half a minute, and the machine's speed changes from one
    half-minute to the next, so each is compared with what ran beside it rather than with every other run."""
    ratios = []
    for i, (size, run) in enumerate(sequence):
        if size != large:
            continue
        beside = [sequence[j][1] for j in (i - 1, i + 1) if 0 <= j < len(sequence) and sequence[j][0] != large]
        if beside:
            ratios.append(getattr(run, attribute) / statistics.mean(getattr(other, attribute) for other in beside))
    return statistics.median(ratios) if ratios else None


def report(runs: dict[int, list[Run]], args: argparse.Namespace, out: Printer) -> dict:
    out(f"scaling: scripted tool turns, context window {WINDOW} tokens, proactive compaction at "
        f"{THRESHOLD:.0%}, python {sys.version.split()[0]}")
    medians: dict[int, float] = {}
    cpu_medians: dict[int, float] = {}
    memories: dict[int, int | None] = {}
    sizes: dict[str, dict] = {}
    for size, group in runs.items():
        first = group[0]
        per_call = statistics.median(r.per_call_ms for r in group)
        cpu_per_call = statistics.median(r.cpu_per_call_ms for r in group)
        medians[size] = per_call
        cpu_medians[size] = cpu_per_call
        memory = memories[size] = None if args.quick else peak_memory(size)  # quick: one child per size, below
        used = ", ".join(f"{name} {count}" for name, count in sorted(first.strategies.items()))
        block = min(BLOCK, first.requests - 1)
        out(f"  {size:>6,} turns: {first.requests:>6,} requests, {first.compactions:>4} compactions ({used}), "
            f"{first.events:,} events")
        out(f"          time per call: median {per_call:.3f} ms of {len(group)} runs "
            f"(min {min(r.per_call_ms for r in group):.3f}, max {max(r.per_call_ms for r in group):.3f}); "
            f"cpu {cpu_per_call:.3f} ms per call; run {statistics.median(r.seconds for r in group):.2f} s; "
            + (f"peak memory growth {memory / 1e6:.1f} MB ({memory / first.requests / 1e3:.1f} kB per call)"
               if memory is not None else "peak memory not measured (--quick)"))
        out(f"          within a run: first {block} calls {statistics.median(r.first_block_ms for r in group):.3f} "
            f"ms per call, last {block} calls {statistics.median(r.last_block_ms for r in group):.3f} ms per call")
        sizes[str(size)] = {"requests": first.requests, "compactions": first.compactions, "runs": len(group),
                            "ms_per_call": round(per_call, 4), "cpu_ms_per_call": round(cpu_per_call, 4),
                            "peak_memory_mb": round(memory / 1e6, 2) if memory is not None else None}
    ratio = medians[args.large] / medians[args.small]
    cpu_ratio = cpu_medians[args.large] / cpu_medians[args.small]
    out(f"  ratio time-per-call({args.large:,})/time-per-call({args.small:,}) = {ratio:.2f} wall, "
        f"{cpu_ratio:.2f} cpu (medians of all runs; flat = 1, linear growth = {args.large / args.small:.0f})")
    large_memory, small_memory = memories[args.large], memories[args.small]
    memory_ratio = large_memory / max(small_memory, 1) if large_memory is not None and small_memory is not None \
        else None
    if memory_ratio is not None:
        out(f"  ratio peak-memory({args.large:,})/peak-memory({args.small:,}) = {memory_ratio:.1f} "
            "(the trace keeps every event in memory)")
    # quick: one child process (the large size), enough to check the measurement works
    streamed_sizes = (args.large,) if args.quick else (args.small, args.large)
    streamed = {size: peak_memory(size, keep=False) for size in streamed_sizes}
    if args.quick:
        out(f"  with Trace(keep=False): peak memory growth {streamed[args.large] / 1e6:.1f} MB ({args.large:,})")
    else:
        out(f"  with Trace(keep=False) (events to listeners/JSONL only): peak memory growth "
            f"{streamed[args.small] / 1e6:.1f} MB ({args.small:,}) and {streamed[args.large] / 1e6:.1f} MB "
            f"({args.large:,}), ratio {streamed[args.large] / max(streamed[args.small], 1):.1f}")
    return {"small": args.small, "large": args.large, "sizes": sizes, "time_per_call_ratio": round(ratio, 3),
            "cpu_time_per_call_ratio": round(cpu_ratio, 3),
            "memory_ratio": round(memory_ratio, 2) if memory_ratio is not None else None,
            "streamed_memory_mb": {str(k): round(v / 1e6, 2) for k, v in streamed.items()}}


if __name__ == "__main__":
    main()
