"""A transcript is a file anyone can write: what `agentlab replay` and `agentlab sessions` do with the odd ones (a
line nested too deep, fields of a shape Claude Code never writes, a first line that is JSON but not an object,
names and texts with newlines, pipes and devices under subagents/), and with a Claude Code 2.1.332 session whose
refusals switched the model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlab.core.cost import usage_cost
from agentlab.core.events import Fallback, Request, ResultEvent
from agentlab.sessions.command import SESSIONS_DIR, check_sessions, list_sessions
from agentlab.sessions.transcript import (TranscriptError, detect_kind, read_session, read_sessions,
                                             result_subtype, table_lines)
from agentlab.sessions.trace import session_to_trace
from forked import run_forked
from test_transcript import entry, reply, write

FIXTURES = Path(__file__).resolve().parent / "transcripts" / "2.1.332"
OPUS = FIXTURES / "refusal_model_fallback.jsonl"   # recorded: tests/transcripts/README.md says how
SONNET = SESSIONS_DIR / "claude-code" / "2.1.332" / "refusal.jsonl"
DEEP = "[" * 100_000 + "]" * 100_000


def _session_entries() -> list[dict]:
    return [entry("user", uuid="a", message={"role": "user", "content": "go"}),
            entry("api-request", uuid="q", id="q1", params={"model": "claude-sonnet-4-6", "max_tokens": 100}),
            reply("m1", "r1", [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}], "tool_use", "b",
                  requestRef="q1"),
            entry("user", uuid="c", message={"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}),
            entry("system", uuid="d", subtype="compact_boundary",
                  compactMetadata={"trigger": "auto", "preTokens": 1000, "postTokens": 100}),
            entry("system", uuid="e", subtype="api_error", error={"status": 529, "message": "Overloaded"},
                  retryAttempt=1, retryInMs=500),
            reply("m2", "r2", [{"type": "text", "text": "done"}], "end_turn", "f"),
            entry("cost-state", uuid="g", totalCostUSD=0.01)]


def _everything_reads(path: Path) -> list[str]:
    """Read, trace, table and JSON of a transcript: nothing may raise but a TranscriptError."""
    session = read_session(path)
    session_to_trace(session)
    json.dumps(session.to_json(), default=str)
    lines = table_lines(session)
    assert all("\n" not in line for line in lines)
    return session.not_understood_notes()


# -- 2: a line nested too deep -----------------------------------------------------------------------------------

def test_a_line_nested_too_deep_is_skipped_and_marked(tmp_path):
    good = _session_entries()
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(good[0]) + "\n" + DEEP + "\n" + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "\n"
                    + "".join(json.dumps(e) + "\n" for e in good[1:]), encoding="utf-8")
    session = read_session(path)
    assert session.bad_lines == [2, 3] and session.partial and len(session.calls) == 2
    assert "partial: 2 line(s) not read (not JSON or too long): line 2, 3" in table_lines(session)
    first = tmp_path / "first.jsonl"   # as the first line, the file is still told from its next ones
    first.write_text(DEEP + "\n" + "".join(json.dumps(e) + "\n" for e in good), encoding="utf-8")
    assert detect_kind(first) == "claude-code" and read_session(first).bad_lines == [1]


def test_sessions_lists_every_session_when_one_holds_a_line_nested_too_deep(tmp_path):
    project = tmp_path / "-home-me-proj"
    project.mkdir()
    write(project / "good.jsonl", _session_entries())
    (project / "deep.jsonl").write_text(json.dumps(_session_entries()[0]) + "\n" + DEEP + "\n", encoding="utf-8")
    ran = run_forked(["sessions", str(tmp_path)], timeout=120)
    assert ran.code == 0, ran.stderr
    rows = ran.stdout.splitlines()[1:]
    assert sorted(r.split()[-1] for r in rows) == ["-home-me-proj/deep.jsonl", "-home-me-proj/good.jsonl"]
    assert any("(partial)" in r for r in rows)


# -- 3: fields of a shape Claude Code never writes ---------------------------------------------------------------

@pytest.mark.parametrize("where, change, note", [
    ("stop_reason", lambda es: es[2]["message"].update(stop_reason=["end_turn"]),
     "assistant.message.stop_reason as a list"),
    ("usage count", lambda es: es[2]["message"]["usage"].update(input_tokens={"n": 1}),
     "assistant.message.usage.input_tokens as an object"),
    ("preTokens", lambda es: es[4]["compactMetadata"].update(preTokens="167k"),
     "system.compactMetadata.preTokens as a string"),
    ("model", lambda es: es[2]["message"].update(model=["claude"]), "assistant.message.model as a list"),
    ("type", lambda es: es[3].update(type=["user"]), "(a list as its type)"),
    ("hookErrors", lambda es: es.append(entry("system", uuid="h", subtype="stop_hook_summary", hookErrors={"a": 1})),
     None),
    ("status", lambda es: es[5]["error"].update(status="529"), "system.error.status as a string"),
])
def test_a_field_of_an_unexpected_shape_is_not_understood_and_raises_nothing(tmp_path, where, change, note):
    entries = _session_entries()
    change(entries)
    notes = _everything_reads(write(tmp_path / "s.jsonl", entries))
    if note is not None:
        assert any(note in n for n in notes), notes


def test_a_pre_tokens_text_leaves_the_compaction_counted_and_its_size_unknown(tmp_path):
    entries = _session_entries()
    entries[4]["compactMetadata"]["preTokens"] = "167k"
    session = read_session(write(tmp_path / "s.jsonl", entries))
    assert "  after call 1: compaction: auto, ? tokens before, 100 after" in table_lines(session)
    (compaction,) = session_to_trace(session).of_kind("compaction")
    assert compaction.payload.tokens_before == 0


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=8)
# every place of the made-up session a value can be put: (entry, path to the field)
PLACES = [(i, path) for i, path in [
    (0, ("message",)), (0, ("message", "content")), (0, ("cwd",)), (0, ("timestamp",)), (0, ("version",)),
    (1, ("id",)), (1, ("params",)), (1, ("params", "model")), (1, ("params", "max_tokens")),
    (2, ("message",)), (2, ("message", "id")), (2, ("message", "model")), (2, ("message", "stop_reason")),
    (2, ("message", "usage")), (2, ("message", "usage", "output_tokens")), (2, ("message", "content")),
    (2, ("message", "content", 0)), (2, ("message", "content", 0, "type")), (2, ("requestId",)),
    (2, ("requestRef",)), (2, ("isApiErrorMessage",)), (2, ("refusedMessageId",)), (2, ("agentId",)),
    (3, ("message", "content", 0, "content")), (3, ("refusalRetry",)), (3, ("isCompactSummary",)),
    (4, ("compactMetadata",)), (4, ("compactMetadata", "postTokens")), (4, ("subtype",)),
    (5, ("error",)), (5, ("retryAttempt",)), (5, ("retryInMs",)), (5, ("subtype",)), (5, ("apiRefusalCategory",)),
    (5, ("originalModel",)), (5, ("retractedMessageUuids",)), (6, ("message", "usage", "cache_creation")),
    (7, ("totalCostUSD",)), (7, ("type",)), (3, ("uuid",))]]


def _put(entries: list[dict], place: tuple[int, tuple], value: object) -> None:
    """``value`` at ``place``, when an earlier change left a way there."""
    index, path = place
    holder: object = entries[index]
    for depth, key in enumerate(path, 1):
        last = depth == len(path)
        fits = isinstance(holder, dict) and (last or key in holder) if isinstance(key, str) else \
            isinstance(holder, list) and len(holder) > key
        if not fits:
            return
        if last:
            holder[key] = value  # type: ignore[index]
            return
        holder = holder[key]  # type: ignore[index]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(PLACES), JSON), min_size=1, max_size=4),
       st.sampled_from(["model_refusal_fallback", "model_refusal_no_fallback", "api_error"]))
def test_no_field_of_any_shape_makes_the_reader_raise(tmp_path, changes, subtype):
    entries = _session_entries()
    entries[5]["subtype"] = subtype
    for place, value in changes:
        _put(entries, place, value)
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    try:
        _everything_reads(path)
    except TranscriptError:
        pass   # a file with no entry Claude Code writes left: refused, with its reason


# -- 4: a first line that is JSON but not an object ---------------------------------------------------------------

@pytest.mark.parametrize("first", ["null", "[]", "42", '"text"', "not JSON at all"])
def test_a_first_line_that_is_not_an_object_is_skipped_and_marked_whatever_it_is(tmp_path, first):
    path = tmp_path / "s.jsonl"
    path.write_text(first + "\n" + "".join(json.dumps(e) + "\n" for e in _session_entries()), encoding="utf-8")
    assert detect_kind(path) == "claude-code"
    session = read_session(path)
    assert session.bad_lines == [1] and session.partial and len(session.calls) == 2


# -- 6: third-party strings on one line ---------------------------------------------------------------------------

def test_a_newline_in_the_cwd_cannot_forge_a_line_of_the_table(tmp_path):
    forged = "/home/me\n   9  claude-opus-4-8      end_turn                        11  forged"
    entries = _session_entries()
    for e in entries:
        e["cwd"] = forged
    entries[2]["message"]["model"] = "claude\rsonnet\x1b[2J"
    lines = table_lines(read_session(write(tmp_path / "s.jsonl", entries)))
    assert "/home/me^J   9  claude-opus-4-8" in lines[0]
    assert not any(line.lstrip().startswith("9 ") for line in lines)
    assert "claude^Msonnet" in lines[2] and "\x1b" not in "".join(lines)


def test_a_newline_in_a_folder_or_file_name_keeps_one_session_on_one_row(tmp_path):
    project = tmp_path / "proj\nfake row"
    project.mkdir()
    write(project / "a\nb.jsonl", [{**e, "cwd": None} for e in _session_entries()])
    lines, total = list_sessions(tmp_path)
    assert total == 1
    ran = run_forked(["sessions", str(tmp_path)], timeout=120)
    assert ran.code == 0, ran.stderr
    rows = ran.stdout.splitlines()
    assert len(rows) == 2 and rows[1].endswith("proj^Jfake row/a^Jb.jsonl") and "proj^Jfake row" in rows[1]


# -- 7: a pipe or a device under subagents/ ------------------------------------------------------------------------

def test_a_pipe_or_a_device_under_subagents_is_refused_not_read(tmp_path):
    main = write(tmp_path / "s.jsonl", _session_entries())
    sub = tmp_path / "s" / "subagents"
    sub.mkdir(parents=True)
    os.mkfifo(sub / "agent-pipe.jsonl")
    os.symlink("/dev/zero", sub / "agent-zero.jsonl")
    for args in (["replay", str(main)], ["sessions", str(tmp_path)]):
        ran = run_forked(args, timeout=60)   # before: waited for a writer on the pipe, read /dev/zero for ever
        assert ran.code == 0, ran.stderr
    replayed = run_forked(["replay", str(main)], timeout=60).stdout
    assert f"partial: sub-agent file not read: {sub / 'agent-pipe.jsonl'}: not a regular file" in replayed
    assert f"partial: sub-agent file not read: {sub / 'agent-zero.jsonl'}: not a regular file" in replayed
    session = read_session(main)
    assert len(session.calls) == 2 and session.partial
    for name in ("agent-pipe.jsonl", "agent-zero.jsonl"):   # the same words as at the top level
        with pytest.raises(TranscriptError, match="not a regular file"):
            detect_kind(sub / name)


# -- 8: refusals that switch the model (Claude Code 2.1.332) -------------------------------------------------------

def test_a_refusal_fallback_is_three_calls_each_on_its_own_model():
    """On claude-opus-5-5: refused, asked again with the classifier notice, refused again, switched to
    claude-opus-4-8 (model_refusal_fallback), whose answer ends the turn: three api-request entries, three calls."""
    requests = [json.loads(line) for line in OPUS.read_text(encoding="utf-8").splitlines()]
    assert [e["params"]["model"] for e in requests if e["type"] == "api-request"] == \
        ["claude-opus-5-5", "claude-opus-5-5", "claude-opus-4-8"]
    session = read_session(OPUS)
    assert [c.model for c in session.calls] == ["claude-opus-5-5", "claude-opus-5-5", "claude-opus-4-8"]
    assert [c.stop_reason for c in session.calls] == ["refusal", "refusal", "end_turn"]
    assert [c.branch for c in session.calls] == ["refusal_fallback", "refusal_fallback", "complete"]
    assert [c.max_tokens for c in session.calls] == [128000, 128000, 64000]   # each request's own
    (switch,) = session.of("fallback")
    assert switch.after == 2 and switch.data["from_model"] == "claude-opus-5-5" \
        and switch.data["to_model"] == "claude-opus-4-8" and switch.data["category"] == "cyber"
    assert (switch.data["trigger"], switch.data["direction"], switch.data["scope"], switch.data["retracted"]) == \
        ("refusal", "retry", "session", [])
    assert session.ending == "end_turn" and result_subtype(session) == "success"
    assert session.not_understood_notes() == [] and not session.partial
    answer = session.calls[2]
    assert answer.cost_usd == pytest.approx(usage_cost(answer.usage, "claude-opus-4-8"))
    assert answer.cost_usd != pytest.approx(usage_cost(answer.usage, "claude-opus-5-5"))


def test_the_switch_and_why_are_in_the_table_and_the_trace():
    session = read_session(OPUS)
    lines = table_lines(session)
    assert "3 call(s) · ended: end_turn" in lines[0]
    assert lines[3].split()[:3] == ["2", "claude-opus-5-5", "refusal"] and \
        lines[3].endswith("switched to claude-opus-4-8 after the refusal")
    assert "  after call 2: fallback: claude-opus-5-5 → claude-opus-4-8 after a refusal (cyber: The request could " \
           "enable cyber harm.)" in lines
    trace = session_to_trace(session)
    assert [e.payload.model for e in trace if isinstance(e.payload, Request)] == \
        ["claude-opus-5-5", "claude-opus-5-5", "claude-opus-4-8"]
    (fallback,) = [e for e in trace if isinstance(e.payload, Fallback)]
    assert (fallback.call, fallback.payload.from_model, fallback.payload.to_model, fallback.payload.cause) == \
        (2, "claude-opus-5-5", "claude-opus-4-8", "refusal")
    result = trace.events[-1].payload
    assert isinstance(result, ResultEvent) and result.subtype == "success" and result.fallbacks == 2


def test_without_a_fallback_the_second_refusal_ends_the_turn():
    """On claude-sonnet-4-6 (the recorded transcript): two requests, each a refused call on sonnet-4-6, ended by
    model_refusal_no_fallback and the isApiErrorMessage entry whose stop_reason is refusal, counted once."""
    session = read_session(SONNET)
    assert [c.model for c in session.calls] == ["claude-sonnet-4-6", "claude-sonnet-4-6"]
    assert [c.branch for c in session.calls] == ["refusal_fallback", "refusal"]
    assert session.of("fallback") == [] and result_subtype(session) == "error_refusal"


def test_a_local_fallback_says_the_session_keeps_its_model(tmp_path):
    entries = _session_entries()[:3] + [entry(
        "system", uuid="z", subtype="model_refusal_fallback", originalModel="claude-opus-5-5",
        fallbackModel="claude-opus-4-8", requestId="req9", apiRefusalCategory="cyber", trigger="refusal",
        direction="retry", scope="local", retractedMessageUuids=["b"])]
    session = read_session(write(tmp_path / "s.jsonl", entries))
    (switch,) = session.of("fallback")
    assert switch.detail.endswith("in a sub-agent; the session's model is unchanged")
    assert switch.data["scope"] == "local" and switch.data["retracted"] == ["b"]
    assert session.not_understood_notes() == []


def test_the_record_check_understands_both_refusal_transcripts():
    """What `make record` (agentlab sessions --record) runs on fresh transcripts: nothing not understood."""
    for path in (OPUS, SONNET):
        assert check_sessions({"refusal": {"s.jsonl": path.read_text(encoding="utf-8")}}) == [], path


def test_every_request_2_1_332_wrote_is_a_call_a_failed_request_or_named_unanswered():
    """Calls are counted from the api-request entries: each is answered by a reply, a refusal or an error, and the
    one that nothing answers (a 400 prompt-too-long that Claude Code compacted on) is counted as such."""
    for path in [*sorted((SESSIONS_DIR / "claude-code" / "2.1.332").glob("*.jsonl")), OPUS]:
        session = read_session(path)
        failed = [e for e in session.events if e.name == "retry_error"
                  or (e.name == "api_error" and isinstance(e.data.get("status"), int))]
        assert session.requests == len(session.calls) + len(failed) + session.unanswered, path
        assert session.to_json()["requests"] == session.requests
    assert read_session(SESSIONS_DIR / "claude-code" / "2.1.332" / "prompt_too_long.jsonl").unanswered == 1
    assert (read_session(OPUS).requests, read_session(OPUS).unanswered) == (3, 0)


def test_a_resumed_file_that_repeats_the_requests_counts_each_once(tmp_path):
    """A resumed or forked file starts with the entries of the one before it; api-request entries carry no uuid,
    so they are known again by their id: the refused call after them is of the request that was really sent."""
    first = [entry("user", uuid="a", message={"role": "user", "content": "go"}),
             entry("api-request", uuid=None, id="q1", params={"model": "claude-sonnet-4-6", "max_tokens": 100}),
             reply("m1", "r1", [{"type": "text", "text": "hi"}], "end_turn", "b", requestRef="q1")]
    for e in first:
        if e["type"] == "api-request":
            del e["uuid"]
    more = [entry("api-request", id="q2", params={"model": "claude-opus-5-5", "max_tokens": 100}),
            entry("user", uuid="c", message={"role": "user", "content": "noted"}, refusalRetry=True,
                  refusedMessageId="m2")]
    del more[0]["uuid"]
    session = read_sessions([write(tmp_path / "1.jsonl", first), write(tmp_path / "2.jsonl", first + more)])
    assert [(c.message_id, c.model) for c in session.calls] == [("m1", "claude-sonnet-4-6"), ("m2", "claude-opus-5-5")]
    assert (session.requests, session.unanswered) == (2, 0)
