"""One meaning per number: the max_tokens counts agree everywhere they are shown, the answer after
continuations is the whole text, and every scenario's usage agrees with its requests and replies."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from forked import run_forked

from agentlab.ui import plots
from agentlab.core.errors import ScenarioError
from agentlab.lab import scenario_loop
from agentlab.ui.report import format_event, print_trace
from agentlab.backend.models import model_limits
from agentlab.backend.scenario import load_scenario, parse_scenario, scenario_names
from agentlab.backend.scripted import USAGE_TOLERANCE_SHARE, USAGE_TOLERANCE_TOKENS, ScenarioEngine, within_tolerance
from agentlab.core.trace import Trace
from agentlab.ui.widgets import Stepper, render_decision

REPO = Path(__file__).resolve().parent.parent

# scenario: (escalations, continuations, subtype)
COUNTS = {
    "max_tokens_give_up": (1, 3, "error_max_output_tokens"),
    "max_tokens_escalate": (1, 0, "success"),
    "max_tokens_continue": (1, 1, "success"),
    "incomplete_tool_use": (1, 0, "success"),
}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_the_max_tokens_counts_agree_everywhere(name: str, tmp_path: Path) -> None:
    escalations, continuations, subtype = COUNTS[name]
    stepper = Stepper(name, show_plots=False)
    stepper.run_to_end()
    stepper.update()
    loop = stepper.loop
    result = loop.result
    # the result, its JSON form and its event read back
    assert result.subtype == subtype
    assert (result.escalations, result.continuations) == (escalations, continuations)
    data = result.to_dict()
    assert (data["escalations"], data["continuations"]) == (escalations, continuations)
    assert "recoveries" not in data   # no sum of unlike things under a third name
    event = loop.trace.of_kind("result")[-1].data
    assert (event["escalations"], event["continuations"]) == (escalations, continuations)
    # the banner
    banner = stepper.result_pane.value
    assert f"escalations {escalations}" in banner
    assert (f"continuations {continuations}" in banner) == bool(continuations)
    # the stepper's loop state: escalations per run; continuations in a row (the run's total when it ended
    # while still cut off, 0 after a reply that was not cut)
    state = re.search(r"Loop state: (.*?)</div>", render_decision([], loop.trace.events, loop)).group(1)
    assert f"escalations {escalations}/1" in state
    in_a_row = continuations if subtype != "success" else 0
    assert f"continuations in a row {in_a_row}/3" in state
    # the plot data
    run = plots.read_run(loop.trace.to_frame())
    counter = plots.COUNTERS[0]
    counted = {s.label: len(plots._occurrences(run, s.what)) for s in counter.series}
    assert counted == {"escalations": escalations, "continuations": continuations}
    limits = {s.label: run.limits[s.limit_key] for s in counter.series}
    assert limits == {"escalations": 1, "continuations": 3}
    # the end message says the same two counts
    if subtype == "error_max_output_tokens":
        assert result.result == (f"The response hit max_tokens (64000) again after "
                                 f"{_plural(escalations, 'escalation')} and {_plural(continuations, 'continuation')}; "
                                 "the limit is 3 continuations in a row.")
        ended = loop.trace.of_kind("transition")[-1].data
        assert ended["branch"] == "max_tokens_give_up"
        assert (ended["escalations"], ended["continuations_in_a_row"]) == (escalations, continuations)


def test_a_cut_tool_call_after_the_escalation_ends_the_run_and_says_why() -> None:
    cut = {"content": [{"type": "tool_use", "name": "calculator", "input": {}, "partial_json": '{"expr'}],
           "stop_reason": "max_tokens"}
    text_cut = {"content": [{"type": "text", "text": "Let me"}], "stop_reason": "max_tokens"}
    sc = parse_scenario({"description": "text cut, then a tool call cut", "tools": "demo",
                         "steps": [text_cut, cut]}, "inline")
    result = scenario_loop(sc).run()
    assert (result.subtype, result.escalations, result.continuations) == ("error_max_output_tokens", 1, 0)
    assert result.result == ("The response hit max_tokens (64000) inside a tool call, which cannot be continued, "
                             "and 1 escalation used of 1.")


# --- the answer after continuations ---------------------------------------------------------------------

PIECES = ("2 is the only even prime. 3 is the first odd prime. 5 ends in five. 7 is",
          " a Mersenne exponent. ... 199 is the last prime below 200.")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_the_answer_after_a_continuation_is_the_whole_text(stream: bool, tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    loop = scenario_loop("max_tokens_continue", stream=stream, trace=str(path))
    result = loop.run()
    loop.trace.close()
    assert result.continuations == 1
    assert result.result == "".join(PIECES)
    assert [e for e in Trace.load(path) if e.kind == "result"][-1].data["result"] == "".join(PIECES)


def test_the_cli_prints_the_whole_answer_in_its_json() -> None:
    ran = run_forked(["run", "max_tokens_continue", "--json"], cwd=REPO)
    assert ran.code == 0, ran.stderr
    data = json.loads(ran.stdout.strip().splitlines()[-1])
    assert data["result"] == "".join(PIECES) and data["continuations"] == 1


def test_continuations_are_joined_in_order_and_a_new_turn_starts_afresh() -> None:
    cut = [{"content": [{"type": "text", "text": f"part {i}. "}], "stop_reason": "max_tokens"} for i in range(3)]
    sc = parse_scenario({"description": "three pieces", "steps": [
        *cut, {"content": [{"type": "text", "text": "end."}], "stop_reason": "end_turn"}]}, "inline")
    result = scenario_loop(sc).run()
    # the first cut is escalated (its text thrown away); the next two are kept and continued
    assert (result.escalations, result.continuations) == (1, 2)
    assert result.result == "part 1. part 2. end."
    tools = parse_scenario({"description": "cut, then tools", "tools": "demo", "steps": [
        cut[0], cut[1],
        {"content": [{"type": "tool_use", "name": "calculator", "input": {"expression": "1 + 1"}}],
         "stop_reason": "tool_use"},
        {"content": [{"type": "text", "text": "2."}], "stop_reason": "end_turn"}]}, "inline")
    assert scenario_loop(tools).run().result == "2."   # the pieces belonged to the turn before the tools


# --- scripted usage agrees with the request and the reply ------------------------------------------------

def _responses(name: str):
    """(the request body as the engine received it, the response event, why it is staged) per answered call."""
    loop = scenario_loop(name)
    try:
        loop.run()
    except Exception:  # a scenario that raises is reported by its own tests
        pass
    engine: ScenarioEngine = loop.engine
    requests = engine.message_requests
    out = []
    for event in loop.trace.of_kind("response"):
        recorded = requests[event.call - 1]
        out.append((recorded.body, event.data, recorded.staged, engine))
    return out


@pytest.mark.parametrize("name", scenario_names())
def test_every_scenarios_usage_agrees_with_its_requests_and_replies(name: str) -> None:
    """A max_tokens stop reports output_tokens equal to the request's max_tokens; input_tokens are within the
    stated tolerance of the engine's estimate of the request; output_tokens of the reply's; input and output
    together fit the scenario's context window; unless staged."""
    sc = load_scenario(name)
    window = sc.context_window or model_limits(sc.model).context_window
    checked = 0
    for body, data, staged, engine in _responses(name):
        if staged:
            assert staged.strip()
            continue
        checked += 1
        # the prompt and the reply both live in the context window: the API cannot answer past its end
        used = data["input_tokens"] + (data.get("cache_creation_input_tokens") or 0) + \
            (data.get("cache_read_input_tokens") or 0) + data["output_tokens"]
        assert used <= window, (f"{name}: a reply to a {used - data['output_tokens']}-token prompt reports "
                                f"{data['output_tokens']} output tokens, {used} in all, past the {window}-token "
                                "window (give the scenario its model's context_window, or stage the number)")
        if data["stop_reason"] == "max_tokens":
            assert data["output_tokens"] == body["max_tokens"], (name, data["output_tokens"], body["max_tokens"])
        size = engine.request_tokens(body)
        # the whole prompt: uncached input plus what was written to and read from the prompt cache
        prompt = data["input_tokens"] + (data.get("cache_creation_input_tokens") or 0) + \
            (data.get("cache_read_input_tokens") or 0)
        assert within_tolerance(prompt, size), (name, data["input_tokens"], size)
    # a scenario that never gets a message back (an error on the first call) has nothing to check
    assert checked or not any(data for _, data, _, _ in _responses(name)), name


def test_the_tolerance_is_stated_where_scenarios_are_written() -> None:
    readme = (REPO / "data" / "scenarios" / "README.md").read_text(encoding="utf-8")
    assert f"{USAGE_TOLERANCE_SHARE:.0%}" in readme and f"{USAGE_TOLERANCE_TOKENS} tokens" in readme
    assert "staged:" in readme


def test_the_check_catches_a_made_up_number() -> None:
    sc = parse_scenario({"description": "invented usage", "steps": [
        {"content": [{"type": "text", "text": "Hi."}], "usage": {"input_tokens": 199000}}]}, "inline")
    loop = scenario_loop(sc)
    result = loop.run()
    assert result.subtype == "error_api"
    [failure] = loop.engine.failures
    assert "input_tokens 199000, but the request is about" in failure and "'staged'" in failure
    assert "step 0" in failure and "'inline'" in failure


def test_the_check_catches_an_invented_output_count() -> None:
    sc = parse_scenario({"description": "invented output", "steps": [
        {"content": [{"type": "text", "text": "Hi."}], "usage": {"output_tokens": 1400}}]}, "inline")
    loop = scenario_loop(sc)
    assert loop.run().subtype == "error_api"
    assert "output_tokens 1400, but the reply is about" in loop.engine.failures[0]


def test_a_max_tokens_reply_cannot_state_its_own_output_count() -> None:
    with pytest.raises(ScenarioError, match=r"steps\[0\].*max_tokens reply reports the request's max_tokens"):
        parse_scenario({"description": "x", "steps": [
            {"content": [{"type": "text", "text": "Hi"}], "stop_reason": "max_tokens",
             "usage": {"output_tokens": 5}}]}, "inline")


@pytest.mark.parametrize("step, message", [
    ({"content": [], "usage": {"input_tokens": 5}, "staged": "  "}, "cannot be empty"),
    ({"content": [], "staged": "why"}, "needs the 'usage' or the 'error' whose numbers it stages"),
])
def test_staged_is_validated(step, message) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario({"description": "x", "steps": [step]}, "inline")


def test_a_staged_number_says_so_where_it_is_shown(capsys) -> None:
    sc = load_scenario("context_window_full")
    [why] = [s.staged for s in sc.steps if s.staged]
    stepper = Stepper("context_window_full", show_plots=False)
    stepper.run_to_end()
    stepper.update()
    pane = stepper.transcript_pane.value
    # the requested model's window less the reply's 1,000 output tokens: a 1M window (data/models.yaml)
    assert pane.count("agentlab-staged") == 1 and "999000/1000" in pane
    assert re.search(r"999000/1000 <span class=\"agentlab-staged\"[^>]*>\(staged by the scenario: " + re.escape(
        why[:30]), pane)
    loop = stepper.loop
    print_trace(loop, kinds=("response",))
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if "staged" in line] == [
        next(line for line in lines if "in/out=999000/1000" in line)]
    assert f"(staged: {why})" in lines[3]
    plain = format_event(loop.trace.of_kind("response")[3])
    assert "staged" not in plain   # only a caller that knows the scenario can say so


def test_a_continued_reply_weighs_what_it_reported_in_the_next_request() -> None:
    loop = scenario_loop("max_tokens_give_up")
    loop.run()
    inputs = [e.data["input_tokens"] for e in loop.trace.of_kind("response")]
    outputs = [e.data["output_tokens"] for e in loop.trace.of_kind("response")]
    assert outputs == [100, 64000, 64000, 64000, 64000]
    # every continued 64,000-token reply is in the next request, so the input grows by about that much
    assert all(63_900 < later - earlier < 64_200 for earlier, later in zip(inputs[1:], inputs[2:], strict=False))
    estimates = [e.data["context_tokens"] for e in loop.trace.of_kind("request")]
    assert all(within_tolerance(reported, estimate) for reported, estimate in zip(inputs, estimates, strict=True))


def test_trace_round_trip_keeps_the_two_counts(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    loop = scenario_loop("max_tokens_give_up", trace=Trace(path))
    loop.run()
    loop.trace.close()
    from agentlab.core.loop import Result

    back = Result.from_event([e for e in Trace.load(path) if e.kind == "result"][-1].data)
    assert (back.escalations, back.continuations) == (1, 3)


def test_a_staged_error_says_so_in_the_stepper_and_the_trace(capsys) -> None:
    stepper = Stepper("prompt_too_long", show_plots=False)
    stepper.run_to_end()
    stepper.update()
    pane = stepper.transcript_pane.value
    assert re.search(r"1250000 tokens &gt; 1000000 maximum <span class=\"agentlab-staged\"", pane)
    print_trace(stepper.loop, kinds=("api_error",))
    assert "1250000 tokens > 1000000 maximum (staged: the request is a few hundred tokens" in capsys.readouterr().out


def test_a_window_as_large_as_the_models_own_needs_no_client_setting() -> None:
    """max_tokens_give_up runs in its model's own 1M-token window so that its numbers fit; a client needs no
    setting for a window as large as the model's, so the scenario stays gradeable (a small window still is not)."""
    from agentlab.grading.command import gradeable_scenarios, needs_settings

    give_up = load_scenario("max_tokens_give_up")
    assert give_up.context_window is not None and give_up.context_window >= model_limits(give_up.model).context_window
    assert needs_settings(give_up) == [] and "max_tokens_give_up" in gradeable_scenarios()
    assert needs_settings(load_scenario("door_code")) == ["a small context window"]
