"""The Python API refuses, at construction, arguments it could only fail on later, naming the argument."""

from __future__ import annotations

import math
import re

import pytest

from agentlab.backend.scripted import ScenarioEngine, scripted_client
from agentlab.core.config import RunConfig
from agentlab.core.errors import ConfigError
from agentlab.core.hooks import Hooks
from agentlab.core.loop import AgentLoop
from agentlab.core.tools import ToolRegistry
from agentlab.core.trace import Trace
from agentlab.core.transitions import Failure, Limits, LoopState, Retry, decide
from agentlab.lab import RunSetup, scenario_loop


@pytest.fixture
def client():
    return scripted_client(ScenarioEngine.from_name("end_turn"))


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"tools": []}, "RunConfig(tools="),
    ({"tools": "demo"}, "RunConfig(tools="),
    ({"limits": {"max_turns": 3}}, "RunConfig(limits="),
    ({"max_tokens": 0}, "RunConfig(max_tokens="),
    ({"max_tokens": 1.5}, "RunConfig(max_tokens="),
    ({"model": 5}, "RunConfig(model="),
    ({"model": ""}, "RunConfig(model="),
    ({"system": 5}, "RunConfig(system="),
    ({"stream": "yes"}, "RunConfig(stream="),
    ({"stream": 1}, "RunConfig(stream="),
    ({"server_tools": [{"type": "web_search_20250305"}]}, "RunConfig(server_tools="),
    ({"compact_threshold": 2}, "Limits.compact_threshold"),
    ({"compact_threshold": -1}, "Limits.compact_threshold"),
    ({"compact_threshold": math.nan}, "Limits.compact_threshold"),
    ({"compact_threshold": 0}, "Limits.compact_threshold"),
    ({"request_timeout": 0}, "Limits.request_timeout"),
    ({"request_timeout": math.inf}, "Limits.request_timeout"),
    ({"context_window": -5}, "Limits.context_window"),
    ({"max_turn": 3}, "unknown run setting 'max_turn'"),
])
def test_a_run_config_refuses_a_bad_setting_naming_it(kwargs, named) -> None:
    """Each setting is checked where it lives: the request's in RunConfig, the bounds in Limits."""
    with pytest.raises(ConfigError, match=re.escape(named)):
        RunConfig.of(prompt="hi", **kwargs)


def test_a_run_config_needs_exactly_one_of_prompt_and_messages() -> None:
    with pytest.raises(ConfigError, match="exactly one of prompt= or messages="):
        RunConfig()
    with pytest.raises(ConfigError, match="exactly one of prompt= or messages="):
        RunConfig(prompt="hi", messages=[{"role": "user", "content": "hi"}])
    config = RunConfig(prompt="hi").with_overrides(messages=[{"role": "user", "content": "go on"}])
    assert config.prompt is None and config.messages == ({"role": "user", "content": "go on"},)


def test_a_bound_is_set_one_way_and_read_from_limits() -> None:
    config = RunConfig.of(prompt="hi", context_window=1000, limits=Limits(max_turns=2))
    assert config.limits == Limits(max_turns=2, context_window=1000)
    assert not {"context_window", "compact_threshold", "request_timeout"} & set(RunConfig.__dataclass_fields__)


def test_the_config_is_frozen_and_keeps_no_list_of_the_caller() -> None:
    stops = ["END"]
    config = RunConfig(prompt="hi", stop_sequences=stops, compaction="summarize")
    stops.append("MORE")
    assert config.stop_sequences == ("END",) and config.compaction == ("summarize",)
    with pytest.raises(AttributeError):
        config.model = "other"  # type: ignore[misc]


@pytest.mark.parametrize(("kwargs", "named"), [({"hooks": "x.json"}, "hooks="), ({"trace": 5}, "trace=")])
def test_agent_loop_rejects_a_bad_live_object_naming_it(client, kwargs, named) -> None:
    with pytest.raises(ConfigError, match=named.replace("=", r"=\.\.\.")):
        AgentLoop(client, RunConfig(prompt="hi"), **kwargs)


def test_agent_loop_without_a_client_or_a_config_names_it(client) -> None:
    with pytest.raises(ConfigError, match=r"AgentLoop\(client, \.\.\.\)"):
        AgentLoop(None, RunConfig(prompt="hi"))
    with pytest.raises(ConfigError, match=r"expected a RunConfig .* got str"):
        AgentLoop(client, "hi")  # type: ignore[arg-type]


def _registry_with(name: str) -> ToolRegistry:
    tools = ToolRegistry()
    tools.tool(lambda query: "found", name=name, description="a tool of the learner's")
    return tools


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"tools": _registry_with("web_search"), "server_tools": [{"type": "web_search_20250305", "name": "web_search"}]},
     "two tools are named 'web_search' (the tool registry and the server tool web_search_20250305)"),
    ({"server_tools": [{"type": "web_search_20250305", "name": "web_search"},
                       {"type": "web_search_20260209", "name": "web_search"}]},
     "two tools are named 'web_search' (the server tool web_search_20250305 and the server tool "
     "web_search_20260209)"),
])
def test_two_tools_of_one_name_are_refused_before_any_request(kwargs, said) -> None:
    """The API answers such a request with 400 "tools: Tool names must be unique.": the run is refused first."""
    with pytest.raises(ConfigError, match=re.escape(said)) as caught:
        RunConfig.of(prompt="hi", **kwargs)
    assert "\n" not in str(caught.value)


def test_a_scenario_run_with_a_duplicate_tool_is_refused_where_its_loop_is_built() -> None:
    """The demo tools are made for each loop: a server tool named like one of them is refused by ``loop()``."""
    setup = RunSetup.from_scenario("tool_use", server_tools=[{"type": "web_search_20250305", "name": "calculator"}])
    with pytest.raises(ConfigError, match="two tools are named 'calculator'"):
        setup.loop()


def test_agent_loop_takes_a_trace_path_as_the_jsonl_file(client, tmp_path) -> None:
    path = tmp_path / "x.jsonl"
    loop = AgentLoop(client, RunConfig.of(prompt="hi"), trace=str(path))
    assert isinstance(loop.trace, Trace) and loop.trace.path == path
    loop.run()
    loop.trace.close()
    assert Trace.load(path).events[-1].kind == "result"


def test_agent_loop_accepts_the_documented_values(client) -> None:
    loop = AgentLoop(client, RunConfig.of(prompt="hi", tools=ToolRegistry(), compact_threshold=1, request_timeout=0.5,
                                          limits=Limits(max_turns=None, backoff_base=0)), hooks=Hooks())
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

