"""The scripted server serves a scenario's replies as the live API could send them to the request it answers,
and otherwise as written: a forced tool choice does not turn a refusal, a cut-off answer or a full window into
a tool call; a stop sequence stops only a request that set it; a field named in a 400 is one the request sent;
the limits are those of the model the request asks for (data/models.yaml); a scenario at fault is answered
as the server's error, never as the client's. Each driven on the wire with the real ``anthropic`` client."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import pytest

from agentlab.backend.models import model_limits
from agentlab.backend.scenario import load_scenario, parse_scenario
from agentlab.backend.scripted import ScenarioEngine
from agentlab.backend.serve import ScenarioServer
from agentlab.observatory.observe import lenient
from agentlab.observatory.records import ClientOutcome, build_record

ASK = [{"role": "user", "content": "Explain the CAP theorem in depth."}]
FINAL = {"name": "final_answer", "description": "Give the final answer.",
         "input_schema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}


def served(scenario: Any) -> ScenarioServer:
    """As grade and observe serve it: the steps' ``expect`` not enforced."""
    sc = scenario if not isinstance(scenario, str) else load_scenario(scenario)
    return ScenarioServer(ScenarioEngine(lenient(sc)))


def client(server: ScenarioServer) -> anthropic.Anthropic:
    # a timeout of its own: the SDK asks for streaming above ~21k max_tokens with its default timeout
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0, timeout=60)


def one_step(**reply: Any) -> Any:
    return parse_scenario({"description": "one reply", "steps": [reply]}, "inline")


# -- a forced tool choice ---------------------------------------------------------------------------------------

ENDINGS = [
    {"content": [], "stop_reason": "refusal",
     "stop_details": {"type": "refusal", "category": "cyber", "explanation": "The request could enable cyber harm."}},
    {"content": [{"type": "text", "text": "The CAP theorem says a distributed store can"}],
     "stop_reason": "max_tokens"},
    {"content": [{"type": "text", "text": "Cairo is next, and then"}], "stop_reason": "model_context_window_exceeded",
     "usage": {"fills_window": True}},
]


@pytest.mark.parametrize("ending", ENDINGS, ids=[e["stop_reason"] for e in ENDINGS])
@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "final_answer"}])
def test_a_forced_tool_choice_does_not_rewrite_a_reply_that_ends_otherwise(ending: dict, choice: dict) -> None:
    with served(one_step(**ending)) as server:
        reply = client(server).messages.create(model="claude-sonnet-4-6", max_tokens=256, messages=ASK,
                                               tools=[FINAL], tool_choice=choice)
    assert reply.stop_reason == ending["stop_reason"]
    assert [b.type for b in reply.content] == [b["type"] for b in ending["content"]]
    assert not any(b.type == "tool_use" for b in reply.content)
    assert server.engine.requests[0].not_reached is None and server.engine.requests[0].final_answer_call is None


def test_a_finished_answer_under_tool_choice_any_is_a_final_answer_call_and_says_so() -> None:
    with served("end_turn") as server:
        reply = client(server).messages.create(model="claude-sonnet-4-6", max_tokens=256, messages=ASK,
                                               tools=[FINAL], tool_choice={"type": "any"})
    assert reply.stop_reason == "tool_use" and [b.name for b in reply.content] == ["final_answer"]
    assert server.engine.requests[0].final_answer_call == "final_answer"


# -- a stop sequence -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("sequences", "stopped"), [(None, False), (["STOP"], False), (["END"], True),
                                                    (["STOP", "END"], True)])
@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_stops_only_a_request_that_set_it(sequences: list | None, stopped: bool,
                                                          stream: bool) -> None:
    extra = {"stop_sequences": sequences} if sequences is not None else {}
    with served("stop_sequence") as server:
        sdk = client(server)
        if stream:
            with sdk.messages.stream(model="claude-sonnet-4-6", max_tokens=256, messages=ASK, **extra) as s:
                reply = s.get_final_message()
        else:
            reply = sdk.messages.create(model="claude-sonnet-4-6", max_tokens=256, messages=ASK, **extra)
    text = "".join(b.text for b in reply.content if b.type == "text")
    if stopped:
        assert (reply.stop_reason, reply.stop_sequence, text) == ("stop_sequence", "END", "one two three ")
        assert server.engine.requests[0].not_reached is None
    else:  # the model writes END and goes on to the end of its turn
        assert (reply.stop_reason, reply.stop_sequence, text) == ("end_turn", None, "one two three END")
        assert "does not set the stop sequence 'END'" in server.engine.requests[0].not_reached[0]


# -- a field the request sent ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "named"), [
    ({"system": "Be brief."}, "system"),
    ({"system": "Be brief.", "tools": [FINAL], "stop_sequences": ["END"]}, "stop_sequences"),
    ({"tools": [FINAL], "thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048}, "thinking"),
])
def test_an_unsupported_field_is_one_the_request_sent(extra: dict, named: str) -> None:
    with served("unsupported_field") as server:
        with pytest.raises(anthropic.BadRequestError) as error:
            client(server).messages.create(**{"model": "claude-sonnet-4-6", "max_tokens": 256, "messages": ASK,
                                              **extra})
    assert error.value.body["error"]["message"] == f"{named}: Extra inputs are not permitted"


def test_a_request_of_only_the_required_fields_has_nothing_to_refuse() -> None:
    with served("unsupported_field") as server:
        reply = client(server).messages.create(model="claude-sonnet-4-6", max_tokens=256, messages=ASK)
    assert reply.stop_reason == "end_turn" and reply.content[0].text == "Hello!"


# -- the requested model's limits -------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "claude-haiku-4-5", "claude-3-haiku-20240307"])
def test_an_overflow_quotes_the_requested_model_s_window(model: str) -> None:
    window = model_limits(model).context_window
    with served("prompt_too_long") as server:
        sdk = client(server)
        for _ in range(2):
            sdk.messages.create(model=model, max_tokens=256, messages=ASK)
        with pytest.raises(anthropic.BadRequestError) as error:
            sdk.messages.create(model=model, max_tokens=256, messages=ASK)
    said = error.value.body["error"]["message"]
    assert said == f"prompt is too long: {window + window // 4} tokens > {window} maximum"


@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "claude-haiku-4-5"])
def test_a_full_window_stop_fills_the_requested_model_s_window(model: str) -> None:
    window = model_limits(model).context_window
    with served("context_window_exceeded") as server:
        sdk = client(server)
        replies = [sdk.messages.create(model=model, max_tokens=256, messages=ASK) for _ in range(4)]
    assert replies[3].stop_reason == "model_context_window_exceeded"
    usage = replies[3].usage
    assert usage.input_tokens + usage.output_tokens == window and usage.output_tokens < 20


def test_a_request_larger_than_the_requested_model_s_window_is_too_long() -> None:
    long = [{"role": "user", "content": "word " * 220_000}]  # about 275,000 tokens: over 200k, within 1M
    with served("end_turn") as server:
        sdk = client(server)
        with pytest.raises(anthropic.BadRequestError) as error:
            sdk.messages.create(model="claude-haiku-4-5", max_tokens=256, messages=long)
        reply = sdk.messages.create(model="claude-sonnet-4-6", max_tokens=256, messages=long)
    assert error.value.body["error"]["message"].startswith("prompt is too long: ")
    assert error.value.body["error"]["message"].endswith(" tokens > 200000 maximum")
    assert reply.stop_reason == "end_turn"


@pytest.mark.parametrize(("model", "ceiling"), [("claude-haiku-4-5", 64000), ("claude-sonnet-4-6", 128000),
                                                ("claude-3-haiku-20240307", 4096)])
def test_max_tokens_above_the_requested_model_s_ceiling_is_the_api_s_400_in_any_scenario(model: str,
                                                                                         ceiling: int) -> None:
    with served("end_turn") as server:
        sdk = client(server)
        with pytest.raises(anthropic.BadRequestError) as error:
            sdk.messages.create(model=model, max_tokens=ceiling + 1, messages=ASK)
        reply = sdk.messages.create(model=model, max_tokens=ceiling, messages=ASK)  # no step was used up
    assert error.value.body["error"]["message"] == (
        f"max_tokens: {ceiling + 1} > {ceiling}, which is the maximum allowed number of output tokens for {model}")
    assert reply.stop_reason == "end_turn" and server.engine.requests[1].step == 0


@pytest.mark.parametrize(("model", "escalated"), [("claude-sonnet-4-6", 200_000), ("claude-3-haiku-20240307", 64000),
                                                  ("claude-haiku-4-5", 100_000)])
def test_max_tokens_clamp_clamps_whatever_model_the_client_asks_for(model: str, escalated: int) -> None:
    ceiling = model_limits(model).max_output
    with served("max_tokens_clamp") as server:
        sdk = client(server)
        assert sdk.messages.create(model=model, max_tokens=256, messages=ASK).stop_reason == "max_tokens"
        with pytest.raises(anthropic.BadRequestError) as error:
            sdk.messages.create(model=model, max_tokens=escalated, messages=ASK)
        with sdk.messages.stream(model=model, max_tokens=ceiling, messages=ASK) as stream:
            last = stream.get_final_message()
    assert f"max_tokens: {escalated} > {ceiling}, which is the maximum" in error.value.body["error"]["message"]
    assert last.stop_reason == "end_turn"


# -- the prefill the model refuses ------------------------------------------------------------------------------

def test_a_paused_turn_sent_back_is_no_prefill() -> None:
    with served("pause_turn") as server:
        sdk = client(server)
        tools = [dict(t) for t in load_scenario("pause_turn").server_tools]
        first = sdk.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=ASK, tools=tools)
        assert first.stop_reason == "pause_turn"
        again = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]}]
        second = sdk.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=again, tools=tools)
    assert server.engine.requests[1].status == 200 and second.stop_reason is not None


# -- the scenario at fault -------------------------------------------------------------------------------------

def test_a_scenario_whose_usage_disagrees_is_the_server_s_error_and_the_record_says_so() -> None:
    broken = one_step(content=[{"type": "text", "text": "Hi."}], usage={"input_tokens": 90_000})
    with served(broken) as server:
        sdk = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=2)
        with pytest.raises(anthropic.InternalServerError) as error:
            sdk.messages.create(model="claude-sonnet-4-6", max_tokens=256, messages=ASK)
        with httpx2.Client() as http:  # sent again, it gets the same answer: the step was not used up
            again = http.post(server.base_url + "/v1/messages",
                              json={"model": "claude-sonnet-4-6", "max_tokens": 256, "messages": ASK})
    assert error.value.status_code == 500 and error.value.body["error"]["type"] == "api_error"
    assert "the scenario is broken" in error.value.body["error"]["message"]
    assert error.value.response.headers["x-should-retry"] == "false"
    assert again.status_code == 500 and len(server.exchanges) == 2  # the SDK did not retry it
    record = build_record(broken, server, "hand", "1", ClientOutcome({"exit_code": 0}), 0.1)
    assert [e["n"] for e in record["server_errors"]] == [1, 2]
    assert "input_tokens 90000, but the request is about" in record["server_errors"][0]["message"]
    assert record["requests"][0]["kind"] == "scenario_error"
