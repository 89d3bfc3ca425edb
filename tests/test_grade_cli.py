"""``agentlab grade`` end to end: real commands against real servers, a few scenarios each (every scenario,
and the heatmap, is ``make grade``). agentlab's own CLI passes, the tutorial loop fails with the failures
named by scenario, a hanging command is stopped at the timeout with its whole process group, a crashing one
is graded on what it sent, and the exit codes say which."""

from __future__ import annotations

import json
import os
import shlex
import sys
import textwrap
from pathlib import Path

import pytest

from agentlab.backend.scenario import load_scenario
from agentlab.cli import main
from agentlab.grading.command import gradeable_scenarios, needs_settings
from forked_agent import command as forked_command
from forked_agent import preloaded

REPO = Path(__file__).resolve().parent.parent
PY = shlex.quote(sys.executable)


@pytest.fixture(scope="module")
def agents() -> str:
    """The address of a server whose forks run the real clients graded below (``python -m agentlab run``, the naive
    loop) with the SDK and agentlab's loop imported once (tests/forked_agent.py): each graded scenario still starts
    a command of its own, without 3 s of CPU spent importing them again."""
    with preloaded(("anthropic", "agentlab.lab", "agentlab.backend.scenario")) as address:
        yield address


def grade(capsys, *args: str) -> tuple[int, str, dict]:
    """Exit code, the text report (stdout, or stderr with --json) and the JSON document (all of stdout)."""
    code = main(["grade", *args])
    captured = capsys.readouterr()
    if "--json" not in args:
        return code, captured.out, {}
    data = json.loads(captured.out) if captured.out.strip() else {}
    return code, captured.err, data


def scenarios(data: dict) -> list[dict]:
    return [dict(s, client=r["client"]) for r in data["reports"] for s in r["scenarios"]]


def failures(data: dict) -> dict[str, list[str]]:
    return {s["name"]: s["failed"] for s in scenarios(data)}


def why(data: dict) -> dict[str, dict[str, str]]:
    return {s["name"]: {r["rule"]: r["message"] for r in s["rules"] if r["status"] == "fail"} for s in scenarios(data)}


# -- usage --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ([], "nothing to grade"),
    (["--command", "no-such-agent-command --x"], "'no-such-agent-command' was not found on PATH"),
    (["--command", "./no/such/file.py"], "is not an executable file"),
    (["--command", "true", "no_such_scenario"], "no_such_scenario"),
    (["--command", "true", "--timeout", "0"], "--timeout"),
    (["--command", "true", "--jobs", "0"], "--jobs"),
    (["--command", "true", "--pass-env", "ANTHROPIC_BASE_URL"], "--pass-env ANTHROPIC_BASE_URL: grade sets it"),
    (["--command", "true", "--pass-env", "A B"], "not an environment variable name"),
    (["--observed", "agentlab", "--baseline", "b.json"], "--baseline goes with --command"),
    (["--command", "true", "--baseline", "/no/such/baseline.json"], "--baseline /no/such/baseline.json: cannot read"),
    (["end_turn"], "nothing to grade"),
    (["--observed", "nobody"], "no records for nobody"),
])
def test_bad_usage_exits_2_with_a_message(capsys, args, message):
    assert _exit_status(["grade", *args]) == 2
    assert message in capsys.readouterr().err


def _exit_status(argv: list[str]) -> int:
    """main's status, or the one argparse exits with (a flag's value is checked as it is parsed)."""
    try:
        return main(argv)
    except SystemExit as stopped:
        return int(stopped.code)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e400", "86401"])
def test_a_bad_timeout_exits_2_with_one_line_before_anything_runs(capsys, value):
    assert _exit_status(["grade", "--command", "true", "end_turn", "--timeout", value]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    # the same form as every usage error of agentlab run: the command, the flag, what it expects, what it got
    assert len(lines) == 1 and lines[0].startswith("agentlab grade: --timeout: expected ") and \
        lines[0].endswith(f"got {value} (see `agentlab grade --help`)"), captured.err
    assert captured.out == ""  # no banner, nothing graded


def test_load_of_a_file_that_is_not_a_report_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["grade", "--load", str(bad)]) == 2
    assert "not a report saved with --save" in capsys.readouterr().err


def _saved(tmp_path: Path, name: str, reports: list) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"reports": reports}), encoding="utf-8")
    return str(path)


def test_load_of_a_report_that_does_not_show_its_work_does_not_pass(tmp_path, capsys):
    """A verdict of fail without its checks, a fail with only passing checks, nothing graded: none passes."""
    held = [{"rule": "ends_on_its_own", "status": "pass", "why": "exit 0"}]
    unshown = {"client": "x", "verdict": "fail", "scenarios": [
        {"client": "x", "name": "end_turn", "verdict": "fail", "failed": ["stop_when_done"],
         "why": {"stop_when_done": "kept going"}, "requests": 2, "ending": "exit 0"}]}
    bare = {"client": "y", "verdict": "fail", "scenarios": [{"client": "y", "name": "end_turn", "verdict": "fail"}]}
    mixed = {"client": "z", "verdict": "fail", "scenarios": [{"client": "z", "name": "end_turn", "verdict": "fail"}],
             "checks": {"end_turn": held}}
    for report, needle in [(unshown, "stop_when_done  kept going"), (bare, "no checks"),
                           (mixed, "saved_verdict")]:
        code, out, data = grade(capsys, "--load", _saved(tmp_path, "r.json", [report]), "--json")
        assert code == 1 and data["verdict"] == "fail", out
        assert needle in out, out
    code, out, data = grade(capsys, "--load", _saved(tmp_path, "empty.json", [{"client": "n", "scenarios": []}]),
                            "--json")
    assert code == 1 and data["verdict"] == "fail" and "nothing graded" in out, out
    code, out, data = grade(capsys, "--load", _saved(tmp_path, "none.json", []), "--json")
    assert code == 1 and data["verdict"] == "fail", out


def test_load_of_a_report_that_shows_its_work_keeps_its_verdict(tmp_path, capsys):
    held = [{"rule": "ends_on_its_own", "status": "pass", "why": "exit 0"},
            {"rule": "stop_when_done", "status": "pass", "why": "stopped"}]
    good = {"client": "x", "verdict": "pass", "scenarios": [{"client": "x", "name": "end_turn", "verdict": "pass",
                                                             "failed": [], "why": {}}],
            "checks": {"end_turn": held}}
    code, out, data = grade(capsys, "--load", _saved(tmp_path, "r.json", [good]), "--json")
    assert code == 0 and data["verdict"] == "pass", out


def test_the_default_scenarios_need_no_client_settings():
    names = gradeable_scenarios()
    assert {"pause_turn", "max_tokens_give_up", "mislabel_end_turn", "api_errors", "tool_use"} <= set(names)
    assert not {"stop_hook", "max_turns", "overloaded_fallback", "door_code", "tour"} & set(names)
    assert needs_settings(load_scenario("stop_hook")) == ["a Stop hook"]


# -- real clients ---------------------------------------------------------------------------------------------

def test_agentlab_run_passes_every_rule(capsys, agents):
    command = shlex.join(forked_command(agents, "-m", "agentlab", "run", "--tools", "demo", "--prompt"))
    code, out, data = grade(capsys, "--command", command, "pause_turn", "max_tokens_continue", "incomplete_tool_use",
                            "--json")
    assert code == 0, out
    assert data["verdict"] == "pass" and failures(data) == {
        "pause_turn": [], "max_tokens_continue": [], "incomplete_tool_use": []}
    assert "every rule holds" in out and "✓ escalate_cut_tool_call" in out
    # `agentlab run --tools demo` offers no web search: the live API could not pause a search it was never
    # offered, so pause_turn's branch is not reached (–), which is neither a pass nor a failure
    assert "3 scenarios, 2 pass, 0 fail, 1 not reached" in out and "– pause_turn" in out
    assert "    not reached: the scripted model uses the server tool web_search, which the request does not offer" \
        in out
    # with --web-search it offers the server tool: the search pauses, and the loop resumes it
    code, out, data = grade(capsys, "--command", command.replace("--prompt", "--web-search --prompt"), "pause_turn",
                            "--json")
    assert code == 0 and "1 scenario, 1 pass, 0 fail" in out and "✓ pause_turn_resume" in out, out


def test_the_naive_loop_fails_with_the_rules_named_by_scenario(capsys, agents):
    command = shlex.join(forked_command(agents, REPO / "examples" / "naive_loop.py"))
    code, out, data = grade(capsys, "--command", command, "pause_turn", "mislabel_end_turn", "max_tokens_give_up",
                            "--json")
    assert code == 1, out
    assert data["verdict"] == "fail"
    assert failures(data) == {"pause_turn": ["pause_turn_resume"], "mislabel_end_turn": ["tool_result_pairing"],
                              "max_tokens_give_up": ["bounded_max_tokens_recovery"]}
    assert "the run ended there, with the server tool unfinished" in why(data)["pause_turn"]["pause_turn_resume"]
    assert "(labelled end_turn)" in why(data)["mislabel_end_turn"]["tool_result_pairing"]


# -- commands that misbehave -------------------------------------------------------------------------------------

SEND_ONE = """\
import json, os, sys, urllib.request
CALCULATOR = {"name": "calculator",
              "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}}}}
def send(prompt, tools=None):
    body = {"model": os.environ["AGENTLAB_MODEL"], "max_tokens": 100, "messages": [{"role": "user", "content": prompt}]}
    if tools:
        body["tools"] = tools
    request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", json.dumps(body).encode(),
                                     {"content-type": "application/json",
                                      "x-api-key": os.environ["ANTHROPIC_API_KEY"]})
    return json.loads(urllib.request.urlopen(request).read())
"""


def _script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(SEND_ONE + textwrap.dedent(body), encoding="utf-8")
    return f"{PY} {shlex.quote(str(path))}"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_hanging_command_is_stopped_at_the_timeout_with_its_process_group(tmp_path, capsys):
    pidfile = tmp_path / "child.pid"
    command = _script(tmp_path, "hang.py", f"""
        import subprocess, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        send(sys.argv[-1])
        time.sleep(300)
    """)
    code, out, data = grade(capsys, "--command", command, "end_turn", "--timeout", "3", "--json")
    assert code == 1, out
    assert failures(data) == {"end_turn": ["stop_when_done", "ends_on_its_own"]}
    assert "did not end within 3 s; stopped after 1 request" in out
    # what it sent before it hung is graded as usual: the final answer came, but it did not end the run
    assert "✗ stop_when_done" in out and "still running at the timeout" in out
    assert "✓ stop_when_done" not in out
    assert not _alive(int(pidfile.read_text())), "the command's child outlived the timeout"


def test_a_timed_out_command_is_ended_with_a_setsid_grandchild_whose_parent_exited(tmp_path, capsys):
    """The grandchild is in a session of its own and its parent has exited: neither the process group nor the
    descendants reach it, the command's tag in its environment does."""
    pidfile = tmp_path / "grandchild.pid"
    command = _script(tmp_path, "escape.sh.py", f"""
        import subprocess, time
        subprocess.run(["sh", "-c", "setsid sleep 1000 > /dev/null 2>&1 & echo $! > {pidfile}"], check=True)
        send(sys.argv[-1])
        time.sleep(300)
    """)
    code, out, data = grade(capsys, "--command", command, "end_turn", "--timeout", "3", "--json")
    assert code == 1 and "did not end within 3 s" in out, out
    pid = int(pidfile.read_text())
    assert not _alive(pid), "a setsid grandchild outlived grade's timeout"


def test_a_command_that_exits_is_judged_on_its_exit_though_a_background_child_holds_stdout(tmp_path, capsys):
    pidfile = tmp_path / "child.pid"
    command = _script(tmp_path, "leave.py", f"""
        import subprocess
        child = subprocess.Popen(["setsid", "sleep", "1000"], stdout=sys.stdout, stderr=sys.stderr)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print(send(sys.argv[-1])["content"][0]["text"])
    """)
    code, out, data = grade(capsys, "--command", command, "end_turn", "--timeout", "60", "--json")
    assert code == 0, out
    assert [s["ending"] for s in scenarios(data)] == ["exit 0"] and "did not end" not in out
    assert not _alive(int(pidfile.read_text())), "what the command left running outlived its grade"


def test_a_crashing_command_is_graded_on_what_it_sent(tmp_path, capsys):
    command = _script(tmp_path, "crash.py", """
        send(sys.argv[-1], [CALCULATOR])
        raise SystemExit("agent crashed: cannot parse the reply")
    """)
    code, out, data = grade(capsys, "--command", command, "tool_use", "end_turn", "--json")
    assert code == 1, out
    # one behaviour, one failure: the crash with a call unanswered is tool_result_pairing's; after the final answer
    # nothing else fails, so ends_cleanly does (a crash never passes)
    assert failures(data) == {"tool_use": ["tool_result_pairing"], "end_turn": ["ends_cleanly"]}
    assert [s["verdict"] for s in scenarios(data)] == ["fail", "fail"]
    ending = {s["name"]: s["ending"] for s in scenarios(data)}
    assert ending == {"tool_use": "exit 1", "end_turn": "exit 1"}
    assert "request 1's reply asked for 1 tool call; the run ended without sending the results" in out
    assert "request 1 got end_turn [text], a final answer; the command exited with status 1" in out


def test_a_command_that_never_offers_the_server_tool_is_told_so(tmp_path, capsys):
    # pause_turn's scripted model searches with web_search; this command sends the prompt with no tools at all
    command = _script(tmp_path, "no_tools.py", """
        send(sys.argv[-1])
    """)
    code, out, data = grade(capsys, "--command", command, "pause_turn", "end_turn", "--json")
    assert code == 0, out  # not reached is no failure: the exit status is unaffected
    unreached = {s["name"]: s.get("not_reached", []) for s in scenarios(data)}
    assert unreached == {"end_turn": [], "pause_turn": [
        "the scripted model uses the server tool web_search, which the request does not offer"]}
    assert "– pause_turn" in out and "2 scenarios, 1 pass, 0 fail, 1 not reached" in out
    assert "    not reached: the scripted model uses the server tool web_search" in out


# -- records, saved reports, the heatmap ---------------------------------------------------------------------------

def test_observed_records_are_graded_saved_combined_and_drawn(tmp_path, capsys):
    saved = tmp_path / "reports.json"
    code, out, data = grade(capsys, "--observed", "agentlab", "tool-runner", "--save", str(saved), "--json")
    assert code == 1  # the tool runner fails several rules
    clients = {s["client"] for s in scenarios(data)}
    assert any(c.startswith("agentlab ") for c in clients) and any(c.startswith("tool-runner ") for c in clients)
    assert {c.split()[0] for c in clients} == {"agentlab", "tool-runner"}
    picture = tmp_path / "heat.png"
    code, out, again = grade(capsys, "--load", str(saved), "--heatmap", str(picture), "--json")
    assert code == 1 and scenarios(again) == scenarios(data)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"heatmap: {picture}" in out


def test_observed_agentlab_alone_exits_0(capsys):
    code, out, data = grade(capsys, "--observed", "agentlab", "--json")
    assert code == 0, out
    assert data["verdict"] == "pass" and all(s["verdict"] == "pass" for s in scenarios(data))


def test_scenario_names_pick_scenarios_of_the_records(capsys):
    code, out, data = grade(capsys, "refusal", "end_turn", "--observed", "agentlab", "--json")
    assert code == 0, out
    assert [s["name"] for s in scenarios(data)] == ["refusal", "end_turn"]
    assert "agentlab 0.1.0: 2 scenarios, 2 pass, 0 fail" in out
    code = main(["grade", "no_such_scenario", "--observed", "agentlab"])
    assert code == 2
    assert "no_such_scenario: not in the reports graded here; they hold api_error_fatal, " in capsys.readouterr().err


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to see whether a process is alive")
def test_alive_helper_sees_this_process():
    assert _alive(os.getpid())


def test_a_client_that_posts_to_messages_without_v1_is_told_how_to_run_it(tmp_path, capsys):
    # like the Vercel AI SDK: it appends /messages to ANTHROPIC_BASE_URL, which it expects to end in /v1
    path = tmp_path / "no_v1.py"
    path.write_text(textwrap.dedent("""\
        import json, os, sys, urllib.error, urllib.request
        body = {"model": os.environ["AGENTLAB_MODEL"], "max_tokens": 100,
                "messages": [{"role": "user", "content": sys.argv[-1]}]}
        request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/messages", json.dumps(body).encode(),
                                         {"content-type": "application/json"})
        try:
            print(json.loads(urllib.request.urlopen(request).read())["content"][0]["text"])
        except urllib.error.HTTPError as error:
            sys.exit(json.loads(error.read())["error"]["message"])
    """), encoding="utf-8")
    command = f"{PY} {shlex.quote(str(path))}"
    code, out, data = grade(capsys, "--command", command, "end_turn", "--json")
    assert code == 1, out
    said = why(data)[scenarios(data)[0]["name"]]["sends_the_prompt"]
    assert said.startswith("no request reached /v1/messages: the client posted to /messages (exit 1")
    assert said.endswith("it expects a base URL that ends in /v1: grade it with --base-url-suffix /v1")
    code, out, data = grade(capsys, "--command", command, "end_turn", "--base-url-suffix", "/v1", "--json")
    assert code == 0, out
    assert data["verdict"] == "pass"
    assert main(["grade", "--command", command, "end_turn", "--base-url-suffix", "v1"]) == 2
    assert "--base-url-suffix: expected a path such as /v1, got 'v1'" in capsys.readouterr().err
