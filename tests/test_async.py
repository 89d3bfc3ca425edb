"""The same loop with an AsyncAnthropic client: ``await loop.arun()`` and ``async for ... in loop.asteps()``.

Every scenario runs twice through the real SDK on the scripted backend, once with ``anthropic.Anthropic``
and once with ``anthropic.AsyncAnthropic``; the traces (payloads, in order) and the results must be equal.
Hooks given as commands run as asyncio subprocesses in the async run.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import anthropic
import pytest

from agentlab.backend.scenario import load_scenario, parse_scenario, scenario_names
from agentlab.backend.scripted import ScenarioEngine, scripted_async_client
from agentlab.core.config import RunConfig
from agentlab.core.errors import ConfigError
from agentlab.core.hooks import Hooks
from agentlab.core.loop import AgentLoop
from agentlab.core.wire import needs_streaming
from agentlab.lab import scenario_loop

THINKING_AND_COST = ["thinking_tool_use", "thinking_max_tokens", "redacted_thinking", "what_a_run_costs"]


def payloads(loop) -> list[tuple[str, int, dict]]:
    return [(e.kind, e.call, e.data) for e in loop.trace]


def wire(loop) -> list[tuple[object, bool, str]]:
    """What the scripted backend received: every request body, whether it streamed, and what it answered."""
    return [(r.body, r.stream, r.kind) for r in loop.engine.requests]


def run_both(name, **overrides):
    sync_loop = scenario_loop(name, **overrides)
    sync_result = sync_loop.run()
    async_loop = scenario_loop(name, asynchronous=True, **overrides)
    assert isinstance(async_loop.client, anthropic.AsyncAnthropic)
    async_result = asyncio.run(async_loop.arun())
    return sync_loop, sync_result, async_loop, async_result


@pytest.mark.parametrize("name", scenario_names())
def test_every_scenario_gives_the_same_trace_sync_and_async(name):
    sync_loop, sync_result, async_loop, async_result = run_both(name)
    assert payloads(async_loop) == payloads(sync_loop)
    assert async_result.to_dict(with_messages=True) == sync_result.to_dict(with_messages=True)
    assert wire(async_loop) == wire(sync_loop)   # the same requests on the wire, streamed alike


@pytest.mark.parametrize("name", ["tour", "max_tokens_continue", "pause_turn", "api_errors", *THINKING_AND_COST])
def test_streaming_async_matches_sync(name):
    sync_loop, sync_result, async_loop, async_result = run_both(name, stream=True)
    assert payloads(async_loop) == payloads(sync_loop)
    assert async_result.to_dict(with_messages=True) == sync_result.to_dict(with_messages=True)
    assert wire(async_loop) == wire(sync_loop)
    assert all(stream for _, stream, _ in wire(async_loop))


def test_thinking_and_cost_scenarios_async_carry_thinking_cache_and_cost():
    """Thinking blocks go back unchanged, breakpoints are placed and every call is priced, as in the sync run."""
    for name in THINKING_AND_COST:
        _, sync_result, async_loop, async_result = run_both(name)
        assert async_loop.engine.failures == [], (name, async_loop.engine.failures)
        assert async_result.cost_usd is not None and async_result.cost_usd == sync_result.cost_usd > 0
        bodies = [r.body for r in async_loop.engine.requests if r.body is not None]
        assert bodies and all(any("cache_control" in json.dumps(m) for m in b["messages"]) for b in bodies), name
    tool_use = run_both("thinking_tool_use")[2]
    first = [e.data["content"] for e in tool_use.trace if e.kind == "response"][0]
    second = [r.body for r in tool_use.engine.requests][1]
    assert first[0]["type"] == "thinking" and second["messages"][1] == {"role": "assistant", "content": first}


def test_async_caching_off_and_an_unpriced_model_match_the_sync_run():
    for overrides in ({"cache": False}, {"model": "claude-scripted-unpriced"}, {"thinking": 1024, "max_tokens": 2048}):
        sync_loop, sync_result, async_loop, async_result = run_both("what_a_run_costs", **overrides)
        assert payloads(async_loop) == payloads(sync_loop), overrides
        assert wire(async_loop) == wire(sync_loop), overrides
        assert async_result.to_dict() == sync_result.to_dict(), overrides


def test_async_escalation_to_64000_streams_as_the_sdk_requires():
    """AsyncAnthropic refuses a large non-streaming request too; the async loop streams it, like the sync one."""
    client = scripted_async_client(ScenarioEngine(load_scenario("end_turn")))
    assert needs_streaming(client, {"model": "claude-sonnet-4-6", "max_tokens": 64_000})
    assert not needs_streaming(client, {"model": "claude-sonnet-4-6", "max_tokens": 21_333})
    with pytest.raises(ValueError, match="Streaming is required"):
        asyncio.run(client.messages.create(model="claude-sonnet-4-6", max_tokens=64_000,
                                           messages=[{"role": "user", "content": "hi"}]))
    sync_loop, sync_result, async_loop, async_result = run_both("max_tokens_escalate")
    assert [r.stream for r in async_loop.engine.requests] == [False, True]
    assert [e.data["stream"] for e in async_loop.trace if e.kind == "request"] == [False, True]
    assert wire(async_loop) == wire(sync_loop)
    assert async_result.to_dict(with_messages=True) == sync_result.to_dict(with_messages=True)
    engine = ScenarioEngine(load_scenario("end_turn"))
    loop = AgentLoop(scripted_async_client(engine), RunConfig.of(prompt="hi", max_tokens=64_000))
    assert asyncio.run(loop.arun()).subtype == "success" and engine.requests[-1].stream is True


def test_async_thinking_survives_a_compaction_like_the_sync_loop():
    steps = []
    for i, name in enumerate(["building_manual.txt", "handbook.txt", "it_guide.txt", "building_manual.txt"]):
        steps.append({"content": [{"type": "thinking", "thinking": f"Step {i}: read {name} next."},
                                  {"type": "tool_use", "id": f"toolu_read_{i}", "name": "read_file",
                                   "input": {"path": name}}], "stop_reason": "tool_use"})
    steps.append({"content": [{"type": "thinking", "thinking": "Enough read."},
                              {"type": "text", "text": "Done."}], "stop_reason": "end_turn"})
    sc = parse_scenario({"name": "thinking_compaction", "description": "thinking across a compaction",
                         "tools": "demo", "max_tokens": 4096, "thinking": 2048, "context_window": 4000,
                         "compact_threshold": 0.7, "compaction": "clear_tool_results", "steps": steps},
                        "thinking_compaction.yaml")
    for stream in (False, True):
        sync_loop, sync_result, async_loop, async_result = run_both(sc, stream=stream)
        assert async_loop.engine.failures == []
        assert async_result.compactions >= 1 and async_result.subtype == "success"
        assert payloads(async_loop) == payloads(sync_loop)
        assert wire(async_loop) == wire(sync_loop)


def test_asteps_yields_one_report_per_step_like_iterating_the_sync_loop():
    sync_reports = list(scenario_loop("tour"))

    async def collect():
        loop = scenario_loop("tour", asynchronous=True)
        return [report async for report in loop.asteps()], loop

    async_reports, loop = asyncio.run(collect())
    assert [r.transition for r in async_reports] == [r.transition for r in sync_reports]
    assert [r.done for r in async_reports] == [r.done for r in sync_reports]
    assert async_reports[-1].done and loop.result is not None


def test_waits_go_through_the_async_sleep():
    waited: list[float] = []

    async def asleep(seconds: float) -> None:
        waited.append(seconds)

    loop = scenario_loop("api_errors", asynchronous=True, asleep=asleep)
    asyncio.run(loop.arun())
    retries = [e.data["delay_s"] for e in loop.trace if e.kind == "retry"]
    assert retries and [round(w, 3) for w in waited] == [d for d in retries if d]


def test_command_hooks_run_as_asyncio_subprocesses(tmp_path: Path):
    script = tmp_path / "block_once.py"
    script.write_text(
        "import json, os, sys\n"
        "payload = json.load(sys.stdin)\n"
        f"flag = {str(tmp_path / 'blocked')!r}\n"
        "if payload['stop_hook_active'] or os.path.exists(flag):\n"
        "    print('{}')\n"
        "else:\n"
        "    open(flag, 'w').close()\n"
        "    print(json.dumps({'decision': 'block', 'reason': 'run the tests first'}))\n")
    settings = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": f"{sys.executable} {script}"}]}]}}
    loop = scenario_loop("stop_hook", asynchronous=True, settings=settings)  # its own Stop hook blocks once too
    result = asyncio.run(loop.arun())
    commands = [e.data for e in loop.trace if e.kind == "hook" and e.data["source"] == "command"]
    assert [h["decision"] for h in commands] == ["block", None]
    assert all(h["exit_code"] == 0 for h in commands)
    assert result.subtype == "success" and result.stop_hook_blocks == 1


def test_async_hooks_answer_as_the_sync_ones(tmp_path: Path):
    settings = {"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": "echo 'not json {' ; exit 3"},
        {"type": "command", "command": "echo 'stop here' >&2; exit 2"},
    ]}]}}
    hooks = Hooks(settings, cwd=str(tmp_path))
    sync = hooks.run("Stop", {"stop_hook_active": False})
    async_ = asyncio.run(hooks.arun("Stop", {"stop_hook_active": False}))
    strip = [dict(vars(r), duration_ms=0) for r in sync.runs], [dict(vars(r), duration_ms=0) for r in async_.runs]
    assert strip[0] == strip[1]
    assert async_.blocked and async_.reason == sync.reason == "stop here"


def test_async_hook_timeout_kills_the_command(tmp_path: Path):
    hooks = Hooks({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "echo started; sleep 30",
                                                  "timeout": 0.5}]}]}}, cwd=str(tmp_path))
    outcome = asyncio.run(hooks.arun("Stop", {"stop_hook_active": False}))
    (run,) = outcome.runs
    assert run.timed_out and "timed out after 0.5 s" in str(run.error)
    assert not outcome.blocked


def test_the_wrong_driver_is_a_clear_error():
    async_loop = scenario_loop("end_turn", asynchronous=True)
    with pytest.raises(ConfigError, match="AsyncAnthropic client: use `await loop.astep"):
        async_loop.run()
    sync_loop = scenario_loop("end_turn")
    with pytest.raises(ConfigError, match="sync Anthropic client"):
        asyncio.run(sync_loop.arun())


def test_async_trace_file_is_the_same_jsonl(tmp_path: Path):
    scenario_loop("tour", trace=tmp_path / "sync.jsonl").run()
    asyncio.run(scenario_loop("tour", trace=tmp_path / "async.jsonl", asynchronous=True).arun())

    def lines(path: Path) -> list[dict]:
        return [{k: v for k, v in json.loads(line).items() if k != "wall_ms"}
                for line in path.read_text().splitlines()]

    assert lines(tmp_path / "async.jsonl") == lines(tmp_path / "sync.jsonl")


@pytest.mark.parametrize("name", ["thinking_tool_use", "redacted_thinking"])
def test_async_loop_streams_thinking_over_http_like_the_sync_loop(name):
    """Through ``agentlab serve`` over real HTTP: the AsyncAnthropic loop streams (thinking_delta and
    signature_delta on the wire), sends the same requests and ends with the same trace as the sync loop."""
    from agentlab.backend.serve import ScenarioServer
    from agentlab.lab import RunSetup

    setup = RunSetup.from_scenario(name, stream=True)
    runs = []
    for asynchronous in (False, True):
        with ScenarioServer(load_scenario(name)) as server:
            http = setup.with_overrides(base_url=server.base_url)
            loop = http.loop(asynchronous=asynchronous)
            result = asyncio.run(loop.arun()) if asynchronous else loop.run()
            bodies = [(x.request.body, x.request.stream) for x in server.exchanges]
            raw = "".join(x.reply.body.decode() for x in server.exchanges)
        assert isinstance(loop.client, anthropic.AsyncAnthropic) == asynchronous
        assert '"signature_delta"' in raw or '"redacted_thinking"' in raw
        runs.append((payloads(loop), result.to_dict(with_messages=True), bodies))
    assert runs[1] == runs[0]
