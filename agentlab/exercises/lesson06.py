"""Lesson 06, pause_turn: helpers for the notebook and the check of its exercise.

The exercise: write ``finish_turn(call_model, messages, max_continuations=3)``, the loop that lets a
paused server-tool answer finish. ``call_model(messages)`` returns a response as a dict with ``stop_reason``
and ``content``; while the answer is ``pause_turn``, the paused content goes back unchanged as the
assistant's message (no new user message) and the model is called again, at most ``max_continuations`` times.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from . import exercise

Message = dict[str, Any]


def show_result(result: Any) -> None:
    """The result in one line: subtype, turns, requests, last stop_reason, and the final text."""
    print(f"{result.subtype}: num_turns={result.num_turns} requests={result.requests} "
          f"stop_reason={result.stop_reason}")
    print(f"result: {result.result!r}")


def roles_and_blocks(messages: list[Message]) -> None:
    """Print each message's role and the types of its content blocks (a string content counts as one text)."""
    for m in messages:
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text"}]
        print(f"{m['role']:<9}", [b["type"] for b in blocks])


def observed(scenario: str, extra: Iterable[str] = ()) -> None:
    """What each recorded client did when served ``scenario`` (the records in data/observed), one line each.

    ``extra`` names fields of the client's own result to show as well, e.g. ``("num_turns",)``.
    """
    from ..observatory.compare import describe
    from ..observatory.observe import load_records

    for (client, version), by_scenario in sorted(load_records().items()):
        record = by_scenario.get(scenario)
        line = describe(record) if record else "not recorded"
        if record:
            result = record.get("result") or {}
            line += "".join(f"; {name} {result.get(name)}" for name in extra if name in result)
        print(f"{client} {version}".ljust(22), line)


# --- the fake model used by the check ---------------------------------------------------------------------

def _search(i: int) -> list[dict[str, Any]]:
    return [{"type": "text", "text": f"Searching, part {i}."},
            {"type": "server_tool_use", "id": f"srvtoolu_{i}", "name": "web_search",
             "input": {"query": f"query {i}"}}]


def _final() -> list[dict[str, Any]]:
    return [{"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "text", "text": "Here is what I found."}]


MAX_CALLS = 20


class PausingModel:
    """Answers ``pause_turn`` ``pauses`` times (or always), then ``end_turn``; keeps a copy of every request."""

    def __init__(self, pauses: int | None) -> None:
        self.pauses = pauses
        self.requests: list[list[Message]] = []

    def __call__(self, messages: list[Message]) -> dict[str, Any]:
        if not isinstance(messages, list):
            raise AssertionError(f"call_model expects the list of messages, got {type(messages).__name__}")
        self.requests.append(copy.deepcopy(messages))
        n = len(self.requests)
        if n > MAX_CALLS:
            raise AssertionError(f"finish_turn called the model {MAX_CALLS} times and still did not stop: a model "
                                 "that keeps pausing would keep it going forever; use max_continuations")
        if self.pauses is None or n <= self.pauses:
            return {"role": "assistant", "stop_reason": "pause_turn", "content": _search(n)}
        return {"role": "assistant", "stop_reason": "end_turn", "content": _final()}


def _appended(request: list[Message], original: list[Message], call: int) -> list[Message]:
    if request[:len(original)] != original:
        raise AssertionError(
            f"request {call} changed the messages the answer started from; keep them as they were and only "
            "add the paused content after them")
    return request[len(original):]


def _check_resent(request: list[Message], original: list[Message], paused: list[list[dict]], call: int) -> None:
    extra = _appended(request, original, call)
    roles = [m.get("role") for m in extra]
    if "user" in roles:
        added = next(m for m in extra if m.get("role") == "user")
        raise AssertionError(
            f"request {call} added a user message ({added.get('content')!r}). A pause_turn is resumed by "
            "sending the assistant's content back as it is, with no new user message: the model has not "
            "finished its answer, so the next message is still the assistant's")
    if not extra:
        raise AssertionError(
            f"request {call} sent the same messages as the first one: the paused content was not added. "
            "Append the response's content as an assistant message before calling again")
    sent: list[dict] = []
    for message in extra:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        sent.extend(content or [])
    expected = [block for blocks in paused for block in blocks]
    if sent != expected and len(sent) < len(expected) and expected[len(expected) - len(sent):] == sent:
        raise AssertionError(
            f"request {call} sent back only the latest paused content; send everything the assistant "
            "produced in this answer so far (every paused response, in order), as one assistant message")
    if sent != expected:
        kinds = [b.get("type") for b in sent]
        want = [b.get("type") for b in expected]
        raise AssertionError(
            f"request {call} sent back the blocks {kinds}, expected {want} exactly as the model returned "
            "them (keep the server_tool_use block: the server needs it to resume the search)")


@exercise("lesson06", "finish_turn")
def check_finish_turn(finish_turn: Callable[..., Any]) -> str:
    """Raise AssertionError with a clear message unless ``finish_turn`` resumes a paused answer correctly."""
    question = [{"role": "user", "content": "Search the web for this week's AI news."}]

    model = PausingModel(pauses=0)
    messages = copy.deepcopy(question)
    response = finish_turn(model, messages)
    if len(model.requests) != 1:
        raise AssertionError(f"an answer that ends with end_turn needs one call; finish_turn made "
                             f"{len(model.requests)}")
    if not isinstance(response, dict) or response.get("stop_reason") != "end_turn":
        raise AssertionError(f"finish_turn must return the model's final response; it returned {response!r}")

    model = PausingModel(pauses=2)
    messages = copy.deepcopy(question)
    response = finish_turn(model, messages)
    if len(model.requests) != 3:
        raise AssertionError(
            f"the model paused twice and then finished: that is 3 calls, finish_turn made {len(model.requests)}")
    for call in (2, 3):
        _check_resent(model.requests[call - 1], question, [_search(i) for i in range(1, call)], call)
    if messages != question:
        raise AssertionError("finish_turn changed the caller's list of messages; build a new list instead")
    if not isinstance(response, dict) or response.get("stop_reason") != "end_turn":
        got = response.get("stop_reason") if isinstance(response, dict) else response
        raise AssertionError(f"after the pauses, finish_turn must return the final end_turn response, got {got!r}")

    model = PausingModel(pauses=None)
    response = finish_turn(model, copy.deepcopy(question), max_continuations=2)
    if len(model.requests) != 3:
        raise AssertionError(
            f"a model that pauses forever, with max_continuations=2, must be called 3 times (the first call "
            f"and 2 continuations); finish_turn made {len(model.requests)} call(s). Without a bound a loop "
            "can resume forever")
    if not isinstance(response, dict) or response.get("stop_reason") != "pause_turn":
        raise AssertionError("when the continuations run out, return the last (paused) response so the caller "
                             "can see the answer did not finish")
    return "finish_turn: correct. Paused content goes back unchanged, no user message, and the loop is bounded."


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    Keep a list `answer` of everything the assistant produced so far. Up to max_continuations times: if the
    response is not pause_turn, stop; else answer = answer + response["content"] (unchanged, server_tool_use
    blocks included) and call the model with messages + [{"role": "assistant", "content": answer}] (a new
    list: the caller's stays as it was). Return the last response.
"""


def finish_turn(call_model, messages, max_continuations=3):
    """Call the model; while it answers pause_turn, send its content back and call again."""
    response = call_model(messages)
    answer: list[dict] = []                     # the assistant's content so far, in order
    for _ in range(max_continuations):
        if response["stop_reason"] != "pause_turn":
            break
        answer = answer + response["content"]   # unchanged: server_tool_use blocks included
        response = call_model(messages + [{"role": "assistant", "content": answer}])
    return response


SOLUTION = finish_turn
