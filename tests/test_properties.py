"""Property tests: random response sequences through the real SDK and the scripted backend.

Each example builds a Scenario (any mix of stop reasons, including unknown and missing ones; text, empty,
tool_use, server_tool_use and cut-off tool_use content; HTTP errors), a random max_turns, fallback models
and a random Stop-hook behaviour, runs the loop step by step, and checks what must always hold.

The number of examples comes from a hypothesis profile: ``agentlab-ci`` (the default, 500 examples for the
main property) or ``agentlab-quick`` (set AGENTLAB_HYPOTHESIS_PROFILE=agentlab-quick while iterating).
The profiles are applied per test, so other test modules keep their own settings.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from agentlab.backend.scenario import KNOWN_STOP_REASONS, Scenario, parse_scenario
from agentlab.core.hooks import Hooks
from agentlab.core.loop import SUBTYPES
from agentlab.core.tools import demo_tools
from agentlab.lab import scenario_loop

settings.register_profile("agentlab-ci", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("agentlab-quick", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PROFILE = settings.get_profile(os.environ.get("AGENTLAB_HYPOTHESIS_PROFILE", "agentlab-ci"))
MAIN = settings(PROFILE)
STREAMING = settings(PROFILE, max_examples=max(PROFILE.max_examples // 5, 20))
# Properties that once caught bugs: a third of the examples each.
KNOWN_BUG = settings(PROFILE, max_examples=max(PROFILE.max_examples // 3, 20))

# One demo registry for all examples: building it derives schemas with pydantic, the slowest part of a run.
TOOLS = demo_tools()
PROMPT = "Plan the task, use tools when useful, and say when you are done."

# --- generating scenarios -------------------------------------------------------------------------------

TEXTS = ["Done.", "Working on it.", "Let me check that.", "The answer is 42."]
TOOL_CALLS = [
    {"type": "tool_use", "name": "calculator", "input": {"expression": "6 * 7"}},
    {"type": "tool_use", "name": "get_weather", "input": {"location": "Oslo"}},
    {"type": "tool_use", "name": "calculator", "input": {"expression": "1 / 0"}},
    {"type": "tool_use", "name": "no_such_tool", "input": {"x": 1}},
]
ERRORS = [
    {"status": 400, "type": "invalid_request_error", "message": "prompt is too long: 250000 tokens > 200000 maximum"},
    {"status": 400, "type": "invalid_request_error", "message": "messages.0.content: something is off"},
    {"status": 400, "type": "invalid_request_error",
     "message": "max_tokens: 64000 > 4096, which is the maximum allowed number of output tokens for this model"},
    {"status": 401, "type": "authentication_error", "message": "invalid x-api-key"},
    {"status": 403, "type": "permission_error", "message": "not allowed"},
    {"status": 429, "type": "rate_limit_error", "message": "rate limited", "retry_after": 0},
    {"status": 500, "type": "api_error", "message": "Internal server error"},
    {"status": 529, "type": "overloaded_error", "message": "Overloaded"},
    {"status": 529, "type": "overloaded_error", "message": "Overloaded", "headers": {"x-should-retry": "false"}},
]
STOP_REASONS = [*KNOWN_STOP_REASONS, None, "something_new"]
SHAPES = ["text", "empty", "blank", "tool_use", "server_tool_use", "incomplete_tool_use"]
HOOK_ANSWERS = ["pass", "block", "stop", "raise", "garbage"]


@st.composite
def contents(draw) -> list[dict[str, Any]]:
    shape = draw(st.sampled_from(SHAPES))
    lead = [{"type": "text", "text": draw(st.sampled_from(TEXTS))}] if draw(st.booleans()) else []
    if shape == "text":
        return [{"type": "text", "text": draw(st.sampled_from(TEXTS))}]
    if shape == "empty":
        return []
    if shape == "blank":
        return [{"type": "text", "text": ""}]
    if shape == "tool_use":
        calls = draw(st.lists(st.sampled_from(TOOL_CALLS), min_size=1, max_size=3))
        return lead + [dict(c) for c in calls]
    if shape == "server_tool_use":
        blocks = lead + [{"type": "server_tool_use", "id": "srvtoolu_PLACEHOLDER", "name": "web_search",
                          "input": {"query": "news"}}]
        if draw(st.booleans()):
            blocks.append({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_PLACEHOLDER",
                           "content": [{"type": "web_search_result", "title": "News", "url": "https://example.com",
                                        "encrypted_content": "abc", "page_age": None}]})
        return blocks
    # a tool_use cut off by max_tokens: the last block, its JSON unfinished when streamed
    return lead + [{"type": "tool_use", "name": "calculator", "input": {}, "partial_json": '{"expression": "(17 * 2'}]


@st.composite
def steps(draw) -> dict[str, Any]:
    if draw(st.integers(0, 4)) == 0:
        return {"error": dict(draw(st.sampled_from(ERRORS)))}
    stop_reason = draw(st.sampled_from(STOP_REASONS))
    step: dict[str, Any] = {"content": draw(contents()), "stop_reason": stop_reason}
    if stop_reason == "something_new":
        step["unknown_stop_reason"] = True
    if stop_reason == "stop_sequence":
        step["stop_sequence"] = "END"
    if stop_reason == "model_context_window_exceeded":  # as the API sends it: the window is full
        step["usage"] = {"fills_window": True}
    if stop_reason == "refusal" and draw(st.booleans()):
        step["stop_details"] = {"type": "refusal", "category": "cyber", "explanation": "Could cause harm."}
    return step


@dataclass
class Case:
    scenario: Scenario
    max_turns: int | None
    hook_answers: list[str]
    hook_after: str  # what the Stop hook says once hook_answers are used up
    overrides: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # what hypothesis prints for a failing example: enough to rebuild it
        steps = [s.model_dump(exclude_none=True, exclude_defaults=True) for s in self.scenario.steps]
        return (f"Case(max_turns={self.max_turns}, hook_answers={self.hook_answers}, hook_after={self.hook_after!r},"
                f" overrides={self.overrides}, steps={json.dumps(steps)})")


def build_case(raw_steps: list[dict[str, Any]], *, max_turns: int | None = None, hook_answers: list[str] | None = None,
               hook_after: str = "pass", **overrides: Any) -> Case:
    fixed = []
    for k, step in enumerate(raw_steps):
        step = json.loads(json.dumps(step).replace("srvtoolu_PLACEHOLDER", f"srvtoolu_{k}"))
        fixed.append(step)
    raw = {"name": "generated", "description": "a random response sequence", "prompt": PROMPT, "tools": "demo",
           "steps": fixed}
    return Case(parse_scenario(raw, "generated.yaml"), max_turns, list(hook_answers or []), hook_after, overrides)


@st.composite
def cases(draw) -> Case:
    # runs of one step repeated reach the bounds (pause_turn, max_tokens, Stop-hook cap, retries)
    runs = draw(st.lists(st.tuples(steps(), st.sampled_from([1, 1, 1, 1, 3, 6, 9])), min_size=1, max_size=8))
    raw_steps = [step for step, times in runs for _ in range(times)][:20]
    overrides: dict[str, Any] = {"max_tokens": draw(st.sampled_from([64, 1024, 8192]))}
    if draw(st.booleans()):
        overrides["fallback_model"] = "claude-haiku-4-5"
    if draw(st.booleans()):
        overrides["refusal_fallback_model"] = "claude-opus-4-1"
    return build_case(
        raw_steps,
        max_turns=draw(st.one_of(st.none(), st.integers(1, 8))),
        hook_answers=draw(st.lists(st.sampled_from(HOOK_ANSWERS), max_size=4)),
        hook_after=draw(st.sampled_from(["pass", "block"])),
        **overrides,
    )


# --- running a case -----------------------------------------------------------------------------------------

def stop_hooks(case: Case) -> Hooks:
    answers = list(case.hook_answers)

    def stop_hook(payload: dict[str, Any]) -> Any:
        answer = answers.pop(0) if answers else case.hook_after
        if answer == "block":
            return {"decision": "block", "reason": "Not done yet: run the tests."}
        if answer == "stop":
            return {"continue": False, "stopReason": "The hook ended the session."}
        if answer == "raise":
            raise RuntimeError("a broken Stop hook")
        if answer == "garbage":
            return "{this is not json"
        return None

    hooks = Hooks()
    hooks.on("Stop", stop_hook)
    return hooks


@dataclass
class Run:
    case: Case
    loop: Any
    steps_taken: int

    @property
    def result(self):
        return self.loop.result

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.loop.engine.requests if r.body is not None]


def request_bound(case: Case, limits) -> int:
    """The most model calls a run may make: one per scripted step, one more that finds the script used up
    (an error that ends the run), and for every reactive compaction at most one summary call. Compactions
    are bounded by ``max_compactions`` in a row between two successful calls."""
    n = len(case.scenario.steps)
    return (n + 1) * (1 + limits.max_compactions) + limits.max_compactions


def run_case(case: Case, *, stream: bool = False) -> Run:
    overrides = dict(case.overrides)
    if case.max_turns is not None:
        overrides["max_turns"] = case.max_turns
    loop = scenario_loop(case.scenario, stream=stream, hooks=stop_hooks(case), tools=TOOLS, **overrides)
    cap = request_bound(case, loop.limits) + 2
    taken = 0
    while not loop.done:  # loop.run(), with a guard so that a loop that never ends fails instead of hanging
        loop.step()
        taken += 1
        assert taken <= cap, f"the loop did not end within {cap} steps"
    assert loop.run() is loop.result
    return Run(case, loop, taken)


# --- the invariants ---------------------------------------------------------------------------------------------

def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def _is_tool_result_message(message: dict[str, Any]) -> bool:
    blocks = _blocks(message)
    return message.get("role") == "user" and bool(blocks) and all(b.get("type") == "tool_result" for b in blocks)


def _is_plain_text(message: dict[str, Any]) -> bool:
    blocks = _blocks(message)
    return bool(blocks) and all(b.get("type") == "text" for b in blocks)


def pairing_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Every tool_use is answered by exactly one tool_result in the very next message, a user message that
    holds nothing but tool_result blocks; no tool_result appears anywhere else."""
    problems = []
    answered: set[int] = set()
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        ids = [b.get("id") for b in _blocks(message) if b.get("type") == "tool_use"]
        if not ids:
            continue
        if i + 1 >= len(messages):
            problems.append(f"messages[{i}]: tool_use {ids} is never answered (the transcript ends)")
            continue
        reply = messages[i + 1]
        answered.add(i + 1)
        if not _is_tool_result_message(reply):
            problems.append(f"messages[{i + 1}] answers tool_use {ids} but is not a user message of only tool_results")
        result_ids = [b.get("tool_use_id") for b in _blocks(reply) if b.get("type") == "tool_result"]
        if sorted(result_ids) != sorted(ids):
            problems.append(f"messages[{i + 1}]: tool_result ids {result_ids} do not answer "
                            f"tool_use ids {ids} once each")
    for i, message in enumerate(messages):
        if i not in answered and any(b.get("type") == "tool_result" for b in _blocks(message)):
            problems.append(f"messages[{i}]: a tool_result without a tool_use right before it")
    return problems


def role_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Roles alternate; the one exception is a plain-text user message (a nudge or Stop-hook feedback)
    directly after a user message that holds tool results."""
    problems = []
    for i in range(1, len(messages)):
        before, now = messages[i - 1], messages[i]
        if before.get("role") != now.get("role"):
            continue
        if now.get("role") == "user" and _is_tool_result_message(before) and _is_plain_text(now):
            continue
        problems.append(f"messages[{i - 1}] and messages[{i}] are both {now.get('role')}: "
                        f"{_blocks(before)!r:.120} / {_blocks(now)!r:.120}")
    return problems


def empty_content_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What the API rejects: empty content (except a final assistant message) and empty text blocks."""
    problems = []
    for i, message in enumerate(messages):
        blocks = _blocks(message)
        final_assistant = i == len(messages) - 1 and message.get("role") == "assistant"
        if not blocks and not final_assistant:
            problems.append(f"messages[{i}] ({message.get('role')}) has empty content")
        for b in blocks:
            if b.get("type") == "text" and not str(b.get("text", "")).strip():
                problems.append(f"messages[{i}] ({message.get('role')}) holds an empty text block")
    return problems


def first_message_kept(messages: list[dict[str, Any]]) -> bool:
    if not messages or messages[0].get("role") != "user":
        return False
    blocks = _blocks(messages[0])
    return bool(blocks) and blocks[0].get("type") == "text" and blocks[0].get("text") == PROMPT


def check_main(run: Run) -> None:
    loop, case, result = run.loop, run.case, run.result
    # it ended, within its bound, and the numbers are the wire's numbers
    assert result is not None
    assert result.subtype in SUBTYPES
    assert result.is_error == (result.subtype != "success")
    sent = loop.engine.requests
    assert result.requests == len(sent), "the loop's request count differs from what reached the server"
    assert len(sent) <= request_bound(case, loop.limits)
    # a summary or side request (kind "side:...", e.g. a summary sent with a small max_tokens) takes no step
    scripted = [r for r in sent if r.kind not in ("summary", "unexpected") and not r.kind.startswith("side:")]
    assert len(scripted) <= len(case.scenario.steps)
    # past the end of the script the server answers a plain end_turn; only a blocking Stop hook (bounded by
    # its cap) or a nudge can make the loop ask again
    extra = [r for r in sent if r.kind == "unexpected"]
    assert len(extra) <= loop.limits.stop_hook_block_cap + 2
    if case.max_turns is not None:
        assert result.num_turns <= case.max_turns
    responses = [e for e in loop.trace.of_kind("response") if e.data.get("purpose") == "turn"]
    assert result.num_turns == len(responses)
    if result.subtype == "error_max_turns":
        assert result.num_turns == case.max_turns
    unexpected = [r for r in sent if r.kind == "unexpected"]
    if unexpected:
        # a used-up script answers with a plain end_turn that says so (no client takes it for a retryable
        # error): the run stops there, and nothing the script did not plan was answered as a step
        first = sent.index(unexpected[0])
        assert all(r.kind == "unexpected" for r in sent[first:]) and sent[-1].kind == "unexpected"
        assert result.subtype in ("success", "error_during_execution", "error_max_turns")
    # the scripted engine only fails an expectation when a step has `expect`; generated steps have none
    assert not [f for f in loop.engine.failures if "did not match" in f]
    # every request the loop sent: the first request kept, every tool_use answered once, nothing orphaned
    for k, body in enumerate(run.bodies):
        messages = body.get("messages") or []
        if loop.engine.requests[k].kind == "summary":
            continue
        assert first_message_kept(messages), f"request {k}: the first user message was lost: {messages[:1]}"
        assert not pairing_problems(messages), (k, pairing_problems(messages))
    # the final transcript starts with the prompt
    assert first_message_kept(result.messages)
    # the trace ends with the result event
    assert loop.trace.events[-1].kind == "result"


# --- the properties -------------------------------------------------------------------------------------------

@MAIN
@given(case=cases())
def test_loop_terminates_within_its_bound_and_answers_every_tool_use_it_sends(case):
    run = run_case(case)
    check_main(run)
    event(f"subtype {run.result.subtype}")


@STREAMING
@given(case=cases())
def test_streaming_behaves_like_non_streaming(case):
    plain = run_case(case)
    streamed = run_case(case, stream=True)
    check_main(streamed)
    a, b = plain.result, streamed.result
    assert (a.subtype, a.num_turns, a.requests, a.stop_reason) == (b.subtype, b.num_turns, b.requests, b.stop_reason)
    strip = [{k: v for k, v in body.items() if k != "stream"} for body in plain.bodies]
    assert strip == [{k: v for k, v in body.items() if k != "stream"} for body in streamed.bodies]


# Known bugs in agentlab/core/loop.py, each with an explicit example; see the reasons.

REFUSAL_WITH_TOOL_USE = build_case([
    {"content": [{"type": "text", "text": "I'll run it."}, dict(TOOL_CALLS[0])], "stop_reason": "refusal"}])
REFUSAL_AFTER_PAUSE = build_case([
    {"content": [{"type": "server_tool_use", "id": "srvtoolu_PLACEHOLDER", "name": "web_search",
                  "input": {"query": "news"}}], "stop_reason": "pause_turn"},
    {"content": [{"type": "text", "text": "I can't continue with this."}], "stop_reason": "refusal"}])
FEEDBACK_AFTER_NUDGE = build_case([
    {"content": [dict(TOOL_CALLS[0])], "stop_reason": "tool_use"},
    {"content": [], "stop_reason": "end_turn"},
    {"content": [], "stop_reason": "end_turn"},
    {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}], hook_answers=["block"])
FEEDBACK_AFTER_PROMPT = build_case([
    {"content": [], "stop_reason": "end_turn"},
    {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}], hook_answers=["block"])
EMPTY_CONTINUATION = build_case([
    {"content": [{"type": "text", "text": "Part one"}], "stop_reason": "max_tokens"},
    {"content": [], "stop_reason": "max_tokens"},
    {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}])
BLANK_TEXT_RESENT = build_case([
    {"content": [{"type": "text", "text": ""}], "stop_reason": "end_turn"},
    {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}], hook_answers=["block"])


def test_known_bug_examples_satisfy_the_main_property():
    for case in (REFUSAL_WITH_TOOL_USE, REFUSAL_AFTER_PAUSE, FEEDBACK_AFTER_NUDGE, FEEDBACK_AFTER_PROMPT,
                 EMPTY_CONTINUATION, BLANK_TEXT_RESENT):
        check_main(run_case(case))


@KNOWN_BUG
@given(case=cases())
@example(case=REFUSAL_WITH_TOOL_USE)
def test_final_transcript_answers_every_tool_use(case):
    run = run_case(case)
    assert not pairing_problems(run.result.messages)


@KNOWN_BUG
@given(case=cases())
@example(case=REFUSAL_AFTER_PAUSE)
@example(case=FEEDBACK_AFTER_NUDGE)
@example(case=FEEDBACK_AFTER_PROMPT)
def test_roles_alternate(case):
    run = run_case(case)
    assert not role_problems(run.result.messages)
    assert run.bodies, "no request was sent"
    for body in run.bodies:
        assert not role_problems(body.get("messages") or [])


@KNOWN_BUG
@given(case=cases())
@example(case=EMPTY_CONTINUATION)
@example(case=BLANK_TEXT_RESENT)
def test_no_request_carries_empty_content(case):
    run = run_case(case)
    assert run.bodies, "no request was sent"
    for k, body in enumerate(run.bodies):
        assert not empty_content_problems(body.get("messages") or []), k


def test_a_turn_resumed_after_compaction_is_no_prefill_when_resent():
    """A compaction stop's turn is sent back as the last message; resent with more max_tokens after the next
    reply is cut off, it is still a resumption (the live API accepts it), not a prefill the model refuses."""
    done = [{"type": "text", "text": "Done."}]
    case = build_case([{"content": done, "stop_reason": "compaction"}, {"content": done, "stop_reason": "max_tokens"}],
                      max_tokens=64)
    for stream in (False, True):
        kinds = [r.kind for r in run_case(case, stream=stream).loop.engine.requests]
        assert "invalid_request" not in kinds, kinds
