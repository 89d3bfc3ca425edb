"""Lesson 14, your own sessions: count the model calls in a Claude Code transcript.

The learner writes ``count_calls(entries) -> int``: how many model replies a session's entries (the JSON
objects of its ``.jsonl`` file, in order) hold. A streamed reply is written as several ``assistant`` entries
that share one ``message.id`` (one content block each): one call. A resumed session's file repeats earlier
entries: a reply already counted (same message id and request id) is not counted again. The synthetic entries
Claude Code writes for an API error (``isApiErrorMessage``, model ``<synthetic>``) are not replies, and the
sub-agents' entries (``isSidechain``) are not the main thread's. ``check_count_calls`` runs it on made-up cases
and on every committed transcript, against ``agentlab replay``'s own count.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..core.transitions import DEFAULT_MODEL
from . import exercise

HINT = """
Keep a set of the replies seen so far. For each entry with "type" == "assistant": skip it when it has
"isApiErrorMessage" or "isSidechain" set; otherwise make a key of its message's "id" and its "requestId", and
add it to the set. The answer is the size of the set: the entries of one streamed reply (and a reply
repeated by a resumed file) share a key.
"""


def _reply(mid: str, rid: str, block: str, **extra: Any) -> dict[str, Any]:
    return {"type": "assistant", "requestId": rid, **extra,
            "message": {"id": mid, "model": DEFAULT_MODEL, "content": [{"type": block}]}}


PROMPT = {"type": "user", "message": {"role": "user", "content": "Hello"}}
ERROR = {"type": "assistant", "isApiErrorMessage": True, "requestId": "r9",
         "message": {"id": "5b7c-uuid", "model": "<synthetic>", "content": [{"type": "text"}]}}

# (case, entries, expected count)
CASES: tuple[tuple[str, list[dict[str, Any]], int], ...] = (
    ("one reply, one entry", [PROMPT, _reply("m1", "r1", "text")], 1),
    ("one streamed reply: text and tool_use as two entries", [PROMPT, _reply("m1", "r1", "text"),
                                                               _reply("m1", "r1", "tool_use")], 1),
    ("two replies", [PROMPT, _reply("m1", "r1", "tool_use"), {"type": "user"}, _reply("m2", "r2", "text")], 2),
    ("an API error is not a reply", [PROMPT, ERROR], 0),
    ("a resumed file repeats the first reply", [PROMPT, _reply("m1", "r1", "text"), PROMPT,
                                                _reply("m1", "r1", "text"), _reply("m2", "r2", "text")], 2),
    ("a sub-agent's reply is not the main thread's", [PROMPT, _reply("m1", "r1", "tool_use"),
                                                      _reply("s1", "r5", "text", isSidechain=True),
                                                      _reply("m2", "r2", "text")], 2),
)

RULE = ("one call per distinct (message id, request id) among the main thread's assistant entries, leaving out "
        "the synthetic API-error entries")


def _fixture_cases() -> list[tuple[str, list[dict[str, Any]], int]]:
    from ..sessions.command import iter_fixtures
    from ..sessions.transcript import read_session

    cases = []
    for path in iter_fixtures():
        entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        want = sum(1 for c in read_session(path).calls if c.usage_known)   # refusals 2.1.332 wrote only by id
        cases.append((f"{path.parent.name}/{path.stem}", entries, want))
    return cases


@exercise("lesson14", "count_calls", todo="write the body of count_calls in the exercise cell above: a set of "
          "(message id, request id) over the assistant entries that are real replies")
def check_count_calls(count_calls: Callable[[list[dict[str, Any]]], int]) -> str:
    """Check ``count_calls`` on made-up entries and on every committed Claude Code transcript."""
    cases = list(CASES) + _fixture_cases()
    for case, entries, want in cases:
        try:
            got = count_calls([dict(e) for e in entries])
        except Exception as exc:  # a crashing answer is a wrong case, named like the others
            raise AssertionError(f"case {case!r}: expected {want}, got {type(exc).__name__}: {exc}: {RULE}") from None
        if got != want or isinstance(got, bool):
            raise AssertionError(f"case {case!r}: expected {want} call(s), got {got!r}: {RULE}")
    return (f"Right: {len(cases)} cases pass, the {len(cases) - len(CASES)} committed transcripts included: "
            f"your count is the one `agentlab replay` prints.")


def count_calls(entries):  # as the exercise cell writes it: no annotations to import
    seen = set()
    for entry in entries:
        if entry.get("type") != "assistant" or entry.get("isApiErrorMessage") or entry.get("isSidechain"):
            continue
        seen.add((entry["message"].get("id"), entry.get("requestId")))
    return len(seen)


SOLUTION = count_calls
