"""The exercise of lesson 12: the notebook's naive loop is graded and reported as "Not solved yet" with the
failed rules named (no exception); the solution shown on demand passes every rule on every gradeable
scenario; wrong loops fail with an AssertionError naming the scenario, the rule and what the loop did."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import anthropic
import pytest

from agentlab.exercises import WrongAnswer, lesson12, solution_source
from agentlab.exercises.lesson12 import STUB, card_summary, check_agent_loop, failed_beyond, grade_loop, side_by_side
from agentlab.grading.command import RULES, Check, Report, ScenarioGrade, grade_function, gradeable_scenarios

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "12_your_loop_graded.ipynb"
FEW = ["pause_turn", "mislabel_end_turn", "max_tokens_give_up", "end_turn"]


def _cells() -> list[dict[str, Any]]:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def _notebook_stub():
    (cell,) = [c for c in _cells() if "exercise" in c.get("metadata", {}).get("tags", [])]
    namespace: dict[str, Any] = {}
    exec(compile("".join(cell["source"]), "12_your_loop_graded:exercise", "exec"), namespace)
    return namespace["agent_loop"]


def test_the_notebook_starts_from_the_stub_and_defines_no_solution():
    (cell,) = [c for c in _cells() if "exercise" in c.get("metadata", {}).get("tags", [])]
    assert "".join(cell["source"]).strip() == STUB.strip()
    code = "\n".join("".join(c["source"]) for c in _cells() if c["cell_type"] == "code")
    assert "with_options" not in code and "messages.stream" not in code  # the solution's lines are not shown


def test_the_stub_is_graded_and_not_solved_yet_names_the_failed_rules(capsys):
    check_agent_loop(_notebook_stub(), scenarios=FEW)  # no exception
    out = capsys.readouterr().out
    assert out.startswith("Not solved yet: the naive loop fails 3 rules in 3 of 4 scenarios — ")
    for rule in ("tool_result_pairing", "bounded_max_tokens_recovery", "pause_turn_resume"):
        assert rule in out
    assert 'show_solution("lesson12")' in out


def test_the_solution_passes_every_rule_on_every_gradeable_scenario(capsys):
    report = lesson12.grade_loop(lesson12.SOLUTION)
    check_agent_loop(lesson12.SOLUTION, report)
    out = capsys.readouterr().out
    assert not report.failed
    # the solution sets no stop sequence and enables no thinking: those scenarios' own branches are not reached,
    # and the pass line says so rather than "all 23"
    unreached = [g.scenario for g in report.grades if g.verdict == "not_reached"]
    assert set(unreached) == {"redacted_thinking", "stop_sequence", "thinking_max_tokens", "thinking_tool_use"}
    n = len(gradeable_scenarios())
    assert f"agent_loop: every rule holds on the {n - len(unreached)} of {n} scenarios it reached" in out
    assert f"not reached: {', '.join(unreached)} (the report card says why)" in out


def test_the_solution_uses_only_the_sdk():
    source = solution_source("lesson12")
    assert "agentlab" not in source and "import anthropic" in source


def _content_only(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
    """Decides on the content (tools run whatever the label) and nothing else."""
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = client.messages.create(model=model, max_tokens=1024, tools=tools, messages=messages)
        messages.append({"role": "assistant", "content": reply.content})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in reply.content if b.type == "text")
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": run_tool(u.name, u.input)} for u in uses]})


def _resends(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
    """Sends the same request again after max_tokens, three times."""
    messages = [{"role": "user", "content": prompt}]
    for _ in range(4):
        reply = client.messages.create(model=model, max_tokens=1024, tools=tools, messages=messages)
        if reply.stop_reason != "max_tokens":
            break
    return "".join(b.text for b in reply.content if b.type == "text")


def _never_calls(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
    raise ValueError("forgot to call the model")


def _forgetful(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
    """Compacts by throwing away everything but the prompt."""
    messages = [{"role": "user", "content": prompt}]
    for _ in range(12):
        try:
            reply = client.messages.create(model=model, max_tokens=1024, tools=tools, messages=messages)
        except anthropic.BadRequestError:
            messages = messages[:1]
            continue
        if reply.stop_reason == "model_context_window_exceeded":
            messages = messages[:1]
            continue
        messages.append({"role": "assistant", "content": reply.content})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "done"
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": run_tool(u.name, u.input)} for u in uses]})
def _escalates_unstreamed(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
    """Escalates to 64,000 without streaming or a timeout: the SDK raises before sending."""
    messages = [{"role": "user", "content": prompt}]
    max_tokens = 1024
    while True:
        reply = client.messages.create(model=model, max_tokens=max_tokens, tools=tools, messages=messages)
        if reply.stop_reason == "max_tokens":
            max_tokens = 64000
            continue
        messages.append({"role": "assistant", "content": reply.content})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "done"
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": run_tool(u.name, u.input)} for u in uses]})


@pytest.mark.parametrize("loop, scenarios, message", [
    (_forgetful, ["context_window_exceeded"],
     r"^context_window_exceeded · rule bounded_compaction .*yours: request 4 got model_context_window_exceeded "
     r"\[text\]; request 5 kept nothing but the prompt"),
    (_escalates_unstreamed, ["incomplete_tool_use"],
     r"^incomplete_tool_use · rule escalate_cut_tool_call .*the loop raised ValueError \(Streaming is required for "
     r"operations that may take longer than 10 minutes.*\) and ended there instead of asking again"),
    (_content_only, ["mislabel_end_turn", "max_tokens_give_up"],
     r"^max_tokens_give_up · rule bounded_max_tokens_recovery \(row 3\): a careful loop raises max_tokens or keeps "
     r"the partial answer .*; yours: request 1 was cut off \(max_tokens \[text\]\); the run ended after "
     r"0 escalations and 0 continuations"),
    (_resends, ["max_tokens_give_up"],
     r"^max_tokens_give_up · rule bounded_max_tokens_recovery .*yours: request 1 was cut off; request 2 sent it "
     r"again at the same max_tokens \(1024\)"),
    (_never_calls, ["end_turn", "tool_use"],
     r"^end_turn · rule sends_the_prompt .*yours: no request reached the server \(raised ValueError\)\n"
     r"fails 1 rule in 2 scenarios \(the details per scenario follow\):\n    ✗ sends_the_prompt: end_turn, tool_use$"),
])
def test_wrong_loops_fail_naming_scenario_rule_and_what_they_did(loop, scenarios, message):
    with pytest.raises(AssertionError, match=message):
        check_agent_loop(loop, scenarios=scenarios)


def _naive_edited():
    """The notebook's naive loop with one harmless line more: a learner's edit, graded as an answer."""
    (cell,) = [c for c in _cells() if "exercise" in c.get("metadata", {}).get("tags", [])]
    source = "".join(cell["source"]).replace('    messages = [', '    edited = True\n    messages = [', 1)
    namespace: dict[str, Any] = {}
    exec(compile(source, "12_your_loop_graded:edited", "exec"), namespace)
    return namespace["agent_loop"]


def test_the_headline_is_a_real_failure_and_the_rules_come_one_a_line():
    """api_errors sorts first, but its rule fails only as a policy difference: the check and the report card lead
    with the rule that fails outright and list every failed rule on a line of its own, the policy one last."""
    loop, scenarios = _naive_edited(), ["api_errors", "pause_turn", "max_tokens_give_up"]
    report = grade_loop(loop, scenarios)
    lines = report.text().splitlines()
    assert lines[1] == "fails 3 rules in 3 scenarios (the details per scenario follow):"
    assert lines[2:5] == ["    ✗ bounded_max_tokens_recovery: max_tokens_give_up",
                          "    ✗ pause_turn_resume: pause_turn",
                          "    ✗ retry_with_backoff: api_errors (policy: differs from the reference loop's choice, "
                          "counted as a failure: --policy strict)"]
    with pytest.raises(WrongAnswer) as caught:
        check_agent_loop(loop, scenarios=scenarios)
    first, *rest = str(caught.value).splitlines()
    assert first.startswith("max_tokens_give_up · rule bounded_max_tokens_recovery (row 3): a careful loop ")
    assert rest == lines[1:5]


def test_the_check_reads_a_report_of_the_same_function_only(capsys):
    stub = _notebook_stub()
    report = grade_loop(stub)
    (api_errors,) = [g for g in report.grades if g.scenario == "api_errors"]
    # the SDK's two retries differ from the reference loop's choice (policy): the lesson counts that as failing
    assert api_errors.check("retry_with_backoff").status == "policy"
    assert api_errors.verdict == "fail" and api_errors.failed == ["retry_with_backoff"] and report.policy == "strict"
    (pause,) = [g for g in report.grades if g.scenario == "pause_turn"]
    assert pause.failed == ["pause_turn_resume"]
    failing = len(report.failed)
    pause.checks[:] = [Check("ends_on_its_own", "pass", "ok")]  # grading could not give it: read, not redone
    rules = {rule for names in report.failed.values() for rule in names}
    check_agent_loop(stub, report)
    assert f"fails {len(rules)} rules in {failing - 1} of {len(report.grades)} scenarios" in capsys.readouterr().out
    assert "pause_turn" not in report.failed
    check_agent_loop(_notebook_stub(), report, scenarios=FEW)  # another function object: graded again
    assert "fails 3 rules in 3 of 4 scenarios" in capsys.readouterr().out


def test_a_loop_that_hangs_is_graded_as_stopped():
    def hangs(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
        client.messages.create(model=model, max_tokens=100, messages=[{"role": "user", "content": prompt}])
        import threading

        threading.Event().wait(5)

    report = grade_function(hangs, ["end_turn"], timeout=0.5)
    # it got the final answer and then hung: the answer did not end the run, and the run did not end on its own
    assert report.failed == {"end_turn": ["stop_when_done", "ends_on_its_own"]}
    assert "did not end within 0.5 s; stopped after 1 request" in report.text()
    assert "still running at the timeout" in report.text()


def test_a_loop_is_handed_the_scenarios_server_tools():
    seen: list[list[str]] = []

    def records_tools(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
        seen.append([t["name"] for t in tools])
        client.messages.create(model=model, max_tokens=100, tools=tools, messages=[{"role": "user", "content": prompt}])

    report = grade_function(records_tools, ["pause_turn"], jobs=1)
    assert seen == [["calculator", "get_weather", "read_file", "run_tests", "web_search"]]
    assert report.grade("pause_turn").notes == []  # offered, so nothing to note
    report = grade_function(lambda client, prompt, tools, run_tool: client.messages.create(
        model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": prompt}]), ["pause_turn"])
    # never offered: the live API would not pause a search it was not offered, so the branch is not reached
    assert "server tool web_search, which the request does not offer" in report.grade("pause_turn").not_reached[0]
    assert report.grade("pause_turn").mark == "–" and report.passed


def test_side_by_side_marks_each_report(capsys):
    report = grade_loop(_content_only, ["pause_turn", "tool_use"])
    table = side_by_side([report])
    assert table.loc["pause_turn", "your _content_only"] == "✗ pause_turn_resume"
    assert table.loc["tool_use", "your _content_only"] == "✓"


def _card(client: str, failing: dict[str, list[str]], passing: tuple[str, ...] = ("end_turn",),
          unjudged: tuple[str, ...] = ()) -> Report:
    grades = [ScenarioGrade(name, [Check(rule, "fail", "why") for rule in rules]) for name, rules in failing.items()]
    grades += [ScenarioGrade(name, [Check("stop_when_done", "pass", "ok")]) for name in passing]
    grades += [ScenarioGrade(name, [Check("ends_on_its_own", "pass", "ok")]) for name in unjudged]
    return Report(client, grades)


def test_card_summary_counts_and_names_what_a_later_version_adds(capsys):
    old = _card("claude-code 1.0", {"pause_turn": ["pause_turn_resume"]}, unjudged=("door_code",))
    new = _card("claude-code 2.0", {"pause_turn": ["pause_turn_resume"], "refusal": ["no_resend_after_refusal"]})
    assert failed_beyond(new, old) == {"refusal": ["no_resend_after_refusal"]}
    assert failed_beyond(old, new) == {}
    card_summary([old, new, _card("other 1.0", {})])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "claude-code 1.0: 3 scenarios, 1 pass, 1 fail, 1 not reached; not reached (–): door_code"
    assert out[0].split(": ", 1)[1].startswith(old.text().splitlines()[0].split(": ", 1)[1])  # the report's words
    assert "    ✗ pause_turn_resume: pause_turn" in out
    assert "    fails beyond claude-code 1.0: refusal (no_resend_after_refusal)" in out
    assert "other 1.0: 1 scenarios, 1 pass, 0 fail" in out
    assert sum(line.startswith("    fails beyond") for line in out) == 1  # only a later version of one client


def test_the_recorded_claude_code_versions_differ_on_the_refusals_and_one_400():
    """What lesson 12 says 2.1.332 fails beyond 2.1.197: it asks a refusing model once more in every refusal
    scenario recorded, and it resends the 400 of unsupported_field."""
    cards = {r.client: r for r in lesson12.report_cards(["claude-code"])}
    beyond = failed_beyond(cards["claude-code 2.1.332"], cards["claude-code 2.1.197"])
    assert beyond.pop("unsupported_field") == ["no_retry_on_fatal"]
    assert {"refusal", "refusal_fallback", "refusal_model_fallback"} <= set(beyond)
    assert all(s.startswith("refusal") and rules == ["no_resend_after_refusal"] for s, rules in beyond.items())


# -- every rule the capstone grades, and a loop with one bug planted for each ------------------------------------

SOURCE = solution_source("lesson12")

# rule -> (the bug, a line of the solution, what it becomes): each loop is the solution with that one change
PLANTED: dict[str, tuple[str, str, str]] = {
    "sends_the_prompt": ("sends another prompt", 'messages = [{"role": "user", "content": prompt}]',
                         'messages = [{"role": "user", "content": "Hello."}]'),
    "retry_with_backoff": ("no retry", "client.with_options(max_retries=5)", "client.with_options(max_retries=0)"),
    "no_retry_on_fatal": ("resends a 400 unchanged", "                continue\n            raise\n",
                          "                continue\n            continue\n"),
    "bounded_compaction": ("no compaction", 'if stop == "model_context_window_exceeded":', "if False:"),
    "escalate_cut_tool_call": ("runs the cut-off tool call",
                               'if stop == "max_tokens" and content and content[-1].type == "tool_use":', "if False:"),
    "tool_result_pairing": ("decides on the label", "if uses:", 'if uses and stop == "tool_use":'),
    "bounded_max_tokens_recovery": ("gives up after 2 recoveries", "if continuations == 3:", "if continuations == 1:"),
    "clamp_max_tokens": ("no clamp", "if ceiling and max_tokens > int(ceiling.group(1)):", "if False:"),
    "no_resend_after_refusal": ("asks the refusing model again",
                                'raise RuntimeError(f"the model refused ({details}); not sent again")', "continue"),
    "pause_turn_resume": ("no pause_turn resume", 'if stop in ("pause_turn", "compaction"):', "if False:"),
    "stop_when_done": ("answers a tool_use label without a tool call", "if uses:",
                       "if uses or stop == 'tool_use':"),
    "nudge_empty_turn": ("no nudge", "and after_results and not nudged:", "and False:"),
    "ends_on_its_own": ("hangs after the answer", "        return partial + text",
                        "        __import__('threading').Event().wait(3)"),
    "ends_cleanly": ("raises after the answer", "        return partial + text",
                     "        raise RuntimeError(partial + text)"),
}
# more bugs the capstone names, each failing the rule given
MORE: dict[str, tuple[str, str, str, str]] = {
    "raise_after_400": ("clamp_max_tokens", "raises on every 400", "        except anthropic.BadRequestError as exc:\n",
                        "        except anthropic.BadRequestError as exc:\n            raise\n"),
    "no_prompt_too_long": ("bounded_compaction", "raises on 'prompt is too long'",
                           'if "prompt is too long" in str(exc) and compactions < 3:', "if False:"),
    "continues_forever": ("bounded_max_tokens_recovery", "continues past 3", "if continuations == 3:",
                          "if continuations == 30:"),
    "no_max_tokens_recovery": ("bounded_max_tokens_recovery", "returns the cut-off text",
                               '        if stop == "max_tokens":\n            if not escalated:',
                               '        if False:\n            if not escalated:'),
    "text_after_results": ("tool_result_pairing", "text after the tool results", "for u in uses]})",
                           "for u in uses] + [{'type': 'text', 'text': 'Here they are.'}]})"),
    "pause_with_a_user_message": ("pause_turn_resume", "adds a user message to a paused turn",
                                  "add_assistant(content)                             "
                                  "# unchanged, and nothing after it",
                                  "add_assistant(content); messages.append({'role': 'user', 'content': 'Go on.'})"),
}


def _planted(old: str, new: str):
    assert SOURCE.count(old) == 1, f"the solution no longer has the line to plant a bug in: {old!r}"
    namespace: dict[str, Any] = {}
    exec(compile(SOURCE.replace(old, new), "<planted bug>", "exec"), namespace)
    return namespace["agent_loop"]


@pytest.fixture(scope="module")
def reference_report():
    return grade_loop(lesson12.SOLUTION)


def test_the_reference_solution_passes_every_rule_it_reaches(reference_report):
    assert reference_report.failed == {} and reference_report.verdict == "pass"
    assert not reference_report.policy_groups()   # not even a difference from the reference loop's choices


def test_every_rule_the_capstone_grades_has_a_planted_bug(reference_report):
    judged = {c.rule for g in reference_report.grades for c in g.checks if c.status != "not_reached"}
    assert judged == set(PLANTED)
    cells = _cells()
    recipes = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("### A recipe per rule"))
    rows = "\n".join(line for line in recipes.split("|---|---|", 1)[1].splitlines() if line.startswith("|"))
    named = set(re.findall(r"`([a-z_]+)`", rows)) & {r.name for r in RULES}
    assert len(named) >= 10
    assert named <= judged, f"the recipes name rules the capstone does not grade: {sorted(named - judged)}"


def _scenarios_of(report, rule: str) -> list[str]:
    return [g.scenario for g in report.grades if (c := g.check(rule)) is not None and c.status != "not_reached"]


# a bug after the final answer shows where the reference answers; it raises only where it gives up
ON = {"ends_cleanly": ["end_turn", "tool_use"]}


@pytest.mark.parametrize("rule", list(PLANTED))
def test_each_planted_bug_fails_the_rule_it_breaks(rule, reference_report):
    _bug, old, new = PLANTED[rule]
    scenarios = ON.get(rule) or _scenarios_of(reference_report, rule)
    with pytest.raises(WrongAnswer) as caught:
        check_agent_loop(_planted(old, new), scenarios=scenarios, timeout=0.8 if rule == "ends_on_its_own" else 30)
    assert re.search(rf"\b{rule}\b", str(caught.value)), f"{rule} not named: {caught.value}"


@pytest.mark.parametrize("name", list(MORE))
def test_more_planted_bugs_fail(name, reference_report):
    rule, _bug, old, new = MORE[name]
    with pytest.raises(WrongAnswer, match=rf"\b{rule}\b"):
        check_agent_loop(_planted(old, new), scenarios=_scenarios_of(reference_report, rule))


def test_the_stub_and_the_solution_default_to_the_labs_default_model():
    """The learner's loop asks for the model a run uses unless told otherwise (data/models.yaml's default),
    written out: the stub and the solution are code that runs with the anthropic package alone."""
    from agentlab.core.transitions import DEFAULT_MODEL
    from agentlab.exercises import lesson12

    assert inspect.signature(_notebook_stub()).parameters["model"].default == DEFAULT_MODEL
    assert inspect.signature(lesson12.agent_loop).parameters["model"].default == DEFAULT_MODEL
