"""Plots: every scenario renders, PNGs are written and repeatable, odd traces (empty, error-only) do not crash."""

from __future__ import annotations

import pandas as pd
import pytest

from agentlab.backend.models import model_limits
from agentlab.backend.scenario import load_scenario, parse_scenario, scenario_names
from agentlab.core.hooks import Hooks
from agentlab.core.trace import Trace, events_to_frame
from agentlab.core.transitions import PROMPT_TOO_LONG_SIZES, ROWS
from agentlab.lab import scenario_loop
from agentlab.ui import plots

PNG = b"\x89PNG\r\n\x1a\n"
SINGLE = [plots.token_usage, plots.context_fill, plots.compaction_bars, plots.recovery_attempts,
          plots.decision_path, plots.overview]
FUNCTIONS = [*SINGLE, plots.dashboard]
# One scenario for each kind of run: tools and most branches, compaction (reactive and by a 400),
# give-ups at a limit, retries and a fallback, an error with no message at all. (Every scenario goes
# through every plot in the dashboard test.)
SAMPLE = ["tour", "context_window_full", "prompt_too_long", "max_tokens_give_up", "stop_hook_cap",
          "overloaded_fallback", "api_error_fatal", "max_turns", "door_code"]
SAMPLE_PNG = ["tour", "prompt_too_long", "stop_hook_cap", "api_error_fatal"]


def finished(name: str):
    loop = scenario_loop(name)
    loop.run()
    return loop


@pytest.fixture(scope="module")
def frames():
    return {name: finished(name).trace.to_frame() for name in SAMPLE}


def axes_text(fig) -> str:
    """Every piece of text on the figure (titles, labels, tick labels, annotations, legends)."""
    parts = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        parts += [ax.get_title(loc="left"), ax.get_xlabel(), ax.get_ylabel()]
        parts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        parts += [t.get_text() for t in ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            parts += [t.get_text() for t in legend.get_texts()]
    return "\n".join(parts)


@pytest.fixture(scope="module")
def live_dashboard():
    """One dashboard figure drawn again for each scenario, as the stepper does (the same plot function; that
    it gives a new figure's pixels is tests/test_live_figure.py's job)."""
    return plots.LiveFigure("dashboard", dpi=30)


@pytest.mark.parametrize("name", scenario_names())
def test_every_scenario_renders_in_the_dashboard(name, live_dashboard):
    # The dashboard draws every plot (tokens, context, budget, path, compactions, recoveries) into one figure.
    loop = finished(name)
    png = live_dashboard.render(loop.trace.to_frame())
    assert png.startswith(PNG)
    assert f"Run ended: {loop.result.subtype}" in axes_text(live_dashboard.figure)


@pytest.mark.parametrize("function", SINGLE, ids=lambda f: f.__name__)
def test_each_plot_writes_a_png_for_each_kind_of_run(function, frames, tmp_path):
    for name in SAMPLE_PNG:
        path = tmp_path / f"{function.__name__}-{name}.png"
        fig = function(frames[name], save=path, dpi=30)
        assert fig.axes, f"{function.__name__}({name}) drew nothing"
        assert path.read_bytes().startswith(PNG)


def test_same_trace_same_png(frames):
    frame = frames["tour"]
    first = plots.to_png(plots.dashboard(frame, dpi=40))
    again = plots.to_png(plots.dashboard(finished("tour").trace.to_frame(), dpi=40))
    assert first == again


def test_accepts_a_frame_a_trace_or_a_loop():
    loop = finished("tool_use")
    pngs = {plots.to_png(plots.decision_path(source, dpi=40))
            for source in (loop, loop.trace, loop.trace.to_frame(), loop.trace.events)}
    assert len(pngs) == 1
    with pytest.raises(TypeError, match="trace DataFrame"):
        plots.token_usage(42)


def test_save_creates_missing_directories(tmp_path):
    path = tmp_path / "a" / "b" / "tokens.png"
    plots.token_usage(finished("end_turn"), save=path, dpi=30)
    assert path.read_bytes().startswith(PNG)


def test_the_figure_shows_itself_as_png_without_pyplot():
    fig = plots.token_usage(finished("end_turn"), dpi=30)
    assert fig._repr_png_().startswith(PNG)


@pytest.mark.parametrize("function", SINGLE, ids=lambda f: f.__name__)
def test_empty_frames_draw_a_note(function):
    for frame in (events_to_frame([]), pd.DataFrame(), Trace().to_frame()):   # no events; not even columns
        assert plots.to_png(function(frame, dpi=30)).startswith(PNG)


def test_empty_frame_says_so():
    text = axes_text(plots.dashboard(pd.DataFrame(), dpi=30))
    assert "no model calls in this run" in text
    assert "no decision taken yet" in text
    # panels with nothing to show are left out, not drawn empty
    assert "no compaction in this run" not in text and plots.RECOVERY_HEADING not in text


def titles(fig) -> list[str]:
    return [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]


def test_the_dashboard_leaves_out_panels_with_nothing_to_show(frames):
    tour = titles(plots.dashboard(frames["tour"], dpi=30))
    # the tour has retries, an escalation, a pause and a Stop-hook block, but no compaction
    assert "History size before and after each compaction" not in tour
    assert "Recovery budget used" not in tour    # the recovery panels below say the same
    assert {"API retries and fallbacks", "max_tokens: escalations and continuations", "pause_turn continuations",
            "Stop-hook blocks"} <= set(tour)
    assert "compactions" not in tour and "model turns" not in tour
    given_up = titles(plots.dashboard(frames["max_tokens_give_up"], dpi=30))
    assert [t for t in given_up if t in {c.title for c in plots.COUNTERS}] == [
        "max_tokens: escalations and continuations"]
    compacted = titles(plots.dashboard(frames["door_code"], dpi=30))
    assert "History before / after each compaction" in compacted and "compactions" in compacted
    capped = titles(plots.dashboard(frames["max_turns"], dpi=30))
    assert "model turns" in capped   # max_turns set: the turns count against it


def test_the_dashboard_is_readable_at_the_size_the_stepper_shows_it(frames):
    from agentlab.ui.widgets import PLOT_DPI

    fig = plots.dashboard(frames["tour"])
    width_px = fig.get_size_inches()[0] * PLOT_DPI["dashboard"]
    assert width_px <= 1000                        # fits a notebook cell without being scaled down
    smallest = min(t.get_fontsize() for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels())
    assert smallest * PLOT_DPI["dashboard"] / 72 >= 7.5   # pixels: the smallest tick label stays legible


def test_context_fill_shows_an_overflow_on_a_linear_scale(frames):
    fig = plots.context_fill(frames["door_code"], dpi=30)
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    run = plots.read_run(frames["door_code"])
    refused = [c for c in run.calls if c.error_status == 400]
    assert len(refused) == 1
    size, window = (int(x) for x in PROMPT_TOO_LONG_SIZES.search(refused[0].error_message).groups())
    assert window == run.context_window == 2600 and size > window
    low, high = ax.get_ylim()
    assert low == 0 and high > size             # the refused request is inside the plot, above the window line
    text = axes_text(fig)
    assert f"{size:,} > {window:,}" in text and "context window (2,600)" in text


def test_a_run_stopped_before_any_call():
    # A UserPromptSubmit hook that stops the prompt: a start, a transition and a result, zero model calls.
    loop = scenario_loop("end_turn", hooks=_stop_prompt())
    loop.run()
    assert loop.result.requests == 0
    frame = loop.trace.to_frame()
    assert plots.read_run(frame).calls == []
    text = axes_text(plots.dashboard(frame, dpi=30))
    assert "Run ended: error_during_execution" in text and "no model calls in this run" in text
    assert "end: error_during_execution" in text


def test_error_only_run(frames):
    run = plots.read_run(frames["api_error_fatal"])
    assert [(c.n, c.answered, c.error_status) for c in run.calls] == [(1, False, 401)]
    text = axes_text(plots.token_usage(frames["api_error_fatal"], dpi=30))
    assert "HTTP 401" in text and "no call used any tokens" in text


def test_a_run_in_progress_is_labelled_so():
    loop = scenario_loop("tour")
    loop.step()
    loop.step()
    assert "Run in progress: 2 model call(s)" in axes_text(plots.dashboard(loop, dpi=30))


def test_no_compaction_note_and_compaction_bars(frames):
    assert "no compaction in this run" in axes_text(plots.compaction_bars(frames["tour"], dpi=30))
    text = axes_text(plots.compaction_bars(frames["prompt_too_long"], dpi=30))
    assert "summarize" in text and "(prompt_too_long)" in text


def test_token_usage_draws_the_window_only_when_it_matters(frames):
    near = axes_text(plots.token_usage(frames["context_window_full"], dpi=30))
    far = axes_text(plots.token_usage(frames["tour"], dpi=30))
    # the window of the model each scenario asks for (data/models.yaml), as the plot labels it
    window = {name: model_limits(load_scenario(name).model).context_window for name in ("context_window_full", "tour")}
    assert f"context window ({plots._tokens(window['context_window_full'])})" in near
    assert f"context window: {window['tour']:,} tokens, far above this scale" in far
    assert "context window (" not in far   # no window line


def test_decision_path_has_a_row_for_every_branch_and_a_dot_per_decision(frames):
    fig = plots.decision_path(frames["tour"], dpi=30)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert [label.split()[-1] for label in labels] == [branch for _, branch, _ in ROWS]
    dots = sum(len(c.get_offsets()) for c in ax.collections)
    transitions = (frames["tour"].kind == "transition").sum()
    assert dots == transitions
    assert "end: success" in axes_text(fig)


def test_recoveries_count_against_their_limits(frames):
    run = plots.read_run(frames["max_tokens_give_up"])
    counts = {(c.title, series.label): len(plots._occurrences(run, series.what)) for c in plots.COUNTERS
              for series in c.series}
    assert counts["max_tokens: escalations and continuations", "escalations"] == 1
    assert counts["max_tokens: escalations and continuations", "continuations"] == 3
    assert counts["pause_turn continuations", "continuations"] == 0
    text = axes_text(plots.recovery_attempts(frames["max_tokens_give_up"], dpi=30))
    assert "escalations: limit per run = 1" in text and "continuations: limit in a row = 3" in text
    assert "continuations in a row (3 in all)" in text
    assert "the run ended here" in text
    assert "pause_turn continuations" not in text   # a counter the run never moved gets no panel
    capped = axes_text(plots.recovery_attempts(frames["stop_hook_cap"], dpi=30))
    assert "blocks fed back (8)" in capped and "cap per run = 8" in capped and "the run ended here" in capped


def test_two_rounds_of_cut_offs_are_drawn_in_a_row_under_their_limit():
    """Cut twice, a tool call, cut twice again: four continuations in all, never more than two in a row, and
    the run succeeds. The panel draws the count in a row (at most 2) under the limit in a row (3), not the
    total (4) above it."""
    cut = {"content": [{"type": "text", "text": "part of the answer"}], "stop_reason": "max_tokens"}
    steps = [cut, cut, cut,
             {"content": [{"type": "tool_use", "name": "calculator", "input": {"expression": "2 + 2"}}],
              "stop_reason": "tool_use"},
             cut, cut, {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}]
    scenario = parse_scenario({"name": "two_rounds", "description": "two rounds of cut-offs", "tools": "demo",
                               "steps": steps}, "two_rounds.yaml")
    loop = scenario_loop(scenario)
    result = loop.run()
    assert (result.subtype, result.escalations, result.continuations) == ("success", 1, 4)
    in_a_row = [e.payload.continuations_in_a_row for e in loop.trace.of_kind("transition")]
    assert max(c for c in in_a_row if c is not None) == 2 < loop.limits.max_continuations
    fig = plots.recovery_attempts(loop, dpi=30)
    text = axes_text(fig)
    assert "continuations in a row (4 in all)" in text and "continuations: limit in a row = 3" in text
    panel = next(ax for ax in fig.axes if ax.get_title(loc="left") == "max_tokens: escalations and continuations")
    lines = {line.get_label(): list(line.get_ydata()) for line in panel.get_lines()}
    continued = lines["continuations in a row (4 in all)"]
    assert max(continued) == 2 and continued.count(0) >= 2     # up to 2, back to 0 after the tool call, up again
    assert lines["continuations: limit in a row = 3"] == [3, 3] and lines["escalations (1)"][-1] == 1


def test_a_run_without_recoveries_says_so_in_one_line():
    loop = scenario_loop("end_turn")
    loop.run()
    text = axes_text(plots.recovery_attempts(loop, dpi=30))
    assert plots.NO_RECOVERIES in text


def test_fallback_is_named_on_the_path(frames):
    assert "→ claude-haiku-4-5" in axes_text(plots.decision_path(frames["overloaded_fallback"], dpi=30))


def test_inline_scenario_with_server_tools():
    sc = parse_scenario({"description": "server tool", "prompt": "Find a park.", "steps": [
        {"content": [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                      "input": {"query": "park"}}], "stop_reason": "pause_turn"},
        {"content": [{"type": "text", "text": "Frognerparken."}], "stop_reason": "end_turn"}]}, "inline")
    loop = scenario_loop(sc)
    loop.run()
    assert "pause_turn" in axes_text(plots.decision_path(loop, dpi=30))


def _stop_prompt() -> Hooks:
    """Hooks whose UserPromptSubmit hook says continue: false."""
    hooks = Hooks()
    hooks.on("UserPromptSubmit", lambda payload: {"continue": False, "stopReason": "prompt rejected in a test"})
    return hooks


def test_counts_in_a_row_rise_and_start_over_as_the_loop_counts_them():
    """Retries in a row climb with each failed attempt and are 0 once a call succeeds; a compaction counts one
    until a call answers; pauses start over after the reply that finishes the turn."""
    def in_a_row(name: str, title: str) -> list[tuple[int, int]]:
        loop = scenario_loop(name)
        loop.run()
        series = next(c for c in plots.COUNTERS if c.title == title).series[0]
        return plots.in_a_row_after(plots.read_run(loop), series)

    assert in_a_row("api_errors", "API retries and fallbacks") == [(1, 1), (2, 2), (3, 3), (4, 0)]
    assert in_a_row("prompt_too_long", "compactions") == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 0)]
    assert in_a_row("pause_turn", "pause_turn continuations") == [(1, 1), (2, 0)]


def test_the_recovery_budget_shows_counts_in_a_row_where_they_stand_now():
    loop = scenario_loop("max_tokens_give_up")
    loop.run()
    text = axes_text(plots.overview(loop, dpi=30))
    assert "max_tokens continuations in a row" in text and "3 / 3" in text and "max_tokens escalations" in text
    loop = scenario_loop("api_errors")
    loop.run()
    text = axes_text(plots.overview(loop, dpi=30))
    assert "API retries in a row" in text and "0 / 5" in text      # 3 retries, then a call that succeeded


def _text_boxes(fig):
    """(text, its box in display pixels, the axes it belongs to) for every visible text of the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        texts = [ax.title, ax._left_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):   # the tick labels that are drawn: those inside the view
            low, high = sorted(axis.get_view_interval())
            slack = (high - low) * 1e-9
            texts += [tick.label1 for tick in axis.get_major_ticks() if low - slack <= tick.get_loc() <= high + slack]
        for t in texts:
            if t.get_visible() and t.get_text().strip():
                yield t.get_text(), t.get_window_extent(renderer), ax


@pytest.mark.parametrize("function", [plots.overview, plots.dashboard])
@pytest.mark.parametrize("name", ["tour", "max_tokens_give_up", "stop_hook_cap", "door_code"])
def test_no_text_is_cut_off_or_drawn_over_another_panel(function, name, frames):
    fig = function(frames[name])
    boxes = list(_text_boxes(fig))
    width, height = fig.canvas.get_width_height()
    assert len(boxes) > 20
    for text, box, ax in boxes:
        assert box.x0 >= -1 and box.y0 >= -1 and box.x1 <= width + 1 and box.y1 <= height + 1, \
            f"{function.__name__}({name}): {text!r} runs off the figure: {box}"
        for other in fig.axes:
            if other is not ax and other.get_visible() and other.axison:
                inside = other.get_window_extent()
                overlap = min(box.x1, inside.x1) - max(box.x0, inside.x0)
                vertical = min(box.y1, inside.y1) - max(box.y0, inside.y0)
                assert overlap <= 1 or vertical <= 1, \
                    f"{function.__name__}({name}): {text!r} is drawn over another panel"
