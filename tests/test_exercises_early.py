"""The exercises of lessons 00-05: wrong answers fail their checks with a clear message.

Every lesson's solution, stub and on-demand help are tested in tests/test_exercises_helpers.py; the notebooks'
stubs in tests/test_exercises_notebooks.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentlab.core.transitions import Limits, LoopState, decide
from agentlab.exercises import lesson00, lesson01, lesson02, lesson03, lesson04, lesson05

# --- lesson 00 ------------------------------------------------------------------------------------------------

def _loop_without_tool_results(call_model, run_tool, prompt):
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = call_model(messages)
        messages.append({"role": "assistant", "content": reply["content"]})
        if not any(b["type"] == "tool_use" for b in reply["content"]):
            return messages
        for b in reply["content"]:
            if b["type"] == "tool_use":
                run_tool(b["name"], b["input"])
        messages.append({"role": "user", "content": "done"})


def _one_message_per_result(call_model, run_tool, prompt):
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = call_model(messages)
        messages.append({"role": "assistant", "content": reply["content"]})
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        if not uses:
            return messages
        for u in uses:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u["id"], "content": run_tool(u["name"], u["input"])}]})


def _loop_that_never_stops(call_model, run_tool, prompt):
    messages = [{"role": "user", "content": prompt}]
    for _ in range(100):
        reply = call_model(messages)
        messages.append({"role": "assistant", "content": reply["content"]})
        messages.append({"role": "user", "content": "go on"})
    return messages


def _single_call(call_model, run_tool, prompt):
    messages = [{"role": "user", "content": prompt}]
    messages.append({"role": "assistant", "content": call_model(messages)["content"]})
    return messages


def _loop_on_the_label(call_model, run_tool, prompt):
    """Dispatches on stop_reason == "tool_use", as the API docs' samples do, instead of on the content."""
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = call_model(messages)
        messages.append({"role": "assistant", "content": reply["content"]})
        if reply["stop_reason"] != "tool_use":
            return messages
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u["id"], "content": run_tool(u["name"], u["input"])} for u in uses]})


def _first_tool_only(call_model, run_tool, prompt):
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = call_model(messages)
        messages.append({"role": "assistant", "content": reply["content"]})
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        if not uses:
            return messages
        u = uses[0]
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u["id"], "content": run_tool(u["name"], u["input"])}]})


def _result_keyed_id(call_model, run_tool, prompt):
    """Names the result's key after the tool_use block's ``id`` instead of ``tool_use_id``."""
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = call_model(messages)
        messages.append({"role": "assistant", "content": reply["content"]})
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        if not uses:
            return messages
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "id": u["id"], "content": run_tool(u["name"], u["input"])} for u in uses]})


def _text_only_assistant(call_model, run_tool, prompt):
    """Keeps only the reply's text in the history, dropping the tool_use blocks the results answer."""
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = call_model(messages)
        text = " ".join(b["text"] for b in reply["content"] if b["type"] == "text")
        messages.append({"role": "assistant", "content": text})
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        if not uses:
            return messages
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u["id"], "content": run_tool(u["name"], u["input"])} for u in uses]})


@pytest.mark.parametrize("wrong, match", [
    (_loop_on_the_label, r"(?s)a tool call labelled end_turn.*expected 2 model call\(s\), got 1.*stop_reason was "
                         r"'end_turn', but its content holds a tool_use block"),
    (_first_tool_only, r"(?s)two tool calls in one reply.*first difference: message 2\['content'\] should have 2"),
    (_result_keyed_id, r"(?s)first difference: key message 2\['content'\]\[0\]\['tool_use_id'\] is missing"),
    (_text_only_assistant, r"(?s)first difference: message 1\['content'\]"),
    (_loop_without_tool_results, r"(?s)request 2 carried the wrong history: message 2 should be.*tool_result.*"
                                 r"but it is.*\"done\""),
    (_one_message_per_result, r"(?s)two tool calls in one reply.*message 2 should be.*ONE user message"),
    (_loop_that_never_stops, r"had no tool_use block, so the loop should have stopped"),
    (_single_call, r"one tool call, then the answer.*expected 2 model call\(s\), got 1"),
])
def test_lesson00_wrong_loops_fail(wrong, match) -> None:
    with pytest.raises(AssertionError, match=match):
        lesson00.check_naive_loop(wrong)


def test_lesson00_naive_table_shows_the_failures() -> None:
    table = lesson00.naive_vs_agentlab(["max_tokens_give_up", "refusal", "pause_turn"], naive_loop=lesson00.SOLUTION)
    assert table.loc["max_tokens_give_up", "naive: the user gets"] == "3.14159265358979"
    assert table.loc["refusal", "naive: the user gets"] == "(empty)"
    assert table.loc["refusal", "agentlab: result"] == "error_refusal"
    # the naive loop stops at the paused reply's text (no crash: its request offers the scenario's web_search)
    assert table.loc["pause_turn", "naive: the user gets"] == "Let me search for that."
    assert table.loc["pause_turn", "naive: calls"] == 1
    assert table.loc["pause_turn", "agentlab: calls"] == 2
    assert table.loc["pause_turn", "agentlab: result"] == "success"
    assert not table["naive: the user gets"].str.startswith("crashed").any(), table["naive: the user gets"].to_dict()


def test_lesson00_scripted_model_offers_the_scenarios_server_tools() -> None:
    call_model = lesson00.scripted_model("pause_turn")
    reply = call_model([{"role": "user", "content": "Search the web for this week's AI news."}])
    assert reply["stop_reason"] == "pause_turn"
    assert [b["type"] for b in reply["content"]] == ["text", "server_tool_use"]


# --- lesson 01 ------------------------------------------------------------------------------------------------

def test_lesson01_a_label_driven_answer_fails() -> None:
    def by_label(message):
        if message["stop_reason"] != "tool_use":
            return []
        return [b["id"] for b in message["content"] if b["type"] == "tool_use"]

    with pytest.raises(AssertionError, match=r"a tool_use block labelled end_turn.*expected \['toolu_x'\], got \[\]"):
        lesson01.check_tools_to_run(by_label)


def test_lesson01_running_server_tools_fails() -> None:
    def every_tool(message):
        return [b["id"] for b in message["content"] if b["type"] in ("tool_use", "server_tool_use")]

    with pytest.raises(AssertionError, match=r"a server tool \(the API runs it, not you\).*got \['srvtoolu_1'\]"):
        lesson01.check_tools_to_run(every_tool)


def test_lesson01_an_exception_is_reported_as_a_wrong_case() -> None:
    with pytest.raises(AssertionError, match=r"raised KeyError"):
        lesson01.check_tools_to_run(lambda m: [b["id"] for b in m["content"] if b["name"]])


# --- lesson 02 ------------------------------------------------------------------------------------------------

def test_lesson02_continuing_a_cut_tool_call_fails() -> None:
    def always_continue_after_escalation(message, escalations, continuations):
        if escalations < lesson02.MAX_ESCALATIONS:
            return "escalate"
        return "continue" if continuations < lesson02.MAX_CONTINUATIONS else "give_up"

    with pytest.raises(AssertionError, match=r"(?s)a tool_use block cut off, after the escalation.*expected "
                                             r"'give_up', got 'continue'"):
        lesson02.check_on_max_tokens(always_continue_after_escalation)


def test_lesson02_escalating_a_cut_tool_call_past_the_limit_fails() -> None:
    def escalate_every_cut_tool_call(message, escalations, continuations):
        if message["content"][-1]["type"] == "tool_use":
            return "escalate"
        if any(b["type"] == "tool_use" for b in message["content"]):
            return "run_tools"
        if escalations < lesson02.MAX_ESCALATIONS:
            return "escalate"
        return "continue" if continuations < lesson02.MAX_CONTINUATIONS else "give_up"

    with pytest.raises(AssertionError, match=r"(?s)escalations=1, continuations=0\]: expected 'give_up', "
                                             r"got 'escalate'"):
        lesson02.check_on_max_tokens(escalate_every_cut_tool_call)


def test_lesson02_an_off_by_one_limit_fails() -> None:
    solution = lesson02.SOLUTION

    def one_too_many(message, escalations, continuations):
        answer = solution(message, escalations, continuations)
        return "continue" if answer == "give_up" and continuations == lesson02.MAX_CONTINUATIONS else answer

    with pytest.raises(AssertionError, match=r"(?s)3 continuations in a row \[.*expected 'give_up', got 'continue'"):
        lesson02.check_on_max_tokens(one_too_many)


@pytest.mark.parametrize("case", lesson02.CASES, ids=[c[0] for c in lesson02.CASES])
def test_lesson02_cases_agree_with_decide(case) -> None:
    """The lesson's expected answers are what agentlab's own decide() does."""
    _, message, escalations, continuations, expected = case
    state = LoopState(model="claude-sonnet-4-6", max_tokens=64_000 if escalations else 1024, escalations=escalations,
                      continuations_in_a_row=continuations)
    branch = decide(message, state, Limits()).branch
    assert {"max_tokens_escalate": "escalate", "incomplete_tool_use": "escalate", "max_tokens_continue": "continue",
            "max_tokens_give_up": "give_up", "tool_use": "run_tools"}[branch] == expected


# --- lesson 03 ------------------------------------------------------------------------------------------------

def test_lesson03_slicing_by_message_orphans_a_tool_result() -> None:
    with pytest.raises(AssertionError, match=r"(?s)not a valid history.*tool_result toolu_lima lacks a tool_use"):
        lesson03.check_drop_middle(lambda messages, keep_last: messages[:1] + messages[-keep_last:])


def test_lesson03_mutating_the_input_fails() -> None:
    solution = lesson03.SOLUTION

    def in_place(messages, keep_last):
        kept = solution(messages, keep_last)
        messages[:] = kept
        return kept

    with pytest.raises(AssertionError, match=r"changed its input"):
        lesson03.check_drop_middle(in_place)


def test_lesson03_assuming_two_messages_per_turn_fails() -> None:
    def pairs(messages, keep_last):  # assumes every turn is exactly two messages
        n = min(2 * keep_last, len(messages) - 1)
        return [messages[0]] + (messages[len(messages) - n:] if n else [])

    with pytest.raises(AssertionError, match=r"(?s)a turn ending with a nudge, keep 2.*not a valid history"):
        lesson03.check_drop_middle(pairs)


def test_lesson03_forgotten_names_the_lost_facts() -> None:
    solution = lesson03.SOLUTION
    report = lesson03.forgotten(solution(lesson03.HISTORY, 1))
    assert report["facts forgotten"] == ["door code", "deploy day"]
    assert lesson03.forgotten(lesson03.HISTORY)["facts kept"] == ["door code", "deploy day"]



def test_lesson03_server_and_client_compaction_forget_different_facts() -> None:
    """The server's summary replaces the first message (the room goes), agentlab's summary keeps it verbatim (both
    stay), clearing tool results loses the door code; only the compacting runs pay for a summary."""
    pytest.importorskip("pandas")
    sides = lesson03.compaction_sides(trigger=1500, window=3000, threshold=0.5)
    kept = {name: (row["kept door code"], row["kept desk room"]) for name, row in sides.iterrows()}
    assert kept == {"none (a window it never fills)": (True, True), "server: compact_20260112": (True, False),
                    "client: summarize": (True, True), "client: clear_tool_results": (False, True)}
    requests = sides["requests"].to_dict()
    assert requests["server: compact_20260112"] == requests["none (a window it never fills)"] + 1  # the paused reply
    assert requests["client: summarize"] == requests["none (a window it never fills)"] + 1         # the summary call
    assert sides.loc["server: compact_20260112", "output_tokens"] > sides.loc["none (a window it never fills)",
                                                                              "output_tokens"]

# --- lesson 04 ------------------------------------------------------------------------------------------------

def test_lesson04_retrying_on_the_same_model_fails() -> None:
    def retry_when_set(message, model, fallback_model, fallback_used):
        if fallback_model and not fallback_used:
            return ("retry", fallback_model)
        return ("end", "Refused: " + str((message.get("stop_details") or {}).get("category")))

    with pytest.raises(AssertionError, match=r"(?s)the fallback is the model that refused.*expected action 'end', "
                                             r"got 'retry'"):
        lesson04.check_on_refusal(retry_when_set)


def test_lesson04_a_vague_explanation_fails() -> None:
    def vague(message, model, fallback_model, fallback_used):
        if fallback_model and fallback_model != model and not fallback_used:
            return ("retry", fallback_model)
        return ("end", "The model refused.")

    with pytest.raises(AssertionError, match=r"should mention \['cyber', 'The request could enable cyber harm.'\]"):
        lesson04.check_on_refusal(vague)


def test_lesson04_a_bare_string_fails() -> None:
    with pytest.raises(AssertionError, match=r"expected a pair of strings"):
        lesson04.check_on_refusal(lambda *args: "end")


# --- lesson 05 ------------------------------------------------------------------------------------------------

def _scenario(text: str = "Apple, pear, plum. ", **reply: Any) -> dict[str, Any]:
    step = {"content": [{"type": "text", "text": text}], "stop_reason": "stop_sequence", "stop_sequence": "STOP"}
    step.update(reply)
    return {"description": "fruits", "prompt": "Name three fruits, then write STOP.", "steps": [step]}


@pytest.mark.parametrize("raw, match", [
    (_scenario(text="Apple, pear, plum. STOP"), r"never includes the matched stop sequence"),
    (_scenario(stop_sequence="END"), r"(?s)stop_sequence 'STOP'.*got 'END'"),
    (_scenario(stop_reason="end_turn", stop_sequence=None), r"stop_reason 'stop_sequence', got 'end_turn'"),
    (_scenario(text=""), r"give the reply some text"),
    ({"prompt": "x", "steps": []}, r"does not load"),
    ("steps: []", r"write the scenario as a dict"),
])
def test_lesson05_wrong_scenarios_fail(raw, match) -> None:
    with pytest.raises(AssertionError, match=match):
        lesson05.check_stop_scenario(raw)


def test_lesson05_a_second_unexpected_step_is_caught() -> None:
    raw = _scenario()
    raw["steps"].insert(0, {"content": [{"type": "text", "text": "Thinking. "}], "stop_reason": "end_turn"})
    with pytest.raises(AssertionError, match=r"first reply should have stop_reason 'stop_sequence'"):
        lesson05.check_stop_scenario(raw)


def test_lesson03_the_notebook_s_drop_oldest_column_is_drop_middle() -> None:
    """Lesson 03 compares clear_tool_results with drop_oldest shrunk to the last turn, saying that this is what
    drop_middle(HISTORY, 1) does; the two must agree."""
    from agentlab.core.compaction import drop_oldest

    dropped = drop_oldest(lesson03.HISTORY, target_tokens=0, keep_last_turns=1).messages
    assert dropped == lesson03.SOLUTION(lesson03.HISTORY, 1)
