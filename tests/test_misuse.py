"""Under misuse: `agentlab serve` safe from web pages, no secret or escape sequence on the terminal, no file of
the user's overwritten or mixed, and every bad input one line naming it (exit 2), never a traceback."""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import anthropic
import pytest
from forked import run_forked
from wire import MessagesServer, message, text

from agentlab.backend.scenario import load_scenario
from agentlab.backend.serve import ScenarioServer
from agentlab.cli import main as cli_main
from agentlab.core.config import RunConfig
from agentlab.core.errors import ConfigError, ScenarioError
from agentlab.core.guard import FileBusy, check_outputs, printable, redact, redact_value
from agentlab.core.trace import Trace

REPO = Path(__file__).resolve().parent.parent
SCENARIO = ("description: mine\nrow: \"11\"\nprompt: {prompt}\nsteps:\n  - content: [{{type: text, text: hello}}]\n"
            "    stop_reason: end_turn\n")
BODY = json.dumps({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})


def post(server: ScenarioServer, headers: dict[str, str]) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("POST", "/v1/messages", body=BODY, headers={"content-type": "text/plain", **headers})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def one_line(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert all(n in err for n in needles), err
    return err


# --- serve answers only its own host and origin -----------------------------------------------------------

@pytest.mark.parametrize("headers", [{"Host": "attacker.example"}, {"Host": "attacker.example:8080"},
                                     {"Origin": "https://attacker.example"}, {"Origin": "null"},
                                     {"Origin": "http://127.0.0.1:1"}, {"Sec-Fetch-Site": "cross-site"}])
def test_serve_refuses_another_host_or_origin_without_using_a_step_or_recording(tmp_path, headers) -> None:
    record = tmp_path / "record.jsonl"
    logged: list[str] = []
    with ScenarioServer("end_turn", record=record, log=logged.append) as server:
        status, body = post(server, headers)
        assert status == 403 and body["error"]["type"] == "permission_error"
        assert server.engine.requests == [] and server.exchanges == []
        assert record.read_text() == ""
        assert any("refused" in line for line in logged)
        # the scenario's first step is still there for the client it is meant for
        reply = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert reply.content[0].text == "The capital of France is Paris."


@pytest.mark.parametrize("headers", [{}, {"Host": "localhost"}, {"Host": "[::1]:9"}, {"Origin": "{own}"},
                                     {"Host": "lab.internal", "Origin": "http://lab.internal:{port}"},
                                     {"Sec-Fetch-Site": "same-origin"}])
def test_serve_answers_loopback_its_own_origin_and_the_names_allowed(headers) -> None:
    with ScenarioServer("end_turn", allow_hosts=["lab.internal"]) as server:
        given = {k: v.format(own=server.base_url, port=server.port) for k, v in headers.items()}
        status, body = post(server, given)
        assert status == 200 and body["type"] == "message", body


def test_serve_binds_to_the_loopback_only() -> None:
    with ScenarioServer("end_turn") as server:
        assert server.base_url.startswith("http://127.0.0.1:")


# --- secrets ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ['ab"cd\\ef\x01gh-long-key', "k3y"], ids=["escaped", "short"])
def test_a_key_echoed_by_the_server_is_in_neither_the_output_nor_the_trace(tmp_path, monkeypatch, capsys, key):
    with MessagesServer([message([text(f"your key is {key}, right?")])]) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", key)
        code = cli_main(["run", "--base-url", server.url, "--prompt", "hi", "--json", "--trace",
                         str(tmp_path / "t.jsonl")])
    out = capsys.readouterr().out
    trace = (tmp_path / "t.jsonl").read_text()
    assert code == 0
    for encoded in (key, json.dumps(key)[1:-1]):
        assert encoded not in out and encoded not in trace
    assert "your key is [redacted], right?" in json.loads(out.splitlines()[-1])["result"]


def test_redaction_runs_on_values_and_a_short_key_only_as_a_whole_word() -> None:
    key = 'q"\\\x07uote-key'
    assert redact_value({"a": [f"x {key} y"], key: 1}, (key,)) == {"a": ["x [redacted] y"], "[redacted]": 1}
    assert redact("key k3y refused; k3yboard, k3y_2", ("k3y",)) == "key [redacted] refused; k3yboard, k3y_2"
    assert redact("sk-ant-api03-abcdefghij and more") == "[redacted] and more"
    same = {"a": ["b"]}
    assert redact_value(same, ("zzz",)) is same


# --- the terminal ---------------------------------------------------------------------------------------

def test_printable_shows_control_characters_as_cat_v_does() -> None:
    assert printable("a\x1b]0;title\x07b\x1b[2J\r\x7f\x9b é\t\n") == "a^[]0;title^Gb^[[2J^M^?M-^[ é\t\n"
    assert printable("\u202eevil") == "<U+202E>evil"


def test_escape_sequences_reach_a_terminal_printable_and_the_trace_real(tmp_path) -> None:
    scenario = tmp_path / "esc.yaml"
    scenario.write_text('description: x\nprompt: hi\nsteps:\n  - content: [{type: text, text: "t \\e]0;pwned\\a '
                        'c \\e[2J end"}]\n    stop_reason: end_turn\n')
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "agentlab", "run", str(scenario), "--trace",
                             str(tmp_path / "t.jsonl")], stdout=child, stderr=child, cwd=tmp_path)
    os.close(child)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert proc.wait(timeout=60) == 0
    assert b"\x1b" not in shown and b"\x07" not in shown
    assert b"t ^[]0;pwned^G c ^[[2J end" in shown
    assert "\x1b]0;pwned\x07" in Trace.load(tmp_path / "t.jsonl").of_kind("result")[0].data["result"]


def test_a_hooks_and_a_models_escape_sequences_never_reach_a_pipe_raw(tmp_path) -> None:
    """A CI log is a pipe that a browser renders as a terminal: what agentlab prints there has no escape sequence
    (the hook's error line, the model's reply), while the trace keeps each byte."""
    hook = tmp_path / "esc.sh"
    hook.write_text("#!/bin/sh\ncat >/dev/null\nprintf 'bad \\033[2J\\033]8;;http://x\\007link\\033]8;;\\007 "
                    "over\\n' >&2\nexit 1\n")
    hook.chmod(0o755)
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": str(hook)}]}]}}))
    scenario = tmp_path / "esc.yaml"
    scenario.write_text('description: x\nprompt: hi\nsteps:\n  - content: [{type: text, text: "t \\e]0;pwned\\a '
                        'c \\e[31mred\\e[0m end"}]\n    stop_reason: end_turn\n')
    done = run_forked(["run", str(scenario), "--settings", str(settings), "--trace", str(tmp_path / "t.jsonl")],
                      cwd=tmp_path, timeout=120)
    assert done.code == 0, done.stderr
    shown = done.stdout + done.stderr
    assert "\x1b" not in shown and "\x07" not in shown
    assert "Stop [command] error: exit code 1 (non-blocking): bad link" in done.stdout
    assert done.stdout.rstrip().endswith("t  c red end")
    hook_run = Trace.load(tmp_path / "t.jsonl").of_kind("hook")[0].data
    assert "\x1b]8;;http://x\x07link" in hook_run["stderr"]


def test_grade_json_on_a_pipe_is_the_same_document(tmp_path) -> None:
    """``grade --json`` keeps an agent's escape sequences, escaped in the JSON, so the document reads back whole."""
    agent = tmp_path / "agent.py"
    agent.write_text("import sys\nsys.stderr.write('\\x1b[2Jcleared \\x9b31m')\nsys.exit(3)\n")
    done = run_forked(["grade", "--command", f"{sys.executable} {agent}", "end_turn", "--json"], cwd=tmp_path,
                      timeout=120)
    assert "\x1b" not in done.stdout and "\x9b" not in done.stdout
    doc = json.loads(done.stdout)
    assert doc["reports"][0]["scenarios"][0]["stderr"] == "\x1b[2Jcleared \x9b31m", doc["reports"][0]["scenarios"][0]


# --- no file overwritten ----------------------------------------------------------------------------------

def test_grade_save_onto_the_graded_scenario_is_refused_and_the_scenario_kept(tmp_path, capsys) -> None:
    scenario = tmp_path / "mine.json"
    scenario.write_text(json.dumps({"description": "x", "row": "11", "prompt": "hi", "steps": [
        {"content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn"}]}))
    before = scenario.read_text()
    code = cli_main(["grade", "--command", "true", str(scenario), "--save", str(scenario)])
    one_line(capsys, code, "--save", "scenario file", "overwrite")
    assert scenario.read_text() == before


def test_grade_save_onto_a_loaded_report_is_refused(tmp_path, capsys) -> None:
    report = tmp_path / "r.json"
    report.write_text('{"reports": []}')
    one_line(capsys, cli_main(["grade", "--load", str(report), "--save", str(report)]), "--load", "overwrite")
    assert report.read_text() == '{"reports": []}'


def test_grade_save_onto_a_committed_record_it_grades_is_refused(tmp_path, monkeypatch, capsys) -> None:
    import shutil

    import agentlab.grading.command as grade

    record = tmp_path / "observed" / "c" / "1" / "end_turn.json"
    record.parent.mkdir(parents=True)
    shutil.copy(REPO / "data" / "observed" / "agentlab" / "0.1.0" / "end_turn.json", record)
    before = record.read_text()
    monkeypatch.setattr(grade, "observed_dir", lambda: tmp_path / "observed")
    one_line(capsys, cli_main(["grade", "--observed", "agentlab", "--save", str(record)]), "committed record")
    assert record.read_text() == before


def test_serve_record_onto_the_served_scenario_is_refused_and_the_scenario_kept(tmp_path) -> None:
    scenario = tmp_path / "mine.yaml"
    scenario.write_text(SCENARIO.format(prompt="hi"))
    # a process of its own: a server that did not refuse would serve until stopped, and the timeout ends it
    ran = run_forked(["serve", str(scenario), "--record", str(scenario)], cwd=tmp_path, timeout=60)
    assert ran.code == 2 and "Traceback" not in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
    assert "--record" in ran.stderr and "scenario file" in ran.stderr, ran.stderr
    assert scenario.read_text() == SCENARIO.format(prompt="hi")


def test_a_trace_onto_the_hook_script_the_settings_run_is_refused_and_the_script_kept(tmp_path, monkeypatch,
                                                                                     capsys) -> None:
    script = tmp_path / "hook.sh"
    script.write_text("#!/bin/sh\ncat >/dev/null\n")
    script.chmod(0o755)
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": '"$CLAUDE_PROJECT_DIR"/hook.sh --quiet'}]}]}}))
    monkeypatch.chdir(tmp_path)
    code = cli_main(["run", "end_turn", "--settings", str(settings), "--trace", "hook.sh"])
    one_line(capsys, code, "--trace", "hook script")
    assert script.read_text() == "#!/bin/sh\ncat >/dev/null\n"


def test_a_trace_onto_a_sandbox_file_is_refused(capsys) -> None:
    notes = REPO / "data" / "sandbox" / "notes.txt"
    before = notes.read_bytes()
    one_line(capsys, cli_main(["run", "tour", "--trace", str(notes)]), "--trace", "sandbox file")
    assert notes.read_bytes() == before


def test_check_outputs_finds_a_hard_link_and_two_outputs_on_one_file(tmp_path) -> None:
    (tmp_path / "in.yaml").write_text("x")
    os.link(tmp_path / "in.yaml", tmp_path / "link")
    with pytest.raises(ConfigError, match="overwrite"):
        check_outputs({"--out": tmp_path / "link"}, {"the input": [tmp_path / "in.yaml"]})
    with pytest.raises(ConfigError, match="also the file of --a"):
        check_outputs({"--a": tmp_path / "o", "--b": tmp_path / "o"}, {})


# --- one writer per file ----------------------------------------------------------------------------------

def _held(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_a_trace_another_run_is_writing_is_refused_and_left_alone(tmp_path, capsys) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("the other run's line\n")
    fd = _held(path)
    try:
        code = cli_main(["run", "end_turn", "--trace", str(path)])
    finally:
        os.close(fd)
    one_line(capsys, code, str(path), "another run is writing")
    assert path.read_text() == "the other run's line\n"


def test_two_traces_on_one_file_the_second_is_refused() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        first, second = Trace(Path(folder) / "t.jsonl"), Trace(Path(folder) / "t.jsonl")
        first.open()
        with pytest.raises(FileBusy):
            second.open()
        first.close()
        second.open()  # the lock goes with the first writer
        second.close()


def test_a_record_file_another_server_is_writing_is_refused(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    with ScenarioServer("end_turn", record=path), pytest.raises(FileBusy, match="--record"):
        ScenarioServer("end_turn", record=path).start()


# --- duplicate keys ---------------------------------------------------------------------------------------

def test_a_key_given_twice_in_a_yaml_scenario_is_refused_naming_it_and_its_lines(tmp_path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(SCENARIO.format(prompt="hi") + "prompt: other\n")
    with pytest.raises(ScenarioError, match=r"duplicate key 'prompt' at line 7 \(first given at line 3\)"):
        load_scenario(path)
    path.write_text("description: x\nprompt: hi\nsteps:\n  - content: [{type: text, text: a, text: b}]\n")
    with pytest.raises(ScenarioError, match="duplicate key 'text' at line 4"):
        load_scenario(path)


def test_a_key_given_twice_in_a_json_scenario_is_refused_naming_it_and_its_lines(tmp_path) -> None:
    path = tmp_path / "dup.json"
    path.write_text('{"description": "x", "prompt": "hi",\n "steps": [{"content": [{"type": "text", "text": "a"}],\n'
                    '  "stop_reason": "end_turn", "x": [{"a": 1, "b": "stop_reason"}],\n'
                    '  "stop_reason": "max_tokens"}]}')
    with pytest.raises(ScenarioError, match=r"duplicate key 'stop_reason' at line 4 \(first given at line 3\)"):
        load_scenario(path)


def test_a_yaml_merge_key_overridden_is_not_a_duplicate(tmp_path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text("description: x\nprompt: hi\nsteps:\n  - &s {content: [{type: text, text: a}], stop_reason: "
                    "end_turn}\n  - <<: *s\n    stop_reason: max_tokens\n")
    assert load_scenario(path).steps[1].stop_reason == "max_tokens"


# --- no traceback: one line naming the input, exit 2 ----------------------------------------------------------

@pytest.mark.parametrize(("prompt", "needles"), [('"a\\0b"', ("NUL byte",)), ("a" * 300_000, ("argument too long",))],
                         ids=["nul", "300kb"])
def test_grade_a_prompt_no_argument_can_carry_is_one_line(tmp_path, capsys, prompt, needles) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(SCENARIO.format(prompt=prompt))
    one_line(capsys, cli_main(["grade", "--command", "true", str(path)]), "p.yaml", *needles)


@pytest.mark.parametrize(("args", "needles"), [
    (["--command", "python 'x"], ("--command", "No closing quotation")),
    (["--observed", "--save", "{dir}/missing/r.json"], ("--save", "does not exist")),
    (["--observed", "--save", "{dir}/r.csv"], ("--save", ".json")),
    (["--observed", "--heatmap", "{dir}/missing/h.png"], ("--heatmap", "does not exist")),
    (["--observed", "--heatmap", "{dir}/h.xyz"], ("--heatmap", "unknown image format")),
    (["--load", "{dir}/items.json"], ("--load", "reports[0]")),
    (["--load", "{dir}/kinds.json"], ("--load", "reports[0]")),
], ids=["quote", "save-folder", "save-format", "heatmap-folder", "heatmap-format", "load-items", "load-kinds"])
def test_grade_bad_usage_is_one_line(tmp_path, capsys, args, needles) -> None:
    (tmp_path / "items.json").write_text('{"reports": [5]}')
    (tmp_path / "kinds.json").write_text('{"reports": [{"client": "c", "scenarios": "abc"}]}')
    code = cli_main(["grade", *(a.format(dir=tmp_path) for a in args)])
    one_line(capsys, code, *needles)


@pytest.mark.parametrize("out", ["/dev/full/x", "/proc/self/x"])
def test_observe_out_that_cannot_be_made_is_one_line(capsys, out) -> None:
    one_line(capsys, cli_main(["observe", "agentlab", "end_turn", "--out", out]), "--out", out)


def test_a_nul_byte_in_a_settings_command_is_one_line(tmp_path, capsys) -> None:
    settings = tmp_path / "s.json"
    settings.write_text('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "tr\\u0000ue"}]}]}}')
    one_line(capsys, cli_main(["run", "end_turn", "--settings", str(settings)]), "s.json", "command", "NUL")


def test_a_base_url_from_the_environment_that_is_not_a_url_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://[::1")
    one_line(capsys, cli_main(["run", "--prompt", "hi"]), "ANTHROPIC_BASE_URL", "not a URL")


@pytest.mark.parametrize("answer", ['{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", '{"decision": ' + "9" * 5000 + "}"],
                         ids=["deep", "digits"])
def test_a_hook_answer_that_json_cannot_read_is_a_hook_error_not_a_traceback(tmp_path, answer) -> None:
    from agentlab.core.hooks import Hooks

    (tmp_path / "answer.txt").write_text(answer)
    hooks = Hooks({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "cat >/dev/null; cat answer.txt"}]}]}},
                  cwd=str(tmp_path))
    outcome = hooks.run("Stop", {"stop_hook_active": False})
    assert not outcome.blocked and len(outcome.errors) == 1
    assert "cannot be read" in outcome.errors[0] or "nested too deeply" in outcome.errors[0]


@pytest.mark.parametrize(("line", "needle"), [
    ('{"kind": "result", "call": 0, "data": {}}', "'seq'"),
    ('{"kind": "result", "seq": 0, "call": 0, "data": [1]}', "'data'"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
], ids=["no-seq", "list-data", "deep"])
def test_a_trace_file_that_is_not_events_is_one_error_naming_the_line(tmp_path, line, needle) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n{}\n")
    with pytest.raises(ValueError, match="line 1") as caught:
        Trace.load(path)
    assert needle in str(caught.value)


def test_the_python_api_names_a_wrong_prices_and_a_record_without_its_fields() -> None:
    from agentlab.backend.scripted import ScenarioEngine, scripted_client
    from agentlab.core.loop import AgentLoop
    from agentlab.observatory.replay import load_record

    with pytest.raises(ConfigError, match="prices"):
        AgentLoop(scripted_client(ScenarioEngine.from_name("end_turn")), RunConfig.of(prompt="hi", prices="cheap"))
    with pytest.raises(ConfigError, match="^the record given: client: missing$"):
        load_record({})
    with pytest.raises(ConfigError, match="^the record given: requests: .*valid tuple .*got 5"):
        load_record({"client": "c", "version": "1", "scenario": "end_turn", "requests": 5})


@pytest.mark.parametrize(("argv", "line"), [
    (["run", "end_turn", "--timeout", "0"],
     "agentlab run: --timeout: expected seconds above 0 and at most 86400, got 0 (see `agentlab run --help`)"),
    (["run", "end_turn", "--max-turns", "-3"],
     "agentlab run: --max-turns: expected a number of at least 1, got -3 (see `agentlab run --help`)"),
    (["serve", "end_turn", "--port", "99999"], None),
    (["sessions", "--limit", "0"], None),
    (["run", "end_turn", "--max-turns"],
     "agentlab run: --max-turns: expected one argument (see `agentlab run --help`)"),
    (["run", "end_turn", "--thinking", "5"],
     "agentlab run: --thinking: expected a budget of at least 1024 tokens (the API's minimum), got 5 "
     "(see `agentlab run --help`)"),
    (["grade", "--observed", "pydantic-ai", "--jobs", "0"],
     "agentlab grade: --jobs: expected 1 to 64 jobs, got 0 (see `agentlab grade --help`)"),
    (["grade", "--observed", "pydantic-ai", "--jobs", "100000"],
     "agentlab grade: --jobs: expected 1 to 64 jobs, got 100000 (see `agentlab grade --help`)"),
    (["grade", "--observed", "pydantic-ai", "--timeout", "nan"],
     "agentlab grade: --timeout: expected seconds above 0 and at most 86400, got nan (see `agentlab grade --help`)"),
])
def test_a_usage_error_is_one_short_line_with_a_pointer_to_help(capsys, argv, line) -> None:
    try:
        code = cli_main(argv)
    except SystemExit as stopped:
        code = stopped.code
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1 and len(err) < 200 and "usage:" not in err, err
    assert line is None or err.strip() == line, err


@pytest.mark.parametrize("value", [10**11, 10**400], ids=["1e11", "1e400"])
def test_max_tokens_and_thinking_past_the_bound_are_refused_from_flags_scenarios_and_python(tmp_path, capsys, value):
    from agentlab.backend.scripted import ScenarioEngine, scripted_client
    from agentlab.core.loop import AgentLoop
    from agentlab.core.transitions import MAX_TOKENS_BOUND

    for flag in ("--max-tokens", "--thinking"):
        with pytest.raises(SystemExit) as stopped:
            cli_main(["run", "end_turn", flag, str(value)])
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and flag in err and f"{MAX_TOKENS_BOUND:,}" in err and len(err) < 300, err
    for field in ("max_tokens", "thinking"):
        path = tmp_path / f"{field}.yaml"
        path.write_text(SCENARIO.format(prompt="hi") + f"{field}: {value}\n")
        one_line(capsys, cli_main(["run", str(path)]), f"{field}.yaml", field, "less than or equal")
    client = scripted_client(ScenarioEngine.from_name("end_turn"))
    with pytest.raises(ConfigError, match="max_tokens"):
        AgentLoop(client, RunConfig.of(prompt="hi", max_tokens=value))
    with pytest.raises(ConfigError, match="thinking"):
        AgentLoop(client, RunConfig.of(prompt="hi", max_tokens=MAX_TOKENS_BOUND, thinking=value))


UNKNOWN_TOOL = """description: the model names a tool the run does not have
prompt: hi
tools: demo
steps:
  - content: [{{type: tool_use, id: toolu_1, name: no_such_tool, input: {{}}{flag}}}]
    stop_reason: tool_use
  - expect: {{has_tool_result: true}}
    content: [{{type: text, text: done}}]
    stop_reason: end_turn
"""


def test_a_tool_that_does_not_exist_is_a_tool_error_on_the_wire(tmp_path) -> None:
    """A call marked ``unoffered`` is served as written: the loop answers it with an error tool_result naming the
    tool, the trace's tool event is an error, and the run goes on to its answer."""
    scenario = tmp_path / "unknown.yaml"
    scenario.write_text(UNKNOWN_TOOL.format(flag=", unoffered: true"))
    done = run_forked(["run", str(scenario), "--trace", str(tmp_path / "t.jsonl")], cwd=tmp_path, timeout=120)
    assert done.code == 0, done.stderr
    assert "no_such_tool({}) -> ERROR \"Unknown tool 'no_such_tool'" in done.stdout
    trace = Trace.load(tmp_path / "t.jsonl")
    tool = trace.of_kind("tool")[0].data
    assert tool["name"] == "no_such_tool" and tool["is_error"] is True
    second = [e.data for e in trace.of_kind("request")][1]
    assert second["messages"] == 3
    answer = [e.data for e in trace.of_kind("append") if e.data["role"] == "user"][-1]["content"][0]
    assert answer["type"] == "tool_result" and answer["is_error"] is True and "Unknown tool" in str(answer["content"])


def test_a_scripted_call_to_a_tool_the_run_lacks_is_an_error_of_the_scenario(tmp_path) -> None:
    """Unmarked, the call cannot be sent to the request (the live API calls offered tools): the run does not
    pass for a success; it says which call and which tool, on one line, and exits 1."""
    scenario = tmp_path / "unknown.yaml"
    scenario.write_text(UNKNOWN_TOOL.format(flag=""))
    done = run_forked(["run", str(scenario)], cwd=tmp_path, timeout=120)
    assert done.code == 1
    assert done.stderr.count("\n") == 1 and "call 1" in done.stderr and "no_such_tool" in done.stderr
    assert "error of the scenario" in done.stderr and "error_during_execution" in done.stdout


def test_an_unoffered_call_is_not_sent_where_the_api_must_call_an_offered_tool() -> None:
    from agentlab.backend.offered import fit_reply

    call = {"type": "tool_use", "id": "t", "name": "nope", "input": {}, "unoffered": True}
    tools = [{"name": "calc", "input_schema": {"type": "object"}}]
    sent, _, why = fit_reply([call], "tool_use", {"tools": tools})
    assert sent == [{"type": "tool_use", "id": "t", "name": "nope", "input": {}}] and why == []
    for choice in ({"type": "any"}, {"type": "none"}, {"type": "tool", "name": "calc"}):
        sent, _, why = fit_reply([call], "tool_use", {"tools": tools, "tool_choice": choice})
        assert not any(b.get("name") == "nope" for b in sent) and why, choice
