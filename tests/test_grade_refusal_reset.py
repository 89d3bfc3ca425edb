"""no_resend_after_refusal on the wire: a loop that asks the model that refused again after resetting the context
passes; one that keeps the refused turn and adds a note fails.

"When you receive stop_reason: refusal, you must reset the conversation context before continuing. You can remove
or rephrase the turn that triggered the refusal, or clear the conversation history entirely. Attempting to continue
without resetting will result in continued refusals." (Handle streaming refusals,
https://platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals)
Each loop below is a plain raw-SDK loop graded by grade_function against the scripted server of the refusal
scenario: the requests the rule reads are what the loop sent.
"""

from __future__ import annotations

from typing import Any

from agentlab.grading.serving import grade_function

REPHRASED = "Describe, at a high level and without specifics, what the task involves."
NOTE = "That reply was stopped by a safety classifier. Please try again."


def _loop(after_refusal: str):
    """A loop that, after its first refusal, asks the same model once more: ``reset`` with the refused turn
    rephrased, ``note`` with the refused turn kept and a user note after it. A second refusal ends the run."""

    def loop(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for attempt in range(2):
            reply = client.messages.create(model=model, max_tokens=1024, messages=messages, tools=tools)
            if reply.stop_reason != "refusal":
                return "".join(b.text for b in reply.content if b.type == "text")
            if attempt == 0 and after_refusal == "reset":
                messages = [{"role": "user", "content": REPHRASED}]
            elif attempt == 0:
                messages += [{"role": "assistant", "content": "(declined)"}, {"role": "user", "content": NOTE}]
        raise RuntimeError("the request was refused")

    return loop


def _check(after_refusal: str):
    report = grade_function(_loop(after_refusal), ["refusal"], timeout=30)
    grade = report.grade("refusal")
    check = grade.check("no_resend_after_refusal") if grade is not None else None
    assert check is not None, report.text()
    return check


def test_the_same_model_after_the_refused_turn_was_rephrased_passes():
    check = _check("reset")
    assert check.status == "pass", check.why
    assert check.why.endswith("of the refused request removed or rewritten (the context reset)"), check.why


def test_the_same_model_with_the_refused_turn_kept_and_a_note_after_it_fails():
    check = _check("note")
    assert check.status == "fail", check.why
    assert "the turn that triggered the refusal left as it was (the context not reset)" in check.why, check.why
