"""The ReplayStepper on Claude Code's own session files: step a transcript call by call, with its plots."""

from __future__ import annotations

import html
import re

import pytest

from agentlab.backend.scenario import load_scenario
from agentlab.sessions.command import SESSIONS_DIR, read_fixture
from agentlab.ui import plots
from agentlab.ui.widgets import ReplayStepper

FIXTURES = SESSIONS_DIR / "claude-code"


@pytest.mark.parametrize("name", ["stop_hook", "context_window_full", "api_errors", "refusal"])
def test_the_stepper_steps_a_transcript_to_the_end(name):
    session = read_fixture("2.1.332", name)
    s = ReplayStepper(FIXTURES / "2.1.332" / f"{name}.jsonl", show_plots=False)
    assert s.call_count == 0
    steps = 0
    while not s.done:
        before = s.call_count
        s.step_button.click()
        steps += 1
        assert s.call_count > before
    requests = s.trace.events[-1].payload.requests
    assert s.call_count == requests >= len(session.calls)
    assert steps == requests
    assert f"ended: {html.escape(session.ending)}" in s.header.value
    s.reset_button.click()
    assert s.call_count == 0 and not s.step_button.disabled


def test_the_stepper_shows_the_compaction_step_and_draws_the_session_plot():
    s = ReplayStepper(str(FIXTURES / "2.1.197" / "context_window_full.jsonl"), plot="session")
    for _ in range(4):
        s.step_button.click()
    assert s.call_count == 4
    assert re.search(r'agentlab-call-latest" data-call="4"', s.transcript_pane.value)
    assert "After call 4: row 4 · context_compact" in s.decision_pane.value
    assert bytes(s.plot_image.value).startswith(b"\x89PNG")
    assert s.plot_picker.value == "session"
    assert "Claude Code 2.1.197 session" in s.header.value
    assert "token counts as Claude Code wrote them" in s.header.value
    assert repr(s) == "ReplayStepper(claude-code 2.1.197 session, 6 call(s))"
    s.run_button.click()
    assert 'data-subtype="success"' in s.result_pane.value


def test_the_session_plots_read_a_transcript():
    from agentlab.sessions.trace import session_to_trace

    trace = session_to_trace(read_fixture("2.1.332", "context_window_full"))
    run = plots.read_run(trace)
    assert [c.stop_reason for c in run.calls][3] == "model_context_window_exceeded"
    assert len(run.compactions) == 1 and run.result is not None and run.result.compactions == 1
    for draw in (plots.context_fill, plots.recovery_attempts, plots.compaction_bars, plots.cumulative_cost,
                 plots.session_overview):
        fig = draw(trace)
        assert plots.to_png(fig).startswith(b"\x89PNG")
    bars = plots.compaction_bars(trace).axes[0]
    heights = [p.get_height() for p in bars.patches]
    assert heights[0] > 200_000 and heights[1] < 3_000    # Claude Code's preTokens and postTokens


def test_an_agentlab_run_saved_as_a_trace_replays_with_its_failed_calls(tmp_path):
    from agentlab.lab import scenario_loop

    path = tmp_path / "my_run.jsonl"
    loop = scenario_loop("api_errors", trace=str(path))
    loop.run()
    for source in (path, loop, loop.trace):
        s = ReplayStepper(source, show_plots=False)
        assert s.call_count == 0
        s.step_button.click()
        assert s.call_count == 1 and "529" in s.transcript_pane.value   # the failed first call is a step
        s.run_button.click()
        assert s.call_count == 4 and s.done
        header = html.unescape(s.header.value)
        assert "agentlab run" in header and load_scenario("api_errors").model in header
        assert "4 model call(s), 3 failed" in header
    assert repr(ReplayStepper(path)) == "ReplayStepper(agentlab run: my_run.jsonl, 4 call(s))"
    assert "session" in dict(ReplayStepper(path).plot_picker.options).values()


def test_the_display_text_of_a_replay_says_what_it_steps():
    s = ReplayStepper(FIXTURES / "2.1.332" / "context_window_full.jsonl", show_plots=False)
    assert s._repr_mimebundle_()["text/plain"] == (
        "[the replay stepper on a Claude Code 2.1.332 session of 6 call(s): an interactive widget, drawn when "
        "this cell runs in JupyterLab or Jupyter Notebook]")


def test_a_sessions_window_is_its_models_from_the_model_table():
    from agentlab.backend.models import model_limits
    from agentlab.sessions.trace import session_to_trace

    session = read_fixture("2.1.332", "context_window_full")
    trace = session_to_trace(session)
    window = model_limits(session.calls[0].model).context_window
    assert window == 1_000_000
    windows = {e.data.get("context_window") for e in trace if e.kind in ("start", "request", "response", "compaction")}
    assert windows == {window}
