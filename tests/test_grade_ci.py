"""``agentlab grade`` in a framework's CI, through the real command: the JSON report (one document, checked
against the JSON Schema shipped in the package), JUnit XML, the baseline of known failures, --keep, the command
contract ({prompt}, the AGENTLAB_* variables, the stripped environment, --pass-env, a command that sends
nothing), ``agentlab serve --mode grade``, and the pytest plugin (``pytest --agentlab-grade``)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import anthropic
import jsonschema
import pytest

from agentlab.backend.scenario import load_scenario
from agentlab.cli import main
from agentlab.grading.command import RULES, SCHEMA_PATH, SCHEMA_VERSION
from agentlab.grading.report import Report
from forked_agent import command, preloaded
from test_grade_cli import _alive  # is a process still running (not a zombie)

REPO = Path(__file__).resolve().parent.parent
PY = shlex.quote(sys.executable)
NAIVE_LOOP = REPO / "examples" / "naive_loop.py"
NAIVE = f"{PY} {shlex.quote(str(NAIVE_LOOP))}"
SCENARIOS = ["pause_turn", "max_tokens_give_up", "end_turn"]


@pytest.fixture(scope="module")
def forked_naive() -> str:
    """The naive loop as a command whose agent is a fork of a server that imported the SDK once
    (tests/forked_agent.py): the grades below that are about the report, the baseline and the plugin run it so,
    each scenario some 3 s of CPU cheaper. The ``naive`` fixture grades the script started afresh."""
    with preloaded() as address:
        yield shlex.join(command(address, NAIVE_LOOP))


def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def scenarios(doc: dict) -> dict[str, dict]:
    return {s["name"]: s for r in doc["reports"] for s in r["scenarios"]}


@pytest.fixture(scope="module")
def naive(tmp_path_factory) -> dict:
    """The naive loop graded once on three scenarios with every output: --json, --save, --junit, --keep,
    --write-baseline."""
    out = tmp_path_factory.mktemp("naive")
    args = ["grade", "--command", NAIVE, *SCENARIOS, "--json", "--save", str(out / "saved.json"),
            "--junit", str(out / "junit.xml"), "--keep", str(out / "kept"), "--write-baseline", str(out / "base.json")]
    done = subprocess.run([sys.executable, "-m", "agentlab", *args], capture_output=True, text=True, timeout=300,
                          cwd=out)
    return {"dir": out, "code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


# -- the JSON report -----------------------------------------------------------------------------------------------

def test_json_is_one_document_valid_against_the_shipped_schema(naive):
    assert naive["code"] == 1, naive["stderr"]
    doc = json.loads(naive["stdout"])  # all of stdout: one document, the text report went to stderr
    jsonschema.validate(doc, schema())
    assert doc["schema_version"] == SCHEMA_VERSION == 2
    assert doc["agentlab_version"] == metadata.version("agentlab-workbench")
    assert doc["verdict"] == "fail"
    (report,) = doc["reports"]
    assert report["command"] == shlex.split(NAIVE)
    assert report["environment"] == {"removed": ["ANTHROPIC_*", "CLAUDE*"], "passed": []}
    found = scenarios(doc)
    assert list(found) == SCENARIOS
    for name, s in found.items():
        assert [r["rule"] for r in s["rules"]] == [r.name for r in RULES], name  # every rule, in the table's order
        assert s["exit_code"] == 0 and s["requests"] == 1 and 0 < s["duration_s"] < 300
    status = {name: {r["rule"]: r["status"] for r in s["rules"]} for name, s in found.items()}
    assert status["pause_turn"]["pause_turn_resume"] == "fail"
    assert status["max_tokens_give_up"]["bounded_max_tokens_recovery"] == "fail"
    assert status["end_turn"]["stop_when_done"] == "pass"
    assert status["end_turn"]["retry_with_backoff"] == "not_reached"
    message = {r["rule"]: r["message"] for r in found["pause_turn"]["rules"]}
    assert "the server tool unfinished" in message["pause_turn_resume"]
    assert "    ✗ pause_turn_resume: pause_turn\n" in naive["stderr"]     # the headline: a failed rule a line


def test_the_schema_rejects_what_is_not_a_report():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"schema_version": 1, "agentlab_version": "x", "verdict": "maybe", "reports": []},
                            schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"verdict": "pass", "reports": []}, schema())  # no schema_version


def test_save_writes_the_json_document_and_load_reads_it_back(naive, capsys):
    saved = json.loads((naive["dir"] / "saved.json").read_text(encoding="utf-8"))
    assert saved == json.loads(naive["stdout"])
    assert main(["grade", "--load", str(naive["dir"] / "saved.json"), "--json"]) == 1
    again = json.loads(capsys.readouterr().out)
    jsonschema.validate(again, schema())
    assert scenarios(again) == scenarios(saved)


def test_a_report_of_the_earlier_format_still_loads(tmp_path, capsys):
    old = {"reports": [{"client": "old", "verdict": "fail",
                        "scenarios": [{"client": "old", "name": "end_turn", "verdict": "fail", "failed": ["x_rule"],
                                       "why": {"x_rule": "because"}, "requests": 2, "ending": "exit 0"}],
                        "checks": {"end_turn": [{"rule": "x_rule", "status": "fail", "why": "because"}]}}]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    assert main(["grade", "--load", str(path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, schema())
    assert scenarios(doc)["end_turn"]["failed"] == ["x_rule"]


def test_a_report_of_a_newer_schema_is_refused(tmp_path, capsys):
    path = tmp_path / "new.json"
    path.write_text(json.dumps({"schema_version": 99, "reports": []}), encoding="utf-8")
    assert main(["grade", "--load", str(path)]) == 2
    assert "schema_version 99" in capsys.readouterr().err


# -- JUnit -------------------------------------------------------------------------------------------------------

def test_junit_has_a_test_case_per_scenario_and_rule(naive):
    root = ET.parse(naive["dir"] / "junit.xml").getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(SCENARIOS) * len(RULES) == int(suite.get("tests")) == int(root.get("tests"))
    failed = {(c.get("classname"), c.get("name")): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failed) == {("pause_turn", "pause_turn_resume"), ("max_tokens_give_up", "bounded_max_tokens_recovery")}
    assert "the server tool unfinished" in failed["pause_turn", "pause_turn_resume"].get("message")
    assert "the server tool unfinished" in failed["pause_turn", "pause_turn_resume"].text
    skipped = [c for c in cases if c.find("skipped") is not None]
    passed = [c for c in cases if not list(c)]
    assert int(suite.get("failures")) == 2 and int(suite.get("errors")) == 0
    assert int(suite.get("skipped")) == len(skipped)
    assert ("end_turn", "stop_when_done") in {(c.get("classname"), c.get("name")) for c in passed}
    assert len(passed) + len(skipped) + 2 == len(cases)


# -- the baseline ---------------------------------------------------------------------------------------------------

def test_write_baseline_records_todays_failures(naive):
    base = json.loads((naive["dir"] / "base.json").read_text(encoding="utf-8"))
    assert {s: sorted(rules) for s, rules in base["failures"].items()} == {
        "pause_turn": ["pause_turn_resume"], "max_tokens_give_up": ["bounded_max_tokens_recovery"]}


def test_a_baseline_accepts_known_failures_fails_on_new_ones_and_names_what_passes_now(naive, forked_naive, tmp_path,
                                                                                         capsys):
    saved = str(naive["dir"] / "saved.json")
    known = tmp_path / "known.json"
    # graded again from the saved report would not do: a baseline is about the command graded now
    assert main(["grade", "--load", saved, "--baseline", str(naive["dir"] / "base.json")]) == 2
    assert "--baseline goes with --command" in capsys.readouterr().err
    base = json.loads((naive["dir"] / "base.json").read_text(encoding="utf-8"))
    base["failures"]["end_turn"] = ["stop_when_done"]  # passes today: the baseline can shrink
    known.write_text(json.dumps(base), encoding="utf-8")
    assert main(["grade", "--command", forked_naive, *SCENARIOS, "--baseline", str(known), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    jsonschema.validate(doc, schema())
    assert doc["verdict"] == "pass" and doc["reports"][0]["verdict"] == "fail"
    assert doc["baseline"]["new"] == [] and doc["baseline"]["now_pass"] == [{"scenario": "end_turn",
                                                                              "rule": "stop_when_done"}]
    assert "2 known failure(s) accepted, 0 new" in captured.err
    assert "no longer failing (remove them from it): end_turn: stop_when_done" in captured.err
    del base["failures"]["pause_turn"]
    known.write_text(json.dumps(base), encoding="utf-8")
    assert main(["grade", "--command", forked_naive, *SCENARIOS, "--baseline", str(known)]) == 1
    assert "new failures: pause_turn: pause_turn_resume" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--save", "same.json", "--junit", "same.json"], "--junit same.json: is also the file of --save"),
    (["--junit", "out", "--save", "r.json"], "--junit out: is a folder"),
    (["--keep", "same.json/kept"], "--keep same.json/kept: cannot create the folder"),
])
def test_output_files_that_collide_exit_2_before_anything_runs(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    if "--keep" in args:
        (tmp_path / "same.json").write_text("a file, not a folder")
    assert main(["grade", "--command", NAIVE, "end_turn", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "agentlab grade:" not in captured.err
    assert "--keep" in args or not (tmp_path / "same.json").exists()


def test_saving_over_a_loaded_report_is_refused(naive, tmp_path, capsys):
    saved = tmp_path / "saved.json"
    saved.write_text((naive["dir"] / "saved.json").read_text())
    before = saved.read_text()
    assert main(["grade", "--load", str(saved), "--save", str(saved)]) == 2
    assert "is a report given to --load" in capsys.readouterr().err
    assert saved.read_text() == before


def test_a_malformed_baseline_exits_2_before_anything_runs(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"failures": 3}', encoding="utf-8")
    assert main(["grade", "--command", NAIVE, "end_turn", "--baseline", str(bad)]) == 2
    captured = capsys.readouterr()
    assert "not a baseline written by --write-baseline" in captured.err and "agentlab grade:" not in captured.err


def test_a_baseline_nested_100000_levels_deep_is_one_line_naming_it(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert main(["grade", "--command", NAIVE, "end_turn", "--baseline", str(deep)]) == 2
    err = capsys.readouterr().err
    assert err == f"agentlab: --baseline {deep}: nested too deeply to be a baseline written by --write-baseline\n"


# -- --keep -------------------------------------------------------------------------------------------------------

def test_keep_holds_what_the_server_saw_and_what_the_command_printed(naive):
    doc = json.loads(naive["stdout"])
    for name, s in scenarios(doc).items():
        folder = naive["dir"] / "kept" / name
        exchanges = [json.loads(line) for line in (folder / "exchanges.jsonl").read_text().splitlines()]
        assert len(exchanges) == s["requests"]
        first = exchanges[0]
        assert first["method"] == "POST" and first["body"]["messages"][0]["role"] == "user"
        assert first["reply"]["status"] == 200 and first["reply"]["body"]
        record = json.loads((folder / "record.json").read_text())
        assert record["scenario"] == name and len(record["requests"]) == s["requests"]
        assert json.loads((folder / "exit.json").read_text())["exit_code"] == 0
        assert (folder / "stdout.txt").read_text().strip(), "the naive loop prints its answer"
        assert (folder / "stderr.txt").exists()


# -- the command contract --------------------------------------------------------------------------------------------

ECHO = """\
import json, os, sys, urllib.request
seen = {"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items()
                                       if k.startswith(("AGENTLAB_", "ANTHROPIC_", "CLAUDE"))}}
open(os.environ["ECHO_TO"] + "/" + os.environ["AGENTLAB_SCENARIO"] + ".json", "w").write(json.dumps(seen))
prompt = os.environ["AGENTLAB_PROMPT"]
body = {"model": os.environ["AGENTLAB_MODEL"], "max_tokens": 100, "messages": [{"role": "user", "content": prompt}]}
request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", json.dumps(body).encode(),
                                 {"content-type": "application/json", "x-api-key": os.environ["ANTHROPIC_API_KEY"]})
urllib.request.urlopen(request).read()
"""


def test_the_prompt_goes_where_the_placeholder_stands_and_the_environment_is_documented(tmp_path, capsys, monkeypatch):
    script = tmp_path / "echo.py"
    script.write_text(ECHO, encoding="utf-8")
    monkeypatch.setenv("ECHO_TO", str(tmp_path))
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "secret-token")
    monkeypatch.setenv("ANTHROPIC_MODEL", "a-model")
    monkeypatch.setenv("CLAUDE_CODE_USE_BEDROCK", "1")
    command = f"{PY} {shlex.quote(str(script))} --prompt={{prompt}} --then-more"
    assert main(["grade", "--command", command, "end_turn", "pause_turn", "--pass-env", "ANTHROPIC_MODEL",
                 "--json"]) == 0  # pause_turn: not reached, it offers no web search
    captured = capsys.readouterr()
    seen = json.loads((tmp_path / "end_turn.json").read_text())
    assert seen["argv"] == ["--prompt=What is the capital of France?", "--then-more"]
    tags = [k for k in seen["env"] if k.startswith("AGENTLAB_PROCESS_")]  # what the cleanup finds its processes by
    assert len(tags) == 1 and seen["env"].pop(tags[0]) == "1"
    assert seen["env"] == {
        "ANTHROPIC_BASE_URL": seen["env"]["ANTHROPIC_BASE_URL"], "ANTHROPIC_API_KEY": "agentlab-grade-key",
        "ANTHROPIC_MODEL": "a-model", "AGENTLAB_PROMPT": "What is the capital of France?",
        "AGENTLAB_SCENARIO": "end_turn", "AGENTLAB_MODEL": load_scenario("end_turn").model,
        "AGENTLAB_MAX_TOKENS": "1024", "AGENTLAB_SERVER_TOOLS": "[]"}
    assert seen["env"]["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    paused = json.loads((tmp_path / "pause_turn.json").read_text())
    assert [t["name"] for t in json.loads(paused["env"]["AGENTLAB_SERVER_TOOLS"])] == ["web_search"]
    doc = json.loads(captured.out)
    assert doc["reports"][0]["environment"] == {"removed": ["ANTHROPIC_*", "CLAUDE*"], "passed": ["ANTHROPIC_MODEL"]}
    assert "without the ANTHROPIC_* and CLAUDE* variables (passed with --pass-env: ANTHROPIC_MODEL)" in captured.err
    assert scenarios(doc)["end_turn"]["verdict"] == "pass"


def test_a_passed_variable_and_an_api_key_printed_by_the_command_are_redacted(tmp_path, capsys, monkeypatch):
    script = tmp_path / "leak.py"
    script.write_text("import os, sys\nprint('token', os.environ['ANTHROPIC_AUTH_TOKEN'], file=sys.stderr)\n"
                      "print('key sk-ant-api03-abcdefghijklmnop', file=sys.stderr)\nsys.exit(3)\n")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "very-secret-token-value")
    assert main(["grade", "--command", f"{PY} {shlex.quote(str(script))}", "end_turn", "--pass-env",
                 "ANTHROPIC_AUTH_TOKEN", "--keep", str(tmp_path / "kept"), "--json"]) == 1
    captured = capsys.readouterr()
    kept = (tmp_path / "kept" / "end_turn" / "stderr.txt").read_text()
    for text in (captured.out, captured.err, kept):
        assert "very-secret-token-value" not in text and "sk-ant-api03" not in text
    assert "token [redacted]" in kept and "key [redacted]" in kept


def test_without_a_placeholder_the_prompt_is_the_last_argument(tmp_path, capsys, monkeypatch):
    script = tmp_path / "echo.py"
    script.write_text(ECHO, encoding="utf-8")
    monkeypatch.setenv("ECHO_TO", str(tmp_path))
    assert main(["grade", "--command", f"{PY} {shlex.quote(str(script))} -v", "end_turn"]) == 0
    assert json.loads((tmp_path / "end_turn.json").read_text())["argv"] == ["-v", "What is the capital of France?"]


def test_a_command_that_sends_nothing_shows_its_stderr_and_what_to_check(tmp_path, capsys):
    script = tmp_path / "swallow.py"
    script.write_text("import sys\nprint('usage: agent [--tools T...] PROMPT', file=sys.stderr)\n"
                      "print('error: the following arguments are required: PROMPT', file=sys.stderr)\nsys.exit(2)\n")
    assert main(["grade", "--command", f"{PY} {shlex.quote(str(script))} --tools", "end_turn", "--json"]) == 1
    captured = capsys.readouterr()
    assert "no request reached the server. Check that the command reads ANTHROPIC_BASE_URL" in captured.err
    assert "end the options with --, or place {prompt}" in captured.err
    assert "stderr: usage: agent [--tools T...] PROMPT" in captured.err
    assert "error: the following arguments are required: PROMPT" in captured.err
    s = scenarios(json.loads(captured.out))["end_turn"]
    assert s["exit_code"] == 2 and s["requests"] == 0 and "arguments are required" in s["stderr"]


# -- agentlab serve --mode grade ------------------------------------------------------------------------------------

def _serve(scenario: str, *mode: str):
    proc = subprocess.Popen([sys.executable, "-m", "agentlab", "serve", scenario, *mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert "agentlab serve: http://" in line, line + proc.stderr.read()
    return proc, line.split()[2]


@pytest.mark.parametrize("mode", ["strict", "grade"])
def test_serve_in_grade_mode_answers_what_strict_mode_refuses(mode):
    proc, url = _serve("max_tokens_continue", "--mode", mode)
    try:
        client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
        messages = [{"role": "user", "content": "Recite the digits of pi."}]
        model = load_scenario("max_tokens_continue").model
        client.messages.create(model=model, max_tokens=100, messages=messages)
        # a careless second request: the script expects max_tokens raised; strict mode says so with a 400
        if mode == "strict":
            with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
                client.messages.create(model=model, max_tokens=100, messages=messages)
        else:
            reply = client.messages.create(model=model, max_tokens=100, messages=messages)
            assert reply.type == "message"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


# -- the pytest plugin -----------------------------------------------------------------------------------------------

def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest in a new process, as a framework's CI runs it. nbval and hypothesis, installed here for the lessons
    and agentlab's own tests, are left out: a maintainer's venv has no reason to hold them, and loading them
    (nbformat, jsonschema's format grammars; all of hypothesis, which its plugin imports) is some three and one
    and a half seconds of CPU in each pytest process."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-p", "no:nbval", "-p", "no:hypothesispytest", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "250"})  # summary lines not cut


def test_the_plugin_fails_a_scenario_with_its_rules_named_and_writes_junit(tmp_path, naive, forked_naive):
    (tmp_path / "test_other.py").write_text("def test_other():\n    assert False\n")  # not collected: no paths given
    done = _pytest(tmp_path, "--agentlab-grade", forked_naive, "--agentlab-scenarios", ",".join(SCENARIOS),
                   "--junitxml", "out.xml")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED agentlab-grade::pause_turn - pause_turn: pause_turn_resume failed" in done.stdout
    assert "FAILED agentlab-grade::max_tokens_give_up - max_tokens_give_up: bounded_max_tokens_recovery failed" \
        in done.stdout
    assert "2 failed, 1 passed" in done.stdout and "test_other" not in done.stdout
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "out.xml").getroot().iter("testcase")}
    assert set(cases) == set(SCENARIOS)
    assert "the server tool unfinished" in cases["pause_turn"].find("failure").text
    # with the baseline written by agentlab grade, the known failures are expected ones
    done = _pytest(tmp_path, "--agentlab-grade", forked_naive, "--agentlab-scenarios", ",".join(SCENARIOS),
                   "--agentlab-baseline", str(naive["dir"] / "base.json"), "-rx")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 2 xfailed" in done.stdout
    assert "known failure(s) in the baseline: pause_turn_resume" in done.stdout


def test_with_test_paths_given_the_plugin_runs_them_too(tmp_path, forked_naive):
    (tmp_path / "test_other.py").write_text("def test_other():\n    pass\n")
    done = _pytest(tmp_path, "test_other.py", "--agentlab-grade", forked_naive, "--agentlab-scenarios", "end_turn",
                   "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_other.py::test_other PASSED" in done.stdout and "agentlab-grade::end_turn PASSED" in done.stdout


def test_a_scenario_not_reached_is_skipped(tmp_path):
    # the grading is replaced by a report whose run reached no branch rule (nothing any rule could judge)
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import agentlab_grade.pytest_plugin as pytest_agentlab
        from agentlab.grading.command import Check, Report, ScenarioGrade

        def grade(self, name):
            self._report = Report("fake", [ScenarioGrade(name, [Check("ends_on_its_own", "pass", "it ended")], 1,
                                                         "exit 0", notes=["the branch was never offered"])])
            return self._report.grade(name)

        pytest_agentlab.GradeSession.grade = grade
    """))
    done = _pytest(tmp_path, "--agentlab-grade", "true", "--agentlab-scenarios", "end_turn", "-rs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout and "not reached: exit 0, 1 request(s); the branch was never offered" \
        in done.stdout


def test_the_plugin_under_xdist_grades_each_scenario_on_its_worker(tmp_path, forked_naive):
    done = _pytest(tmp_path, "--agentlab-grade", forked_naive, "--agentlab-scenarios", "pause_turn,end_turn",
                   "-n", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED agentlab-grade::pause_turn - pause_turn: pause_turn_resume failed" in done.stdout
    assert "1 failed, 1 passed" in done.stdout


def test_the_plugin_grades_only_the_selected_scenarios(tmp_path, forked_naive):
    done = _pytest(tmp_path, "--agentlab-grade", forked_naive, "--agentlab-scenarios", ",".join(SCENARIOS), "-k",
                   "end_turn",
                   "--agentlab-keep", "kept")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 2 deselected" in done.stdout
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["end_turn"]


def test_bad_plugin_options_are_a_usage_error(tmp_path):
    done = _pytest(tmp_path, "--agentlab-grade", "true", "--agentlab-scenarios", "no_such_scenario")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "--agentlab-grade:" in done.stderr and "no_such_scenario" in done.stderr


def test_a_baseline_nested_too_deeply_is_a_usage_error_not_an_internal_error(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    done = _pytest(tmp_path, "--agentlab-grade", "true", "--agentlab-scenarios", "end_turn",
                   "--agentlab-baseline", "deep.json")
    assert done.returncode == 4 and "INTERNALERROR" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == ("ERROR: --agentlab-grade: --baseline deep.json: nested too "
                                                    "deeply to be a baseline written by --write-baseline")


def test_without_the_option_the_plugin_imports_nothing_of_agentlab(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    script = textwrap.dedent("""
        import sys, pytest
        code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:nbval",
                            "-p", "no:hypothesispytest", "test_one.py"])  # as _pytest: not a maintainer's plugins
        plugin = sorted(p for p in sys.modules if p.startswith("agentlab_grade"))
        print("RESULT", code, plugin, sorted(m for m in sys.modules if m == "agentlab" or m.startswith("agentlab.")))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": ""})
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT"))
    assert line == "RESULT 0 ['agentlab_grade', 'agentlab_grade.pytest_plugin'] []", done.stdout + done.stderr


def test_grading_a_command_imports_no_sdk(tmp_path):
    """The grader serves scripted replies and runs a command: neither needs the anthropic SDK, whose import is some
    3 s of CPU in each ``agentlab grade`` and each ``pytest --agentlab-grade`` process."""
    script = ("import sys\nfrom agentlab.cli import main\ncode = main(['grade', '--command', 'true', 'end_turn'])\n"
              "print('RESULT', code, sorted(m for m in sys.modules if m.split('.')[0] in ('anthropic', 'httpx')))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "RESULT 1 []", done.stdout + done.stderr  # 1: `true` sends nothing


def test_report_round_trip_keeps_the_command():
    report = Report("x", [], command=["python", "a.py"], passed_env=["ANTHROPIC_MODEL"])
    again = Report.from_dict(report.to_dict())
    assert again.command == ["python", "a.py"] and again.passed_env == ["ANTHROPIC_MODEL"]


@pytest.mark.parametrize(("mode", "status", "says"), [
    ("report", 0, "≠ retry_with_backoff"), ("strict", 1, "counted as failures: --policy strict"),
    ("ignore", 0, "every rule holds")])
def test_policy_flag_decides_what_a_difference_counts_as(mode, status, says, capsys):
    # pydantic-ai's committed api_errors record: the SDK's two retries, where the reference loop makes three
    code = main(["grade", "api_errors", "--observed", "pydantic-ai", "--policy", mode])
    out = capsys.readouterr().out
    assert code == status, out
    assert says in out


def test_the_plugin_s_policy_option_decides_what_a_difference_counts_as(tmp_path):
    # a conftest replaces the grading by a report with one policy difference (no agent needed)
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import agentlab_grade.pytest_plugin as pytest_agentlab
        from agentlab.grading.command import Check, Report, ScenarioGrade

        def grade(self, name):
            checks = [Check("retry_with_backoff", "policy", "ended after 2 retries", policy="2 retries"),
                      Check("ends_on_its_own", "pass", "it ended")]
            self._report = Report("fake", [ScenarioGrade(name, checks, 3, "exit 1")])
            return self._report.under(self.config.getoption("agentlab_policy")).grade(name)

        pytest_agentlab.GradeSession.grade = grade
    """))
    outcomes = {}
    for mode in ("report", "strict", "ignore"):
        done = _pytest(tmp_path, "--agentlab-grade", "true", "--agentlab-scenarios", "api_errors",
                       "--agentlab-policy", mode)
        outcomes[mode] = (done.returncode, done.stdout.strip().splitlines()[-1])
    assert outcomes["strict"][0] == 1 and "1 failed" in outcomes["strict"][1], outcomes
    assert outcomes["report"][0] == 0 and outcomes["ignore"][0] == 0, outcomes


# -- Ctrl-C ------------------------------------------------------------------------------------------------------------

SLOW_AGENT = """import os, sys, time
with open(sys.argv[1], "w") as started:  # the test reads this: the agent is running
    started.write(str(os.getpid()))
time.sleep(3600)  # a slow agent: far beyond the grade's timeout
"""


def _interrupted_while_the_agent_runs(tmp_path: Path, argv: list[str]) -> tuple[subprocess.CompletedProcess, int]:
    """Start ``argv`` (a grade of SLOW_AGENT, whose command is ``{agent}``), wait until the agent has started (it
    writes its pid into a named pipe), press Ctrl-C (SIGINT), and wait for the grade to end (a bound far below the
    grade's 600 s timeout, a safety net: past it, the failure shows the stack of every thread of the grade, which
    faulthandler prints on SIGABRT). Returns how it ended and the agent's pid."""
    import select
    import signal

    from forked import as_from_a_terminal

    script, fifo = tmp_path / "slow_agent.py", tmp_path / "started.fifo"
    script.write_text(SLOW_AGENT, encoding="utf-8")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # open before the agent: its open for writing never waits
    agent = f"{PY} {shlex.quote(str(script))} {shlex.quote(str(fifo))}"
    proc = subprocess.Popen([a.replace("{agent}", agent) for a in argv], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal,
                            env={**os.environ, "COLUMNS": "250", "PYTHONFAULTHANDLER": "1"})
    try:
        readable, _, _ = select.select([reader], [], [], 240)
        assert readable, "the agent never started"
        pid = int(os.read(reader, 100))
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # where every thread of the grade was: faulthandler's dump on SIGABRT
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            raise AssertionError(f"the grade did not end within 120 s of the Ctrl-C:\n{out[-3000:]}\n"
                                 f"{err[-6000:]}") from None
    finally:
        os.close(reader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), pid




def test_ctrl_c_during_a_grade_kills_the_agents_at_once_and_says_interrupted(tmp_path):
    done, pid = _interrupted_while_the_agent_runs(tmp_path, [
        sys.executable, "-m", "agentlab", "grade", "--command", "{agent}", "end_turn", "tool_use", "--timeout", "600"])
    assert done.returncode == 130, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == "agentlab: interrupted" and "Traceback" not in done.stderr, done.stderr
    assert not _alive(pid), "the agent outlived the Ctrl-C"


def test_ctrl_c_during_the_plugins_grade_kills_the_agents_and_ends_pytest_as_ctrl_c_does(tmp_path):
    done, pid = _interrupted_while_the_agent_runs(tmp_path, [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:nbval",
        "-p", "no:hypothesispytest",
        "--agentlab-grade", "{agent}", "--agentlab-scenarios", "end_turn,tool_use", "--agentlab-timeout", "600"])
    assert done.returncode == 2, done.stdout + done.stderr  # pytest's exit status for an interrupted run
    assert "KeyboardInterrupt" in done.stdout and "INTERNALERROR" not in done.stdout + done.stderr, done.stdout
    assert not _alive(pid), "the agent outlived the Ctrl-C"
