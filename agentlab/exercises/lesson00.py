"""Lesson 00, the loop: a naive agent loop, the scripted model it talks to, and the check of the exercise.

The learner writes ``naive_loop(call_model, run_tool, prompt)``: call the model, and while its reply holds
``tool_use`` blocks, run them and send the results back; otherwise stop. ``check_naive_loop`` drives it with a
scripted model (plain dicts, no SDK, no network) and raises an AssertionError naming the case, what was
expected and what came back. ``SOLUTION`` and ``HINT`` are shown on demand by ``show_solution("lesson00")`` and
``hint("lesson00")``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from ..core.compaction import text_blocks
from ..lab import demo_tool_runner
from . import exercise

Message = dict[str, Any]
NaiveLoop = Callable[[Callable[[list[Message]], Message], Callable[[str, dict[str, Any]], str], str], list[Message]]


# --- the scripted model for the check -----------------------------------------------------------------------

def _reply(stop_reason: str, *blocks: dict[str, Any]) -> Message:
    return {"role": "assistant", "type": "message", "content": list(blocks), "stop_reason": stop_reason}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _use(tool_id: str, name: str, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


class _Script:
    """A fake model answering from a list of replies; keeps a copy of every request it was sent."""

    def __init__(self, case: str, replies: list[Message]) -> None:
        self.case = case
        self.replies = replies
        self.requests: list[list[Message]] = []
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []

    def call_model(self, messages: list[Message]) -> Message:
        if len(self.requests) >= len(self.replies):
            raise AssertionError(
                f"case {self.case!r}: the model was called {len(self.requests) + 1} times, but its reply "
                f"number {len(self.replies)} had no tool_use block, so the loop should have stopped there"
                + _label_note(self.replies[-1]))
        self.requests.append(copy.deepcopy(messages))
        return copy.deepcopy(self.replies[len(self.requests) - 1])

    def run_tool(self, name: str, tool_input: dict[str, Any]) -> str:
        self.tool_calls.append((name, dict(tool_input)))
        return f"result of {name}({json.dumps(tool_input, sort_keys=True)})"


CASES: tuple[tuple[str, list[Message]], ...] = (
    ("a plain text answer", [_reply("end_turn", _text("Paris."))]),
    ("one tool call, then the answer", [
        _reply("tool_use", _text("Let me add."), _use("toolu_a", "calculator", expression="2+2")),
        _reply("end_turn", _text("2+2 = 4.")),
    ]),
    ("two tool calls in one reply", [
        _reply("tool_use", _use("toolu_a", "get_weather", location="Oslo"),
               _use("toolu_b", "get_weather", location="Lima")),
        _reply("end_turn", _text("Oslo is colder than Lima.")),
    ]),
    ("three rounds of tools", [
        _reply("tool_use", _use("toolu_1", "read_file", path="notes.txt")),
        _reply("tool_use", _use("toolu_2", "calculator", expression="4711+1")),
        _reply("tool_use", _use("toolu_3", "run_tests")),
        _reply("end_turn", _text("Done.")),
    ]),
    # the two that separate a loop reading the content from one reading the stop_reason label (lesson 01)
    ("a tool call labelled end_turn", [
        _reply("end_turn", _text("Checking."), _use("toolu_m", "get_weather", location="Oslo")),
        _reply("end_turn", _text("Oslo: 3°C.")),
    ]),
    ("the label tool_use on a text-only reply", [
        _reply("tool_use", _text("No tool needed: 4.")),
    ]),
)


def _label_note(reply: Message) -> str:
    """Why a loop may have gone wrong on ``reply``: its stop_reason says the opposite of its content."""
    has_use = any(b["type"] == "tool_use" for b in reply["content"])
    if reply["stop_reason"] == "tool_use" and not has_use:
        return (" (its stop_reason was 'tool_use', but its content holds no tool_use block: decide by the "
                "content, not by the label)")
    if reply["stop_reason"] != "tool_use" and has_use:
        return (f" (its stop_reason was {reply['stop_reason']!r}, but its content holds a tool_use block: decide "
                "by the content, not by the label)")
    return ""


def _expected_history(prompt: str, replies: list[Message]) -> list[Message]:
    history: list[Message] = [{"role": "user", "content": prompt}]
    for reply in replies:
        history.append({"role": "assistant", "content": reply["content"]})
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        if uses:
            history.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u["id"],
                 "content": f"result of {u['name']}({json.dumps(u['input'], sort_keys=True)})"} for u in uses]})
    return history


def _normal(message: Any) -> Any:
    """A message with string content written as one text block, so both spellings compare equal."""
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        return {**message, "content": [{"type": "text", "text": message["content"]}]}
    return message


def _show(value: Any, width: int = 300) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def _where(want: Any, got: Any, path: str = "") -> str:
    """The first place two values differ, as a path of keys and indexes, e.g. ``content[0]["tool_use_id"]``,
    and what each holds there."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in list(want) + [k for k in got if k not in want]:
            if key not in got:
                return f"key {path}[{key!r}] is missing (it should be {_show(want[key], 80)})"
            if key not in want:
                return f"key {path}[{key!r}] should not be there (it is {_show(got[key], 80)})"
            if want[key] != got[key]:
                return _where(want[key], got[key], f"{path}[{key!r}]")
    if isinstance(want, list) and isinstance(got, list):
        for i, (w, g) in enumerate(zip(want, got, strict=False)):
            if w != g:
                return _where(w, g, f"{path}[{i}]")
        if len(want) != len(got):
            return f"{path or 'the list'} should have {len(want)} item(s), it has {len(got)}"
    return f"{path or 'the value'} should be {_show(want, 80)}, it is {_show(got, 80)}"


def _first_difference(want: list[Message], got: list[Message]) -> str | None:
    """Where two histories first differ, in words, naming the key that differs; None when they are equal."""
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        if w != g:
            return (f"message {i} should be\n  {_show(w)}\nbut it is\n  {_show(g)}\n"
                    f"first difference: {_where(w, g, f'message {i}')}")
    if len(got) != len(want):
        what = f"extra message {_show(got[len(want)])}" if len(got) > len(want) else \
            f"missing message {_show(want[len(got)])}"
        return f"expected {len(want)} messages, got {len(got)}: {what}"
    return None


@exercise("lesson00", "naive_loop")
def check_naive_loop(naive_loop: NaiveLoop) -> str:
    """Run ``naive_loop`` against scripted models; raise AssertionError with a clear message when it is wrong."""
    prompt = "Help me, please."
    for case, replies in CASES:
        script = _Script(case, replies)
        history = naive_loop(script.call_model, script.run_tool, prompt)
        expected = _expected_history(prompt, replies)
        assert len(script.requests) == len(replies), (
            f"case {case!r}: expected {len(replies)} model call(s), got {len(script.requests)}: the loop should "
            "call the model again after every reply with tool_use blocks, and stop after the first without"
            + (_label_note(replies[len(script.requests) - 1]) if script.requests else ""))
        assert isinstance(history, list), (
            f"case {case!r}: naive_loop should return the message history (a list), got {type(history).__name__}")
        for n, sent in enumerate(script.requests):
            problem = _first_difference([_normal(m) for m in expected[: 1 + 2 * n]], [_normal(m) for m in sent])
            assert problem is None, (
                f"case {case!r}: request {n + 1} carried the wrong history: {problem}\n(append the assistant's whole "
                "content, then ONE user message with a tool_result for every tool_use id, in order, and nothing else)")
        problem = _first_difference([_normal(m) for m in expected], [_normal(m) for m in history])
        assert problem is None, f"case {case!r}: the history naive_loop returned is wrong: {problem}"
    return (f"All {len(CASES)} cases pass: your loop runs tools until a reply has none, then stops, whatever "
            "the stop_reason label says.")


# --- the solution, shown on demand -----------------------------------------------------------------------------

HINT = """
    Loop forever: call the model, append {"role": "assistant", "content": reply["content"]}, then collect
    the blocks whose "type" is "tool_use". None: return the history. Otherwise build one tool_result per
    block ({"type": "tool_result", "tool_use_id": block["id"], "content": run_tool(...)}) and append them
    all in ONE user message before calling the model again.
"""


def naive_loop(call_model, run_tool, prompt):
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = call_model(messages)
        messages.append({"role": "assistant", "content": reply["content"]})
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        if not uses:
            return messages
        results = [{"type": "tool_result", "tool_use_id": u["id"],
                    "content": run_tool(u["name"], u["input"])} for u in uses]
        messages.append({"role": "user", "content": results})


SOLUTION = naive_loop

# --- the same loop against the scripted scenarios -------------------------------------------------------------

def scripted_model(name: str, counter: list[int] | None = None) -> Callable[[list[Message]], Message]:
    """``call_model(messages) -> dict`` answering from scenario ``name`` through the real SDK client (offline).

    The client keeps the SDK's default of two automatic retries (429, 529, 5xx), as a plain
    ``anthropic.Anthropic()`` would; ``counter``, when given, counts the calls made.
    """
    from ..backend.scenario import load_scenario
    from ..backend.scripted import ScenarioEngine, scripted_client
    from ..lab import build_tools

    scenario = load_scenario(name)
    client = scripted_client(ScenarioEngine(scenario), max_retries=2)
    tools = build_tools(scenario.tools)
    # the tools the scenario's model may use: the client's own, and the server tools (web_search, ...) the API
    # runs, offered as they are, as a real client would have to for the API to answer with their blocks
    offered = [*(tools.schemas() if tools is not None else []), *(dict(t) for t in scenario.server_tools)]
    extra = {"tools": offered} if offered else {}

    def call_model(messages: list[Message]) -> Message:
        if counter is not None:
            counter[0] += 1
        reply = client.messages.create(model=scenario.model, max_tokens=scenario.max_tokens,
                                       messages=messages, **extra)
        return reply.to_dict()

    return call_model


def _answer(history: list[Message]) -> str:
    last = history[-1] if history else {}
    if last.get("role") != "assistant":
        return "(no answer)"
    blocks = text_blocks(last.get("content"))
    text = " ".join(b.get("text", "") for b in blocks if b.get("type") == "text").strip()
    return text or "(empty)"


def naive_vs_agentlab(names: list[str], naive_loop: NaiveLoop | None = None, width: int = 38):
    """One row per scenario: what the naive loop handed the user, and how agentlab's loop ended the run.

    ``naive_loop`` defaults to the naive loop of the exercise's solution; pass your own to compare it.
    """
    import pandas as pd

    naive_loop = naive_loop or SOLUTION

    from ..backend.scenario import load_scenario
    from ..lab import run_scenario

    rows = []
    for name in names:
        prompt = load_scenario(name).prompt
        calls = [0]
        try:
            answer = _answer(naive_loop(scripted_model(name, calls), demo_tool_runner(), prompt))
        except Exception as exc:  # shown to the learner: how the naive loop failed
            answer = f"crashed: {type(exc).__name__}"
        result = run_scenario(name)
        answer = answer if len(answer) <= width else answer[: width - 1] + "…"
        rows.append({"scenario": name, "naive: calls": calls[0], "naive: the user gets": answer,
                     "agentlab: calls": result.requests, "agentlab: result": result.subtype})
    return pd.DataFrame(rows).set_index("scenario")
