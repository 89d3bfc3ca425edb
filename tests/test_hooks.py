"""Hooks: Claude Code's hook protocol for callables and commands, one rule per test."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from agentlab.hooks import HOOK_EVENTS, NOT_INTERACTIVE, HookConfigError, HookOutcome, Hooks

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "data" / "hooks"

# The event-specific payload the loop passes for each event.
PAYLOADS = {
    "UserPromptSubmit": {"prompt": "hello"},
    "PreToolUse": {"tool_name": "get_weather", "tool_input": {"city": "Paris"}, "tool_use_id": "toolu_1"},
    "PostToolUse": {"tool_name": "get_weather", "tool_input": {"city": "Paris"},
                    "tool_response": "sunny", "tool_use_id": "toolu_1"},
    "Stop": {"stop_hook_active": False, "last_assistant_message": "Done."},
    "PreCompact": {"trigger": "auto", "custom_instructions": ""},
    "PostCompact": {"trigger": "auto", "compact_summary": "summary"},
}


class FakeClock:
    """Advances by ``step`` seconds every time it is read."""

    def __init__(self, step: float = 0.25) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def python_hook(tmp_path: Path, body: str, name: str = "hook.py") -> str:
    """Write a Python hook script and return the shell command that runs it."""
    path = tmp_path / name
    path.write_text("import json, os, sys\n" + body, encoding="utf-8")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def printing(tmp_path: Path, answer: object, name: str = "hook.py") -> str:
    """A command hook that prints ``answer`` (JSON-encoded unless it is a str) and exits 0."""
    text = answer if isinstance(answer, str) else json.dumps(answer)
    return python_hook(tmp_path, f"sys.stdin.read()\nprint({text!r})\n", name)


def exiting(tmp_path: Path, code: int, stderr: str = "", stdout: str = "", name: str = "hook.py") -> str:
    body = (f"sys.stdin.read()\nprint({stdout!r})\nprint({stderr!r}, file=sys.stderr)\n"
            f"sys.exit({code})\n")
    return python_hook(tmp_path, body, name)


def settings(event: str, *commands: str, matcher: str | None = None, timeout: float | None = None) -> dict:
    hooks = []
    for command in commands:
        hook: dict = {"type": "command", "command": command}
        if timeout is not None:
            hook["timeout"] = timeout
        hooks.append(hook)
    group: dict = {"hooks": hooks}
    if matcher is not None:
        group["matcher"] = matcher
    return {"hooks": {event: [group]}}


def fire(event: str, config: dict | None = None, tmp_path: Path | None = None, **kwargs) -> HookOutcome:
    hooks = Hooks(config, cwd=str(tmp_path) if tmp_path else None, **kwargs)
    return hooks.run(event, PAYLOADS[event])


def decisions(outcome: HookOutcome) -> dict:
    """The HookOutcome fields that must not depend on how a hook was written."""
    fields = dataclasses.asdict(outcome)
    fields.pop("runs")
    fields["run_answers"] = [(r.decision, r.reason, r.error is None) for r in outcome.runs]
    return fields


# -- what a hook receives ----------------------------------------------------------------------------

@pytest.mark.parametrize("event", HOOK_EVENTS)
def test_command_gets_the_payload_on_stdin_in_cwd_with_project_dir(tmp_path, event):
    out = tmp_path / "seen.json"
    command = python_hook(tmp_path, (
        f"seen = {{'stdin': json.load(sys.stdin), 'cwd': os.getcwd(),"
        f" 'project': os.environ.get('CLAUDE_PROJECT_DIR')}}\n"
        f"open({str(out)!r}, 'w').write(json.dumps(seen))\n"))
    hooks = Hooks(settings(event, command), cwd=str(tmp_path), session_id="s1", transcript_path="/t.jsonl")
    outcome = hooks.run(event, PAYLOADS[event])
    seen = json.loads(out.read_text())
    assert seen["stdin"] == {"session_id": "s1", "transcript_path": "/t.jsonl", "cwd": str(tmp_path),
                             "hook_event_name": event, **PAYLOADS[event]}
    assert seen["cwd"] == str(tmp_path) and seen["project"] == str(tmp_path)
    assert [r.exit_code for r in outcome.runs] == [0] and outcome.runs[0].source == "command"


def test_callable_gets_the_same_payload_as_a_copy():
    seen = []
    hooks = Hooks(cwd="/lab")
    hooks.on("Stop", lambda payload: seen.append(payload) or payload.clear())
    payload = {"stop_hook_active": True, "last_assistant_message": "x"}
    hooks.run("Stop", payload)
    assert payload == {"stop_hook_active": True, "last_assistant_message": "x"}
    assert seen == [{}]  # the hook cleared its own copy
    hooks.on("Stop", seen.append)
    hooks.run("Stop", payload)
    assert seen[-1] == {"session_id": "agentlab", "transcript_path": None, "cwd": "/lab",
                        "hook_event_name": "Stop", **payload}


def test_no_hooks_means_an_empty_outcome():
    outcome = Hooks().run("Stop", PAYLOADS["Stop"])
    assert outcome == HookOutcome(event="Stop", runs=[])


def test_unknown_event_is_rejected():
    hooks = Hooks()
    with pytest.raises(ValueError, match="unknown hook event 'stop'"):
        hooks.run("stop", {})
    with pytest.raises(ValueError, match="SessionStart"):
        hooks.on("SessionStart", print)


def test_has_and_decorator_registration():
    hooks = Hooks()
    assert not hooks.has("Stop")

    @hooks.on("Stop")
    def keep_going(payload):
        return {"decision": "block", "reason": "more"}

    assert keep_going({})["reason"] == "more"  # the decorator returns the function unchanged
    assert hooks.has("Stop") and not hooks.has("PreToolUse")
    assert hooks.run("Stop", {}).runs[0].name.endswith("keep_going")


# -- exit 0 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("event", ["Stop", "PostToolUse", "UserPromptSubmit", "PreCompact"])
def test_exit0_json_block(tmp_path, event):
    outcome = fire(event, settings(event, printing(tmp_path, {"decision": "block", "reason": "not yet"})))
    assert outcome.blocked and outcome.reason == "not yet"
    assert outcome.runs[0].decision == "block" and outcome.runs[0].error is None


@pytest.mark.parametrize("event", ["Stop", "PostToolUse", "UserPromptSubmit"])
def test_exit0_json_without_decision_does_not_block(tmp_path, event):
    outcome = fire(event, settings(event, printing(tmp_path, {"suppressOutput": True})))
    assert not outcome.blocked and outcome.runs[0].error is None


def test_block_without_reason_still_has_one(tmp_path):
    outcome = fire("Stop", settings("Stop", printing(tmp_path, {"decision": "block"})))
    assert outcome.blocked and "no reason given" in outcome.reason


@pytest.mark.parametrize("decision", ["allow", "deny", "ask"])
def test_pretooluse_permission_decision(tmp_path, decision):
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                     "permissionDecisionReason": "because"}}
    outcome = fire("PreToolUse", settings("PreToolUse", printing(tmp_path, answer)), interactive=True)
    assert outcome.permission == decision and outcome.permission_reason == "because"
    assert not outcome.blocked


def test_pretooluse_updated_input(tmp_path):
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                     "updatedInput": {"city": "Lyon"}}}
    outcome = fire("PreToolUse", settings("PreToolUse", printing(tmp_path, answer)))
    assert outcome.permission == "allow" and outcome.updated_input == {"city": "Lyon"}


@pytest.mark.parametrize(("legacy", "permission"), [("approve", "allow"), ("block", "deny")])
def test_pretooluse_older_decision_field(tmp_path, legacy, permission):
    answer = {"decision": legacy, "reason": "old style"}
    outcome = fire("PreToolUse", settings("PreToolUse", printing(tmp_path, answer)))
    assert outcome.permission == permission and outcome.permission_reason == "old style"


def test_plain_text_is_context_for_user_prompt_submit(tmp_path):
    outcome = fire("UserPromptSubmit", settings("UserPromptSubmit", printing(tmp_path, "It is Monday.")))
    assert outcome.additional_context == ["It is Monday."] and not outcome.blocked


@pytest.mark.parametrize("event", ["Stop", "PreToolUse", "PostToolUse", "PreCompact", "PostCompact"])
def test_plain_text_is_ignored_elsewhere(tmp_path, event):
    outcome = fire(event, settings(event, printing(tmp_path, "just chatting")))
    assert outcome.additional_context == [] and outcome.runs[0].error is None
    assert not outcome.blocked and outcome.permission is None


@pytest.mark.parametrize("event", ["UserPromptSubmit", "PostToolUse", "PreToolUse"])
def test_json_additional_context(tmp_path, event):
    answer = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": "note this"}}
    outcome = fire(event, settings(event, printing(tmp_path, answer)))
    assert outcome.additional_context == ["note this"]


def test_additional_context_is_not_read_on_stop(tmp_path):
    answer = {"hookSpecificOutput": {"hookEventName": "Stop", "additionalContext": "note this"}}
    assert fire("Stop", settings("Stop", printing(tmp_path, answer))).additional_context == []


@pytest.mark.parametrize("event", HOOK_EVENTS)
def test_continue_false_stops_the_loop(tmp_path, event):
    answer = {"continue": False, "stopReason": "budget spent", "systemMessage": "stopping"}
    outcome = fire(event, settings(event, printing(tmp_path, answer)))
    assert outcome.stop_loop and outcome.stop_reason == "budget spent"
    assert outcome.system_messages == ["stopping"]


def test_continue_true_does_not_stop(tmp_path):
    outcome = fire("Stop", settings("Stop", printing(tmp_path, {"continue": True})))
    assert not outcome.stop_loop and outcome.stop_reason is None


# -- exit 2 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("event", ["Stop", "UserPromptSubmit", "PostToolUse", "PreCompact"])
def test_exit2_blocks_with_stderr_as_reason(tmp_path, event):
    command = exiting(tmp_path, 2, stderr="fix the tests", stdout='{"decision": "approve"}')
    outcome = fire(event, settings(event, command))
    assert outcome.blocked and outcome.reason == "fix the tests"
    assert outcome.runs[0].exit_code == 2 and outcome.runs[0].error is None


def test_exit2_on_pretooluse_denies(tmp_path):
    outcome = fire("PreToolUse", settings("PreToolUse", exiting(tmp_path, 2, stderr="no weather today")))
    assert outcome.permission == "deny" and outcome.permission_reason == "no weather today"
    assert not outcome.blocked and outcome.runs[0].decision == "deny"


def test_exit2_on_post_compact_is_only_recorded(tmp_path):
    outcome = fire("PostCompact", settings("PostCompact", exiting(tmp_path, 2, stderr="too late")))
    assert not outcome.blocked
    assert "cannot block" in outcome.runs[0].error and "too late" in outcome.runs[0].error


def test_exit2_with_empty_stderr_has_a_reason(tmp_path):
    outcome = fire("Stop", settings("Stop", exiting(tmp_path, 2)))
    assert outcome.blocked and "exit code 2" in outcome.reason


def test_example_exit2_script_blocks():
    hooks = Hooks(settings("Stop", str(EXAMPLES / "exit2_stop.sh")), cwd=str(REPO))
    outcome = hooks.run("Stop", PAYLOADS["Stop"])
    assert outcome.blocked and outcome.reason.startswith("Not done yet")
    custom = Hooks(settings("Stop", f"{EXAMPLES / 'exit2_stop.sh'} 'Run the tests.'"), cwd=str(REPO))
    assert custom.run("Stop", PAYLOADS["Stop"]).reason == "Run the tests."


# -- non-blocking errors -----------------------------------------------------------------------------

@pytest.mark.parametrize("code", [1, 3, 127])
def test_other_exit_codes_are_non_blocking_errors(tmp_path, code):
    command = exiting(tmp_path, code, stderr="something broke", stdout='{"decision": "block"}')
    outcome = fire("Stop", settings("Stop", command))
    run = outcome.runs[0]
    assert not outcome.blocked and run.decision is None and run.exit_code == code
    assert f"exit code {code}" in run.error and "something broke" in run.error
    assert outcome.errors == [f"{run.name}: {run.error}"]


def test_missing_script_is_a_non_blocking_error(tmp_path):
    outcome = fire("PreToolUse", settings("PreToolUse", str(tmp_path / "no_such_hook.sh")))
    assert outcome.permission is None and "exit code 127" in outcome.runs[0].error


@pytest.mark.parametrize("garbage", ['{"decision": "block", ', "{not json}", '{"a": 1} trailing'])
def test_garbage_json_is_a_non_blocking_error(tmp_path, garbage):
    outcome = fire("Stop", settings("Stop", printing(tmp_path, garbage)))
    run = outcome.runs[0]
    assert not outcome.blocked and run.exit_code == 0
    assert "does not parse" in run.error and garbage.strip() in run.error


@pytest.mark.parametrize(("event", "answer", "problem"), [
    ("Stop", {"decision": "block", "reason": 5}, "reason should be a string"),
    ("Stop", {"decision": "maybe"}, "decision 'maybe'"),
    ("Stop", {"continue": "no"}, "continue should be true or false"),
    ("PostCompact", {"decision": "block", "reason": "x"}, "no meaning for PostCompact"),
    ("PreToolUse", {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "yes"}},
     "permissionDecision 'yes'"),
    ("PreToolUse", {"hookSpecificOutput": {"hookEventName": "Stop", "permissionDecision": "deny"}},
     "hookEventName is 'Stop' in a PreToolUse hook"),
    ("PreToolUse", {"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": [1]}},
     "updatedInput should be an object"),
])
def test_json_with_bad_fields_is_ignored_as_a_whole(tmp_path, event, answer, problem):
    outcome = fire(event, settings(event, printing(tmp_path, answer)))
    assert problem in outcome.runs[0].error
    assert not outcome.blocked and outcome.permission is None and outcome.updated_input is None


def test_hanging_hook_is_killed_at_its_timeout(tmp_path):
    outcome = fire("Stop", settings("Stop", "sleep 30", timeout=0.5), tmp_path)
    run = outcome.runs[0]
    assert run.timed_out and "timed out after 0.5 s" in run.error
    assert not outcome.blocked and run.decision is None


def test_default_timeout_applies_and_kills_the_process_group(tmp_path):
    # The background `sleep` inherits the hook's stdout: unless the whole process group is killed, reading
    # the hook's output would wait the full 30 s for it. Finishing well before that proves the kill.
    command = "sleep 30 & wait"
    outcome = Hooks(settings("Stop", command), cwd=str(tmp_path), default_timeout=0.5).run("Stop", {})
    assert outcome.runs[0].timed_out
    assert outcome.runs[0].duration_ms < 20_000


def test_callable_that_raises_is_a_non_blocking_error():
    hooks = Hooks()

    def broken(payload):
        raise RuntimeError("boom")

    hooks.on("Stop", broken)
    hooks.on("Stop", lambda payload: {"decision": "block", "reason": "still here"})
    outcome = hooks.run("Stop", {})
    assert [r.error for r in outcome.runs] == ["raised RuntimeError: boom", None]
    assert outcome.runs[0].stderr.startswith("RuntimeError: boom\n  at test_hooks.py:")
    assert outcome.runs[0].stderr.endswith(" in broken")
    assert outcome.blocked and outcome.reason == "still here"


@pytest.mark.parametrize("result", [42, ["block"], {"decision": {1, 2}}])
def test_callable_returning_something_a_command_cannot_print(result):
    hooks = Hooks()
    hooks.on("Stop", lambda payload: result)
    outcome = hooks.run("Stop", {})
    assert outcome.runs[0].error and not outcome.blocked


def test_duration_uses_the_injected_clock():
    hooks = Hooks(clock=FakeClock(step=0.5))
    hooks.on("Stop", lambda payload: None)
    run = hooks.run("Stop", {}).runs[0]
    assert run.duration_ms == 500.0
    assert json.loads(json.dumps(dataclasses.asdict(run)))["duration_ms"] == 500.0


# -- matchers ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("matcher", "tool", "runs"), [
    ("get_weather", "get_weather", True),
    ("get_weather", "get_weather_v2", False),
    ("read_file|get_weather", "get_weather", True),
    ("read_file|get_weather", "write_file", False),
    ("read_.*", "read_file", True),
    ("read_.*", "xread_file", False),  # a regular expression must match the whole name
    ("mcp__.*__search", "mcp__docs__search", True),
    ("*", "anything", True),
    ("", "anything", True),
    (None, "anything", True),
])
@pytest.mark.parametrize("event", ["PreToolUse", "PostToolUse"])
def test_tool_matchers(event, matcher, tool, runs):
    config = {"hooks": {event: [{"hooks": [{"type": "command", "command": "true"}]}]}}
    if matcher is not None:
        config["hooks"][event][0]["matcher"] = matcher
    from_settings = Hooks(config).run(event, {**PAYLOADS[event], "tool_name": tool})
    from_callable = Hooks()
    from_callable.on(event, lambda payload: None, matcher=matcher)
    assert len(from_settings.runs) == runs
    assert len(from_callable.run(event, {**PAYLOADS[event], "tool_name": tool}).runs) == runs


def test_tool_name_argument_overrides_the_payload():
    hooks = Hooks()
    hooks.on("PreToolUse", lambda payload: None, matcher="read_file")
    assert len(hooks.run("PreToolUse", PAYLOADS["PreToolUse"], tool_name="read_file").runs) == 1
    assert len(hooks.run("PreToolUse", PAYLOADS["PreToolUse"]).runs) == 0


@pytest.mark.parametrize("event", ["Stop", "UserPromptSubmit"])
def test_matcher_is_ignored_for_events_without_one(event):
    hooks = Hooks({"hooks": {event: [{"matcher": "nothing_matches_this",
                                      "hooks": [{"type": "command", "command": "true"}]}]}})
    hooks.on(event, lambda payload: None, matcher="nor_this")
    assert len(hooks.run(event, PAYLOADS[event]).runs) == 2


def test_compact_matchers_match_the_trigger():
    hooks = Hooks()
    hooks.on("PreCompact", lambda payload: None, matcher="manual")
    assert len(hooks.run("PreCompact", {"trigger": "manual", "custom_instructions": ""}).runs) == 1
    assert len(hooks.run("PreCompact", {"trigger": "auto", "custom_instructions": ""}).runs) == 0


def test_identical_commands_run_once_per_firing(tmp_path):
    command = printing(tmp_path, {"decision": "block", "reason": "once"})
    config = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": command}]},
                                 {"hooks": [{"type": "command", "command": command}]}]}}
    outcome = Hooks(config).run("Stop", {})
    assert len(outcome.runs) == 1 and outcome.reason == "once"


# -- several hooks -----------------------------------------------------------------------------------

def permission(decision: str, reason: str):
    def hook(payload):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                       "permissionDecisionReason": reason}}
    hook.__qualname__ = f"{decision}_hook"
    return hook


@pytest.mark.parametrize(("answers", "expected", "reason"), [
    (["allow", "ask", "deny"], "deny", "deny said so"),
    (["deny", "allow"], "deny", "deny said so"),
    (["allow", "ask"], "ask", "ask said so"),
    (["allow", "allow"], "allow", "allow said so\nallow said so"),
])
def test_permission_aggregation_deny_over_ask_over_allow(answers, expected, reason):
    hooks = Hooks(interactive=True)
    for answer in answers:
        hooks.on("PreToolUse", permission(answer, f"{answer} said so"))
    outcome = hooks.run("PreToolUse", PAYLOADS["PreToolUse"])
    assert (outcome.permission, outcome.permission_reason) == (expected, reason)
    assert [r.decision for r in outcome.runs] == answers  # runs keep registration order


def test_ask_becomes_deny_when_no_one_can_answer():
    hooks = Hooks(interactive=False)
    hooks.on("PreToolUse", permission("allow", "fine"))
    hooks.on("PreToolUse", permission("ask", "are you sure?"))
    outcome = hooks.run("PreToolUse", PAYLOADS["PreToolUse"])
    assert outcome.permission == "deny"
    assert outcome.permission_reason == f"{NOT_INTERACTIVE}\nare you sure?"
    assert "'ask'" in NOT_INTERACTIVE and "non-interactive" in NOT_INTERACTIVE
    assert outcome.runs[1].decision == "ask"  # the run records what the hook said


def test_updated_input_is_dropped_when_denied():
    hooks = Hooks()
    hooks.on("PreToolUse", lambda p: {"hookSpecificOutput": {"permissionDecision": "allow",
                                                             "updatedInput": {"city": "Lyon"}}})
    assert hooks.run("PreToolUse", PAYLOADS["PreToolUse"]).updated_input == {"city": "Lyon"}
    hooks.on("PreToolUse", permission("deny", "no"))
    assert hooks.run("PreToolUse", PAYLOADS["PreToolUse"]).updated_input is None


def test_last_updated_input_wins():
    hooks = Hooks()
    for city in ("Lyon", "Nice"):
        hooks.on("PreToolUse", lambda p, c=city: {"hookSpecificOutput": {"updatedInput": {"city": c}}})
    assert hooks.run("PreToolUse", PAYLOADS["PreToolUse"]).updated_input == {"city": "Nice"}


def test_all_hooks_run_blocks_and_contexts_are_joined_in_order(tmp_path):
    first = exiting(tmp_path, 2, stderr="first reason", name="one.py")
    second = printing(tmp_path, {"decision": "block", "reason": "second reason"}, name="two.py")
    third = exiting(tmp_path, 1, stderr="broken", name="three.py")
    hooks = Hooks(settings("Stop", first, second, third))
    hooks.on("Stop", lambda payload: {"decision": "block", "reason": "third reason"})
    outcome = hooks.run("Stop", PAYLOADS["Stop"])
    assert [r.source for r in outcome.runs] == ["command", "command", "command", "python"]
    assert outcome.blocked and outcome.reason == "first reason\nsecond reason\nthird reason"
    assert len(outcome.errors) == 1 and "broken" in outcome.errors[0]


def test_several_hanging_hooks_time_out_together(tmp_path):
    outcome = fire("Stop", settings("Stop", "sleep 30", "sleep 31", "sleep 32", timeout=0.5), tmp_path,
                   clock=FakeClock())
    assert [r.timed_out for r in outcome.runs] == [True, True, True]


def test_contexts_from_several_hooks(tmp_path):
    hooks = Hooks(settings("UserPromptSubmit", printing(tmp_path, "from a command")))
    hooks.on("UserPromptSubmit", lambda payload: "from a callable")
    hooks.on("UserPromptSubmit", lambda payload: {"hookSpecificOutput": {
        "hookEventName": "UserPromptSubmit", "additionalContext": "from JSON"}})
    outcome = hooks.run("UserPromptSubmit", PAYLOADS["UserPromptSubmit"])
    assert outcome.additional_context == ["from a command", "from a callable", "from JSON"]


# -- one behaviour, two forms ------------------------------------------------------------------------

SAME_ANSWERS = [
    ("Stop", {"decision": "block", "reason": "keep going"}),
    ("Stop", {"decision": "approve"}),
    ("Stop", {"continue": False, "stopReason": "enough"}),
    ("UserPromptSubmit", "plain context"),
    ("UserPromptSubmit", {"decision": "block", "reason": "not that prompt"}),
    ("PostToolUse", {"decision": "block", "reason": "tool output looks wrong",
                     "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "hm"}}),
    ("PreToolUse", {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask",
                                           "permissionDecisionReason": "sure?"}}),
    ("PreToolUse", {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                           "updatedInput": {"city": "Lyon"}}}),
    ("PreToolUse", {"decision": "block", "reason": "old style"}),
    ("PreCompact", {"decision": "block", "reason": "not now"}),
    ("PostCompact", {"systemMessage": "compacted"}),
    ("Stop", {"decision": "block", "reason": 7}),
]


@pytest.mark.parametrize(("event", "answer"), SAME_ANSWERS)
def test_callable_and_command_give_the_same_outcome(tmp_path, event, answer):
    as_command = fire(event, settings(event, printing(tmp_path, answer)))
    hooks = Hooks()
    hooks.on(event, lambda payload: answer)
    as_callable = hooks.run(event, PAYLOADS[event])
    assert decisions(as_callable) == decisions(as_command)
    assert (as_command.runs[0].source, as_callable.runs[0].source) == ("command", "python")


# -- settings errors ---------------------------------------------------------------------------------

def write_settings(tmp_path: Path, monkeypatch, data: object) -> str:
    monkeypatch.chdir(tmp_path)
    Path("settings.json").write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return "settings.json"


def test_config_error_names_the_file_and_the_json_path(tmp_path, monkeypatch):
    data = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"},
                                          {"type": "prompt", "prompt": "is it done?"}]}]}}
    with pytest.raises(HookConfigError) as caught:
        Hooks(write_settings(tmp_path, monkeypatch, data))
    assert str(caught.value) == "settings.json: hooks.Stop[0].hooks[1].type: expected 'command', got 'prompt'"
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("data", "message"), [
    ({"hooks": []}, "settings.json: hooks: expected an object of events, got list"),
    ({"hooks": {"Stop": {}}}, "settings.json: hooks.Stop: expected a list of matcher groups, got dict"),
    ({"hooks": {"Stop": ["x"]}}, "settings.json: hooks.Stop[0]: expected an object, got str"),
    ({"hooks": {"Stop": [{}]}}, "settings.json: hooks.Stop[0].hooks: expected a list of hooks, got None"),
    ({"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}},
     "settings.json: hooks.Stop[0].hooks[0].command: expected a non-empty string, got None"),
    ({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true", "timeout": "5"}]}]}},
     "settings.json: hooks.Stop[0].hooks[0].timeout: expected a number of seconds above 0 and at most 86400, "
     "got '5'"),
    ({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true", "timeout": 0}]}]}},
     "settings.json: hooks.Stop[0].hooks[0].timeout: expected a number of seconds above 0 and at most 86400, "
     "got 0"),
    ({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true", "timeout": 1e7}]}]}},
     "settings.json: hooks.Stop[0].hooks[0].timeout: expected a number of seconds above 0 and at most 86400, "
     "got 10000000.0"),
    ({"hooks": {"PreToolUse": [{"matcher": 3, "hooks": []}]}},
     "settings.json: hooks.PreToolUse[0].matcher: expected a string, got 3"),
    ({"hooks": {"PreToolUse": [{"matcher": "read_(", "hooks": []}]}},
     "settings.json: hooks.PreToolUse[0].matcher: not a valid regular expression 'read_('"),
    ({"hooks": {"stop": []}}, "settings.json: hooks.stop: unknown hook event; did you mean 'Stop'?"),
    ({"hooks": {"PreToolUsed": []}},
     "settings.json: hooks.PreToolUsed: unknown hook event; did you mean 'PreToolUse'?"),
    ({"Stop": []}, 'settings.json: Stop: hook events belong under a top-level "hooks" key'),
    ([], "settings.json: expected a JSON object, got list"),
    ('{"hooks": {', "settings.json: not valid JSON (line 1, column 12)"),
])
def test_config_errors(tmp_path, monkeypatch, data, message):
    with pytest.raises(HookConfigError) as caught:
        Hooks(write_settings(tmp_path, monkeypatch, data))
    assert str(caught.value).startswith(message)


def test_missing_settings_file(tmp_path):
    with pytest.raises(HookConfigError, match="missing.json: cannot read the settings file"):
        Hooks(tmp_path / "missing.json")


def test_dict_settings_errors_name_settings():
    with pytest.raises(HookConfigError, match=r"^settings: hooks\.Stop\[0\]\.hooks\[0\]\.type"):
        Hooks({"hooks": {"Stop": [{"hooks": [{"type": "http"}]}]}})


def test_bad_matcher_in_on():
    with pytest.raises(HookConfigError, match=r"Hooks.on\('PreToolUse'\): not a valid regular expression"):
        Hooks().on("PreToolUse", print, matcher="[")


def test_other_claude_code_events_are_kept_out_and_listed():
    config = {"permissions": {"allow": []},
              "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "true"}]}],
                        "Notification": [{"hooks": [{"type": "prompt"}]}]}}
    hooks = Hooks(config)
    assert hooks.ignored_events == ["SessionStart", "Notification"]
    assert not any(hooks.has(event) for event in HOOK_EVENTS)


def test_settings_without_hooks_are_fine():
    assert not Hooks({"permissions": {"allow": ["Bash"]}}).has("Stop")


# -- the example scripts -----------------------------------------------------------------------------

@pytest.fixture
def examples():
    return Hooks(EXAMPLES / "settings.example.json", cwd=str(REPO))


def test_example_scripts_are_executable():
    for name in ("stop_until_tests_pass.py", "deny_tool.py", "add_context.py", "exit2_stop.sh"):
        assert os.access(EXAMPLES / name, os.X_OK), name


def test_example_add_context(examples):
    outcome = examples.run("UserPromptSubmit", PAYLOADS["UserPromptSubmit"])
    assert outcome.additional_context == ["Today's date in the lab is 2026-01-01."]


def test_example_deny_tool(examples):
    denied = examples.run("PreToolUse", PAYLOADS["PreToolUse"])
    assert denied.permission == "deny" and "get_weather" in denied.permission_reason
    other = examples.run("PreToolUse", {**PAYLOADS["PreToolUse"], "tool_name": "read_file"})
    assert other.runs == [] and other.permission is None


@pytest.mark.parametrize(("state", "blocked"), [
    ("failed\n3 tests failed", True),
    ("passed", False),
    ("who knows", False),
    (None, False),  # no state file: cannot decide, never blocks
])
def test_example_stop_until_tests_pass(examples, tmp_path, monkeypatch, state, blocked):
    state_file = tmp_path / "tests_state"
    if state is not None:
        state_file.write_text(state, encoding="utf-8")
    monkeypatch.setenv("AGENTLAB_TESTS_STATE", str(state_file))
    outcome = examples.run("Stop", PAYLOADS["Stop"])
    assert outcome.blocked is blocked and outcome.runs[0].error is None
    if blocked:
        assert outcome.reason == ("Tests have not passed yet: run run_tests and fix failures "
                                  "before finishing.")
