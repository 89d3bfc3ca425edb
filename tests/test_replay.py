"""Replays of recorded client runs: every committed Claude Code record becomes a trace the plots and the
stepper's panes draw, with one model call per recorded request."""

from __future__ import annotations

import re

import pytest

from agentlab.core.errors import ConfigError
from agentlab.core.trace import EVENT_KINDS
from agentlab.core.transitions import ROW_OF
from agentlab.observatory.observe import OBSERVED_DIR, load_records
from agentlab.observatory.replay import ending, load_record, record_to_trace, replay_branches
from agentlab.ui import plots
from agentlab.ui.plots import compare_paths
from agentlab.ui.widgets import ReplayStepper

RECORDS = load_records()
CLAUDE = sorted((version, name) for (client, version), by in RECORDS.items() if client == "claude-code"
                for name in by)
EVERY = sorted((client, version, name) for (client, version), by in RECORDS.items() for name in by)


def claude(version: str, name: str) -> dict:
    return RECORDS[("claude-code", version)][name]


def test_there_are_claude_code_records():
    assert len(CLAUDE) >= 20


@pytest.fixture(scope="module")
def live() -> dict[str, plots.LiveFigure]:
    """A figure per plot kind, drawn again for each record as the stepper does (the same plot functions)."""
    return {kind: plots.LiveFigure(kind, dpi=30) for kind in ("overview", "recoveries", "path")}


@pytest.mark.parametrize("version,name", CLAUDE)
def test_every_claude_code_record_replays_into_a_trace_the_plots_draw(version, name, live):
    record = claude(version, name)
    trace = record_to_trace(record)
    kinds = [e.kind for e in trace]
    assert set(kinds) <= set(EVENT_KINDS)
    assert kinds[0] == "start" and kinds[-1] == "result"
    assert [e.seq for e in trace] == list(range(len(trace)))
    requests = trace.of_kind("request")
    assert len(requests) == len(record["requests"])
    assert [e.call for e in requests] == [r["n"] for r in record["requests"]]
    # every call has its answer: a response for a 2xx reply, an api_error otherwise, with the recorded stop reason
    assert record["requests"], name
    for r in record["requests"]:
        answers = [e for e in trace if e.call == r["n"] and e.kind in ("response", "api_error")]
        assert len(answers) == 1, (name, r["n"])
        if r["reply"]["status"] >= 400:
            assert answers[0].kind == "api_error" and answers[0].data["status"] == r["reply"]["status"]
        else:
            assert answers[0].data["stop_reason"] == r["reply"].get("stop_reason")
            blocks = answers[0].data["blocks"]
            assert (blocks.split(",") if blocks else []) == r["reply"].get("blocks"), (name, r["n"])
    # at least one decision, every known branch on its row, and the run ends the way the client said
    transitions = trace.of_kind("transition")
    assert transitions
    for t in transitions:
        if t.data["branch"] in ROW_OF:
            assert t.data["row"] == ROW_OF[t.data["branch"]]
    assert trace.of_kind("result")[0].data["subtype"] == ending(record)
    assert trace.of_kind("result")[0].data["requests"] == len(record["requests"])
    run = plots.read_run(trace.to_frame())
    assert [c.n for c in run.calls] == [r["n"] for r in record["requests"]]
    frame = trace.to_frame()
    for kind in ("overview", "recoveries"):
        assert live[kind].draw(frame).axes   # built (rendering to PNG is checked once, below)
    assert live["path"].render(frame).startswith(b"\x89PNG")


@pytest.mark.parametrize("client,version,name", EVERY)
def test_every_record_of_every_client_replays(client, version, name):
    record = RECORDS[(client, version)][name]
    trace = record_to_trace(record)
    assert len(trace.of_kind("request")) == len(record["requests"])
    assert trace.of_kind("result")


def _by_call(trace, kind: str) -> dict[int, list]:
    out: dict[int, list] = {}
    for e in trace.of_kind(kind):
        out.setdefault(e.call, []).append(e.data)
    return out


def test_the_replay_reads_every_field_of_every_record_as_its_json_says():
    """The replay reads records as record_types.Record; what it takes from a record is checked here against a
    plain reading of the record's JSON (the dict access the replay used before the types), for every record."""
    for (client, version), by in RECORDS.items():
        for name, record in by.items():
            where, trace = f"{client}/{version}/{name}", record_to_trace(record)
            requests, result = record["requests"], record.get("result") or {}
            start = trace.of_kind("start")[0].data
            assert (start["model"], start["max_tokens"], start["stream"]) == tuple(
                requests[0].get(k) for k in ("model", "max_tokens", "stream")), where
            assert [start[k] for k in ("client", "version", "scenario")] == [record[k] for k in
                                                                          ("client", "version", "scenario")], where
            sent, errors, appends = trace.of_kind("request"), _by_call(trace, "api_error"), _by_call(trace, "append")
            compactions, decided = _by_call(trace, "compaction"), _by_call(trace, "transition")
            for i, r in enumerate(requests):
                assert [sent[i].call, sent[i].data["model"], sent[i].data["max_tokens"], sent[i].data["stream"],
                        sent[i].data["messages"], sent[i].data["client_action"]] == [
                    r["n"], r.get("model"), r.get("max_tokens"), r.get("stream"),
                    r["appended"].get("messages_after"), r.get("action")], (where, i)
                if r["reply"]["status"] >= 400:
                    assert [(d["status"], d["error_type"]) for d in errors[r["n"]]] == [
                        (r["reply"]["status"], r["reply"].get("error"))], (where, i)
                before = requests[i - 1]["n"] if i else 0
                assert [d["role"] for d in appends.get(before, [])] == [
                    m.get("role") for m in r["appended"].get("appended") or []], (where, i)
                actions = [d["client_action"] for d in decided.get(before, []) if d.get("client_action")]
                assert actions in ([], [r["action"]]), (where, i)
                for d in compactions.get(before, []):
                    assert (d["messages_before"], d["messages_after"], d["removed"]) == tuple(
                        r["appended"].get(k) for k in ("messages_before", "messages_after", "dropped")), (where, i)
            end = trace.of_kind("result")[0].data
            failed = bool(result.get("is_error") or result.get("raised") or result.get("timed_out")
                          or result.get("exit_code") not in (0, None))
            assert [end["is_error"], end["result"], end["client_stop_reason"], end["client_subtype"],
                    end["exit_code"], end["model"]] == [failed, result.get("text", ""), result.get("stop_reason"),
                                                        result.get("subtype"), result.get("exit_code"),
                                                        requests[-1].get("model")], where
            if "num_turns" in result:
                assert end["num_turns"] == result["num_turns"], where


def test_the_max_tokens_give_up_replay_shows_continuations_and_no_escalation():
    record = claude("2.1.197", "max_tokens_give_up")
    trace = record_to_trace(record)
    assert replay_branches(trace) == ["max_tokens_continue"] * 3 + ["max_tokens_give_up"]
    assert {e.data["max_tokens"] for e in trace.of_kind("request")} == {32000}
    added = [e.data["content"][0]["text"] for e in trace.of_kind("append") if e.data["role"] == "user" and e.call > 0]
    assert len(added) == 3 and all(t.startswith("Output token limit hit") for t in added)
    # the partial answers are the scenario's scripted texts, not the recorder's shortened ones
    assert trace.of_kind("response")[0].data["content"] == [{"type": "text", "text": "3.14159265358979"}]
    end = trace.of_kind("transition")[-1].data
    assert end["type"] == "End" and end["subtype"] == "success, is_error"
    assert trace.of_kind("result")[0].data["is_error"] is True


def test_client_actions_map_to_branches():
    assert replay_branches(record_to_trace(claude("2.1.197", "overloaded_fallback"))) == \
        ["api_retry", "api_retry", "api_fallback", "complete"]
    assert replay_branches(record_to_trace(claude("2.1.197", "empty_end_turn"))) == \
        ["tool_use", "empty_nudge", "complete"]
    cap = replay_branches(record_to_trace(claude("2.1.197", "stop_hook_cap")))
    assert cap.count("stop_hook_block") == 8 and cap[-1] == "stop_hook_cap"
    assert replay_branches(record_to_trace(claude("2.1.197", "pause_turn"))) == ["complete"]
    assert replay_branches(record_to_trace(claude("2.1.197", "refusal"))) == ["refusal"]


def test_a_stop_hook_reason_fed_back_as_a_system_text_is_the_hook_events_reason():
    """Claude Code may send a Stop hook's reason among the system texts rather than as a user text: the replay
    reads the block and its reason from either."""
    import copy

    record = copy.deepcopy(claude("2.1.197", "stop_hook_cap"))
    for request in record["requests"]:
        diff = request["appended"]
        hook = [t for t in diff["injected_user_texts"] if t.startswith("Stop hook")]
        diff["injected_user_texts"] = [t for t in diff["injected_user_texts"] if t not in hook]
        diff["injected_system_texts"] = [*diff.get("injected_system_texts", []), *hook]
    moved = [e.payload.reason for e in record_to_trace(record) if e.kind == "hook"]
    assert moved and moved == [e.payload.reason for e in record_to_trace(claude("2.1.197", "stop_hook_cap"))
                               if e.kind == "hook"]
    assert replay_branches(record_to_trace(record)).count("stop_hook_block") == 8


def test_a_summary_call_compacts_instead_of_deciding():
    trace = record_to_trace(claude("2.1.197", "prompt_too_long"))
    assert replay_branches(trace) == ["tool_use", "tool_use", "prompt_too_long", "complete"]
    summary = [e for e in trace.of_kind("request") if e.data["purpose"] == "summary"]
    assert [e.call for e in summary] == [4]
    assert [e.call for e in trace.of_kind("compaction")] == [4]
    assert not [e for e in trace.of_kind("transition") if e.call == 4]


def test_the_agentlab_replay_matches_agentlabs_own_run():
    """agentlab's own record, replayed, takes the branches agentlab's loop takes on the scenario."""
    from agentlab.lab import scenario_loop

    for name in ("max_tokens_give_up", "tour", "stop_hook_cap", "overloaded_fallback", "pause_turn"):
        (key,) = [k for k in RECORDS if k[0] == "agentlab"]
        loop = scenario_loop(name)
        loop.run()
        assert replay_branches(record_to_trace(RECORDS[key][name])) == replay_branches(loop.trace), name


def test_load_record_by_name_path_and_triple():
    record = load_record("max_tokens_give_up")
    assert record["client"] == "claude-code"
    path = OBSERVED_DIR / "claude-code" / record["version"] / "max_tokens_give_up.json"
    assert load_record(str(path)) == record
    assert load_record(f"claude-code/{record['version']}/max_tokens_give_up") == record
    assert load_record("max_tokens_give_up", client="agentlab")["client"] == "agentlab"
    with pytest.raises(ConfigError, match="no behaviour record"):
        load_record("no_such_scenario")


@pytest.mark.parametrize("version,name", CLAUDE)
def test_the_replay_stepper_steps_to_the_end(version, name):
    record = claude(version, name)
    s = ReplayStepper(record, show_plots=False)
    assert s.call_count == 0 and "Nothing yet" in s.transcript_pane.value
    steps = 0
    while not s.done:
        before = s.call_count
        s.step_button.click()
        steps += 1
        assert s.call_count > before
        assert 'class="agentlab-current"' in s.decision_pane.value or "row —" in s.decision_pane.value
        assert steps <= len(record["requests"])
    assert s.call_count == len(record["requests"])
    assert s.step_button.disabled and s.run_button.disabled
    assert f'data-subtype="{ending(record)}"' in s.result_pane.value
    s.reset_button.click()
    assert s.call_count == 0 and not s.step_button.disabled
    s.run_button.click()
    assert s.call_count == len(record["requests"]) and s.done


def test_the_replay_stepper_outlines_the_latest_call_and_draws_the_plot():
    s = ReplayStepper("max_tokens_give_up")
    s.step()
    s.step()
    s.update()
    assert s.call_count == 2
    assert re.search(r'agentlab-call agentlab-call-latest" data-call="2"', s.transcript_pane.value)
    assert "After call 2: row 3 · max_tokens_continue" in s.decision_pane.value
    assert "Output token limit hit" in s.transcript_pane.value
    assert bytes(s.plot_image.value).startswith(b"\x89PNG")
    s.plot_picker.value = "overview"
    assert bytes(s.plot_image.value).startswith(b"\x89PNG")
    assert "ReplayStepper(claude-code/" in repr(s)


def test_compare_paths_draws_two_panels():
    fig = compare_paths("max_tokens_give_up")
    assert len(fig.axes) == 2
    assert fig.axes[0].get_title(loc="left").startswith("Claude Code ")
    assert plots.to_png(fig) == plots.to_png(compare_paths("max_tokens_give_up"))


def test_a_graded_function_is_named_by_its_label_in_the_replay():
    """A record that ``agentlab grade`` made of a function (version "graded") says "your agent_loop ran the tool
    call(s)", not "your agent_loop graded ran …"."""
    from agentlab.exercises.lesson12 import grade_loop, naive_loop

    record = grade_loop(naive_loop, ["tool_use"]).grade("tool_use").record
    assert record["version"] == "graded"
    reasons = [e.payload.reason for e in record_to_trace(record) if e.kind == "transition"]
    assert any(r.startswith("your agent_loop ran the tool call(s)") for r in reasons), reasons
    assert not any("graded" in r for r in reasons), reasons
