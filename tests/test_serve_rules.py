"""The grade rules read what the server served: the final-answer call the server made of a finished reply is
no unanswered tool call; no escalation is asked of a request already at its model's output ceiling; a call
cut off by max_tokens stays cut off in its stand-in; a reply the server had to replace by its own text leaves
only the rules judging that reply without it. Each run on the wire with the real ``anthropic`` client."""

from __future__ import annotations

import json

import anthropic
import pytest

from agentlab.backend.scenario import load_scenario, parse_scenario
from agentlab.backend.scripted import ScenarioEngine
from agentlab.backend.serve import ScenarioServer
from agentlab.grading.command import grade_function
from agentlab.grading.rules import RULES, Run, stop_when_done
from agentlab.observatory.observe import lenient, observe_scenario
from agentlab.observatory.records import ClientOutcome

FINAL = {"name": "final_answer", "description": "Give the final answer.",
         "input_schema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}
BASH = {"name": "Bash", "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


def final_answer_loop(client, prompt, tools, run_tool):
    """A loop whose answer is a call of its own final_answer tool, forced with tool_choice any (as pydantic-ai's
    output tool is): the call is the answer, and the run ends on it."""
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=messages,
                                       tools=[*tools, FINAL], tool_choice={"type": "any"})
        calls = [b for b in reply.content if b.type == "tool_use"]
        final = next((b for b in calls if b.name == "final_answer"), None)
        if final is not None:
            return final.input["answer"]
        messages += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": run_tool(b.name, b.input)} for b in calls]}]


def test_the_server_s_final_answer_call_is_no_unanswered_tool_call() -> None:
    grade = grade_function(final_answer_loop, ["end_turn"]).grades[0]
    assert grade.record["requests"][0]["final_answer_call"] == "final_answer"
    check = grade.check("tool_result_pairing")
    assert check is not None and check.status == "not_reached" and "is the final answer" in check.why, check
    assert not grade.failed


def ceiling_loop(stop: str):
    """A loop already at claude-3-haiku's ceiling of 4,096 output tokens, which gives up on a cut-off reply."""
    def agent_loop(client, prompt, tools, run_tool):
        reply = client.messages.create(model="claude-3-haiku-20240307", max_tokens=4096, tools=tools,
                                       messages=[{"role": "user", "content": prompt}])
        if reply.stop_reason == "max_tokens":
            raise RuntimeError(f"cut off at the model's ceiling ({stop})")
        return "done"

    return agent_loop


def test_a_cut_tool_call_at_the_model_s_ceiling_may_end_the_run() -> None:
    grade = grade_function(ceiling_loop("tool call"), ["incomplete_tool_use"]).grades[0]
    check = grade.check("escalate_cut_tool_call")
    assert check is not None and check.status == "pass" and "its model's ceiling" in check.why, check


def test_cut_text_at_the_model_s_ceiling_asks_only_for_a_continuation() -> None:
    grade = grade_function(ceiling_loop("text"), ["max_tokens_give_up"]).grades[0]
    check = grade.check("bounded_max_tokens_recovery")
    assert check is not None and check.status == "fail"
    assert "ask the model to continue (max_tokens is already its model's ceiling)" in check.why
    assert "raise max_tokens" not in check.why


@pytest.mark.parametrize("stream", [False, True])
def test_a_cut_off_call_stays_cut_off_in_its_stand_in(stream: bool) -> None:
    with ScenarioServer(ScenarioEngine(lenient(load_scenario("incomplete_tool_use")))) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        ask = {"model": "claude-sonnet-4-6", "max_tokens": 64, "tools": [BASH],
               "messages": [{"role": "user", "content": "Compute (17 * 23) + 4."}]}
        if stream:
            with client.messages.stream(**ask) as events:
                partial = "".join(e.delta.partial_json for e in events if e.type == "content_block_delta"
                                  and e.delta.type == "input_json_delta")
        else:
            reply = client.messages.create(**ask)
    if stream:  # Bash's own input, cut short: the scripted calculator's fields, as far as they went
        assert partial.startswith('{"command": "python3 -c \'print((17 * 2')
        with pytest.raises(json.JSONDecodeError):
            json.loads(partial)
    else:  # nothing whole to run: the cut call's input as the scripted one has it
        call = reply.content[-1]
        assert (reply.stop_reason, call.name, call.input) == ("max_tokens", "Bash", {})


def test_a_reply_the_server_replaced_voids_only_the_rules_that_judge_it() -> None:
    scenario = parse_scenario({"description": "thinking only, then an answer", "steps": [
        {"content": [{"type": "thinking", "thinking": "Hmm."}], "stop_reason": "end_turn"},
        {"content": [{"type": "text", "text": "Hello!"}], "stop_reason": "end_turn"}]}, "inline")

    def runner(sc, base_url, workdir, timeout) -> ClientOutcome:  # no thinking enabled: nothing can be sent
        client = anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0)
        for _ in range(2):
            client.messages.create(model="claude-sonnet-4-6", max_tokens=100,
                                   messages=[{"role": "user", "content": sc.prompt}])
        return ClientOutcome({"exit_code": 0})

    record = observe_scenario("hand", scenario, version="1", runner=runner)
    first, second = record["requests"]
    assert first["placeholder_reply"] is True and "placeholder_reply" not in second
    run = Run(record, scenario)
    done = stop_when_done(run)
    assert done is not None and done.status == "pass"  # judged on the real answer only: request 2 ended the run
    judged = {rule.name: c.status for rule in RULES if (c := rule.check(run)) is not None}
    assert judged["sends_the_prompt"] == "pass" and judged["ends_on_its_own"] == "pass"
