"""Per-call overhead of agentlab's loop, next to bare SDK calls and the SDK's own tool runner.

One scripted transcript of 20 tool turns and a final answer, run three ways through the same transport
(the real ``anthropic`` client on an in-process ``httpx2.MockTransport`` answered by a fresh
``ScenarioEngine``):

  agentlab     ``AgentLoop.run()``: decide(), tools, hooks check, context meter, trace events;
  bare         ``client.messages.create(**body)`` for each request body agentlab sent (taken from the
               engine's record), one after the other: no loop, no tools, what an SDK user pays per call;
  bare (raw)   the same through ``client.messages.with_raw_response.create(**body)``, the reply's JSON read
               by the loop's own function for it (no ``Message`` model built): the floor under the rest of
               agentlab's code;
  tool-runner  ``client.beta.messages.tool_runner(...).until_done()`` with ``@beta_tool`` functions that
               call the same demo tool code.

Clients, tools and engines are built before the clock starts; only the conversation is timed. The three
run in turn (rotating which goes first) many times in one process, and the medians are compared.

    .venv/bin/python bench/overhead.py               # 40 rounds; writes bench/results/overhead.json
    .venv/bin/python bench/overhead.py --profile     # plus where agentlab's time goes, by module
    .venv/bin/python bench/overhead.py --baseline REF  # plus agentlab at git REF, same rounds, same server
    .venv/bin/python bench/overhead.py --instructions  # plus instructions per call under valgrind (load-proof)
    .venv/bin/python bench/overhead.py --processes 5 # the rounds in 5 fresh processes; the median of their figures
    .venv/bin/python bench/overhead.py --quick       # a short run that checks the script (the tests run it)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import cProfile
import gc
import importlib
import io
import json
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType

from anthropic import beta_tool

from agentlab.backend.scenario import Scenario, parse_scenario
from agentlab.backend.scripted import ScenarioEngine, scripted_client
from agentlab.core.tools import TestsState, ToolRegistry, calculate, fake_weather, read_sandboxed, run_pretend_tests
from agentlab.core.wire import read_reply  # the loop's own reading of a raw reply
from agentlab.lab import SANDBOX_DIR, scenario_loop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Printer, add_arguments, record  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

TURNS = 20
PROMPT = "Work through the checklist: a sum, the weather, the notes, the tests, one tool call at a time."


def scenario_document(turns: int = TURNS) -> dict:
    calls = (
        ("calculator", {"expression": "1234 + 5678"}),
        ("get_weather", {"location": "Oslo"}),
        ("read_file", {"path": "notes.txt"}),
        ("run_tests", {}),
    )
    steps = []
    for i in range(turns):
        name, tool_input = calls[i % len(calls)]
        steps.append({
            "content": [{"type": "text", "text": f"Step {i + 1}: {name}."},
                        {"type": "tool_use", "id": f"toolu_{i:03d}", "name": name, "input": tool_input}],
            "stop_reason": "tool_use"})
    steps.append({"content": [{"type": "text", "text": "All done: 6912, mild in Oslo, door code noted."}],
                  "stop_reason": "end_turn"})
    return {"name": "overhead", "description": f"{turns} tool turns", "prompt": PROMPT, "tools": "demo",
            "steps": steps}


def build_scenario(turns: int = TURNS) -> Scenario:
    return parse_scenario(scenario_document(turns), "<overhead>")


def runner_tools() -> list:
    """The demo tools as ``@beta_tool`` functions, calling the same code as agentlab's registry."""
    tests = TestsState()
    sandbox = Path(SANDBOX_DIR)

    @beta_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression and return the result.

        Args:
            expression: Arithmetic such as '(2 + 3) * 4 / 7' or '2 ** 8'
        """
        return calculate(expression)

    @beta_tool
    def get_weather(location: str) -> str:
        """Get the current weather for a location (a demo service with made-up but stable answers).

        Args:
            location: A city name, e.g. 'Paris'
        """
        return fake_weather(location)

    @beta_tool
    def read_file(path: str) -> str:
        """Read a text file from the sandbox folder. Long files are cut off after 20,000 characters.

        Args:
            path: Path relative to the sandbox folder, e.g. 'notes.txt'
        """
        return read_sandboxed(sandbox, path)

    @beta_tool
    def run_tests() -> str:
        """Run the project's test suite and report how many tests passed and failed."""
        return run_pretend_tests(tests)

    return [calculator, get_weather, read_file, run_tests]


# -- the three ways, each split into set-up (untimed) and the timed conversation ---------------------------

class ReplayedTools(ToolRegistry):
    """The demo tools' answers recorded in one run and handed back in order: the loop without the tools' work.

    The bare replay runs no tools at all, so ``agentlab (tools replayed)/bare`` is the loop's own overhead.
    """

    def __init__(self, real, outcomes: list) -> None:
        super().__init__()
        self.real, self.outcomes = real, list(outcomes)

    def names(self) -> list[str]:
        return self.real.names()

    def schemas(self) -> list[dict]:
        return self.real.schemas()

    def run_many(self, calls, *, max_workers: int = 4) -> list:
        return [self.outcomes.pop(0) for _ in calls]


def record_tool_outcomes(scenario: Scenario, loop_factory: Callable = scenario_loop) -> list:
    loop = loop_factory(scenario)
    recorded: list = []
    real_run_many = loop.tools.run_many

    def recording(calls, **kwargs):
        out = real_run_many(calls, **kwargs)
        recorded.extend(out)
        return out

    loop.tools.run_many = recording
    loop.run()
    return recorded


def prepare_agentlab(scenario: Scenario, outcomes: list | None = None, *, loop_factory: Callable = scenario_loop
                     ) -> tuple[Callable[[], None], Callable[[], int]]:
    loop = loop_factory(scenario)
    if outcomes is not None:
        replayed = ReplayedTools(loop.tools, outcomes)
        try:
            loop.tools = replayed  # a loop from before RunConfig (a --baseline REF)
        except AttributeError:  # today's loop reads its tools from its config: a loop of its own with them
            loop = loop_factory(scenario, tools=replayed)

    def check() -> int:
        assert loop.result is not None and loop.result.subtype == "success", loop.result
        assert not loop.engine.failures, loop.engine.failures
        return loop.result.requests

    return lambda: loop.run() and None, check


def prepare_bare(scenario: Scenario, bodies: list[dict], server: ModuleType | None = None, *, raw: bool = False
                 ) -> tuple[Callable[[], None], Callable[[], int]]:
    engine = (server.ScenarioEngine if server else ScenarioEngine)(scenario)
    client = (server.scripted_client if server else scripted_client)(engine)

    def conversation() -> None:
        for body in bodies:
            client.messages.create(**body)

    def raw_conversation() -> None:
        for body in bodies:
            read_reply(client.messages.with_raw_response.create(**body))

    def check() -> int:
        assert not engine.failures, engine.failures
        assert [r.body for r in engine.message_requests] == bodies, "the replay differs from agentlab's requests"
        return len(engine.message_requests)

    return (raw_conversation if raw else conversation), check


def prepare_runner(scenario: Scenario, server: ModuleType | None = None
                   ) -> tuple[Callable[[], None], Callable[[], int]]:
    engine = (server.ScenarioEngine if server else ScenarioEngine)(scenario)
    client = (server.scripted_client if server else scripted_client)(engine)
    tools = runner_tools()
    final = {}

    def conversation() -> None:
        runner = client.beta.messages.tool_runner(
            model=scenario.model, max_tokens=scenario.max_tokens, tools=tools,
            messages=[{"role": "user", "content": scenario.prompt}])
        final["message"] = runner.until_done()

    def check() -> int:
        assert not engine.failures, engine.failures
        assert final["message"].stop_reason == "end_turn"
        return len(engine.message_requests)

    return conversation, check


def agentlab_bodies(scenario: Scenario, loop_factory: Callable = scenario_loop) -> list[dict]:
    loop = loop_factory(scenario)
    loop.run()
    return [r.body for r in loop.engine.message_requests]


def baseline_lab(ref: str, index: int = 0) -> ModuleType:
    """agentlab as it was at git ``ref``, imported beside this one as ``agentlab_baseline`` (its modules import
    one another relatively, so a copy under another name is a second, independent package)."""
    folder = Path(tempfile.mkdtemp(prefix="agentlab-baseline-"))
    archive = subprocess.run(["git", "archive", ref, "agentlab"], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    name = f"agentlab_baseline{index or ''}"
    (folder / "agentlab").rename(folder / name)
    sys.path.insert(0, str(folder))
    return importlib.import_module(f"{name}.lab")


def prepare_baseline(lab: ModuleType, turns: int) -> Callable[[], tuple[Callable[[], None], Callable[[], int]]]:
    """The baseline's loop, tools replayed, sending to this checkout's scripted server (the same server as
    the others, so only the loop differs)."""
    parse = importlib.import_module(lab.__name__.rsplit(".", 1)[0] + ".backend.scenario").parse_scenario
    scenario = parse(scenario_document(turns), "<overhead>")
    outcomes = record_tool_outcomes(scenario, lab.scenario_loop)
    current = build_scenario(turns)

    def prepare() -> tuple[Callable[[], None], Callable[[], int]]:
        return prepare_agentlab(scenario, outcomes, loop_factory=lambda s, **settings: lab.scenario_loop(
            s, engine=ScenarioEngine(current), **settings))
    return prepare


def whole_baseline(lab: ModuleType, ref: str, turns: int) -> dict[str, Callable]:
    """The four ways with agentlab at ``ref``, its scripted server included: the run as it was then."""
    package = lab.__name__.rsplit(".", 1)[0]
    server = importlib.import_module(package + ".backend.scripted")
    scenario = importlib.import_module(package + ".backend.scenario").parse_scenario(scenario_document(turns),
                                                                                      "<overhead>")
    bodies = agentlab_bodies(scenario, lab.scenario_loop)
    outcomes = record_tool_outcomes(scenario, lab.scenario_loop)
    return {
        f"{ref}: agentlab": lambda: prepare_agentlab(scenario, loop_factory=lab.scenario_loop),
        f"{ref}: replayed": lambda: prepare_agentlab(scenario, outcomes, loop_factory=lab.scenario_loop),
        f"{ref}: bare": lambda: prepare_bare(scenario, bodies, server),
        f"{ref}: tool-runner": lambda: prepare_runner(scenario, server),
    }


def build_ways(turns: int = TURNS, baselines: dict[str, ModuleType] | None = None,
               whole: dict[str, ModuleType] | None = None) -> tuple[dict[str, Callable], int]:
    """Each way's set-up (it returns the timed conversation and its check), and how many requests agentlab made."""
    scenario = build_scenario(turns)
    bodies = agentlab_bodies(scenario)
    outcomes = record_tool_outcomes(scenario)
    ways = {
        "agentlab": lambda: prepare_agentlab(scenario),
        "agentlab (tools replayed)": lambda: prepare_agentlab(scenario, outcomes),
        "bare": lambda: prepare_bare(scenario, bodies),
        "bare (raw)": lambda: prepare_bare(scenario, bodies, raw=True),
        "tool-runner": lambda: prepare_runner(scenario),
    }
    for ref, lab in (baselines or {}).items():
        ways[f"{ref} (tools replayed)"] = prepare_baseline(lab, turns)
    for ref, lab in (whole or {}).items():
        ways.update(whole_baseline(lab, ref, turns))
    return ways, len(bodies)


def measure(rounds: int, turns: int = TURNS, baselines: dict[str, ModuleType] | None = None,
            whole: dict[str, ModuleType] | None = None) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock and CPU seconds of each way's conversation, ``rounds`` times each, interleaved."""
    ways, requests = build_ways(turns, baselines, whole)
    names = list(ways)
    for name in names:  # warm-up, and a check that each way completes the transcript
        conversation, check = ways[name]()
        conversation()
        calls = check()
        if calls != requests:
            sys.exit(f"{name} made {calls} requests, agentlab made {requests}")
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate which way goes first
            conversation, check = ways[name]()
            gc.collect()
            started, cpu_started = time.perf_counter(), time.process_time()
            conversation()
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - cpu_started)
            check()
    return times, cpu


# -- instructions per call, counted by valgrind: a figure the machine's load does not move -----------------------

INSTRUCTION_RUNS = (2, 6)  # conversations in the two counted processes of a way: their difference is what is kept


def count_runs(way: str, runs: int, converse: bool, turns: int, baselines: dict[str, ModuleType]) -> None:
    """The child's work under valgrind: set ``way`` up ``runs`` times, and hold each conversation when
    ``converse`` (a process that only sets up is counted too, and taken away)."""
    ways, _ = build_ways(turns, baselines)
    for _ in range(runs):
        conversation, _check = ways[way]()
        if converse:
            conversation()


def per_call(counts: dict[tuple[int, bool], int], requests: int) -> float:
    """Instructions per model call from four counts, ``(runs, converse) -> instructions``: what the extra
    conversations cost beyond their extra set-ups, per request. Start-up and one-time set-up cancel out."""
    low, high = INSTRUCTION_RUNS
    conversations = counts[(high, True)] - counts[(low, True)]
    setups = counts[(high, False)] - counts[(low, False)]
    return (conversations - setups) / ((high - low) * requests)


_VALGRIND_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _count_instructions(way: str, runs: int, converse: bool, turns: int, refs: list[str]) -> int:
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               sys.executable, str(Path(__file__).resolve()), "--count-way", way, "--count-runs", str(runs),
               "--count-turns", str(turns), *(["--count-setup-only"] if not converse else []),
               *[arg for ref in refs for arg in ("--baseline", ref)]]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = _VALGRIND_REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        sys.exit(f"valgrind could not count {way!r}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def instructions(names: list[str], turns: int, refs: list[str]) -> dict[str, float]:
    """Instructions per model call of each way (valgrind's cachegrind, four counted processes a way, as many at
    once as there are cores)."""
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (apt-get install -y valgrind)")
    jobs = [(name, runs, converse) for name in names for runs in INSTRUCTION_RUNS for converse in (True, False)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        counts = list(pool.map(lambda job: _count_instructions(*job, turns, refs), jobs))
    by_way: dict[str, dict[tuple[int, bool], int]] = {name: {} for name in names}
    for (name, runs, converse), count in zip(jobs, counts, strict=True):
        by_way[name][(runs, converse)] = count
    return {name: per_call(by_way[name], turns + 1) for name in names}


PROFILE_POINTS = (
    ("agentlab/backend/scripted.py", "handle", "the scripted server (ScenarioEngine.handle), inside the SDK call"),
    ("agentlab/core/tools.py", "run_many", "running the tools (ToolRegistry.run_many)"),
    ("agentlab/core/trace.py", "emit", "trace events (Trace.emit, all callers)"),
    ("agentlab/core/tools.py", "schemas", "tool schemas rebuilt for every request (ToolRegistry.schemas)"),
    ("agentlab/core/transitions.py", "decide", "decide()"),
    ("agentlab/core/loop.py", "_record_response", "reading the response (_record_response, its emit included)"),
    ("anthropic/_models.py", "to_dict", "SDK content blocks to dicts (BaseModel.to_dict, all callers)"),
    ("agentlab/core/transitions.py", "_evolve", "LoopState updates (transitions._evolve)"),
    ("dataclasses.py", "replace", "dataclasses.replace (all callers)"),
    ("agentlab/core/caching.py", "count_breakpoints", "breakpoints counted by reading the request (count_breakpoints)"),
    ("agentlab/core/trace.py", "without_lone_surrogates", "lone surrogates looked for (without_lone_surrogates)"),
    ("agentlab/core/loop.py", "to_dict", "the result message (Result.to_dict)"),
)


def profile_agentlab(runs: int = 20, turns: int = TURNS, out: Callable[..., None] = print) -> None:
    """Where AgentLoop.run() spends its time: cumulative shares of the main parts, then own time."""
    scenario = build_scenario(turns)
    profiler = cProfile.Profile()
    for _ in range(runs):
        conversation, _check = prepare_agentlab(scenario)
        profiler.enable()
        conversation()
        profiler.disable()
    stats = pstats.Stats(profiler).stats

    def cumulative(suffix: str, function: str) -> float:
        return sum(row[3] for (filename, _line, name), row in stats.items()
                   if name == function and filename.replace("\\", "/").endswith(suffix))

    total = cumulative("agentlab/core/loop.py", "run")
    inside = cumulative("agentlab/core/wire.py", "send")
    if not total:
        sys.exit("profile: AgentLoop.run was not found in the profile (has agentlab/core/loop.py moved?)")
    out(f"\nprofile of {runs} agentlab runs ({turns} tool turns each), cumulative time as a share of "
        "AgentLoop.run(), under cProfile (parts overlap):")
    out(f"  {inside / total:6.1%}  the SDK call (wire.send: SDK, transport and scripted server)")
    out(f"  {(total - inside) / total:6.1%}  everything else: agentlab's own work, tools included")
    for suffix, function, label in PROFILE_POINTS:
        out(f"  {cumulative(suffix, function) / total:6.1%}  {label}")
    own = sorted(((row[2], f"{filename.replace(chr(92), '/').rsplit('/agentlab/', 1)[1]}:{line}({name})")
                  for (filename, line, name), row in stats.items()
                  if "/agentlab/" in filename.replace("\\", "/")), reverse=True)
    out("agentlab functions with the most own time:")
    for seconds, name in own[:8]:
        out(f"  {seconds / total:6.1%}  {name}")


RATIO_LABELS = {
    "agentlab/bare": "(bare runs no tools)",
    "replayed/bare": "(the loop's own overhead, tool work taken out; goal <= 1.10)",
    "agentlab/tool-runner": "(goal <= 0.55)",
    "replayed/bare (raw)": "(the loop's own code alone: bare reading the reply's JSON as agentlab does)",
}
WHOLE_RATIOS = ("agentlab/bare", "replayed/bare", "agentlab/tool-runner")  # a --whole-baseline has no raw way


@contextlib.contextmanager
def one_core(wanted: bool = True) -> Iterator[str]:
    """Run on one core (the last allowed), where the system allows it, and give the others back after: the ways
    then share one core's caches and frequency, and the scheduler does not move the process mid-round."""
    if not wanted or not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        yield "not pinned"
        return
    allowed = os.sched_getaffinity(0)
    core = max(allowed)
    os.sched_setaffinity(0, {core})
    try:
        yield f"pinned to core {core}"
    finally:
        os.sched_setaffinity(0, allowed)


def _ratios(times: dict[str, list[float]], baselines: Sequence[str] = (), whole: Sequence[str] = (), *,
            paired: bool = False) -> dict[str, float]:
    """The ratios of the ways, as the ratio of their medians, or ``paired``: the median of each round's own ratio.
    The two ways of a pair ran in the same round, so a machine that slows down for a few seconds slows both,
    where the ratio of the two medians takes each way's median from rounds the slowdown hit differently."""
    def ratio(a: str, b: str) -> float:
        if paired:
            return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))
        return statistics.median(times[a]) / statistics.median(times[b])

    ratios = {"agentlab/bare": ratio("agentlab", "bare"), "replayed/bare": ratio("agentlab (tools replayed)", "bare"),
              "agentlab/tool-runner": ratio("agentlab", "tool-runner"),
              "replayed/bare (raw)": ratio("agentlab (tools replayed)", "bare (raw)")}
    ratios.update({ref: ratio(f"{ref} (tools replayed)", "bare") for ref in baselines})
    for ref in whole:
        ratios.update({f"{ref}: agentlab/bare": ratio(f"{ref}: agentlab", f"{ref}: bare"),
                       f"{ref}: replayed/bare": ratio(f"{ref}: replayed", f"{ref}: bare"),
                       f"{ref}: agentlab/tool-runner": ratio(f"{ref}: agentlab", f"{ref}: tool-runner")})
    return ratios


def _ratio_lines(out: Callable[..., None], ratios: dict, paired: dict, baselines: Sequence[str],
                 whole: Sequence[str], second: str = "the ratio of the medians above") -> None:
    """The ratio lines: each the median of the rounds' own ratios, then ``second`` (the ratio of the medians)."""
    out(f"  ratios, each the median of the rounds' own ratios (the figures the goals are judged on), then {second}:")
    for key, label in RATIO_LABELS.items():
        out(f"  {key:<22} = {paired['wall'][key]:.2f} wall, {paired['cpu'][key]:.2f} cpu   {label}; "
            f"ratio of medians {ratios['wall'][key]:.2f} wall, {ratios['cpu'][key]:.2f} cpu")
    for ref in baselines:
        out(f"  {ref + ' replayed/bare':<22} = {paired['wall'][ref]:.2f} wall, {paired['cpu'][ref]:.2f} cpu   "
            f"(agentlab at {ref}, tools replayed, this server); ratio of medians {ratios['wall'][ref]:.2f} wall, "
            f"{ratios['cpu'][ref]:.2f} cpu")
    for ref in whole:
        for key in WHOLE_RATIOS:
            name = f"{ref}: {key}"
            out(f"  {name:<22} = {paired['wall'][name]:.2f} wall, {paired['cpu'][name]:.2f} cpu   (agentlab and its "
                f"scripted server at {ref}); ratio of medians {ratios['wall'][name]:.2f} wall, "
                f"{ratios['cpu'][name]:.2f} cpu")


def one_process(args: argparse.Namespace, out: Callable[..., None]) -> dict:
    """The rounds in this process: each way's time per call, the ratios, printed; the figures."""
    turns, rounds = (4, 2) if args.quick else (TURNS, args.rounds)
    labs = {ref: baseline_lab(ref, i) for i, ref in enumerate([*args.baseline, *args.whole_baseline])}
    with one_core(wanted=not args.quick) as pinned:  # a quick run (the tests) leaves the test process as it is
        wall, cpu = measure(rounds, turns, {ref: labs[ref] for ref in args.baseline},
                            {ref: labs[ref] for ref in args.whole_baseline})
    calls = turns + 1
    out(f"overhead: {turns} tool turns + final answer ({calls} requests), {rounds} rounds interleaved, "
        f"python {sys.version.split()[0]}, {pinned}; medians per call, wall-clock and CPU time of the process")
    for name in wall:
        out(f"  {name:<26} wall {statistics.median(wall[name]) * 1000 / calls:6.3f} ms per call "
            f"(min {min(wall[name]) * 1000 / calls:.3f}, max {max(wall[name]) * 1000 / calls:.3f})   "
            f"cpu {statistics.median(cpu[name]) * 1000 / calls:6.3f} ms per call")
    ratios = {clock: _ratios(times, args.baseline, args.whole_baseline)
              for clock, times in (("wall", wall), ("cpu", cpu))}
    paired = {clock: _ratios(times, args.baseline, args.whole_baseline, paired=True)
              for clock, times in (("wall", wall), ("cpu", cpu))}
    _ratio_lines(out, ratios, paired, args.baseline, args.whole_baseline)
    return {"turns": turns, "requests": calls, "rounds": rounds,
            "ms_per_call": {clock: {name: round(statistics.median(values) * 1000 / calls, 4)
                                    for name, values in times.items()}
                            for clock, times in (("wall", wall), ("cpu", cpu))},
            "ratios": {clock: {name: round(value, 3) for name, value in values.items()}
                       for clock, values in ratios.items()},
            "paired_ratios": {clock: {name: round(value, 3) for name, value in values.items()}
                              for clock, values in paired.items()},
            "pinned": pinned}


def combine(runs: list[dict]) -> dict:
    """The figures of several processes as one: every time and ratio the median of the processes' own; each
    process's paired ratios are kept beside them, under ``processes``."""
    def median_of(key: str) -> dict:
        digits = 4 if key == "ms_per_call" else 3  # as one process rounds them
        return {clock: {name: round(statistics.median(run[key][clock][name] for run in runs), digits)
                        for name in names} for clock, names in runs[0][key].items()}

    first = runs[0]
    return {"turns": first["turns"], "requests": first["requests"], "rounds": first["rounds"],
            "ms_per_call": median_of("ms_per_call"), "ratios": median_of("ratios"),
            "paired_ratios": median_of("paired_ratios"), "pinned": first["pinned"],
            "processes": [run["paired_ratios"] for run in runs]}


def across_processes(args: argparse.Namespace, out: Callable[..., None]) -> dict:
    """``--processes K``: the rounds run in K fresh processes, one after the other, and their figures combined.
    One process's ratios move by several hundredths from one run to the next on a shared machine, more than
    the rounds inside it do; the median of a few processes is the steadier figure."""
    runs = []
    refs = [*(a for ref in args.baseline for a in ("--baseline", ref)),
            *(a for ref in args.whole_baseline for a in ("--whole-baseline", ref))]
    with tempfile.TemporaryDirectory(prefix="agentlab-overhead-") as folder:
        for k in range(args.processes):
            path = Path(folder) / f"{k}.json"
            command = [sys.executable, str(Path(__file__).resolve()), "--rounds", str(args.rounds), "--out", str(path),
                       *(["--quick"] if args.quick else []), *refs]
            done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
            if done.returncode != 0:
                sys.exit(f"process {k + 1} of {args.processes} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
            runs.append(json.loads(path.read_text(encoding="utf-8"))["figures"])
    figures = combine(runs)
    calls = figures["requests"]
    out(f"overhead: {figures['turns']} tool turns + final answer ({calls} requests), {args.processes} processes of "
        f"{figures['rounds']} rounds interleaved, python {sys.version.split()[0]}, {figures['pinned']}; per call, the "
        "median of the processes' medians, wall-clock and CPU time")
    for name, value in figures["ms_per_call"]["wall"].items():
        each = [run["ms_per_call"]["wall"][name] for run in runs]
        out(f"  {name:<26} wall {value:6.3f} ms per call (processes {min(each):.3f} to {max(each):.3f})   "
            f"cpu {figures['ms_per_call']['cpu'][name]:6.3f} ms per call")
    _ratio_lines(out, figures["ratios"], figures["paired_ratios"], args.baseline, args.whole_baseline,
                 "the median of each process's ratio of its medians")
    for key in RATIO_LABELS:
        out(f"  {key:<22} in each process: " + ", ".join(f"{run['paired_ratios']['cpu'][key]:.2f}" for run in runs)
            + " cpu")
    return figures


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--processes", type=int, default=1,
                        help="run the rounds in this many fresh processes, one after the other, and record the "
                             "median of their figures (each process's ratios are printed too)")
    parser.add_argument("--profile", action="store_true", help="also profile agentlab's loop by module")
    parser.add_argument("--baseline", metavar="REF", action="append", default=[],
                        help="also time agentlab at this git ref, tools replayed (may be given more than once)")
    parser.add_argument("--whole-baseline", metavar="REF", action="append", default=[],
                        help="also time the four ways with agentlab at this git ref, its scripted server included")
    parser.add_argument("--instructions", action="store_true",
                        help="also count the instructions per call of agentlab (tools replayed), bare and each "
                             "--baseline under valgrind: a figure the machine's load does not move (minutes)")
    for hidden in ("--count-way", "--count-runs", "--count-turns"):  # a counted child process (--instructions)
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--count-setup-only", action="store_true", help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.count_way is not None:
        count_runs(args.count_way, int(args.count_runs), not args.count_setup_only, int(args.count_turns),
                   {ref: baseline_lab(ref, i) for i, ref in enumerate(args.baseline)})
        return {}
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    out = Printer()
    figures = across_processes(args, out) if args.processes > 1 else one_process(args, out)
    if args.instructions:
        counted = instructions(["agentlab (tools replayed)", "bare", "bare (raw)", *[f"{ref} (tools replayed)"
                                                                       for ref in args.baseline]],
                               figures["turns"], args.baseline)
        out(f"instructions per call, counted by valgrind (cachegrind; {INSTRUCTION_RUNS[1] - INSTRUCTION_RUNS[0]} "
            "conversations beyond their set-up):")
        for name, value in counted.items():
            out(f"  {name:<26} {value / 1000:8.1f} thousand   /bare = {value / counted['bare']:.3f}")
        figures["instructions_per_call"] = {name: round(value) for name, value in counted.items()}
    if args.profile:
        profile_agentlab(runs=2 if args.quick else 20, turns=figures["turns"], out=out)
    return record("overhead", figures, out.text, args=args,
                  command=" ".join(["bench/overhead.py", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    main()
