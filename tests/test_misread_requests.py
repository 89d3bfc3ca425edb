"""A client's history is judged by what the API would accept and what it means, not by one serialisation: a
re-prompt merged into the user turn before a ``role: system`` item is no compaction, and tool calls told as
text ("Calling tools:" / "Observation:", as smolagents writes them) answer the calls. Both run through the
wire: a loop on the real SDK client against the scenario's server, graded."""

from __future__ import annotations

import pytest

from agentlab.grading.command import grade_function

RETRY = "The previous response failed to produce a valid tool call. Try again."


@pytest.mark.parametrize("merged", ["a text block more", "the same text"])
def test_a_re_prompt_merged_before_a_system_item_is_not_a_compaction(merged: str) -> None:
    def loop(client, prompt, tools, run_tool):  # as Claude Code 2.1.332 re-prompts after a text-only tool_use label
        reminder = {"role": "system", "content": "<system-reminder>Today is a weekday.</system-reminder>"}
        client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, tools=tools,
                               messages=[{"role": "user", "content": prompt}, reminder])
        again = [{"type": "text", "text": prompt}, {"type": "text", "text": RETRY}] if merged != "the same text" \
            else f"{prompt}\n\n{RETRY}"
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, tools=tools,
                                       messages=[{"role": "user", "content": again}, reminder])
        return reply.content[-1].text

    grade = grade_function(loop, ["mislabel_tool_use"], jobs=1).grade("mislabel_tool_use")
    second = grade.record["requests"][1]
    assert second["action"] == "reprompt" and second["appended"]["dropped"] == 0
    assert second["appended"]["injected_user_texts"] == [RETRY]
    assert grade.check("bounded_compaction") is None


def test_tool_calls_told_as_text_answer_the_calls() -> None:
    def loop(client, prompt, tools, run_tool):  # smolagents' ToolCallingAgent writes its memory back as text
        messages = [{"role": "user", "content": prompt}]
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, tools=tools, messages=messages)
        call = next(b for b in reply.content if b.type == "tool_use")
        result = run_tool(call.name, call.input)
        messages += [{"role": "assistant", "content": f"Calling tools:\n[{{'id': '{call.id}', 'type': 'function', "
                                                      f"'function': {{'name': '{call.name}', 'arguments': "
                                                      f"{call.input}}}}}]"},
                     {"role": "user", "content": f"Observation:\n{result}"}]
        return client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, tools=tools,
                                      messages=messages).content[-1].text

    grade = grade_function(loop, ["tool_use"], jobs=1).grade("tool_use")
    check = grade.check("tool_result_pairing")
    assert grade.passed and check is not None and check.status == "pass", check
    assert "1 tool call sent back as text (the call, then its result in a user message), which the API accepts" \
        in check.why
    assert grade.record["requests"][1]["reply"]["status"] == 200  # the API's validation accepts the history


def test_a_call_dropped_for_an_unrelated_message_still_fails() -> None:
    def loop(client, prompt, tools, run_tool):
        messages = [{"role": "user", "content": prompt}]
        client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, tools=tools, messages=messages)
        messages += [{"role": "assistant", "content": "Let me calculate that."},
                     {"role": "user", "content": "Go on."}]
        return client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, tools=tools,
                                      messages=messages).content[-1].text

    grade = grade_function(loop, ["tool_use"], jobs=1).grade("tool_use")
    assert grade.failed == ["tool_result_pairing"]
