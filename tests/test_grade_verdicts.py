"""grade's verdicts, proved with one small purpose-built loop on the raw SDK: done right it passes every rule it
reaches; each behaviour broken on its own fails (or, for the reference loop's choices, differs on) exactly the
rule it breaks, once per scenario, and nothing else. Every output (text, JSON, JUnit, baseline, heatmap) reads
the same verdicts from agentlab.grading.verdict."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any

import anthropic
import pytest

from agentlab.grading.command import (
    Check,
    Report,
    document,
    grade_function,
    gradeable_scenarios,
    junit_xml,
    scenario_verdict,
)
from agentlab.grading.output import failures
from agentlab.grading.report import grade_record
from agentlab.grading.rules import record_from_requests
from agentlab.grading.verdict import cell, counted_once, policy_groups, rule_verdict

CONTINUE = "Output token limit hit. Continue exactly where you stopped."


def careful_loop(*breaks: str):
    """A careful loop on the raw SDK; each name in ``breaks`` breaks one behaviour: ``no_retry`` (a transient error
    ends the run), ``two_retries`` (the SDK's default of 2, the reference loop's 3 not kept), ``no_compaction``
    ("prompt is too long" raises), ``no_max_tokens_recovery`` (a cut-off text is returned as it is),
    ``ignores_pause_turn`` (a paused turn is returned as the answer), ``no_nudge`` (an empty reply after tool
    results ends the run), ``crash_after_answer`` (a KeyError once the answer is in), ``escapes`` (a final error
    message full of terminal escape sequences), ``resend_after_refusal`` (asks the model that refused again),
    ``resend_fatal`` (sends a request a 400/401/403/404 refused twice more unchanged), ``run_cut_tool_call`` (runs
    a tool call that max_tokens cut off), ``no_clamp`` (a 400 naming the model's ceiling raises),
    ``trusts_the_label`` (an ``end_turn`` label ends the run, whatever tool calls the content holds),
    ``credit_changed_body`` (the retry that echoes a refusal's credit token changes the system prompt),
    ``retry_after_chain_refusal`` (with server-side fallbacks, a refusal of the whole chain is retried on
    claude-opus-4-8), ``drops_fallback_block`` (with server-side fallbacks, a turn a fallback model served is sent
    back without its fallback block), ``edits_compaction_block`` (a server's compaction block is sent back with its
    summary changed). ``server_fallbacks`` is no break: the loop asks for the server's fallbacks ("default") instead of
    retrying a refusal itself with its credit token; nor is ``server_compaction``: it asks the server to compact
    on demand on its third call, ``compaction: {type: summarize}``) and resumes with the block."""
    unknown = set(breaks) - {"no_retry", "two_retries", "no_compaction", "no_max_tokens_recovery",
                             "ignores_pause_turn", "no_nudge", "crash_after_answer", "escapes",
                             "resend_after_refusal", "resend_fatal", "run_cut_tool_call", "no_clamp",
                             "trusts_the_label", "credit_changed_body", "retry_after_chain_refusal",
                             "server_fallbacks", "server_compaction", "edits_compaction_block",
                             "drops_fallback_block"}
    assert not unknown, unknown
    retries = 0 if "no_retry" in breaks else 2 if "two_retries" in breaks else 5

    def loop(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
        client = client.with_options(max_retries=retries)
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        state = {"max_tokens": 1024, "escalated": False, "continuations": 0, "compactions": 0, "nudged": False,
                 "resent": 0, "model": model, "fallback_tried": False, "credit": None, "system": None,
                 "server_fallbacks": bool({"server_fallbacks", "retry_after_chain_refusal",
                                           "drops_fallback_block"} & set(breaks))}
        partial = ""
        while True:
            reply = _call(client, state["model"], tools, messages, state, prompt, breaks)
            if reply is None:
                continue  # compacted or clamped: the same turn again
            if reply.stop_reason == "refusal" and _fall_back(reply, state, breaks):
                continue  # the same body again, on the fallback model
            stop, content = reply.stop_reason, list(reply.content)
            text = "".join(b.text for b in content if b.type == "text")
            step = _step(stop, content, messages, state, breaks, run_tool)
            if step == "again":
                if stop == "max_tokens" and content[-1:] and content[-1].type == "text":
                    partial += text
                continue
            if "crash_after_answer" in breaks:
                raise KeyError("id")
            return partial + text

    loop.__name__ = "careful" + "".join(f"+{b}" for b in breaks)
    return loop


def _add_assistant(messages: list[dict[str, Any]], content: list[Any]) -> None:
    if content and messages[-1]["role"] == "assistant":
        messages[-1] = {"role": "assistant", "content": [*messages[-1]["content"], *content]}
    elif content:
        messages.append({"role": "assistant", "content": content})


FALLBACK_MODEL = "claude-opus-4-8"  # the refusal fallback of claude-opus-5-5 (data/models.yaml)
COMPACT_ON_CALL = 3                 # server_compaction: the loop asks the server to compact on its third call


def _fall_back(reply, state, breaks) -> bool:
    """After a refusal: whether to send the same body once more, to the fallback model. With server-side fallbacks
    the refusal is the whole chain's and ends the run; else a refusal that carries a credit token is retried on
    the fallback model with the token (the "Fallback credit" page); without one the run ends."""
    if state["fallback_tried"] or "resend_after_refusal" in breaks:
        return False
    token = getattr(reply.stop_details, "fallback_credit_token", None)
    if state["server_fallbacks"]:
        if "retry_after_chain_refusal" not in breaks:
            return False
        state.update(server_fallbacks=False)
    elif not token:
        return False
    state.update(fallback_tried=True, model=FALLBACK_MODEL, credit=token)
    if "credit_changed_body" in breaks:
        state["system"] = "Answer briefly."
    return True


def _call(client, model, tools, messages, state, prompt, breaks):
    """One model call; None when the request was changed to be sent again (compacted, clamped)."""
    server = state["server_fallbacks"]
    betas = ["server-side-fallback-2026-07-01" if server else "fallback-credit-2026-07-01"]
    body: dict[str, Any] = {"fallbacks": "default"} if server else {}
    state["calls"] = state.get("calls", 0) + 1
    if {"server_compaction", "edits_compaction_block"} & set(breaks) and state["calls"] == COMPACT_ON_CALL:
        betas.append("compact-2026-01-12")
        body["compaction"] = {"type": "summarize"}  # on demand: the reply is the compaction block alone
    extra: dict[str, Any] = {"extra_headers": {"anthropic-beta": ",".join(betas)}}
    if state["credit"]:
        body["fallback_credit_token"], state["credit"] = state["credit"], None
    if body:
        extra["extra_body"] = body
    if state["system"]:
        extra["system"] = state["system"]
    # the beta stream where the server compacts: the plain one does not accumulate a compaction block's content
    # (its compaction_delta), and the block would go back empty
    messages_api = client.beta.messages if "compaction" in body else client.messages
    try:
        with messages_api.stream(model=model, max_tokens=state["max_tokens"], tools=tools, messages=messages,
                                 **extra) as stream:
            return stream.get_final_message()
    except anthropic.APIStatusError as exc:
        if not isinstance(exc, anthropic.BadRequestError):
            return _give_up(exc, state, breaks)
        ceiling = re.search(r"max_tokens: \d+ > (\d+)", str(exc))
        if ceiling and state["max_tokens"] > int(ceiling.group(1)) and "no_clamp" not in breaks:
            state["max_tokens"] = int(ceiling.group(1))
            return None
        if "prompt is too long" in str(exc) and "no_compaction" not in breaks and state["compactions"] < 3:
            _compact(client, model, messages, prompt, state)
            return None
        return _give_up(exc, state, breaks)


def _give_up(exc: anthropic.APIStatusError, state, breaks) -> None:
    """An error no retry or change of the request fixes: raise it (or, broken, send the request again)."""
    if "resend_fatal" in breaks and exc.status_code in (400, 401, 403, 404) and state["resent"] < 2:
        state["resent"] += 1
        return None
    if "escapes" in breaks:
        raise RuntimeError("\x1b[2J\x1b]0;owned\x07gave up\x08\x1b[31m in red") from None
    raise exc


def _compact(client, model, messages, prompt, state) -> None:
    ask = {"role": "user", "content": "Write a summary of this conversation so far. Answer in text only."}
    summary = client.messages.create(model=model, max_tokens=4096, messages=[*messages, ask])
    text = "".join(b.text for b in summary.content if b.type == "text")
    messages[:] = [{"role": "user", "content": f"{prompt}\n\nWhat happened so far:\n{text}"}]
    state["compactions"] += 1


def _step(stop, content, messages, state, breaks, run_tool) -> str:
    """What follows a reply: "again" (the messages were extended or the limit raised) or "done"."""
    cut_call = stop == "max_tokens" and content and content[-1].type == "tool_use"
    if cut_call and not state["escalated"] and "run_cut_tool_call" not in breaks:
        state["max_tokens"], state["escalated"] = 64000, True
        return "again"
    if stop == "refusal" and "resend_after_refusal" in breaks and not state["resent"]:
        state["resent"] += 1
        _add_assistant(messages, content or [{"type": "text", "text": "(refused)"}])
        messages.append({"role": "user", "content": "Please try again."})
        return "again"
    uses = [b for b in content if b.type == "tool_use"]
    if uses and not (stop == "end_turn" and "trusts_the_label" in breaks):
        _add_assistant(messages, [b for b in content if b.type != "fallback" or "drops_fallback_block" not in breaks])
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": run_tool(u.name, u.input)} for u in uses]})
        state["compactions"] = 0
        return "again"
    if stop == "max_tokens" and "no_max_tokens_recovery" not in breaks and state["continuations"] < 3:
        if not state["escalated"]:
            state["max_tokens"], state["escalated"] = 64000, True
            return "again"
        state["continuations"] += 1
        _add_assistant(messages, content)
        messages.append({"role": "user", "content": CONTINUE})
        return "again"
    if stop == "model_context_window_exceeded" and "no_compaction" not in breaks and state["compactions"] < 3:
        messages[:] = [messages[0], {"role": "assistant", "content": "Summary: the work so far."},
                       {"role": "user", "content": "Go on from the summary."}]
        state["compactions"] += 1
        return "again"
    if stop in ("pause_turn", "compaction") and "ignores_pause_turn" not in breaks:
        if "edits_compaction_block" in breaks:
            content = [{**b.model_dump(exclude_none=True), "content": "A shorter summary."} if b.type == "compaction"
                       else b for b in content]
        _add_assistant(messages, content)
        return "again"
    last = messages[-1]["content"]
    after_results = isinstance(last, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                                   for b in last)
    if stop == "end_turn" and not content and after_results and not state["nudged"] and "no_nudge" not in breaks:
        state["nudged"] = True
        messages.append({"role": "user", "content": "Please continue."})
        return "again"
    return "done"


FAST = [name for name in gradeable_scenarios() if name not in ("api_errors",)]  # api_errors waits ~5 s (retry-after)


def _grade(*breaks: str, scenarios: list[str] | None = None) -> Report:
    return grade_function(careful_loop(*breaks), scenarios or FAST, jobs=8, timeout=30)


def _not_passing(report: Report) -> dict[tuple[str, str], str]:
    """(scenario, rule) -> verdict, for every check that is neither pass nor not_reached."""
    return {(g.scenario, c.rule): rule_verdict(c, report.policy) for g in report.grades for c in g.checks
            if rule_verdict(c, report.policy) not in ("pass", "not_reached")}


@pytest.fixture(scope="module")
def correct() -> Report:
    return grade_function(careful_loop(), gradeable_scenarios(), jobs=8, timeout=30)


def test_a_careful_loop_passes_every_rule_it_reaches(correct):
    assert _not_passing(correct) == {}, correct.text()
    assert correct.verdict == "pass" and correct.passed
    assert {g.verdict for g in correct.grades} <= {"pass", "not_reached"}
    assert "every rule holds" in correct.text()


def test_a_scenario_not_reached_keeps_its_reached_rules_and_never_says_pass(correct):
    # the loop never enables thinking: the thinking scenarios' own branch is not reached, but their max_tokens
    # and tool replies were, and those rules keep their verdicts everywhere
    thinking = correct.grade("thinking_max_tokens")
    assert thinking.not_reached and thinking.verdict == "not_reached" and not thinking.reached
    held = thinking.check("bounded_max_tokens_recovery")
    assert held is not None and held.status == "pass"
    doc = document([correct])
    item = next(s for r in doc["reports"] for s in r["scenarios"] if s["name"] == "thinking_max_tokens")
    assert item["verdict"] == "not_reached"
    assert {r["rule"]: r["status"] for r in item["rules"]}["bounded_max_tokens_recovery"] == "pass"
    for s in doc["reports"][0]["scenarios"]:
        assert not (s["not_reached"] and s["verdict"] == "pass"), s["name"]
    block = correct.text().split("\n– thinking_max_tokens ", 1)[1].split("\n", 3)
    assert block[1].startswith("    not reached: the request does not enable thinking")
    assert block[2].startswith("    ✓ bounded_max_tokens_recovery ")  # shown under the – scenario, not hidden


BROKEN = {
    # break: (scenarios, the (scenario, rule) -> verdict it must give and nothing else)
    "no_retry": (["api_errors", "end_turn"], {("api_errors", "retry_with_backoff"): "fail"}),
    "two_retries": (["api_errors", "end_turn"], {("api_errors", "retry_with_backoff"): "policy"}),
    "no_compaction": (FAST, {("prompt_too_long", "bounded_compaction"): "fail",
                             ("context_window_exceeded", "bounded_compaction"): "fail",
                             ("context_window_full", "bounded_compaction"): "fail"}),
    "no_max_tokens_recovery": (FAST, {(s, "bounded_max_tokens_recovery"): "fail" for s in (
        "max_tokens_clamp", "max_tokens_continue", "max_tokens_escalate", "max_tokens_give_up",
        "thinking_max_tokens")}),  # thinking_max_tokens: its own branch not reached, its max_tokens reply was
    "ignores_pause_turn": (FAST, {("pause_turn", "pause_turn_resume"): "fail",
                                  ("redacted_thinking", "pause_turn_resume"): "fail"}),
    "no_nudge": (FAST, {("empty_end_turn", "nudge_empty_turn"): "fail"}),
    "resend_after_refusal": (FAST, {(s, "no_resend_after_refusal"): "fail" for s in (
        "refusal", "refusal_fallback_exhausted", "refusal_fallback_tool_use", "refusal_model_fallback",
        "refusal_server_fallback")}),
    # each refusal that carries a credit token (the loop sends the credit beta; claude-opus-5-5 gives one)
    "credit_changed_body": (FAST, {(s, "credit_token_retry"): "fail" for s in (
        "refusal_fallback_exhausted", "refusal_fallback_tool_use", "refusal_model_fallback",
        "refusal_server_fallback")}),
    # with server-side fallbacks: refusal.yaml's claude-sonnet-4-6 runs alone ("default" there), and
    # refusal_fallback_exhausted's chain declines
    "retry_after_chain_refusal": (FAST, {(s, "stop_after_chain_refusal"): "fail" for s in (
        "refusal", "refusal_fallback_exhausted")}),
    "drops_fallback_block": (["refusal_fallback_tool_use"], {("refusal_fallback_tool_use", "keep_fallback_block"):
                                                             "fail"}),
    # server_compaction needs a client that asks the server to compact (not gradeable from a prompt alone)
    "edits_compaction_block": (["server_compaction"], {("server_compaction", "compaction_block_unchanged"): "fail"}),
    "resend_fatal": (FAST, {("api_error_fatal", "no_retry_on_fatal"): "fail",
                            ("unsupported_field", "no_retry_on_fatal"): "fail"}),  # its 400 names a field sent
    "run_cut_tool_call": (FAST, {("incomplete_tool_use", "escalate_cut_tool_call"): "fail"}),
    "no_clamp": (FAST, {("max_tokens_clamp", "clamp_max_tokens"): "fail"}),
    "trusts_the_label": (FAST, {("mislabel_end_turn", "tool_result_pairing"): "fail"}),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_each_broken_behaviour_fails_exactly_its_rule_once(broken, correct):
    scenarios, expected = BROKEN[broken]
    report = _grade(broken, scenarios=scenarios)
    assert _not_passing(report) == expected, report.text()
    for g in report.grades:  # once: no rule is listed twice on a scenario
        assert len({c.rule for c in g.checks}) == len(g.checks), g.scenario
        assert g.verdict == (max((expected.get((g.scenario, c.rule), "pass") for c in g.checks),
                                 key=["pass", "policy", "fail"].index)
                             if any(k[0] == g.scenario for k in expected) else correct.grade(g.scenario).verdict)


def test_a_loop_on_server_side_fallbacks_passes_every_rule_it_reaches():
    report = _grade("server_fallbacks", scenarios=[s for s in FAST if s.startswith("refusal")])
    assert _not_passing(report) == {}, report.text()
    chain = report.grade("refusal_fallback_exhausted").check("stop_after_chain_refusal")
    assert chain is not None and chain.why == "the refusal of the whole fallback chain ended the run"
    kept = report.grade("refusal_fallback_tool_use").check("keep_fallback_block")
    assert kept is not None and kept.why == "1 answer served by a fallback sent back with the fallback block in place"
    served = report.grade("refusal_server_fallback")
    assert served.verdict == "pass" and served.check("stop_when_done").why.startswith(
        "the final answer (end_turn [fallback, text])")


def test_a_loop_that_asks_the_server_to_compact_resumes_with_the_block_unchanged():
    grade = _grade("server_compaction", scenarios=["server_compaction"]).grade("server_compaction")
    assert grade.verdict == "pass", grade
    assert grade.check("compaction_block_unchanged").why == "1 compaction block sent back unchanged"
    assert grade.check("pause_turn_resume").why == "1 paused answer sent back unchanged, nothing after it"


def _refusal(token: str | None = "tok-1", claim: bool = False) -> dict[str, Any]:
    details = {"type": "refusal", "category": "cyber", "fallback_credit_token": token,
               "fallback_has_prefill_claim": claim if token else None}
    return {"stop_reason": "refusal", "content": [{"type": "text", "text": "Port scanning began"}] if claim else [],
            "stop_details": details}


def _rules(record: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c.rule: (c.status, c.why) for c in grade_record(record, None).checks}


ASK = [{"role": "user", "content": "Summarise the history of port scanning tools."}]


def test_credit_token_retry_judges_the_body_the_model_and_the_token():
    def retry(model="claude-opus-4-8", messages=ASK, token="tok-1", **more):
        return {"body": {"model": model, "max_tokens": 1024, "messages": messages, "fallback_credit_token": token,
                         **more}}
    first = {"body": {"model": "claude-opus-5-5", "max_tokens": 1024, "messages": ASK}}
    same = record_from_requests([{**first, "reply": _refusal()}, retry()])
    assert _rules(same)["credit_token_retry"] == (
        "pass", "1 retry echoed the credit token to claude-opus-4-8 with the same body")
    partial = [*ASK, {"role": "assistant", "content": "Port scanning began"}]
    claimed = record_from_requests([{**first, "reply": _refusal(claim=True)}, retry(messages=partial)])
    assert _rules(claimed)["credit_token_retry"][0] == "pass"
    unclaimed = record_from_requests([{**first, "reply": _refusal(claim=False)}, retry(messages=partial)])
    assert "has no prefill claim" in _rules(unclaimed)["credit_token_retry"][1]
    changed = record_from_requests([{**first, "reply": _refusal()}, retry(system="Answer briefly.")])
    assert _rules(changed)["credit_token_retry"][1].endswith(
        "but its system changed: the retry sends the refused body unchanged, or with one assistant message that "
        "continues the partial answer")
    other = record_from_requests([{**first, "reply": _refusal()}, retry(token="tok-2")])
    assert "did not give" in _rules(other)["credit_token_retry"][1]
    # to the model that refused: a resend there fails no_resend_after_refusal as well (both rules say it)
    same_model = _rules(record_from_requests([{**first, "reply": _refusal()}, retry(model="claude-opus-5-5")]))
    assert "the model that refused" in same_model["credit_token_retry"][1]
    assert same_model["no_resend_after_refusal"][0] == "fail"
    # retrying without the token is allowed (billed as a cache write), and the record never holds the token
    untoken = record_from_requests([{**first, "reply": _refusal()}, {"body": {**first["body"],
                                                                               "model": "claude-opus-4-8"}}])
    assert _rules(untoken)["credit_token_retry"][0] == "pass"
    assert "tok-1" not in json.dumps(same)


def test_stop_after_chain_refusal_allows_one_retry_on_the_recommended_model():
    chain = {"body": {"model": "claude-opus-5-5", "max_tokens": 1024, "messages": ASK, "fallbacks": "default"}}
    again = {"body": {"model": "claude-opus-4-8", "max_tokens": 1024, "messages": ASK}}
    refused = {"stop_reason": "refusal", "blocks": [], "stop_details": {"type": "refusal"}}
    assert _rules(record_from_requests([{**chain, "reply": refused}]))["stop_after_chain_refusal"][0] == "pass"
    failed = _rules(record_from_requests([{**chain, "reply": refused}, again]))["stop_after_chain_refusal"]
    assert failed[0] == "fail" and "the whole chain declined" in failed[1]
    busy = {**refused, "stop_details": {"type": "refusal", "recommended_model": "claude-opus-4-8"}}
    assert _rules(record_from_requests([{**chain, "reply": busy}, again]))["stop_after_chain_refusal"][0] == "pass"


def test_keep_fallback_block_and_compaction_block_unchanged():
    served = [{"type": "fallback", "from": {"model": "claude-opus-5-5"}, "to": {"model": "claude-opus-4-8"}},
              {"type": "tool_use", "id": "t1", "name": "calculator", "input": {"expression": "2+2"}}]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "4"}]}
    first = {"body": {"model": "claude-opus-5-5", "max_tokens": 1024, "messages": ASK},
             "reply": {"stop_reason": "tool_use", "content": served}}

    def then(content):
        return {"body": {**first["body"], "messages": [*ASK, {"role": "assistant", "content": content}, result]}}
    assert _rules(record_from_requests([first, then(served)]))["keep_fallback_block"][0] == "pass"
    dropped = _rules(record_from_requests([first, then(served[1:])]))["keep_fallback_block"]
    assert dropped[0] == "fail" and "without its fallback block" in dropped[1]
    block = {"type": "compaction", "content": "Summary of the work.", "signature": "sig", "encrypted_content": "e"}
    compacted = {"body": first["body"], "reply": {"stop_reason": "compaction", "content": [block]}}

    def resumed(content):
        return {"body": {**first["body"], "messages": [*ASK, {"role": "assistant", "content": content}]}}
    assert _rules(record_from_requests([compacted, resumed([block])]))["compaction_block_unchanged"] == (
        "pass", "1 compaction block sent back unchanged")
    edited = _rules(record_from_requests([compacted, resumed([{**block, "content": "Shorter."}])]))
    assert edited["compaction_block_unchanged"][0] == "fail"
    assert "back changed" in edited["compaction_block_unchanged"][1]
    left_out = _rules(record_from_requests([compacted, resumed([{"type": "text", "text": "Go on."}])]))
    assert "left out the compaction block" in left_out["compaction_block_unchanged"][1]


def test_a_crash_after_the_answer_never_passes_and_fails_ends_cleanly_alone():
    report = _grade("crash_after_answer", scenarios=["end_turn", "tool_use", "api_error_fatal", "refusal"])
    assert _not_passing(report) == {(s, "ends_cleanly"): "fail" for s in ("end_turn", "tool_use", "refusal")}
    assert "a KeyError is a bug in the loop's own code" in report.grade("end_turn").check("ends_cleanly").why
    # a fatal 401 ending the run by raising is keeping no_retry_on_fatal, and the scenario says how it ended
    fatal = report.grade("api_error_fatal")
    assert fatal.verdict == "pass" and fatal.ending.startswith("raised AuthenticationError")
    assert "which no retry can fix: ending with an error is right" in fatal.check("ends_cleanly").why
    assert "✓ ends_cleanly" in report.text() and report.verdict == "fail"


def test_a_raise_after_a_400_is_counted_once():
    # no compaction, and the loop raises on the 400: bounded_compaction fails and says so; ends_cleanly, whose
    # ending that is, is not charged again (nor shown beside it)
    report = _grade("no_compaction", scenarios=["prompt_too_long"])
    grade = report.grade("prompt_too_long")
    assert grade.failed == ["bounded_compaction"] and grade.check("ends_cleanly") is None
    assert "the loop raised BadRequestError" in grade.check("bounded_compaction").why


def test_one_policy_behaviour_is_listed_once_whatever_the_scenarios():
    checks = [Check("retry_with_backoff", "policy", f"request {n} ...", "gives up after 2 retries")
              for n in (3, 4)]
    groups = policy_groups([("api_errors", checks[:1]), ("tour", checks[1:]), ("end_turn", [])])
    assert groups == [("retry_with_backoff", "gives up after 2 retries", ["api_errors", "tour"])]


def test_policy_mode_changes_every_output_the_same_way():
    report = _grade("two_retries", scenarios=["api_errors", "end_turn"])
    key = ("api_errors", "retry_with_backoff")
    for mode, verdict, exits_0 in (("report", "policy", True), ("strict", "fail", False), ("ignore", "pass", True)):
        report.under(mode)
        assert _not_passing(report) == ({key: verdict} if verdict != "pass" else {})
        assert report.passed is exits_0
        doc = json.loads(json.dumps(document([report])))
        rules = {(s["name"], r["rule"]): r for s in doc["reports"][0]["scenarios"] for r in s["rules"]}
        assert rules[key]["status"] == verdict and rules[key]["policy"].startswith("gives up on a transient error")
        assert doc["verdict"] == {"report": "policy", "strict": "fail", "ignore": "pass"}[mode]
        cases = ET.fromstring(junit_xml([report]).split("\n", 1)[1])
        case = next(c for c in cases.iter("testcase") if (c.get("classname"), c.get("name")) == key)
        assert (case.find("failure") is not None) is (verdict == "fail")
        assert (key in failures([report])) is (verdict == "fail")  # a baseline records it only under strict
        summary = "policy: differs from the reference loop's choice (1 behaviour, each listed once"
        assert (summary in report.text()) is (mode != "ignore")
    report.under("report")


def test_a_saved_report_loads_back_with_the_same_verdicts_under_any_mode(tmp_path):
    from agentlab.grading.command import load_document

    report = _grade("two_retries", scenarios=["api_errors", "thinking_max_tokens"]).under("strict")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(document([report])), encoding="utf-8")
    (loaded,) = load_document(path)
    for mode in ("report", "strict", "ignore"):
        assert [g.verdict for g in loaded.under(mode).grades] == [g.verdict for g in report.under(mode).grades]
        assert loaded.text() == report.text()


def test_the_heatmap_counts_what_the_verdicts_count(correct):
    pytest.importorskip("matplotlib")
    from agentlab_grade import grade_heatmap

    fig = grade_heatmap([correct])
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    checks = [c for g in correct.grades if (c := g.check("bounded_max_tokens_recovery")) is not None]
    held, _, differs, reached = cell(checks)
    assert reached > len([g for g in correct.grades if g.scenario.startswith("max_tokens") and not g.not_reached])
    aside = [g.scenario for g in correct.grades if g.not_reached and g.check("bounded_max_tokens_recovery")]
    assert aside == ["thinking_max_tokens"]
    # the thinking scenario's reached rule counts too, marked apart: its own branch was not reached
    assert f"{held + differs}/{reached}\n1 in –" in texts


def test_third_party_text_is_printed_without_escape_sequences():
    report = _grade("escapes", "no_compaction", scenarios=["prompt_too_long"])
    text = report.text()
    assert "\x1b" not in text and "\x07" not in text and "\x08" not in text
    assert "the loop raised RuntimeError (gave up^H in red)" in text
    ET.fromstring(junit_xml([report]).split("\n", 1)[1])  # well-formed XML: no control characters in it


def test_the_verdict_functions_agree_with_the_report():
    checks = [Check("sends_the_prompt", "pass", "ok"), Check("stop_when_done", "pass", "ok")]
    assert scenario_verdict(checks) == "pass"
    assert scenario_verdict(checks, branch_reached=False) == "not_reached"
    assert scenario_verdict(checks[:1]) == "not_reached"  # only a universal rule judged it
    assert scenario_verdict([]) == "fail"  # a grade shows its work
    crash = Check("ends_cleanly", "fail", "crashed")
    assert counted_once([*checks, crash]) == [*checks, crash]
    other = Check("bounded_compaction", "fail", "no")
    assert counted_once([other, crash]) == [other]


def test_a_server_fault_before_an_exit_is_never_a_pass():
    # the server's own usage check fails on the second reply (500, x-should-retry false): the loop raises on it,
    # as a careful loop may. No reply after the fault was the live API's: the scenario does not pass, the report
    # says the server failed, and the rules reached before it keep their verdicts
    from agentlab.backend.scenario import parse_scenario
    from agentlab.grading.report import grade_record
    from agentlab.grading.serving import function_runner
    from agentlab.observatory.observe import observe_scenario

    broken = parse_scenario({"description": "a tool call, then a reply whose usage disagrees", "tools": "demo",
                             "prompt": "Read notes.txt.", "steps": [
        {"content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "notes.txt"}}],
         "stop_reason": "tool_use"},
        {"content": [{"type": "text", "text": "Done."}], "usage": {"input_tokens": 90_000}}]}, "inline")
    record = observe_scenario("careful", broken, version="graded", timeout=30, runner=function_runner(careful_loop()))
    assert record["result"].get("raised") == "InternalServerError" and record["server_errors"]
    grade = grade_record(record, broken)
    report = Report("careful", [grade])
    assert grade.verdict == "not_reached", report.text()
    assert grade.check("tool_result_pairing").status == "pass"  # reached before the fault: kept
    assert grade.check("ends_cleanly").status == "not_reached"
    text = report.text()
    assert "request 2: grade's own server failed (scenario_error:" in text
    assert "grade's own server failed in inline: not a verdict on the client" in text
    assert "every rule holds" not in text and "no scenario passed: none reached its own branch" in text
    item = document([report])["reports"][0]["scenarios"][0]
    assert item["verdict"] == "not_reached" and any("server failed" in n for n in item["not_reached"])
    cases = {c.get("name"): c for c in ET.fromstring(junit_xml([report])).iter("testcase")}
    assert list(cases["tool_result_pairing"]) == []  # a reached rule passes in JUnit too
    assert cases["ends_cleanly"].find("skipped") is not None


def test_a_request_with_nothing_to_refuse_does_not_reach_unsupported_field():
    def bare(client, prompt, tools, run_tool):  # model, messages and max_tokens only: no field to refuse
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024,
                                       messages=[{"role": "user", "content": prompt}])
        return "".join(b.text for b in reply.content if b.type == "text")

    grade = grade_function(bare, ["unsupported_field"]).grades[0]
    assert grade.verdict == "not_reached", grade
    assert grade.not_reached == ["the request sends nothing beyond model, messages and max_tokens: no field "
                                 "such a server could refuse"]
    careful = grade_function(careful_loop(), ["unsupported_field"]).grades[0]  # it sends tools: refused
    assert careful.verdict == "pass" and not careful.not_reached
    assert careful.check("no_retry_on_fatal").status == "pass"


def test_a_loop_that_returned_has_ended_though_its_thread_is_still_closing():
    """A loop's thread says it is done (the runner's wait ends) before the thread itself is over: what the loop
    returned is torn down after that, here slowly. A loop that returned is graded as having ended, not as stopped
    at the timeout; this was a race that a loaded machine lost (pause_turn "did not end within 30 s; stopped
    after 2 requests", in a grade that took 6 s)."""
    import time

    class Answer(str):
        def __del__(self) -> None:
            time.sleep(0.3)  # the loop's thread is still alive when its wait has ended

    def answers(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
        reply = client.messages.create(model=model, max_tokens=1024, messages=[{"role": "user", "content": prompt}])
        return Answer("".join(b.text for b in reply.content if b.type == "text"))

    report = grade_function(answers, ["end_turn"], jobs=1, timeout=30)
    assert report.passed and report.grade("end_turn").verdict == "pass", report.text()
    assert "did not end" not in report.text()
