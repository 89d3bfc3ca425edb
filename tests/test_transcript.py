"""Claude Code session transcripts: the committed real ones (data/sessions) read call by call, and made-up ones
for what the real ones do not hold (sub-agents, resumed files, unknown entries, bad lines, a 200 MB file)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from agentlab.backend.scenario import load_scenario
from agentlab.core.events import CompactionEvent, HookEvent, ResultEvent, TransitionEvent
from agentlab.observatory.replay import load_record
from agentlab.sessions.command import SESSIONS_DIR, check_sessions, iter_fixtures, list_sessions, read_fixture
from agentlab.sessions.transcript import TranscriptError, detect_kind, read_session, read_sessions, table_lines
from agentlab.sessions.trace import session_to_trace

VERSIONS = ("2.1.197", "2.1.332")


def entry(kind: str, **fields) -> dict:
    return {"type": kind, "uuid": fields.pop("uuid", None) or f"u{id(fields)}", "sessionId": "s1",
            "timestamp": fields.pop("timestamp", "2026-12-01T10:00:00.000Z"), "cwd": "/home/me/proj", **fields}


def reply(mid: str, rid: str, blocks: list[dict], stop: str | None, uuid: str, **extra) -> dict:
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
             "cache_creation_input_tokens": 0}
    return entry("assistant", uuid=uuid, requestId=rid, message={
        "id": mid, "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": blocks,
        "stop_reason": stop, "usage": usage}, **extra)


def write(path: Path, entries: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries) + tail, encoding="utf-8")
    return path


def test_every_committed_transcript_is_understood_whole():
    fixtures = list(iter_fixtures())
    assert len(fixtures) == 22
    for path in fixtures:
        session = read_session(path)
        assert session.not_understood_notes() == [], path
        assert not session.partial, path
        assert session.calls or session.events, path


@pytest.mark.parametrize("version", VERSIONS)
def test_a_streamed_reply_is_one_call(version):
    """2.1.197 writes the text and the tool_use of one reply as two entries sharing message.id."""
    session = read_fixture(version, "tool_use")
    assert [c.stop_reason for c in session.calls] == ["tool_use", "end_turn"]
    assert session.calls[0].blocks[-1] == "tool_use"
    assert [c.row for c in session.calls] == ["2", "11"]
    assert session.calls[0].next == "ran the tools" and session.calls[1].next == "end"
    assert [c.model for c in session.calls] == [load_scenario("tool_use").model] * 2
    # 2.1.332 writes each request before its reply (api-request, with max_tokens); 2.1.197 does not. The number
    # is Claude Code's own choice for the model (2.1.332 asks claude-opus-5-5 for 128000, claude-sonnet-4-6 and
    # claude-haiku-4-5 for 32000, not their ceilings), so it is read from what the scripted server saw the same
    # version send on the same scenario (its behaviour record), not from the model table
    sent = [r["max_tokens"] for r in load_record(f"claude-code/{version}/tool_use")["requests"]]
    assert len(sent) == 2 and all(sent)
    assert [c.max_tokens for c in session.calls] == (sent if version == "2.1.332" else [None, None])
    if version == "2.1.197":
        raw = [json.loads(line) for line in (SESSIONS_DIR / "claude-code" / version / "tool_use.jsonl").open()]
        ids = [e["message"]["id"] for e in raw if e.get("type") == "assistant"]
        assert len(ids) == 3 and len(set(ids)) == 2


@pytest.mark.parametrize("version", VERSIONS)
def test_max_tokens_continued_three_times_then_an_api_error(version):
    session = read_fixture(version, "max_tokens_give_up")
    assert [c.stop_reason for c in session.calls] == ["max_tokens"] * 4
    assert [c.branch for c in session.calls] == ["max_tokens_continue"] * 3 + ["max_tokens_give_up"]
    assert session.ending == "API error: max_output_tokens"
    assert len(session.of("api_error")) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_pause_turn_is_not_reached_by_a_client_that_never_offers_web_search(version):
    """Claude Code never offers the API's web_search in its main loop, so the live API cannot pause its turn:
    the server answers the scenario's pause as the live API would, with the text alone (end_turn)."""
    session = read_fixture(version, "pause_turn")
    assert [c.stop_reason for c in session.calls] == ["end_turn"]
    assert session.calls[0].branch == "complete" and session.ending == "end_turn"


def test_refusal_2_1_332_continues_once_2_1_197_never():
    new, old = read_fixture("2.1.332", "refusal"), read_fixture("2.1.197", "refusal")
    assert [c.branch for c in new.calls] == ["refusal_fallback", "refusal"]
    assert [c.branch for c in old.calls] == ["refusal"]
    for session in (new, old):
        assert session.ending.startswith("refusal")
        assert not any(c.usage_known for c in session.calls)   # only the refused reply's id is in the file


def test_api_errors_retried_are_written_by_2_1_332_only():
    new, old = read_fixture("2.1.332", "api_errors"), read_fixture("2.1.197", "api_errors")
    assert [e.data["status"] for e in new.of("retry_error")] == [529, 429]
    assert old.of("retry_error") == []
    for session in (new, old):
        assert session.ending == "API error: 500 server_error" and session.calls == []
    assert read_fixture("2.1.332", "api_error_fatal").ending.startswith("API error: 401")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("scenario", ["context_window_exceeded", "context_window_full"])
def test_a_full_window_is_compacted_in_both_context_scenarios(version, scenario):
    # the live API stops on model_context_window_exceeded only when the window is full, so both scenarios
    # report a full window at call 4 (a short reply, or a longer one cut off), and Claude Code compacts in both
    session = read_fixture(version, scenario)
    assert [c.branch for c in session.calls] == ["tool_use", "tool_use", "tool_use", "context_compact",
                                                 "tool_use", "complete"]
    assert [c.row for c in session.calls] == ["2", "2", "2", "4", "2", "11"]
    assert session.calls[3].stop_reason == "model_context_window_exceeded"
    (compaction,) = session.of("compaction")
    assert compaction.after == 4
    assert compaction.data["pre_tokens"] > 1_000_000 > 5_000 > compaction.data["post_tokens"]
    assert "continued from a previous conversation" in compaction.data["summary"]
    # the compaction freed most of the context: the call after it sends far less
    assert session.calls[4].prompt_tokens < session.calls[3].prompt_tokens / 5
    assert len(read_fixture(version, "prompt_too_long").of("compaction")) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_a_stop_hook_block_is_one_event_between_calls_1_and_2(version):
    session = read_fixture(version, "stop_hook")
    (block,) = session.of("hook_block")
    assert block.after == 1 and "Run run_tests" in block.detail
    assert [c.branch for c in session.calls] == ["stop_hook_block", "tool_use", "complete"]


def test_costs_come_from_the_price_table():
    session = read_fixture("2.1.332", "stop_hook")
    from agentlab.core.cost import usage_cost

    assert session.cost_usd == pytest.approx(sum(usage_cost(c.usage, c.model) for c in session.calls), abs=1e-6)
    # Claude Code's own count agrees to the cent here (it wrote cost-state)
    assert session.reported_cost_usd == pytest.approx(session.cost_usd, abs=0.01)


def test_the_trace_of_a_session_reads_like_a_run():
    trace = session_to_trace(read_fixture("2.1.332", "context_window_full"))
    branches = [e.payload.branch for e in trace if isinstance(e.payload, TransitionEvent)]
    assert branches == ["tool_use"] * 3 + ["context_compact", "tool_use", "complete"]
    (compaction,) = [e for e in trace if isinstance(e.payload, CompactionEvent)]
    assert compaction.call == 4 and compaction.payload.tokens_after < compaction.payload.tokens_before
    result = trace.events[-1].payload
    assert isinstance(result, ResultEvent) and result.subtype == "success" and result.compactions == 1
    hooks = session_to_trace(read_fixture("2.1.197", "stop_hook")).of_kind("hook")
    assert [h.payload.decision for h in hooks if isinstance(h.payload, HookEvent)] == ["block"]


@pytest.mark.parametrize("version, main", [("2.1.197", 2), ("2.1.332", 3)])
def test_a_real_sub_agent_is_kept_apart(version, main):
    """Claude Code writes a sub-agent to <session>/subagents/agent-<id>.jsonl; 2.1.332 runs it in the
    background, so its main thread ends a turn and takes the result up in a third call."""
    session = read_fixture(version, "subagent")
    assert len(session.calls) == main and len(session.sidechain_calls) == 1
    side = session.sidechain_calls[0]
    assert side.sidechain and side.agent and side.stop_reason == "end_turn"
    assert session.calls[0].blocks == ["tool_use"] and session.calls[0].next == "ran the tools"
    assert session.cost_usd == pytest.approx(sum(c.cost_usd for c in session.calls + session.sidechain_calls), abs=1e-6)
    if version == "2.1.332":
        assert session.calls[1].next == "ended the turn; a sub-agent's result came in"


def test_sidechains_are_kept_apart(tmp_path):
    path = write(tmp_path / "s.jsonl", [
        entry("user", uuid="a", message={"role": "user", "content": "go"}),
        reply("m1", "r1", [{"type": "tool_use", "id": "t1", "name": "Task", "input": {}}], "tool_use", "b"),
        reply("m2", "r2", [{"type": "text", "text": "sub"}], "end_turn", "c", isSidechain=True, agentId="ag1"),
        entry("user", uuid="d", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "done"}]}),
        reply("m3", "r3", [{"type": "text", "text": "ok"}], "end_turn", "e")])
    sub = tmp_path / "s" / "subagents"
    sub.mkdir(parents=True)
    write(sub / "agent-x.jsonl", [reply("m4", "r4", [{"type": "text", "text": "x"}], "end_turn", "f", agentId="x")])
    session = read_session(path)
    assert [c.message_id for c in session.calls] == ["m1", "m3"]
    assert [c.message_id for c in session.sidechain_calls] == ["m2", "m4"]
    assert any("sidechains" in line for line in table_lines(session))


def test_a_resumed_session_counts_each_call_once(tmp_path):
    first = [entry("user", uuid="a", message={"role": "user", "content": "go"}),
             reply("m1", "r1", [{"type": "text", "text": "hi"}], "end_turn", "b")]
    again = [dict(first[1], uuid="b2"),   # the same reply repeated under another entry id
             entry("user", uuid="c", message={"role": "user", "content": "more"}),
             reply("m2", "r2", [{"type": "text", "text": "more"}], "end_turn", "d")]
    session = read_sessions([write(tmp_path / "1.jsonl", first), write(tmp_path / "2.jsonl", first + again)])
    assert [c.message_id for c in session.calls] == ["m1", "m2"]
    assert session.calls[0].blocks == ["text"]      # not merged again as if streamed
    assert session.duplicates == 3                  # two by entry id, one by message id and request id


def test_unknown_entries_and_fields_are_counted_and_named(tmp_path):
    path = write(tmp_path / "s.jsonl", [
        entry("user", uuid="a", message={"role": "user", "content": "go"}),
        entry("hologram", uuid="b"), entry("hologram", uuid="c"), entry("hologram", uuid="d"),
        entry("system", uuid="e", subtype="warp_drive"),
        reply("m1", "r1", [{"type": "text", "text": "hi"}], "end_turn", "f", sparkle=1)])
    session = read_session(path)
    notes = session.not_understood_notes()
    assert "3 entries of type hologram not understood" in notes
    assert "1 entry of type system/warp_drive not understood" in notes
    assert any("assistant.sparkle (1)" in n for n in notes)
    assert len(session.calls) == 1


def test_a_cut_last_line_and_a_bad_line_mark_the_result_partial(tmp_path):
    good = [entry("user", uuid="a", message={"role": "user", "content": "go"}),
            reply("m1", "r1", [{"type": "text", "text": "hi"}], "end_turn", "b")]
    cut = read_session(write(tmp_path / "cut.jsonl", good, tail='{"type": "assistant", "mess'))
    assert cut.partial and cut.cut_last_line and len(cut.calls) == 1 and cut.ending == "end_turn (partial)"
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good[0]) + "\nnot json at all\n" + json.dumps(good[1]) + "\n", encoding="utf-8")
    bad = read_session(path)
    assert bad.bad_lines == [2] and len(bad.calls) == 1 and bad.partial


def test_files_that_are_not_transcripts_are_named(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\nworld\n", encoding="utf-8")
    (tmp_path / "other.jsonl").write_text('{"name": "x"}\n', encoding="utf-8")
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    for name, words in (("notes.txt", "not JSON Lines"), ("other.jsonl", "not a Claude Code transcript"),
                        ("empty.jsonl", "empty file")):
        with pytest.raises(TranscriptError, match=words):
            detect_kind(tmp_path / name)
    with pytest.raises(TranscriptError, match="is a folder"):
        detect_kind(tmp_path)
    assert detect_kind(Path("data/observed/claude-code/2.1.332/tool_use.json")) == "observed-record"


def _big_transcript(path: Path, megabytes: int) -> int:
    """A transcript of ``megabytes`` MB: replies with 1 MB tool results between them; its number of calls."""
    blob = "x" * (1 << 20)
    calls = 0
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(entry("user", uuid="p", message={"role": "user", "content": "go"})) + "\n")
        while out.tell() < megabytes << 20:
            calls += 1
            out.write(json.dumps(reply(f"m{calls}", f"r{calls}", [
                {"type": "tool_use", "id": f"t{calls}", "name": "Read", "input": {}}], "tool_use", f"a{calls}")) + "\n")
            out.write(json.dumps(entry("user", uuid=f"u{calls}", message={"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{calls}", "content": blob}]})) + "\n")
    return calls


def test_a_200_mb_transcript_is_read_as_a_stream(tmp_path):
    """Memory grows with the number of calls (each keeps its cut content), not with the file: the peak stays far
    below the file's size. The bound is on growth, never on time."""
    path = tmp_path / "big.jsonl"
    calls = _big_transcript(path, 200)
    assert path.stat().st_size >= 200 << 20
    tracemalloc.start()
    try:
        session = read_session(path)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        path.unlink()   # pytest keeps the last runs' temporary folders: not 200 MB each
    assert len(session.calls) == calls
    assert peak < 40 << 20, f"peak {peak / 2**20:.0f} MB reading a 200 MB file"


def test_thousands_of_sessions_are_listed_newest_first_up_to_the_limit(tmp_path):
    import os

    for i in range(2000):
        folder = tmp_path / f"-proj-{i % 7}"
        folder.mkdir(exist_ok=True)
        path = write(folder / f"{i:05d}.jsonl", [reply(f"m{i}", "r", [{"type": "text", "text": "x"}], "end_turn",
                                                       f"a{i}")])
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    lines, total = list_sessions(tmp_path, limit=50)
    assert total == 2000 and len(lines) == 50
    assert [p.path.name for p in lines[:2]] == ["01999.jsonl", "01998.jsonl"]


def test_the_record_check_names_what_it_does_not_understand():
    text = (SESSIONS_DIR / "claude-code" / "2.1.332" / "tool_use.jsonl").read_text(encoding="utf-8")
    assert check_sessions({"tool_use": {"s.jsonl": text}}) == []
    changed = text + json.dumps({"type": "teleport", "sessionId": "s"}) + "\n"
    assert check_sessions({"tool_use": {"s.jsonl": changed}}) == [
        "tool_use: 1 entry of type teleport not understood"]
    assert check_sessions({"x": {}}) == ["x: Claude Code wrote no transcript"]


def test_failed_requests_are_requests_of_their_own_in_the_trace():
    """2.1.332 retried a 529 and a 429, then ended on a 500: three requests, two retries, an api_error end;
    the plots count them as calls, the session's replies are none."""
    trace = session_to_trace(read_fixture("2.1.332", "api_errors"))
    path = [(e.call, e.payload.branch, e.payload.api_attempts) for e in trace if isinstance(e.payload, TransitionEvent)]
    assert path == [(1, "api_retry", 0), (2, "api_retry", 1), (3, "api_error", 2)]
    assert [e.payload.status for e in trace.of_kind("api_error")] == [529, 429, 500]
    result = trace.events[-1].payload
    assert result.subtype == "error_api" and result.requests == 3 and result.retries == 2
    # giving up after max_tokens is Claude Code's own message, not a failed request
    gave_up = session_to_trace(read_fixture("2.1.332", "max_tokens_give_up"))
    assert gave_up.of_kind("api_error") == [] and gave_up.events[-1].payload.subtype == "error_max_output_tokens"
    assert [e.payload.type for e in gave_up.of_kind("transition")][-1] == "End"


def test_a_bad_first_line_does_not_hide_the_transcript(tmp_path):
    path = tmp_path / "s.jsonl"
    good = [entry("user", uuid="a", message={"role": "user", "content": "go"}),
            reply("m1", "r1", [{"type": "text", "text": "hi"}], "end_turn", "b")]
    path.write_text("\x00\x01 binary junk\n" + "".join(json.dumps(e) + "\n" for e in good), encoding="utf-8")
    assert detect_kind(path) == "claude-code"
    session = read_session(path)
    assert session.bad_lines == [1] and len(session.calls) == 1


def test_an_unreadable_file_is_named(tmp_path, monkeypatch):
    """A file the reader may not open (chmod 0 as a user; faked here, the tests may run as root)."""
    path = write(tmp_path / "s.jsonl", [entry("user", uuid="a", message={"role": "user", "content": "go"})])

    import os

    real_open = os.open

    def refuse(name, *args, **kwargs):
        if str(name).endswith("s.jsonl"):
            raise PermissionError(13, "Permission denied")
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(TranscriptError, match="s.jsonl: cannot be read: Permission denied"):
        read_session(path)


def test_the_record_check_compares_fresh_transcripts_with_the_committed_ones():
    from agentlab.sessions.command import compare_with_fixtures

    text = (SESSIONS_DIR / "claude-code" / "2.1.332" / "stop_hook.jsonl").read_text(encoding="utf-8")
    assert compare_with_fixtures("2.1.332", {"stop_hook": {"s.jsonl": text}}) == []
    # a release that stops writing the replies' entries: every entry left is known, the shape is not
    lines = [line for line in text.splitlines(keepends=True) if '"type": "assistant"' not in line
             and '"type":"assistant"' not in line]
    (line,) = compare_with_fixtures("2.1.332", {"stop_hook": {"s.jsonl": "".join(lines)}})
    assert line.startswith("stop_hook: now 0 call(s)") and "committed 3 call(s) (rows 10 2 11)" in line
