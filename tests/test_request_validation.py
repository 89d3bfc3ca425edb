"""One request validator for serve, grade and observe: a request the live API refuses gets its 400
``invalid_request_error`` in the API's words (and uses up no scenario step); a request it accepts is answered."""

from __future__ import annotations

import anthropic
import pytest

from agentlab.backend.serve import ScenarioServer
from agentlab.backend.validate import request_problem
from agentlab.observatory.observe import observe_scenario
from agentlab.observatory.records import ClientOutcome

ASK = {"role": "user", "content": "What is the weather in Oslo?"}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                          "input": {"location": "Oslo"}}]}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}

REFUSED = [
    ("tool_use without its tool_result", [ASK, CALL, {"role": "user", "content": "and Lima?"}],
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each "
     "`tool_use` block must have a corresponding `tool_result` block in the next message."),
    ("tool_result with no tool_use before it", [ASK, {"role": "assistant", "content": "Let me check."}, RESULT],
     "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1. Each `tool_result` "
     "block must have a corresponding `tool_use` block in the previous message."),
    ("an empty assistant message before the last turn", [ASK, {"role": "assistant", "content": []},
                                                         {"role": "user", "content": "Please continue."}],
     "messages.1: all messages must have non-empty content except for the optional final assistant message"),
    ("an empty user message", [{"role": "user", "content": ""}],
     "messages.0: all messages must have non-empty content except for the optional final assistant message"),
    ("an empty text block", [{"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text",
                                                                                         "text": "hi"}]}],
     "messages: text content blocks must be non-empty"),
    ("a text block of whitespace", [{"role": "user", "content": [{"type": "text", "text": "  \n"}]}],
     "messages: text content blocks must contain non-whitespace text"),
    ("a prefill that ends with whitespace", [ASK, {"role": "assistant", "content": "The weather is "}],
     "messages: final assistant content cannot end with trailing whitespace"),
]


@pytest.mark.parametrize(("what", "messages", "wording"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_api_s_400_in_its_own_words_through_the_wire(what: str, messages: list, wording: str) -> None:
    with ScenarioServer("end_turn") as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=messages)
        assert refused.value.body["error"] == {"type": "invalid_request_error", "message": wording}
        # no step was used up: a valid request still gets the scenario's first step
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=[ASK])
    assert reply.stop_reason == "end_turn"
    assert [e.request.kind for e in server.exchanges] == ["invalid_request", "message"]
    assert [e.request.step for e in server.exchanges] == [None, 0]


ACCEPTED = [
    ("role:system items inside messages", [{"role": "system", "content": "Be brief."}, ASK,
                                           {"role": "system", "content": [{"type": "text", "text": "reminder"}]}]),
    ("a tool round trip", [ASK, CALL, RESULT]),
    ("results first, then text in the same message", [ASK, CALL, {"role": "user", "content": [
        *RESULT["content"], {"type": "text", "text": "Also Lima."}]}]),
    ("consecutive user messages", [ASK, {"role": "user", "content": "And Lima?"}]),
    ("a conversation that starts with the assistant", [{"role": "assistant", "content": "Hello."}, ASK]),
    ("an empty final assistant message", [ASK, {"role": "assistant", "content": ""}]),
    ("a paused tool call sent back as the final assistant message", [ASK, CALL]),
    ("tool calls told as text", [ASK, {"role": "assistant", "content": "Calling tools:\n[{'name': 'get_weather', "
                                                                       "'arguments': {'location': 'Oslo'}}]"},
                                 {"role": "user", "content": "Observation:\nsunny"}]),
    ("a system-held tool result between the call and the result", [ASK, CALL, {"role": "system",
                                                                               "content": "note"}, RESULT]),
]


@pytest.mark.parametrize(("what", "messages"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_what_the_api_accepts_is_answered(what: str, messages: list) -> None:
    # a final assistant message is a prefill, which the 4.6 generation refuses (data/models.yaml): sent to a
    # model that takes one
    model = "claude-haiku-4-5" if messages[-1]["role"] == "assistant" else "claude-sonnet-4-6"
    with ScenarioServer("end_turn") as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        reply = client.messages.create(model=model, max_tokens=100, messages=messages,
                                       extra_body={"output_config": {"effort": "high"}, "metadata": {}})
    assert reply.stop_reason == "end_turn" and server.exchanges[0].request.step == 0


PREFILLS = [a for a in ACCEPTED if a[1][-1]["role"] == "assistant"]


@pytest.mark.parametrize(("what", "messages"), PREFILLS, ids=[a[0] for a in PREFILLS])
@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "claude-opus-4-6", "claude-sonnet-5"])
def test_a_prefill_to_a_model_that_takes_none_is_the_api_s_400(what: str, messages: list, model: str) -> None:
    with ScenarioServer("end_turn") as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as error:
            client.messages.create(model=model, max_tokens=100, messages=messages)
        reply = client.messages.create(model=model, max_tokens=100, messages=[ASK])  # no step was used up
    assert error.value.body["error"]["message"] == ("This model does not support assistant message prefill. "
                                                    "The conversation must end with a user message.")
    assert reply.stop_reason == "end_turn" and server.exchanges[1].request.step == 0


def test_observe_and_grade_records_see_the_same_400() -> None:
    """observe (and grade, which observes) serve through the same engine: the refused request is in the record
    as the API's 400, and the next request gets the first step."""
    def runner(scenario, base_url, workdir, timeout) -> ClientOutcome:
        client = anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0)
        try:
            client.messages.create(model="claude-sonnet-4-6", max_tokens=100,
                                   messages=[ASK, CALL, {"role": "user", "content": "and Lima?"}])
        except anthropic.BadRequestError:
            pass
        client.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=[ASK])
        return ClientOutcome({"exit_code": 0})

    record = observe_scenario("hand", "end_turn", version="1", runner=runner)
    first, second = record["requests"]
    assert first["reply"] == {"status": 400, "error": "invalid_request_error"} and first["step"] is None
    assert "`tool_use` ids were found without `tool_result` blocks" in first["error"]
    assert second["step"] == 0 and second["reply"]["stop_reason"] == "end_turn"


def test_the_validator_is_a_plain_function_too() -> None:
    assert request_problem({"model": "m", "max_tokens": 5, "messages": [ASK, CALL, RESULT]}) is None
    assert request_problem({"model": "m", "messages": [ASK]}) == "max_tokens: Field required"
    assert request_problem({"model": "m", "messages": [ASK]}, count_tokens=True) is None


def test_grade_notes_a_logged_request_the_api_would_refuse() -> None:
    """Requests logged elsewhere (``record_from_requests``) go through the same validator."""
    from agentlab.grading.command import grade_record, record_from_requests

    record = record_from_requests([
        {"body": {"model": "m", "max_tokens": 100, "messages": [ASK]},
         "reply": {"status": 200, "stop_reason": "tool_use", "blocks": ["tool_use"]}},
        {"body": {"model": "m", "max_tokens": 100, "messages": [ASK, CALL, {"role": "user", "content": "and Lima?"}]}},
    ], "tool_use")
    assert "api_would_refuse" not in record["requests"][0]
    assert record["requests"][1]["api_would_refuse"].startswith("messages.1: `tool_use` ids were found without")
    refused = record["requests"][1]["api_would_refuse"]
    assert grade_record(record).notes == [f"request 2 was answered, but the live API refuses it: {refused}"]


def test_a_thread_continued_by_the_sdk_tool_runner_is_answered() -> None:
    """The SDK's tool runner keeps the history in a server-held thread: its second request sends only the tool
    result, with ``thread: {"type": "continue", ...}`` and no tools. The API accepts that and answers from the
    whole conversation; the in-process transport holds threads as ``agentlab serve`` does, so the scenario sees
    the tool offered and the result after its call."""
    from agentlab.backend.scenario import load_scenario
    from agentlab.backend.scripted import ScenarioEngine, scripted_client
    from agentlab.backend.validate import request_problem

    engine = ScenarioEngine(load_scenario("tool_use"))

    @anthropic.beta_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression and return the result."""
        return "6912"

    runner = scripted_client(engine).beta.messages.tool_runner(
        model="claude-sonnet-4-6", max_tokens=1024, tools=[calculator],
        messages=[{"role": "user", "content": "What is 1234 + 5678?"}])
    final = runner.until_done()
    assert final.stop_reason == "end_turn" and not engine.failures and len(engine.message_requests) == 2
    whole = engine.message_requests[1].body
    assert [m["role"] for m in whole["messages"]] == ["user", "assistant", "user"] and whole["tools"]
    sent = {"model": "m", "max_tokens": 10, "thread": {"type": "continue", "previous_message_id": "msg_1"},
            "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                       "content": "6912"}]}]}
    assert request_problem(sent) is None
    assert "unexpected `tool_use_id`" in str(request_problem({**sent, "thread": {"type": "create"}}))


CALCULATOR = {"name": "calculator", "description": "Evaluate arithmetic.",
              "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}}}}
SAME_NAMES = [
    ("a registry tool and a server tool", [CALCULATOR, {"type": "web_search_20250305", "name": "calculator"}]),
    ("two server tools", [{"type": "web_search_20250305", "name": "web_search"},
                          {"type": "web_search_20250305", "name": "web_search"}]),
    ("two client tools", [CALCULATOR, {**CALCULATOR, "description": "Another one."}]),
]


@pytest.mark.parametrize(("what", "tools"), SAME_NAMES, ids=[s[0] for s in SAME_NAMES])
def test_two_tools_of_one_name_get_the_api_s_400_through_the_wire_and_in_process(what: str, tools: list) -> None:
    from agentlab.backend.scripted import ScenarioEngine, scripted_client

    from agentlab.backend.scenario import load_scenario

    refused = []
    with ScenarioServer("end_turn") as server:
        over_http = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        in_process = scripted_client(ScenarioEngine(load_scenario("end_turn")))
        for client in (over_http, in_process):
            with pytest.raises(anthropic.BadRequestError) as caught:
                client.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=[ASK], tools=tools)
            refused.append((caught.value.status_code, caught.value.body["error"]))
    assert refused == [(400, {"type": "invalid_request_error", "message": "tools: Tool names must be unique."})] * 2
    assert [e.request.kind for e in server.exchanges] == ["invalid_request"]


def test_tools_of_different_names_are_answered() -> None:
    assert request_problem({"model": "m", "max_tokens": 10, "messages": [ASK],
                            "tools": [CALCULATOR, {"type": "web_search_20250305", "name": "web_search"}]}) is None
