"""Lesson 11, the real Claude Code: helpers for the notebook and the check of its exercise.

The records in ``data/observed`` say what each client sent after each kind of response. The exercise:
write ``after_max_tokens(diff)``, which reads the change between two requests (a record's ``appended``
entry, as ``agentlab.observatory.observe.diff_requests`` computes it) that follows a ``max_tokens`` reply, and says what
the client did: ``"escalate"`` (the same messages again with a higher ``max_tokens``), ``"continue"`` (the
partial answer kept and a user message added), ``"run_tools"`` (tool results sent back), or ``"stop"``
(``diff`` is None: no request followed). The check runs it on every such request in the committed records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ..observatory.compare import describe
from ..core.transitions import DEFAULT_MODEL
from ..observatory.observe import load_records
from ..observatory.replay import client_label, ending, load_record, record_to_trace  # noqa: F401
from ..ui.plots import compare_paths  # noqa: F401
from .lesson10 import show_table  # noqa: F401
from . import exercise

ANSWERS = ("escalate", "continue", "run_tools", "stop")
ACTION_ANSWERS = {"escalate": "escalate", "continuation": "continue", "tool_results": "run_tools", None: "stop"}


def _short(text: Any, limit: int = 88) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


FIRST = ("claude-code", "agentlab", "tool-runner")   # the order clients are shown and checked in


def _records(clients: tuple[str, ...] | None = None) -> list[tuple[tuple[str, str], dict[str, dict[str, Any]]]]:
    """The committed records of ``clients`` (default: all), in that order, then by version."""
    wanted = clients or FIRST

    def order(key: tuple[str, str]) -> tuple:
        return (wanted.index(key[0]) if key[0] in wanted else len(wanted)), key
    found = load_records()
    return [(key, found[key]) for key in sorted(found, key=order) if clients is None or key[0] in clients]


def show_requests(record: dict[str, Any] | str) -> None:
    """One line per request of a record: max_tokens, the action label, the reply, and any text the client added."""
    record = load_record(record)
    print(f"{client_label(record)} · {record['scenario']}")
    for r in record["requests"]:
        reply = r["reply"]
        got = (f"{reply['status']} {reply.get('error')}" if reply["status"] >= 400
               else f"{reply.get('stop_reason')} [{', '.join(reply.get('blocks') or []) or 'empty'}]")
        added = (r["appended"].get("injected_user_texts") or []) if r["action"] != "first" else []
        said = f"  adds {_short(added[-1], 46)!r}" if added else ""
        print(f"  {r['n']}  max_tokens {r['max_tokens']:<6} {r['action']:<13} → {got}{said}")
    print(f"  end: {ending(record)}" + (f", {_short(record['result']['text'], 70)!r}"
                                        if (record.get("result") or {}).get("text") else ""))


# Claude Code's own context notes (environment, tools, skills, dates), not a reaction to the reply
_CONTEXT_REMINDERS = ("<system-reminder>", "# Environment", "The following deferred", "The following skills",
                      "Available agent types", "Today's date", "Attribution for git", "You are powered by",
                      "<total_tokens>")


def _unwrapped(text: str) -> str:
    """A text without the ``<system-reminder>`` tag 2.1.332 wraps its own messages in."""
    inner = text.strip()
    if inner.startswith("<system-reminder>"):
        inner = inner[len("<system-reminder>"):].removesuffix("</system-reminder>").strip()
    return inner


def contrast(scenario: str, clients: tuple[str, ...] = ("claude-code", "agentlab")) -> None:
    """What each recorded client did on ``scenario``: the short description, the texts it added, its end."""
    for (client, version), by_scenario in _records(clients):
        record = by_scenario.get(scenario)
        if record is None:
            print(f"{client} {version}: not recorded")
            continue
        print(f"{client} {version}: {describe(record)}")
        first = {_unwrapped(t) for t in record["requests"][0]["appended"].get("injected_user_texts") or []} \
            if record["requests"] else set()
        seen: list[str] = []
        for r in record["requests"][1:]:  # what the client wrote itself, each text once (not the prompt again)
            for text in list(r["appended"].get("injected_user_texts") or []) + \
                    list(r["appended"].get("injected_system_texts") or []):
                text = _unwrapped(text)
                if text not in seen and text not in first and not text.startswith(_CONTEXT_REMINDERS):
                    seen.append(text)
        for text in seen:
            print(f"    adds: {_short(text)!r}")
        result = record.get("result") or {}
        if result.get("text") and result.get("is_error"):
            print(f"    says: {_short(result['text'])!r}")


# --- the exercise ---------------------------------------------------------------------------------------------

def max_tokens_cases() -> list[dict[str, Any]]:
    """Every request that follows a max_tokens reply in the committed records (and every run that ended on
    one), with the answer the record implies."""
    cases = []
    for (client, version), by_scenario in _records():
        for name in sorted(by_scenario):
            requests = by_scenario[name]["requests"]
            for i, r in enumerate(requests):
                if r["reply"].get("stop_reason") != "max_tokens":
                    continue
                nxt = requests[i + 1] if i + 1 < len(requests) else None
                action = nxt["action"] if nxt else None
                if action not in ACTION_ANSWERS:
                    continue
                cases.append({"client": f"{client} {version}", "scenario": name, "after": r["n"],
                              "request": nxt["n"] if nxt else None, "diff": nxt["appended"] if nxt else None,
                              "expected": ACTION_ANSWERS[action]})
    return cases


BUILT = "built (not recorded)"


def _body(max_tokens: int, *messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": DEFAULT_MODEL, "max_tokens": max_tokens, "messages": list(messages)}


def built_cases() -> list[dict[str, Any]]:
    """Cases no recorded client produced, built with ``diff_requests`` from two request bodies, that separate an
    answer reading ``same_messages`` and ``tool_results`` from one keyed on the added user text or on a change of
    ``max_tokens``: a continuation that also raises ``max_tokens``, a continuation that adds no user text (the
    partial answer kept as the last message, to be prefilled), and tool results sent with a raised ``max_tokens``."""
    from ..observatory.observe import diff_requests

    prompt = {"role": "user", "content": "Recite the digits of pi."}
    partial = {"role": "assistant", "content": [{"type": "text", "text": "3.14159"}]}
    go_on = {"role": "user", "content": "Continue exactly where you stopped."}
    ask = {"role": "user", "content": "What is the weather in Oslo?"}
    cut_call = {"role": "assistant", "content": [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"location": "Oslo"}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "3°C"}]}
    built = [
        ("continue_with_more_room", _body(100, prompt), _body(4096, prompt, partial, go_on), "continue"),
        ("continue_by_prefill", _body(100, prompt), _body(100, prompt, partial), "continue"),
        ("tools_with_more_room", _body(100, ask), _body(4096, ask, cut_call, result), "run_tools"),
    ]
    return [{"client": BUILT, "scenario": name, "after": 1, "request": 2, "diff": diff_requests(before, after),
             "expected": expected} for name, before, after, expected in built]


def _facts(diff: dict[str, Any] | None) -> str:
    if diff is None:
        return "no request followed the max_tokens reply"
    old_new = (diff.get("changed") or {}).get("max_tokens")
    parts = [f"same_messages={diff.get('same_messages')}",
             f"max_tokens {old_new[0]} → {old_new[1]}" if old_new else "max_tokens unchanged",
             f"{len(diff.get('tool_results') or [])} tool_result(s)"]
    texts = diff.get("injected_user_texts") or []
    parts.append(f"user text added: {_short(texts[-1], 50)!r}" if texts else "no user text added")
    return ", ".join(parts)


@exercise("lesson11", "after_max_tokens")
def check_after_max_tokens(after_max_tokens: Callable[[dict[str, Any] | None], str]) -> str:
    """Raise AssertionError with a clear message unless ``after_max_tokens`` names what each recorded client
    did after every max_tokens reply."""
    import copy

    recorded = max_tokens_cases()
    if not recorded:
        raise AssertionError("no recorded max_tokens replies were found under data/observed")
    cases = recorded + built_cases()
    for case in cases:
        where = (f"{case['client']} · {case['scenario']} · after the max_tokens reply to request {case['after']}"
                 + (f" (request {case['request']})" if case["request"] else ""))
        try:
            got = after_max_tokens(copy.deepcopy(case["diff"]))
        except Exception as exc:  # noqa: BLE001 - turned into a readable failure
            raise AssertionError(f"{where}: after_max_tokens raised {type(exc).__name__}: {exc} "
                                 f"(the diff: {_facts(case['diff'])})") from exc
        if got not in ANSWERS:
            raise AssertionError(f"{where}: after_max_tokens returned {got!r}; return one of {', '.join(ANSWERS)}")
        if got != case["expected"]:
            raise AssertionError(f"{where}: you said {got!r}, the record says {case['expected']!r}. "
                                 f"The diff: {_facts(case['diff'])}")
    return (f"after_max_tokens: correct on all {len(recorded)} max_tokens replies in the records and the "
            f"{len(cases) - len(recorded)} built cases.")


def what_each_client_did() -> None:
    """Print, per recorded client, how often it escalated, continued, ran tools or stopped after max_tokens."""
    tally: dict[str, Counter] = {}
    for case in max_tokens_cases():
        tally.setdefault(case["client"], Counter())[case["expected"]] += 1
    for client, counts in tally.items():
        print(f"{client:<22}" + ", ".join(f"{answer} ×{counts[answer]}" for answer in ANSWERS if counts[answer]))


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    None means no request followed: "stop". Otherwise look at the diff in this order: tool_result blocks sent
    back → "run_tools"; the very same messages sent again → "escalate"; anything else (the partial answer
    kept, a user message added) → "continue".
"""


def after_max_tokens(diff):
    """What a client did after a max_tokens reply: escalate, continue, run_tools or stop."""
    if diff is None:
        return "stop"
    if diff["tool_results"]:
        return "run_tools"
    if diff["same_messages"]:
        return "escalate"
    return "continue"


SOLUTION = after_max_tokens
