"""The Python API refuses, at construction, arguments it could only fail on later, naming the argument."""

from __future__ import annotations

import math

import pytest

from agentlab.core.errors import ConfigError
from agentlab.core.hooks import Hooks
from agentlab.lab import scenario_loop
from agentlab.core.loop import AgentLoop
from agentlab.backend.scripted import ScenarioEngine, scripted_client
from agentlab.core.tools import ToolRegistry
from agentlab.core.trace import Trace
from agentlab.core.transitions import Limits, LoopState, Retry, decide, Failure


@pytest.fixture
def client():
    return scripted_client(ScenarioEngine.from_name("end_turn"))


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"tools": []}, "tools="),
    ({"tools": "demo"}, "tools="),
    ({"hooks": "x.json"}, "hooks="),
    ({"trace": 5}, "trace="),
    ({"limits": {"max_turns": 3}}, "limits="),
    ({"compact_threshold": 2}, "compact_threshold="),
    ({"compact_threshold": -1}, "compact_threshold="),
    ({"compact_threshold": math.nan}, "compact_threshold="),
    ({"compact_threshold": 0}, "compact_threshold="),
    ({"request_timeout": 0}, "request_timeout="),
    ({"request_timeout": math.inf}, "request_timeout="),
    ({"max_tokens": 0}, "max_tokens="),
    ({"max_tokens": 1.5}, "max_tokens="),
    ({"context_window": -5}, "context_window="),
    ({"model": 5}, "model="),
    ({"model": ""}, "model="),
    ({"system": 5}, "system="),
    ({"stream": "yes"}, "stream="),
    ({"stream": 1}, "stream="),
])
def test_agent_loop_rejects_a_bad_argument_naming_it(client, kwargs, named) -> None:
    with pytest.raises(ConfigError, match=named.replace("=", r"=\.\.\.")):
        AgentLoop(client, prompt="hi", **kwargs)


def test_agent_loop_without_a_client_names_the_client() -> None:
    with pytest.raises(ConfigError, match=r"client=\.\.\."):
        AgentLoop(None, prompt="hi")


def test_agent_loop_takes_a_trace_path_as_the_jsonl_file(client, tmp_path) -> None:
    path = tmp_path / "x.jsonl"
    loop = AgentLoop(client, prompt="hi", trace=str(path))
    assert isinstance(loop.trace, Trace) and loop.trace.path == path
    loop.run()
    loop.trace.close()
    assert Trace.load(path).events[-1].kind == "result"


def test_agent_loop_accepts_the_documented_values(client) -> None:
    loop = AgentLoop(client, prompt="hi", tools=ToolRegistry(), hooks=Hooks(), compact_threshold=1,
                     request_timeout=0.5, limits=Limits(max_turns=None, backoff_base=0))
    assert loop.run().subtype == "success"


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"max_turns": -1}, "max_turns"), ({"max_turns": 0}, "max_turns"), ({"backoff_base": -1}, "backoff_base"),
    ({"backoff_cap": math.nan}, "backoff_cap"), ({"max_api_retries": -2}, "max_api_retries"),
    ({"stop_hook_block_cap": 1.5}, "stop_hook_block_cap"), ({"fallback_model": ""}, "fallback_model"),
    ({"escalated_max_tokens": 0}, "escalated_max_tokens"),
])
def test_limits_reject_a_bound_without_meaning(kwargs, named) -> None:
    with pytest.raises(ConfigError, match=f"Limits.{named}"):
        Limits(**kwargs)


def test_many_retries_do_not_overflow_the_backoff() -> None:
    limits = Limits(max_api_retries=2000)
    state = LoopState(model="m", max_tokens=10, api_attempts=1999)
    step = decide(Failure(None, "connection_error", "refused"), state, limits)
    assert isinstance(step, Retry) and step.delay == limits.backoff_cap


def test_a_scenario_loop_passes_the_request_timeout_through() -> None:
    assert scenario_loop("end_turn", request_timeout=3).request_timeout == 3


@pytest.mark.parametrize("timeout", [math.nan, -1, 0, 1e7, math.inf, True, "30"])
def test_hooks_refuse_a_default_timeout_that_is_not_a_finite_span_up_to_a_day(timeout) -> None:
    with pytest.raises(ConfigError, match=r"Hooks\(default_timeout=\.\.\.\)"):
        Hooks(default_timeout=timeout)


def test_hooks_take_a_default_timeout_up_to_a_day() -> None:
    assert Hooks(default_timeout=86_400).default_timeout == 86_400.0
    assert Hooks(default_timeout=0.5).default_timeout == 0.5

