"""Side traffic (a session title, a topic check, a quota probe, a summary on another model, token counting) is
recognised by its shape, answered without using up a scripted step, and listed apart in the record and the
report: the loop's requests meet the script's steps in order, whatever a client sends beside them."""

from __future__ import annotations

import anthropic

from agentlab.backend.serve import ScenarioServer
from agentlab.grading.command import grade_function

PROMPT = [{"role": "user", "content": "What is 1234 + 5678?"}]
TITLE = "Generate a concise, sentence-case title (3-7 words) for this conversation. Reply with the title only."
TOPIC = ("Analyze if this message indicates a new conversation topic. Format your response as a JSON object with "
         "two fields: 'isNewTopic' (boolean) and 'title' (string or null).")


def side_traffic(client: anthropic.Anthropic) -> None:
    client.messages.create(model="claude-haiku-4-5", max_tokens=50, system=TITLE, messages=PROMPT)
    client.messages.create(model="claude-haiku-4-5", max_tokens=50, system=TOPIC, messages=PROMPT)
    client.messages.create(model="claude-haiku-4-5", max_tokens=1, messages=[{"role": "user", "content": "quota"}])
    client.messages.count_tokens(model="claude-sonnet-4-6", messages=PROMPT)


def test_side_requests_use_no_step_through_the_wire() -> None:
    with ScenarioServer("max_tokens_escalate") as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        side_traffic(client)
        first = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=PROMPT)
        summary = client.messages.create(model="claude-haiku-4-5", max_tokens=100, messages=[
            *PROMPT, {"role": "assistant", "content": "Working on it."},
            {"role": "user", "content": "Please write a summary of the conversation so far."}])
    kinds = [e.request.kind for e in server.exchanges]
    assert kinds == ["side:title", "side:title", "side:quota", "count_tokens", "message", "side:summary"]
    assert first.stop_reason == "max_tokens"  # the scenario's first step, not a later one
    assert [e.request.step for e in server.exchanges] == [None, None, None, None, 0, None]
    texts = [e.reply.body for e in server.exchanges[:2]]
    assert b"Scripted conversation" in texts[0] and b'isNewTopic' in texts[1]
    assert summary.stop_reason == "end_turn"


def test_the_report_lists_side_requests_and_grades_the_loop_alone() -> None:
    def loop(client, prompt, tools, run_tool):
        side_traffic(client)
        messages = [{"role": "user", "content": prompt}]
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=messages, tools=tools)
        return reply.content[-1].text

    report = report_of(loop)
    grade = report.grade("end_turn")
    assert grade.passed and grade.requests == 1 and grade.check("sends_the_prompt").status == "pass"
    assert grade.side_requests == ["2 title requests on claude-haiku-4-5", "1 quota request on claude-haiku-4-5",
                                   "token counting (POST /v1/messages/count_tokens)"]
    assert "    side requests (answered without using a step): 2 title requests on claude-haiku-4-5" in report.text()
    assert report.to_dict()["scenarios"][0]["side_requests"] == grade.side_requests


def report_of(loop):
    return grade_function(loop, ["end_turn"], jobs=1)


def test_requests_beyond_the_script_are_counted_in_the_report() -> None:
    def asks_twice(client, prompt, tools, run_tool):
        messages = [{"role": "user", "content": prompt}]
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=messages)
        messages += [{"role": "assistant", "content": reply.content[0].text},
                     {"role": "user", "content": "And again?"}]
        client.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=messages)

    report = report_of(asks_twice)
    grade = report.grade("end_turn")
    assert grade.requests == 2 and grade.beyond_script == 1
    assert "end_turn  2 requests, returned (1 beyond the end of the script)" in report.text()
    assert report.to_dict()["scenarios"][0]["beyond_script"] == 1
