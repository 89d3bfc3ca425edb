"""Per-call overhead of agentlab's loop, next to bare SDK calls and the SDK's own tool runner.

One scripted transcript of 20 tool turns and a final answer, run three ways through the same transport
(the real ``anthropic`` client on an in-process ``httpx2.MockTransport`` answered by a fresh
``ScenarioEngine``):

  agentlab     ``AgentLoop.run()``: decide(), tools, hooks check, context meter, trace events;
  bare         ``client.messages.create(**body)`` for each request body agentlab sent (taken from the
               engine's record), one after the other: no loop, no tools, the floor;
  tool-runner  ``client.beta.messages.tool_runner(...).until_done()`` with ``@beta_tool`` functions that
               call the same demo tool code.

Clients, tools and engines are built before the clock starts; only the conversation is timed. The three
run in turn (rotating which goes first) many times in one process, and the medians are compared.

    .venv/bin/python bench/overhead.py               # 40 rounds
    .venv/bin/python bench/overhead.py --profile     # plus where agentlab's time goes, by module
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from anthropic import beta_tool

from agentlab.backend.scenario import Scenario, parse_scenario
from agentlab.backend.scripted import ScenarioEngine, scripted_client
from agentlab.core.tools import TestsState, calculate, fake_weather, read_sandboxed, run_pretend_tests
from agentlab.lab import SANDBOX_DIR, scenario_loop

TURNS = 20
PROMPT = "Work through the checklist: a sum, the weather, the notes, the tests, one tool call at a time."


def build_scenario(turns: int = TURNS) -> Scenario:
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
    return parse_scenario({"name": "overhead", "description": f"{turns} tool turns", "prompt": PROMPT,
                           "tools": "demo", "steps": steps}, "<overhead>")


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

class ReplayedTools:
    """The demo tools' answers recorded in one run and handed back in order: the loop without the tools' work.

    The bare replay runs no tools at all, so ``agentlab (tools replayed)/bare`` is the loop's own overhead.
    """

    def __init__(self, real, outcomes: list) -> None:
        self.real, self.outcomes = real, list(outcomes)

    def names(self) -> list[str]:
        return self.real.names()

    def schemas(self) -> list[dict]:
        return self.real.schemas()

    def run_many(self, calls, *, max_workers: int = 4) -> list:
        return [self.outcomes.pop(0) for _ in calls]


def record_tool_outcomes(scenario: Scenario) -> list:
    loop = scenario_loop(scenario)
    recorded: list = []
    real_run_many = loop.tools.run_many

    def recording(calls, **kwargs):
        out = real_run_many(calls, **kwargs)
        recorded.extend(out)
        return out

    loop.tools.run_many = recording
    loop.run()
    return recorded


def prepare_agentlab(scenario: Scenario, outcomes: list | None = None) -> tuple[Callable[[], None], Callable[[], int]]:
    loop = scenario_loop(scenario)
    if outcomes is not None:
        loop.tools = ReplayedTools(loop.tools, outcomes)

    def check() -> int:
        assert loop.result is not None and loop.result.subtype == "success", loop.result
        assert not loop.engine.failures, loop.engine.failures
        return loop.result.requests

    return lambda: loop.run() and None, check


def prepare_bare(scenario: Scenario, bodies: list[dict]) -> tuple[Callable[[], None], Callable[[], int]]:
    engine = ScenarioEngine(scenario)
    client = scripted_client(engine)

    def conversation() -> None:
        for body in bodies:
            client.messages.create(**body)

    def check() -> int:
        assert not engine.failures, engine.failures
        assert [r.body for r in engine.message_requests] == bodies, "the replay differs from agentlab's requests"
        return len(engine.message_requests)

    return conversation, check


def prepare_runner(scenario: Scenario) -> tuple[Callable[[], None], Callable[[], int]]:
    engine = ScenarioEngine(scenario)
    client = scripted_client(engine)
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


def agentlab_bodies(scenario: Scenario) -> list[dict]:
    loop = scenario_loop(scenario)
    loop.run()
    return [r.body for r in loop.engine.message_requests]


def measure(rounds: int) -> dict[str, list[float]]:
    scenario = build_scenario()
    bodies = agentlab_bodies(scenario)
    outcomes = record_tool_outcomes(scenario)
    ways = {
        "agentlab": lambda: prepare_agentlab(scenario),
        "agentlab (tools replayed)": lambda: prepare_agentlab(scenario, outcomes),
        "bare": lambda: prepare_bare(scenario, bodies),
        "tool-runner": lambda: prepare_runner(scenario),
    }
    names = list(ways)
    for name in names:  # warm-up, and a check that each way completes the transcript
        conversation, check = ways[name]()
        conversation()
        calls = check()
        if calls != len(bodies):
            sys.exit(f"{name} made {calls} requests, agentlab made {len(bodies)}")
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate which way goes first
            conversation, check = ways[name]()
            gc.collect()
            started = time.perf_counter()
            conversation()
            times[name].append(time.perf_counter() - started)
            check()
    return times


PROFILE_POINTS = (
    ("agentlab/scripted.py", "handle", "the scripted server (ScenarioEngine.handle), inside the SDK call"),
    ("agentlab/tools.py", "run_many", "running the tools (ToolRegistry.run_many)"),
    ("agentlab/trace.py", "emit", "trace events (Trace.emit, all callers)"),
    ("agentlab/tools.py", "schemas", "tool schemas rebuilt for every request (ToolRegistry.schemas)"),
    ("agentlab/transitions.py", "decide", "decide()"),
    ("agentlab/loop.py", "_record_response", "reading the response (_record_response, its emit included)"),
    ("anthropic/_models.py", "to_dict", "SDK content blocks to dicts (BaseModel.to_dict, all callers)"),
    ("dataclasses.py", "replace", "LoopState updates (dataclasses.replace)"),
    ("agentlab/loop.py", "to_dict", "the result message (Result.to_dict)"),
)


def profile_agentlab(runs: int = 20) -> None:
    """Where AgentLoop.run() spends its time: cumulative shares of the main parts, then own time."""
    scenario = build_scenario()
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

    total = cumulative("agentlab/loop.py", "run")
    inside = cumulative("agentlab/loop.py", "_send")
    print(f"\nprofile of {runs} agentlab runs ({TURNS} tool turns each), cumulative time as a share of "
          "AgentLoop.run(), under cProfile (parts overlap):")
    print(f"  {inside / total:6.1%}  the SDK call (AgentLoop._send: SDK, transport and scripted server)")
    print(f"  {(total - inside) / total:6.1%}  everything else: agentlab's own work, tools included")
    for suffix, function, label in PROFILE_POINTS:
        print(f"  {cumulative(suffix, function) / total:6.1%}  {label}")
    own = sorted(((row[2], f"{filename.rsplit('/agentlab/', 1)[1]}:{line}({name})")
                  for (filename, line, name), row in stats.items()
                  if "/agentlab/" in filename.replace("\\", "/")), reverse=True)
    print("agentlab functions with the most own time:")
    for seconds, name in own[:8]:
        print(f"  {seconds / total:6.1%}  {name}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--profile", action="store_true", help="also profile agentlab's loop by module")
    args = parser.parse_args(argv)
    times = measure(args.rounds)
    calls = TURNS + 1
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"overhead: {TURNS} tool turns + final answer ({calls} requests), {args.rounds} rounds interleaved, "
          f"python {sys.version.split()[0]}")
    for name, seconds in medians.items():
        spread = times[name]
        print(f"  {name:<26} median {seconds * 1000:7.2f} ms per run, {seconds * 1000 / calls:6.3f} ms per call "
              f"(min {min(spread) * 1000:.2f}, max {max(spread) * 1000:.2f} ms)")
    print(f"  agentlab/bare        = {medians['agentlab'] / medians['bare']:.2f}   (goal <= 1.10; bare runs no tools)")
    print(f"  agentlab (tools replayed)/bare = {medians['agentlab (tools replayed)'] / medians['bare']:.2f}"
          "   (the loop's own overhead, tool work taken out)")
    print(f"  agentlab/tool-runner = {medians['agentlab'] / medians['tool-runner']:.2f}   (goal < 1)")
    if args.profile:
        profile_agentlab()


if __name__ == "__main__":
    main()
