"""The command under bad input and faults: one clear line and the documented exit code, no traceback, and no
file of the user's emptied or left behind. All runs start at once in a module fixture, each in a fork of the
test process (forked.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import forked
from forked import run_forked
from wire import MessagesServer, Raw, message, ok, sse_events, text

REPO = Path(__file__).resolve().parent.parent
SCENARIO = "description: mine\nprompt: hi\nsteps:\n  - content: [{type: text, text: hello}]\n"
PRECIOUS = "my own file, not a trace\n"
BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
USED_UP = ("description: mine\nprompt: hi\ntools: demo\nsteps:\n  - content: [{type: tool_use, id: toolu_1, "
           "name: calculator, input: {expression: '1 + 1'}}]\n    stop_reason: tool_use\n")
STOP_HOOK = json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}})


@dataclass
class Job:
    args: tuple[str, ...]
    files: dict[str, str | bytes] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    replies: list[Raw] | None = None  # set: a MessagesServer answers, its URL replaces {url}
    links: dict[str, str] = field(default_factory=dict)  # hard links made after the files: new name -> file


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    folder: Path


JOBS: dict[str, Job] = {
    "trace_is_the_scenario": Job(("run", "{dir}/mine.yaml", "--trace", "{dir}/mine.yaml"), {"mine.yaml": SCENARIO}),
    "trace_is_the_settings": Job(("run", "end_turn", "--settings", "{dir}/s.json", "--trace", "{dir}/s.json"),
                                 {"s.json": STOP_HOOK}),
    "failing_run_keeps_the_old_trace": Job(("run", "no_such_scenario", "--trace", "{dir}/old.jsonl"),
                                           {"old.jsonl": PRECIOUS}),
    "bad_settings_keep_the_old_trace": Job(("run", "end_turn", "--settings", "{dir}/s.json", "--trace",
                                            "{dir}/old.jsonl"), {"old.jsonl": PRECIOUS, "s.json": "{broken"}),
    "scenario_is_a_folder": Job(("run", "{dir}",)),
    "scenario_not_utf8": Job(("run", "{dir}/latin.yaml"), {"latin.yaml": "description: caf\xe9\n".encode("latin-1")}),
    "settings_not_utf8": Job(("run", "end_turn", "--settings", "{dir}/s.json"), {"s.json": b'{"hooks": "\xff"}'}),
    "settings_is_a_folder": Job(("run", "end_turn", "--settings", "{dir}")),
    "scenario_name_5000": Job(("run", "a" * 5000)),
    "billion_laughs": Job(("run", "{dir}/bomb.yaml"), {"bomb.yaml": BILLION_LAUGHS}),
    "deep_yaml": Job(("run", "{dir}/deep.yaml"), {"deep.yaml": "steps: " + "[" * 5000 + "]" * 5000 + "\n"}),
    "deep_json": Job(("run", "{dir}/deep.json"), {"deep.json": "[" * 100_000 + "]" * 100_000}),
    "trace_is_a_hard_link_to_the_scenario": Job(("run", "{dir}/mine.yaml", "--trace", "{dir}/link.jsonl"),
                                                {"mine.yaml": SCENARIO}, links={"link.jsonl": "mine.yaml"}),
    "scenario_is_dev_zero": Job(("run", "/dev/zero")),
    "settings_is_dev_zero": Job(("run", "end_turn", "--settings", "/dev/zero")),
    "scenario_over_1_mb": Job(("run", "{dir}/big.yaml"), {"big.yaml": "#" * 1_000_001}),
    "system_not_utf8": Job(("run", "end_turn", "--system", "caf\udce9")),
    "prompt_not_utf8": Job(("run", "end_turn", "--prompt", "\udcff\udcfe")),
    "trace_is_a_folder": Job(("run", "end_turn", "--trace", "{dir}")),
    "trace_to_dev_full": Job(("run", "end_turn", "--json", "--trace", "/dev/full")),
    "max_retries_2000": Job(("run", "end_turn", "--max-retries", "2000")),
    "max_retries_5000_digits": Job(("run", "end_turn", "--max-retries", "9" * 5000)),
    "max_retries_5000_digits_joined": Job(("run", "end_turn", f"--max-retries={'9' * 5000}")),
    "tools_5000_characters": Job(("run", "end_turn", "--tools", "x" * 5000)),
    "settings_path_5000": Job(("run", "end_turn", "--settings", "{dir}/" + "s" * 5000 + ".json")),
    "trace_path_5000": Job(("run", "end_turn", "--trace", "{dir}/" + "t" * 5000 + ".jsonl")),
    "save_path_5000": Job(("grade", "end_turn", "--observed", "agentlab", "--save", "{dir}/" + "s" * 5000 + ".json")),
    "timeout_zero": Job(("run", "end_turn", "--timeout", "0")),
    "base_url_not_a_url": Job(("run", "--base-url", "notaurl", "--prompt", "hi")),
    "base_url_ftp": Job(("run", "--base-url", "ftp://example.invalid/", "--prompt", "hi")),
    "settings_without_trace": Job(("run", "end_turn", "--settings", "{dir}/s.json"), {"s.json": STOP_HOOK},
                                  env={"TMPDIR": "{dir}/tmp"}),
    "surrogate_from_the_model": Job(("run", "--base-url", "{url}", "--prompt", "hi", "--trace", "{dir}/t.jsonl"),
                                    replies=[ok(message([text("bad \ud800 char")]))]),
    "script_used_up": Job(("run", "{dir}/short.yaml", "--json"), {"short.yaml": USED_UP}),
    "script_used_up_text": Job(("run", "{dir}/short.yaml"), {"short.yaml": USED_UP}),
    "stalled_stream_times_out": Job(("run", "--base-url", "{url}", "--prompt", "hi", "--stream", "--timeout", "0.5",
                                     "--max-retries", "0", "--json"),
                                    replies=[Raw(body=b"".join(sse_events(message([text("Hel")]))[:2]),
                                                 content_type="text/event-stream", stall=True)]),
    "dribbled_answer_meets_the_deadline": Job(("run", "--base-url", "{url}", "--prompt", "hi", "--timeout", "1",
                                               "--max-retries", "0", "--json"),
                                              replies=[Raw(body=json.dumps(message([text("x" * 600)])).encode(),
                                                           dribble=0.1)]),
}


def agentlab(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    ran = run_forked(args, env=env, cwd=REPO)
    return ran.code, ran.stdout, ran.stderr


def start(job: Job, folder: Path) -> tuple[Callable[[], tuple[int, str, str]], MessagesServer | None]:
    folder.mkdir(parents=True)
    (folder / "tmp").mkdir()
    for name, content in job.files.items():
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    for name, target in job.links.items():
        os.link(folder / target, folder / name)
    server = MessagesServer(list(job.replies)) if job.replies is not None else None
    url = server.url if server else ""
    args = [a.replace("{dir}", str(folder)).replace("{url}", url) for a in job.args]
    env = {k: v.replace("{dir}", str(folder)) for k, v in job.env.items()}
    return (lambda: agentlab(args, env)), server


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Any:
    root = tmp_path_factory.mktemp("cli_faults")
    started = {name: start(job, root / name) for name, job in JOBS.items()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(call) for name, (call, _) in started.items()}
        outcomes = {name: Ran(*futures[name].result(), root / name) for name in started}
    yield outcomes
    for _, server in started.values():
        if server is not None:
            server.close()


def clean_failure(ran: Ran, *needles: str) -> None:
    assert ran.code == 2, (ran.code, ran.stdout, ran.stderr)
    assert "Traceback" not in ran.stderr + ran.stdout, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentlab: "), ran.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# --- the trace never destroys a file ----------------------------------------------------------------------

def test_a_trace_path_that_is_the_scenario_is_refused_and_the_scenario_kept(runs) -> None:
    ran = runs["trace_is_the_scenario"]
    clean_failure(ran, "--trace", "mine.yaml", "overwrite")
    assert (ran.folder / "mine.yaml").read_text() == SCENARIO


def test_a_trace_path_that_is_the_settings_file_is_refused_and_the_settings_kept(runs) -> None:
    ran = runs["trace_is_the_settings"]
    clean_failure(ran, "--trace", "s.json", "--settings")
    assert (ran.folder / "s.json").read_text() == STOP_HOOK


def test_a_trace_path_that_is_a_hard_link_to_the_scenario_is_refused_and_the_scenario_kept(runs) -> None:
    ran = runs["trace_is_a_hard_link_to_the_scenario"]
    clean_failure(ran, "--trace", "link.jsonl", "overwrite")
    assert (ran.folder / "mine.yaml").read_text() == SCENARIO


@pytest.mark.parametrize("job", ["failing_run_keeps_the_old_trace", "bad_settings_keep_the_old_trace"])
def test_a_run_that_fails_on_its_inputs_leaves_the_old_trace_alone(runs, job) -> None:
    ran = runs[job]
    clean_failure(ran)
    assert (ran.folder / "old.jsonl").read_text() == PRECIOUS


def test_a_trace_path_that_is_a_folder_is_bad_usage(runs) -> None:
    clean_failure(runs["trace_is_a_folder"], "--trace", "is a folder")


def test_a_trace_that_cannot_be_written_keeps_the_result_and_says_why(runs) -> None:
    ran = runs["trace_to_dev_full"]
    assert ran.code == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert json.loads(ran.stdout.strip().splitlines()[-1])["subtype"] == "success"
    assert "/dev/full" in ran.stderr and "No space left" in ran.stderr


def test_settings_without_a_trace_leave_no_temporary_transcript(runs) -> None:
    ran = runs["settings_without_trace"]
    assert ran.code == 0, ran.stderr
    assert list((ran.folder / "tmp").iterdir()) == []


# --- bad inputs: one line, exit 2 --------------------------------------------------------------------------

@pytest.mark.parametrize(("job", "needles"), [
    ("scenario_is_a_folder", ("is a folder",)),
    ("scenario_not_utf8", ("latin.yaml", "not UTF-8")),
    ("settings_not_utf8", ("s.json",)),
    ("settings_is_a_folder", ("settings",)),
    ("scenario_name_5000", ("no scenario", "5000 characters")),
    ("billion_laughs", ("bomb.yaml", "aliases")),
    ("deep_yaml", ("deep.yaml", "nested")),
    ("deep_json", ("deep.json", "nested")),
    ("scenario_is_dev_zero", ("/dev/zero", "not a regular file")),
    ("settings_is_dev_zero", ("/dev/zero", "settings")),
    ("scenario_over_1_mb", ("big.yaml", "1000000 bytes")),
    ("system_not_utf8", ("--system", "not valid UTF-8")),
    ("prompt_not_utf8", ("--prompt", "not valid UTF-8")),
    ("max_retries_2000", ("--max-retries",)),
    ("timeout_zero", ("--timeout",)),
    ("base_url_not_a_url", ("--base-url", "notaurl")),
    ("base_url_ftp", ("--base-url", "ftp://example.invalid/")),
])
def test_bad_input_is_one_clear_line_and_exit_2(runs, job, needles) -> None:
    ran = runs[job]
    if job in ("max_retries_2000", "timeout_zero"):  # a usage error: one line, the error and a pointer to --help
        assert ran.code == 2 and "Traceback" not in ran.stderr
        assert len(ran.stderr.splitlines()) == 1 and all(n in ran.stderr for n in needles), ran.stderr
        assert ran.stderr.rstrip().endswith("(see `agentlab run --help`)"), ran.stderr
        return
    clean_failure(ran, *needles)
    assert len(ran.stderr) < 1000


@pytest.mark.parametrize(("job", "option"), [("max_retries_5000_digits", "--max-retries"),
                                             ("max_retries_5000_digits_joined", "--max-retries"),
                                             ("tools_5000_characters", "--tools"),
                                             ("settings_path_5000", "File name too long"),
                                             ("trace_path_5000", "--trace"),
                                             ("save_path_5000", "--save")])
def test_a_long_value_the_user_typed_is_echoed_shortened_with_its_length(runs, job, option) -> None:
    ran = runs[job]
    assert ran.code == 2 and "Traceback" not in ran.stderr, ran.stderr[:2000]
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and len(lines[0]) < 400, ran.stderr[:2000]
    assert re.search(r"…\S* \(5\d\d\d characters\)", lines[0]), lines[0]  # a path also counts its folder


# --- faults on the wire -------------------------------------------------------------------------------------

def test_a_lone_surrogate_from_the_model_is_taken_in_as_u_fffd_and_the_event_says_so(runs) -> None:
    ran = runs["surrogate_from_the_model"]
    assert ran.code == 0, ran.stderr
    assert "Traceback" not in ran.stderr and "bad \ufffd char" in ran.stdout
    from agentlab.core.trace import Trace

    events = Trace.load(ran.folder / "t.jsonl").events
    assert events[-1].kind == "result" and events[-1].data["result"] == "bad \ufffd char"
    response = next(e for e in events if e.kind == "response")
    assert "1 lone surrogate(s)" in response.data["note"] and "U+FFFD" in response.data["note"]


def test_the_timeout_applies_to_a_stalled_stream(runs) -> None:
    ran = runs["stalled_stream_times_out"]
    assert ran.code == 1, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["subtype"] == "error_api" and result["requests"] == 1
    # half the timeout without data: said on stderr before the call fails (with --json too)
    assert ran.stderr.startswith("agentlab: call 1: no data from the server for 0.25 s; still waiting (the call's "
                                 "deadline is 0.5 s)"), ran.stderr


def test_a_server_dribbling_bytes_meets_the_timeout_as_a_deadline_on_the_whole_call(runs) -> None:
    """About 70 s of bytes, one every 0.1 s: each comes within --timeout 1, the whole call does not."""
    ran = runs["dribbled_answer_meets_the_deadline"]
    assert ran.code == 1, (ran.stdout, ran.stderr)
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["subtype"] == "error_api" and "more than 1 s in all" in result["result"], result


def test_a_scenario_whose_script_is_used_up_is_an_error_not_a_success(runs) -> None:
    ran = runs["script_used_up"]
    assert ran.code == 1, (ran.stdout, ran.stderr)
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["subtype"] == "error_during_execution" and result["is_error"] is True
    assert len(result["errors"]) == 1 and "is used up" in result["errors"][0]
    assert "is used up" in ran.stderr and "an error of the scenario" in ran.stderr
    text = runs["script_used_up_text"]
    assert text.code == 1 and "\nerror_during_execution: " in text.stdout, text.stdout
    assert "Traceback" not in text.stderr and "an error of the scenario" in text.stderr


def test_a_closed_stdout_stops_the_printing_not_the_run(tmp_path) -> None:
    trace = tmp_path / "trace.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "agentlab", "run", "tour", "--trace", str(trace)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert first.strip() and "Traceback" not in err, err
    assert proc.returncode == 0
    assert json.loads(trace.read_text().splitlines()[-1])["kind"] == "result"


def test_a_broken_scenario_is_named_and_the_others_still_list(tmp_path, monkeypatch, capsys) -> None:
    import shutil

    from agentlab.backend import scenario as scenario_mod
    from agentlab.cli import main

    for name in ("end_turn", "refusal"):
        shutil.copy(scenario_mod.SCENARIO_DIR / f"{name}.yaml", tmp_path)
    (tmp_path / "broken.yaml").write_text("steps: [", encoding="utf-8")
    monkeypatch.setattr(scenario_mod, "SCENARIO_DIR", tmp_path)
    code = main(["scenarios"])
    out, err = capsys.readouterr()
    assert code == 2
    assert [line.split()[0] for line in out.splitlines()] == ["end_turn", "refusal"]
    assert "broken.yaml" in err and len(err.strip().splitlines()) == 1


def test_observe_out_that_is_a_file_is_bad_usage(tmp_path, capsys) -> None:
    from agentlab.cli import main

    target = tmp_path / "records.txt"
    target.write_text(PRECIOUS)
    code = main(["observe", "agentlab", "end_turn", "--out", str(target)])
    assert code == 2 and "--out" in capsys.readouterr().err
    assert target.read_text() == PRECIOUS


def run_as_another_user(args: list[str]) -> tuple[int, str]:
    """``agentlab ARGS`` in a forked child that, when the tests run as root (as CI does, where permission checks
    always pass), first becomes the unprivileged user 65534 (test_paths.as_another_user). Returns the exit status
    and stderr."""
    import importlib

    from test_paths import as_another_user

    for name in ("agentlab.cli", "agentlab.lab", "agentlab.backend.scenario", "agentlab.core.trace",
                 "agentlab.ui.report", "shutil", "tempfile", "urllib.parse"):
        importlib.import_module(name)  # loaded before the fork, while the files can still be read
    # and agentlab's data found and its sandbox listed (once per process, inherited by the child): the checkout's
    # folder may be private to this user, as a clone under /root or in a mode-700 temporary folder is
    importlib.import_module("agentlab.core.paths").sandbox_files()
    return as_another_user(lambda: agentlab_main(args))


def agentlab_main(args: list[str]) -> int:
    from agentlab.cli import main

    return main(args)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_trace_in_a_read_only_folder_is_bad_usage_before_anything_runs(tmp_path_factory) -> None:
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="agentlab-ro-"))
    try:
        base.chmod(0o755)
        folder = base / "read_only"
        folder.mkdir(mode=0o555)
        folder.chmod(0o555)
        # the scenario beside it, readable by the other user wherever the checkout lies (its folder may be private)
        from agentlab.core.paths import scenarios_dir

        scenario = base / "end_turn.yaml"
        scenario.write_bytes((scenarios_dir() / "end_turn.yaml").read_bytes())
        scenario.chmod(0o644)
        code, err = run_as_another_user(["run", str(scenario), "--trace", str(folder / "t.jsonl")])
        if os.geteuid() == 0 and "Operation not permitted" in err:
            pytest.skip("cannot become another user here")
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("agentlab: --trace "), err
        assert "cannot write there" in lines[0] and "Traceback" not in err
        assert list(folder.iterdir()) == []
    finally:
        (base / "read_only").chmod(0o755)
        import shutil

        shutil.rmtree(base, ignore_errors=True)


# --- outputs that are named pipes ---------------------------------------------------------------------------

def _agentlab_with_a_bound(args: list[str]) -> forked.Ran:
    """The command in a fork (forked.py); if opening the output waited for a reader, the bound (a safety net, not a
    measure) ends it, and the test fails on the TimeoutError."""
    return run_forked(args, cwd=REPO, timeout=120)


RECORD = str(REPO / "data" / "observed" / "agentlab" / "0.1.0" / "end_turn.json")
GRADED = ["grade", "end_turn", "--observed", "agentlab"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
@pytest.mark.parametrize(("args", "name"), [
    (["run", "end_turn", "--trace", "{fifo}"], "out.fifo"),
    (["serve", "end_turn", "--record", "{fifo}"], "out.fifo"),
    ([*GRADED, "--save", "{fifo}"], "out.json"),
    ([*GRADED, "--junit", "{fifo}"], "out.xml"),
    ([*GRADED, "--heatmap", "{fifo}"], "out.png"),
    (["replay", RECORD, "--plot", "{fifo}"], "out.png"),
], ids=["run --trace", "serve --record", "grade --save", "grade --junit", "grade --heatmap", "replay --plot"])
def test_an_output_that_is_a_pipe_no_one_reads_is_refused_at_once(tmp_path, args, name) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    ran = _agentlab_with_a_bound([a.replace("{fifo}", str(fifo)) for a in args])
    assert ran.code == 2, (ran.stdout, ran.stderr)
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "named pipe that nothing reads" in lines[0] and str(fifo) in lines[0], ran.stderr
    assert "agentlab serve: http" not in ran.stdout  # nothing was served


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_trace_into_a_pipe_that_is_read_is_written_as_a_file_is(tmp_path) -> None:
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    read: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as pipe:  # waits for the writer, then reads to its end
            read.append(pipe.read())

    import threading

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    ran = _agentlab_with_a_bound(["run", "end_turn", "--trace", str(fifo), "--json"])
    thread.join(60)
    assert ran.code == 0, ran.stderr
    kinds = [json.loads(line)["kind"] for line in read[0].decode().splitlines()]
    assert kinds[0] == "start" and kinds[-1] == "result"


def test_ctrl_c_while_tools_run_together_names_the_cancelled_calls(monkeypatch, capsys) -> None:
    from agentlab import cli
    from agentlab.core.tools import ToolsCancelled

    def interrupted(args: Any) -> int:
        raise ToolsCancelled(["read_file", "grep"])

    monkeypatch.setattr(cli, "_run", interrupted)
    assert cli.main(["run", "end_turn"]) == 130
    err = capsys.readouterr().err
    assert err == "agentlab: interrupted; 2 tool call(s) cancelled: read_file, grep\n"


# --- reports are written whole or not at all ----------------------------------------------------------------

def _limit_file_size(limit: int) -> Callable[[], None]:
    def preexec() -> None:  # in the child, before the command: every file it writes stops at ``limit`` bytes
        import resource

        sys.dont_write_bytecode = True   # a module imported now is not cached: its .pyc would meet the limit too
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as Linux applies it")
@pytest.mark.parametrize("option", ["--save", "--junit"])
def test_a_report_cut_by_a_full_disk_leaves_the_last_good_one_in_place(tmp_path, option) -> None:
    """A file-size limit of 1,000 bytes stands for a full disk: the report (about 3,500 bytes) cannot be written.
    The previous report stays as it was, no temporary file is left beside it, and the failure is one line."""
    report = tmp_path / ("report.json" if option == "--save" else "report.xml")
    report.write_text(PRECIOUS)
    ran = run_forked([*GRADED, option, str(report)], cwd=REPO, timeout=120, preexec=_limit_file_size(1000))
    assert ran.code == 2, (ran.stdout, ran.stderr)
    assert ran.stderr.strip() == (f"agentlab: {option} {report}: cannot write it: File too large; the previous file "
                                  "is kept as it was"), ran.stderr
    assert report.read_text() == PRECIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == [report.name]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_report_to_dev_full_is_one_line_naming_it() -> None:
    ran = _agentlab_with_a_bound([*GRADED, "--junit", "/dev/full"])
    assert ran.code == 2 and ran.stderr.strip() == ("agentlab: --junit /dev/full: cannot write it: No space "
                                                    "left on device"), ran.stderr
