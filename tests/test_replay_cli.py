"""`agentlab replay` and `agentlab sessions`, run as the real command: in a fork of the test process
(tests/forked.py: its own process, stdout, stderr and exit status), and once as ``python -m agentlab``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab.backend.scenario import load_scenario

from forked import Ran, run_forked

REPO = Path(__file__).resolve().parent.parent
SESSIONS = REPO / "data" / "sessions" / "claude-code"
SECRET = "sk-ant-api03-" + "Q" * 40


def agentlab(*args: str, env: dict[str, str] | None = None) -> Ran:
    return run_forked(list(args), env=env)


def test_replay_prints_the_per_call_table():
    """A real ``python -m agentlab`` process, as a user starts it."""
    proc = subprocess.run([sys.executable, "-m", "agentlab", "replay",
                           str(SESSIONS / "2.1.332" / "context_window_full.jsonl")],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"})
    ran = Ran(proc.returncode, proc.stdout, proc.stderr)
    assert ran.code == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("Claude Code 2.1.332") and "6 call(s)" in lines[0] and "ended: end_turn" in lines[0]
    rows = [line.split() for line in lines[2:8]]
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert [r[2] for r in rows] == ["tool_use"] * 3 + ["model_context_window_exceeded", "tool_use", "end_turn"]
    assert [r[3] for r in rows] == ["2", "2", "2", "4", "2", "11"]
    assert "compacted" in lines[5]
    assert any(line.startswith("  after call 4: compaction: auto") for line in lines)
    data = json.loads(agentlab("replay", "--json", str(SESSIONS / "2.1.332" / "context_window_full.jsonl")).stdout)
    assert f"total ${data['cost_usd']:.4f} (data/prices.yaml)" in lines  # the staged 995k-token call is most of it
    assert ran.stderr == ""


def test_replay_json_has_the_calls_events_and_cost():
    ran = agentlab("replay", "--json", str(SESSIONS / "2.1.197" / "stop_hook.jsonl"))
    assert ran.code == 0, ran.stderr
    data = json.loads(ran.stdout)
    assert data["client"] == "claude-code" and data["version"] == "2.1.197"
    assert [c["stop_reason"] for c in data["calls"]] == ["end_turn", "tool_use", "end_turn"]
    model = load_scenario("stop_hook").model  # the model the session was recorded on (the record target's --model)
    assert all(c["model"] == model and c["usage"]["output_tokens"] > 0 for c in data["calls"])
    assert len(data["hook_blocks"]) == 1 and data["hook_blocks"][0]["after_call"] == 1
    assert data["compactions"] == [] and data["api_errors"] == []
    assert data["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in data["calls"]), abs=1e-6)
    assert data["not_understood"] == {} and data["partial"] is False


def test_replay_json_of_a_trace_and_of_a_record(tmp_path):
    trace = tmp_path / "run.jsonl"
    ran = agentlab("run", "max_tokens_continue", "--trace", str(trace))
    assert trace.exists(), ran.stderr
    from_trace = json.loads(agentlab("replay", "--json", str(trace)).stdout)
    assert from_trace["client"] == "agentlab" and from_trace["kind"] == "agentlab-trace"
    assert [c["stop_reason"] for c in from_trace["calls"]][:1] == ["max_tokens"]
    record = REPO / "data" / "observed" / "claude-code" / "2.1.332" / "api_errors.json"
    ran = agentlab("replay", "--json", str(record))
    assert ran.code == 0, ran.stderr
    from_record = json.loads(ran.stdout)
    assert from_record["client"] == "claude-code" and from_record["kind"] == "observed-record"
    assert len(from_record["api_errors"]) >= 2 and all(c["estimated"] for c in from_record["calls"])


def test_replay_plot_writes_a_png(tmp_path):
    png = tmp_path / "session.png"
    ran = agentlab("replay", str(SESSIONS / "2.1.332" / "context_window_full.jsonl"), "--plot", str(png))
    assert ran.code == 0, ran.stderr
    assert ran.stdout.splitlines()[-1] == f"plot written to {png}"
    from PIL import Image

    with Image.open(png) as image:
        assert image.format == "PNG" and image.width >= 1000 and image.height >= 1000
    assert agentlab("replay", str(SESSIONS / "2.1.332" / "tool_use.jsonl"), "--plot", str(tmp_path / "x.svg")
                    ).code == 2


@pytest.mark.parametrize("target, words", [
    ("notes.txt/x.png", "notes.txt is not a folder"), ("folder.png", "is a folder"),
    ("missing/x.png", "no such folder"), ("x.svg", "give a .png file name")])
def test_a_plot_that_cannot_be_written_is_one_line_before_the_table(tmp_path, target, words):
    (tmp_path / "notes.txt").write_text("a file\n", encoding="utf-8")
    (tmp_path / "folder.png").mkdir()
    ran = agentlab("replay", str(SESSIONS / "2.1.332" / "tool_use.jsonl"), "--plot", str(tmp_path / target))
    assert ran.code == 2 and ran.stdout == ""
    (line,) = ran.stderr.splitlines()
    assert line.startswith(f"agentlab: --plot {tmp_path / target}: ") and words in line


def test_sessions_lists_newest_first(tmp_path):
    for i, name in enumerate(("tool_use", "stop_hook", "refusal")):
        folder = tmp_path / f"-home-me-{name}"
        folder.mkdir()
        target = folder / f"{name}.jsonl"
        shutil.copy(SESSIONS / "2.1.332" / f"{name}.jsonl", target)
        os.utime(target, (1_800_000_000 + i, 1_800_000_000 + i))
    ran = agentlab("sessions", str(tmp_path))
    assert ran.code == 0, ran.stderr
    rows = ran.stdout.splitlines()[1:]
    assert [r.split()[-1].split("/")[0] for r in rows] == ["-home-me-refusal", "-home-me-stop_hook",
                                                           "-home-me-tool_use"]
    assert rows[1].split()[2] == "3" and "end_turn" in rows[1]
    assert "refusal" in rows[0]


@pytest.mark.parametrize("content, words", [
    ("", "empty file"),
    ("hello, this is a letter\n", "not JSON Lines"),
    ('{"name": "a config"}\n', "not a Claude Code transcript"),
    ('{"type": "user", "sessionId": "s", "message": {"role": "us', "no readable entry"),
])
def test_replay_of_unreadable_input_exits_2_with_one_line(tmp_path, content, words):
    path = tmp_path / "x.jsonl"
    path.write_text(content, encoding="utf-8")
    ran = agentlab("replay", str(path))
    assert ran.code == 2
    assert ran.stdout == "" and len(ran.stderr.splitlines()) == 1 and words in ran.stderr
    assert str(path) in ran.stderr and "Traceback" not in ran.stderr


def test_replay_of_a_missing_file_or_a_folder_exits_2(tmp_path):
    for target, words in ((tmp_path / "nope.jsonl", "no such file"), (tmp_path, "is a folder")):
        ran = agentlab("replay", str(target))
        assert ran.code == 2 and words in ran.stderr and "Traceback" not in ran.stderr
    ran = agentlab("sessions", str(tmp_path / "nope"))
    assert ran.code == 2 and "no such folder" in ran.stderr


def test_a_partial_transcript_is_replayed_and_marked(tmp_path):
    text = (SESSIONS / "2.1.197" / "tool_use.jsonl").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    path = tmp_path / "live.jsonl"
    path.write_text("".join(lines[:3]) + "garbage line\n" + "".join(lines[3:]) + '{"type": "assist',
                    encoding="utf-8")
    ran = agentlab("replay", str(path))
    assert ran.code == 0, ran.stderr
    assert "ended: end_turn (partial)" in ran.stdout.splitlines()[0]
    assert "partial: the last line is cut off" in ran.stdout
    assert "partial: 1 line(s) not read (not JSON or too long): line 4" in ran.stdout
    data = json.loads(agentlab("replay", "--json", str(path)).stdout)
    assert data["partial"] is True and len(data["calls"]) == 2


def test_unknown_entry_types_are_named_in_the_output(tmp_path):
    text = (SESSIONS / "2.1.332" / "tool_use.jsonl").read_text(encoding="utf-8")
    extra = "".join(json.dumps({"type": "hologram", "sessionId": "s", "uuid": f"h{i}"}) + "\n" for i in range(3))
    path = tmp_path / "s.jsonl"
    path.write_text(text + extra, encoding="utf-8")
    ran = agentlab("replay", str(path))
    assert ran.code == 0 and "3 entries of type hologram not understood" in ran.stdout


def test_the_environments_api_key_is_never_printed(tmp_path):
    text = (SESSIONS / "2.1.197" / "tool_use.jsonl").read_text(encoding="utf-8")
    key = "my-own-proxy-key-1234567890"
    path = tmp_path / "s.jsonl"
    assert "6912" in text   # the calculator's result, in the tool result the transcript keeps
    path.write_text(text.replace("6912", f"ANTHROPIC_API_KEY={key} and {SECRET}"), encoding="utf-8")
    for args in (["replay", str(path)], ["replay", "--json", str(path)]):
        ran = agentlab(*args, env={"ANTHROPIC_API_KEY": key})
        assert ran.code == 0, ran.stderr
        assert key not in ran.stdout and SECRET not in ran.stdout
    data = json.loads(agentlab("replay", "--json", str(path), env={"ANTHROPIC_API_KEY": key}).stdout)
    assert "[redacted]" in json.dumps(data["events"])


def test_a_200_mb_transcript_is_replayed(tmp_path):
    from test_transcript import _big_transcript

    path = tmp_path / "big.jsonl"
    calls = _big_transcript(path, 200)
    try:
        ran = agentlab("replay", "--json", str(path))
    finally:
        path.unlink()   # pytest keeps the last runs' temporary folders: not 200 MB each
    assert ran.code == 0, ran.stderr
    data = json.loads(ran.stdout)
    assert len(data["calls"]) == calls and data["partial"] is False
    # a tool result of 1 MB is kept cut, not whole
    results = [e for e in data["events"] if e["event"] == "tools"][0]["results"]
    assert len(results[0]["content"]) < 3_000 and "more]" in results[0]["content"]


def test_sessions_in_a_folder_of_thousands(tmp_path):
    line = json.dumps({"type": "assistant", "uuid": "a", "sessionId": "s", "timestamp": "2026-11-30T08:00:00Z",
                       "requestId": "r", "message": {"id": "m", "model": "claude-sonnet-4-6", "stop_reason":
                                                     "end_turn", "content": [{"type": "text", "text": "hi"}]}})
    for i in range(3000):
        folder = tmp_path / f"-home-me-p{i % 10}"
        folder.mkdir(exist_ok=True)
        path = folder / f"{i:05d}.jsonl"
        path.write_text(line + "\n", encoding="utf-8")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    ran = agentlab("sessions", str(tmp_path), "--limit", "20")
    assert ran.code == 0, ran.stderr
    rows = ran.stdout.splitlines()
    assert len(rows) == 1 + 20 + 1 and rows[-1] == "(2980 older session(s) not shown: --limit N shows more)"
    assert rows[1].endswith("-home-me-p9/02999.jsonl") and "2026-11-30 08:00" in rows[1]
    file = tmp_path / "-home-me-p0" / "00000.jsonl"
    ran = agentlab("sessions", str(file))
    assert ran.code == 2 and "is a file" in ran.stderr


def test_replay_table_of_a_trace_has_rows_costs_and_what_came_next(tmp_path):
    trace = tmp_path / "run.jsonl"
    agentlab("run", "tool_use", "--trace", str(trace))
    ran = agentlab("replay", str(trace))
    assert ran.code == 0, ran.stderr
    lines = ran.stdout.splitlines()
    from agentlab import __version__

    assert lines[0] == (f"agentlab trace run.jsonl (read by agentlab {__version__}) · {load_scenario('tool_use').model}"
                        " · prompt "
                        "'What is 1234 + 5678?' · 2 call(s) · ended: success")
    first, second = lines[2].split(), lines[3].split()
    assert first[2:4] == ["tool_use", "2"] and first[-2:] == ["tool_use", "(RunTools)"] and first[-3].startswith("$")
    assert second[2:4] == ["end_turn", "11"] and second[-1] == "(Complete)"
    assert lines[-1].startswith("total $")


def test_replay_of_a_trace_shows_each_failed_call_in_its_place(tmp_path):
    trace = tmp_path / "errors.jsonl"
    agentlab("run", "api_errors", "--trace", str(trace))
    ran = agentlab("replay", str(trace))
    assert ran.code == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert "· 4 call(s), 3 failed · ended: success" in lines[0]
    rows = [line.split() for line in lines[2:6]]
    assert [r[0] for r in rows] == ["1", "2", "3", "4"]
    assert [" ".join(r[2:4]) for r in rows[:3]] == ["HTTP 529", "HTTP 429", "HTTP 500"]
    assert [r[-2:] for r in rows[:3]] == [["api_retry", "(Retry)"]] * 3 and rows[3][2] == "end_turn"
    fatal = tmp_path / "fatal.jsonl"
    agentlab("run", "api_error_fatal", "--trace", str(fatal))
    lines = agentlab("replay", str(fatal)).stdout.splitlines()
    assert "· 1 call(s), 1 failed · ended: error_api" in lines[0]
    assert lines[2].split()[2:5] == ["HTTP", "401", "authentication_error"] and lines[2].endswith("api_error (End)")
    data = json.loads(agentlab("replay", str(fatal), "--json").stdout)
    assert data["calls"] == [] and [(c["n"], c["status"], c["branch"]) for c in data["failed_calls"]] == [
        (1, 401, "api_error")]
    assert data["version"] is None and data["read_by"].startswith("agentlab ") and data["model"]


def test_sessions_in_an_empty_folder_and_update_alone(tmp_path):
    ran = agentlab("sessions", str(tmp_path))
    assert ran.code == 0 and ran.stdout.strip() == f"no session transcript (*.jsonl) under {tmp_path}"
    ran = agentlab("sessions", str(tmp_path), "--update")
    assert ran.code == 2 and "--update goes with --record" in ran.stderr


def test_a_jsonl_of_other_records_is_not_taken_for_a_transcript(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps({"type": "click", "uuid": f"u{i}", "sessionId": "web"}) + "\n"
                            for i in range(4)), encoding="utf-8")
    ran = agentlab("replay", str(path))
    assert ran.code == 2 and ran.stdout == ""
    assert "none of its 4 entries is of a type Claude Code writes (found: click)" in ran.stderr
