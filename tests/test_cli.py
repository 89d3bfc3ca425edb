"""The ``agentlab`` command, run in its own process: offline scenarios, bad usage, and ``--base-url`` runs against
a tiny Messages API server written here from the API's JSON and SSE shapes (not agentlab's scripted engine).
The server answers with canned replies in order and records every request, so the tests assert on the wire.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentlab.backend.scenario import load_scenario, scenario_names
from forked import run_forked
from wire import MessagesServer, asks_for_a_summary, error, message, text

SECRET = "sk-ant-test-SECRET123456"
REPO = Path(__file__).resolve().parent.parent
RESULT_KEYS = {"subtype", "is_error", "num_turns", "stop_reason", "usage"}


# --- running the command ---------------------------------------------------------------------------------
#
# Every run the tests need is declared below as a Job and all of them run at once, in a module fixture, each
# in a fork of this process (forked.py: no Python start or SDK import per run); each test reads its outcome.

@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def result(self) -> dict[str, Any]:
        lines = self.stdout.strip().splitlines()
        assert lines, f"no output; stderr: {self.stderr}"
        return json.loads(lines[-1])


@dataclass
class Job:
    args: tuple[str, ...]
    replies: list[Any] | None = None  # set: run with --base-url against a MessagesServer with these replies
    prompt: str = "Help me, please."
    files: dict[str, str] = field(default_factory=dict)  # written to the job's folder first; {dir} in args


@dataclass
class Outcome:
    ran: Ran
    server: MessagesServer | None
    trace: Path | None
    folder: Path


def agentlab(args: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Ran:
    ran = run_forked(args, env=env, cwd=cwd or REPO)
    return Ran(ran.code, ran.stdout, ran.stderr)


def start_job(job: Job, folder: Path) -> tuple[Callable[[], Ran], MessagesServer | None, Path | None]:
    folder.mkdir(parents=True)
    for name, content in job.files.items():
        (folder / name).write_text(content, encoding="utf-8")
    args = [a.replace("{dir}", str(folder)) for a in job.args]
    if job.replies is None:
        return (lambda: agentlab(args)), None, None
    server = MessagesServer(job.replies, summary=asks_for_a_summary)
    trace = folder / "wire.jsonl"
    # --no-cache: these jobs compare whole histories; the cache breakpoints have tests of their own
    args = ["run", "--base-url", server.url, "--tools", "demo", "--json", "--prompt", job.prompt,
            "--trace", str(trace), "--no-cache", *args]
    return (lambda: agentlab(args, env={"ANTHROPIC_API_KEY": SECRET})), server, trace


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Any:
    root = tmp_path_factory.mktemp("cli")
    started = {name: start_job(job, root / name) for name, job in JOBS.items()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(call) for name, (call, _, _) in started.items()}
        outcomes = {name: Outcome(futures[name].result(), server, trace, root / name)
                    for name, (_, server, trace) in started.items()}
    yield outcomes
    for _, server, _ in started.values():
        if server is not None:
            server.close()


def assert_clean_failure(ran: Ran, *needles: str) -> None:
    assert ran.code == 2, (ran.code, ran.stdout, ran.stderr)
    assert ran.stderr.strip(), "a usage error needs a message on stderr"
    assert "Traceback" not in ran.stderr and "Traceback" not in ran.stdout
    for needle in needles:
        assert needle in ran.stderr, (needle, ran.stderr)


def on_the_wire(outcome: Outcome) -> Ran:
    """A --base-url run: the key went to the server, and nowhere else."""
    ran, server, trace = outcome.ran, outcome.server, outcome.trace
    assert server is not None and trace is not None
    assert server.seen, ran.stderr
    assert all(SECRET in (s.headers.get("x-api-key", "") + s.headers.get("authorization", "")) for s in server.seen)
    for where, output in (("stdout", ran.stdout), ("stderr", ran.stderr),
                          ("trace", trace.read_text(encoding="utf-8") if trace.exists() else "")):
        assert SECRET not in output and "SECRET123456" not in output, f"the API key leaked into {where}"
    assert "Traceback" not in ran.stderr
    return ran


def tool_use(uid: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": uid, "name": name, "input": tool_input}


BAD_SCENARIO = ("description: broken\nsteps:\n  - content: [{type: text, text: hi}]\n"
                "  - content: [{type: text, text: hi}]\n    stop_reason: banana\n")
TOOL_REPLIES = [
    message([text("Calculating."), tool_use("toolu_w1", "calculator", {"expression": "6 * 7"}),
             tool_use("toolu_w2", "get_weather", {"location": "Oslo"})], "tool_use"),
    message([text("6 * 7 = 42, and Oslo is clear.")]),
]
PAUSED = [text("Searching."), {"type": "server_tool_use", "id": "srvtoolu_w1", "name": "web_search",
                               "input": {"query": "agent loops"}}]
TOO_LONG_PROMPT = "Check the weather in Oslo, then in Lima, then summarise."

JOBS: dict[str, Job] = {
    # offline, on scenarios
    "end_turn": Job(("run", "end_turn", "--json", "--trace", "{dir}/trace.jsonl")),
    "refusal": Job(("run", "refusal", "--json")),
    "tour": Job(("run", "tour", "--json")),
    "tour_stream": Job(("run", "tour", "--json", "--stream")),
    "table": Job(("run", "tool_use", "--max-turns", "5")),
    "scenarios": Job(("scenarios",)),
    "scenarios_long": Job(("scenarios", "--long")),
    # bad usage
    "unknown_scenario": Job(("run", "no_such_scenario", "--json")),
    "max_turns_0": Job(("run", "end_turn", "--max-turns", "0")),
    "nothing_to_run": Job(("run", "--prompt", "Hello")),
    "malformed": Job(("run", "{dir}/bad.yaml", "--json"), files={"bad.yaml": BAD_SCENARIO}),
    # --base-url against the independent server
    "wire_tool_use": Job((), TOOL_REPLIES),
    "wire_tool_use_stream": Job(("--stream",), TOOL_REPLIES),
    "wire_max_tokens": Job(("--max-tokens", "256"), [
        message([text("The first part")], "max_tokens"),
        message([text("The first part, longer")], "max_tokens"),
        message([text(" and the end.")])]),
    "wire_pause_turn": Job((), [message(PAUSED, "pause_turn"), message([text("Found it.")])]),
    "wire_overloaded": Job((), [error(529, "overloaded_error", "Overloaded", **{"retry-after": "0"}),
                                message([text("Hello after the retry.")])]),
    "wire_prompt_too_long": Job((), [
        message([tool_use("toolu_p1", "get_weather", {"location": "Oslo"})], "tool_use"),
        message([tool_use("toolu_p2", "get_weather", {"location": "Lima"})], "tool_use"),
        error(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"),
        message([text("Oslo and Lima are both fine.")])], prompt=TOO_LONG_PROMPT),
    "wire_refusal": Job((), [message([], "refusal", stop_details={"type": "refusal", "category": "cyber",
                                                                  "explanation": "Not this one."}),
                             message([text("never sent")])]),
    "wire_forbidden": Job((), [error(403, "permission_error", "This key may not use this model."),
                               message([text("never")])]),
    "wire_key_echo": Job((), [error(401, "authentication_error", f"invalid x-api-key: {SECRET}")]),
}


# --- offline, on scenarios ------------------------------------------------------------------------------------

def test_run_json_success(runs):
    outcome = runs["end_turn"]
    ran = outcome.ran
    assert ran.code == 0, ran.stderr
    result = ran.result
    assert RESULT_KEYS <= set(result)
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["num_turns"] == 1 and result["stop_reason"] == "end_turn"
    assert result["usage"]["input_tokens"] > 0 and result["usage"]["output_tokens"] > 0


def test_trace_file_is_jsonl(runs):
    trace = runs["end_turn"].folder / "trace.jsonl"
    events = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert events[0]["kind"] == "start" and events[-1]["kind"] == "result"
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert {"request", "response", "transition"} <= {e["kind"] for e in events}
    assert events[-1]["data"]["subtype"] == "success"


def test_run_json_error_result_exits_1(runs):
    ran = runs["refusal"].ran
    assert ran.code == 1, ran.stderr
    assert RESULT_KEYS <= set(ran.result)
    assert ran.result["subtype"] == "error_refusal" and ran.result["is_error"] is True
    assert "Traceback" not in ran.stderr


def test_stream_gives_the_same_result(runs):
    plain, streamed = runs["tour"].ran, runs["tour_stream"].ran
    assert plain.code == streamed.code == 0, (plain.stderr, streamed.stderr)
    assert plain.result == streamed.result
    assert plain.result["num_turns"] == 9


def test_readable_table_without_json(runs):
    ran = runs["table"].ran
    assert ran.code == 0, ran.stderr
    for word in ("request", "response", "transition", "tool", "calculator", "6912", "success"):
        assert word in ran.stdout, word
    with pytest.raises(json.JSONDecodeError):
        json.loads(ran.stdout.strip().splitlines()[-1])


def test_scenarios_lists_every_scenario_in_one_short_line(runs):
    ran = runs["scenarios"].ran
    assert ran.code == 0, ran.stderr
    lines = [line for line in ran.stdout.splitlines() if line.strip()]
    assert [line.split()[0] for line in lines] == scenario_names()
    assert max(len(line) for line in lines) <= 80   # fits a terminal
    by_name = {line.split()[0]: line for line in lines}
    # a long description is cut to its start, at a word, and says so
    long_one = load_scenario("compaction_give_up").description
    assert len(long_one) > 300
    assert by_name["compaction_give_up"].endswith(" …")
    assert " ".join(long_one.split()).startswith(by_name["compaction_give_up"].split("row 4", 1)[1].strip()[:-2])
    # a short one is shown whole
    assert by_name["end_turn"].endswith(load_scenario("end_turn").description)


def test_scenarios_cuts_a_description_where_a_phrase_ends(runs) -> None:
    from agentlab.cli import _OPEN_WORDS, _first_sentence

    lines = [line for line in runs["scenarios"].ran.stdout.splitlines() if line.strip()]
    cut = 0
    for line in lines:
        name, shown = line.split()[0], line.split("  ", 1)[1].strip().split("  ", 1)[1].strip()
        whole = _first_sentence(load_scenario(name).description)
        if shown == whole:
            continue
        cut += 1
        assert shown.endswith(" …"), line
        start = shown[:-2]
        assert whole.startswith(start), line
        assert not whole[len(start)].isalnum(), f"{name}: cut inside a word: {line!r}"
        assert start.count("(") == start.count(")"), f"{name}: cut inside a parenthesis: {line!r}"
        last = start.split()[-1]
        assert last.lower() not in _OPEN_WORDS and not last.endswith("'s"), f"{name}: the phrase is left open: {line!r}"
    assert cut >= 10   # most descriptions are longer than a line: the rules above were exercised


def test_a_description_is_cut_at_a_clause_before_a_word() -> None:
    from agentlab.cli import short_description

    text = "refusal: end with error_refusal and an explanation; never resend to the same model"
    assert short_description(text, 40) == "refusal: end with error_refusal …"
    assert short_description(text, 60) == "refusal: end with error_refusal and an explanation …"
    assert short_description("transient errors (529, 429 with retry-after): retry", 30) == "transient errors …"
    assert short_description("three 529s in a row with the fallback model", 28) == "three 529s in a row …"
    assert short_description("short enough", 40) == "short enough"


def test_scenarios_long_adds_the_whole_description(runs):
    ran = runs["scenarios_long"].ran
    assert ran.code == 0, ran.stderr
    names = [line.split()[0] for line in ran.stdout.splitlines() if line and not line.startswith(" ")]
    assert names == scenario_names()
    described = " ".join(ran.stdout.split())
    for name in ("compaction_give_up", "proactive_compaction", "tour"):
        assert " ".join(load_scenario(name).description.split()) in described


# --- bad usage ----------------------------------------------------------------------------------------------

def test_unknown_scenario_is_bad_usage(runs):
    assert_clean_failure(runs["unknown_scenario"].ran, "no_such_scenario")


def test_bad_max_turns_is_bad_usage(runs):
    assert_clean_failure(runs["max_turns_0"].ran, "--max-turns")


def test_nothing_to_run_against_is_bad_usage(runs):
    assert_clean_failure(runs["nothing_to_run"].ran, "ANTHROPIC_API_KEY")


def test_malformed_scenario_file_is_bad_usage(runs):
    assert_clean_failure(runs["malformed"].ran, "bad.yaml", "steps[1]", "stop_reason")


# --- on the wire ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("job", ["wire_tool_use", "wire_tool_use_stream"])
def test_wire_tool_use_is_answered_with_tool_results(runs, job):
    ran = on_the_wire(runs[job])
    assert ran.code == 0 and ran.result["subtype"] == "success" and ran.result["num_turns"] == 2
    first, second = runs[job].server.turns
    assert bool(first.get("stream")) == job.endswith("stream")
    assert {t["name"] for t in first["tools"]} >= {"calculator", "get_weather"}
    assert second["messages"][:-2] == first["messages"]
    assistant, reply = second["messages"][-2:]
    assert assistant == {"role": "assistant", "content": TOOL_REPLIES[0]["content"]}
    assert reply["role"] == "user"
    assert [b["type"] for b in reply["content"]] == ["tool_result", "tool_result"]
    assert [b["tool_use_id"] for b in reply["content"]] == ["toolu_w1", "toolu_w2"]
    assert "42" in json.dumps(reply["content"][0]) and "Oslo" in json.dumps(reply["content"][1])


def test_wire_streaming_sends_the_same_requests(runs):
    plain = runs["wire_tool_use"].server.turns
    streamed = runs["wire_tool_use_stream"].server.turns
    assert [{k: v for k, v in b.items() if k != "stream"} for b in plain] == [
        {k: v for k, v in b.items() if k != "stream"} for b in streamed]
    assert runs["wire_tool_use"].ran.result == runs["wire_tool_use_stream"].ran.result


def test_wire_max_tokens_escalates_then_continues(runs):
    ran = on_the_wire(runs["wire_max_tokens"])
    assert ran.code == 0 and ran.result["subtype"] == "success"
    first, second, third = runs["wire_max_tokens"].server.turns
    assert first["max_tokens"] == 256
    assert second["max_tokens"] > 256 and second["messages"] == first["messages"]
    *head, partial, continuation = third["messages"]
    assert head == first["messages"]
    assert partial == {"role": "assistant", "content": [text("The first part, longer")]}
    assert continuation["role"] == "user" and "continue" in json.dumps(continuation["content"]).lower()


def test_wire_pause_turn_resends_the_content(runs):
    ran = on_the_wire(runs["wire_pause_turn"])
    assert ran.code == 0 and ran.result["num_turns"] == 2
    first, second = runs["wire_pause_turn"].server.turns
    assert second["messages"][:-1] == first["messages"]
    assert second["messages"][-1] == {"role": "assistant", "content": PAUSED}


def test_wire_overloaded_then_success_is_retried(runs):
    ran = on_the_wire(runs["wire_overloaded"])
    assert ran.code == 0 and ran.result["subtype"] == "success"
    assert ran.result.get("retries") == 1
    first, second = runs["wire_overloaded"].server.turns
    assert first == second  # the identical request, sent again


def test_wire_prompt_too_long_sends_a_smaller_request(runs):
    ran = on_the_wire(runs["wire_prompt_too_long"])
    assert ran.code == 0 and ran.result["subtype"] == "success", ran.stdout
    turns = runs["wire_prompt_too_long"].server.turns
    assert len(turns) == 4
    too_long, retried = turns[2], turns[3]
    assert len(json.dumps(retried["messages"])) < len(json.dumps(too_long["messages"]))
    assert TOO_LONG_PROMPT in json.dumps(retried["messages"][0])  # the first request survives compaction


def test_wire_refusal_sends_nothing_more(runs):
    ran = on_the_wire(runs["wire_refusal"])
    assert ran.code == 1
    assert ran.result["subtype"] == "error_refusal" and ran.result["is_error"] is True
    assert len(runs["wire_refusal"].server.seen) == 1


def test_wire_fatal_error_is_not_retried(runs):
    ran = on_the_wire(runs["wire_forbidden"])
    assert ran.code == 1 and ran.result["subtype"] == "error_api"
    assert len(runs["wire_forbidden"].server.seen) == 1


def test_wire_key_echoed_by_the_server_is_not_printed(runs):
    ran = on_the_wire(runs["wire_key_echo"])
    assert ran.code == 1


# --- make demo ------------------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize(("scenario", "status", "last_line"), [
    ("max_tokens_give_up", 0, "make demo: exit status 1 means the run ended with an error result (above)"),
    ("no_such_scenario", 2, "make demo: agentlab exited with status 2: it could not run 'no_such_scenario'"),
])
def test_make_demo_ends_with_a_line_explaining_the_exit(scenario, status, last_line):
    root = Path(__file__).resolve().parent.parent
    ran = subprocess.run(["make", "-s", "--no-print-directory", "demo", f"SCENARIO={scenario}",
                          f"BIN={Path(sys.executable).parent}", "STAMP="],
                         cwd=root, capture_output=True, text=True, timeout=300)
    assert ran.returncode == status, ran.stderr
    said = [line for line in (ran.stdout + ran.stderr).splitlines() if line.startswith("make demo:")]
    assert len(said) == 1 and said[0].startswith(last_line)
    if status == 0:
        assert ran.stdout.rstrip().splitlines()[-1] == said[0]
