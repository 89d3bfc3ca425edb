"""The scripted model answers what the live API could send *this* request: only tools the request offers,
``tool_choice`` honoured in its four forms, thinking blocks only when thinking is enabled, server tool blocks
only when the server tool is offered. Each reply is checked through the wire, from the real SDK client."""

from __future__ import annotations

from typing import Any

import anthropic

from agentlab.backend.scripted import ScenarioEngine
from agentlab.backend.scenario import load_scenario, parse_scenario
from agentlab.backend.serve import ScenarioServer
from agentlab.observatory.observe import lenient

ASK = [{"role": "user", "content": "What is 1234 + 5678?"}]


def tool(name: str, field: str = "expression") -> dict[str, Any]:
    return {"name": name, "description": f"the {name} tool",
            "input_schema": {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}}


CALCULATOR, WEATHER, FINAL = tool("calculator"), tool("get_weather", "location"), tool("final_answer", "answer")


def ask(scenario: Any, **kwargs: Any) -> tuple[anthropic.types.Message, Any]:
    """One request to a fresh server for ``scenario``; the reply and what the server recorded."""
    if isinstance(scenario, str):  # as grade serves it: a step's expectations are recorded, not answered with 400
        scenario = ScenarioEngine(lenient(load_scenario(scenario)))
    with ScenarioServer(scenario) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=4096, messages=ASK, **kwargs)
    return reply, server.exchanges[0].request


def kinds(reply: anthropic.types.Message) -> list[str]:
    return [b.type for b in reply.content]


def test_a_tool_the_request_does_not_offer_is_never_called() -> None:
    reply, seen = ask("tool_use")  # the scripted model calls the calculator; no tools offered
    assert kinds(reply) == ["text"] and reply.stop_reason == "end_turn"
    assert seen.not_reached == ["the scripted model calls calculator, which the request does not offer "
                                "(it offers no tools)"]
    reply, seen = ask("tool_use", tools=[WEATHER])
    assert "tool_use" not in kinds(reply) and "it offers get_weather" in seen.not_reached[0]


def test_an_offered_tool_is_called_as_scripted() -> None:
    reply, seen = ask("tool_use", tools=[WEATHER, CALCULATOR])
    assert kinds(reply) == ["text", "tool_use"] and reply.content[1].name == "calculator"
    assert reply.stop_reason == "tool_use" and seen.not_reached is None


def test_an_interchangeable_call_goes_to_an_offered_tool() -> None:
    scenario = parse_scenario({"name": "any_tool", "description": "any tool will do", "steps": [
        {"content": [{"type": "tool_use", "name": "get_weather", "input": {"location": "Oslo"},
                      "interchangeable": True}], "stop_reason": "tool_use"}]}, "any_tool.yaml")
    reply, seen = ask(ScenarioEngine(scenario), tools=[tool("lookup", "query")])
    assert kinds(reply) == ["tool_use"] and reply.content[0].name == "lookup"
    assert reply.content[0].input == {"query": ""} and seen.not_reached is None


def test_tool_choice_none_gets_no_tool_call() -> None:
    reply, seen = ask("tool_use", tools=[CALCULATOR], tool_choice={"type": "none"})
    assert kinds(reply) == ["text"] and reply.stop_reason == "end_turn"
    assert seen.not_reached == ["tool_choice none: the live API calls no tool"]


def test_tool_choice_auto_is_the_script() -> None:
    reply, seen = ask("tool_use", tools=[CALCULATOR], tool_choice={"type": "auto"})
    assert kinds(reply) == ["text", "tool_use"] and seen.not_reached is None


def test_tool_choice_any_turns_a_text_answer_into_a_tool_call() -> None:
    reply, seen = ask("end_turn", tools=[CALCULATOR, FINAL], tool_choice={"type": "any"})
    assert kinds(reply) == ["tool_use"] and reply.stop_reason == "tool_use"
    assert reply.content[0].name == "final_answer" and reply.content[0].input["answer"]
    assert "tool_choice any" in seen.not_reached[0]
    reply, _ = ask("tool_use", tools=[CALCULATOR], tool_choice={"type": "any"})  # already a call: as scripted
    assert kinds(reply) == ["text", "tool_use"]


def test_tool_choice_tool_calls_that_tool() -> None:
    reply, seen = ask("tool_use", tools=[CALCULATOR, WEATHER], tool_choice={"type": "tool", "name": "get_weather"})
    assert kinds(reply) == ["tool_use"] and reply.content[0].name == "get_weather"
    assert reply.stop_reason == "tool_use" and seen.not_reached
    reply, _ = ask("tool_use", tools=[CALCULATOR, WEATHER], tool_choice={"type": "tool", "name": "calculator"})
    assert [b.name for b in reply.content if b.type == "tool_use"] == ["calculator"]


def test_thinking_blocks_only_when_the_request_enables_thinking() -> None:
    reply, seen = ask("thinking_tool_use", tools=[CALCULATOR])
    assert kinds(reply) == ["text", "tool_use"]
    assert seen.not_reached == ["the request does not enable thinking, so the live API sends no thinking blocks"]
    reply, seen = ask("thinking_tool_use", tools=[CALCULATOR], thinking={"type": "enabled", "budget_tokens": 2048})
    assert kinds(reply) == ["thinking", "text", "tool_use"] and seen.not_reached is None


def test_server_tool_blocks_only_when_the_server_tool_is_offered() -> None:
    reply, seen = ask("pause_turn")
    assert kinds(reply) == ["text"] and reply.stop_reason == "end_turn"
    assert "server tool web_search, which the request does not offer" in seen.not_reached[0]
    reply, seen = ask("pause_turn", tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}])
    assert kinds(reply) == ["text", "server_tool_use"] and reply.stop_reason == "pause_turn"


BASH = tool("Bash", "command")


def test_a_client_with_tools_of_its_own_gets_the_scenario_s_stand_in_call() -> None:
    """Claude Code offers Bash, not the demo tools: a demo-tool scenario stands a Bash command in for each call."""
    reply, seen = ask("tool_use", tools=[BASH, tool("Read", "file_path")])
    assert kinds(reply) == ["text", "tool_use"] and reply.stop_reason == "tool_use" and seen.not_reached is None
    assert reply.content[1].name == "Bash"
    assert reply.content[1].input == {"command": "python3 -c 'print(1234 + 5678)'",
                                      "description": "Calculate 1234 + 5678"}
    reply, _ = ask("tool_use", tools=[BASH, CALCULATOR])  # the scripted tool offered: the script itself
    assert reply.content[1].name == "calculator"


def test_a_search_result_after_a_pause_is_not_sent_to_a_client_that_never_offered_the_search() -> None:
    """The tour pauses a web search and shows its result in the next step: a client that never offered web_search
    gets neither the pause nor, in the next reply, the search result (the live API could send neither)."""
    from agentlab.backend.offered import fit_reply

    later = [{"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
             {"type": "text", "text": "Mild weather."}]
    request = {"model": "claude-sonnet-4-6", "max_tokens": 100, "messages": [{"role": "user", "content": "Go."}]}
    content, stop, why = fit_reply(later, "end_turn", request)
    assert [b["type"] for b in content] == ["text"] and stop == "end_turn"
    assert why == ["the scripted model shows a web_search_tool_result block of the server tool web_search, which "
                   "the request does not offer"]
    offered = {**request, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    assert [b["type"] for b in fit_reply(later, "end_turn", offered)[0]] == ["web_search_tool_result", "text"]
