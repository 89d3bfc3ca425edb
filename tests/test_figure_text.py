"""Every text of every figure the lessons and the steppers show is at least 9 px tall where JupyterLab shows it.

JupyterLab shows a PNG output, or a widget's image, at its own size up to the width of the notebook's output area
and scales a wider one down to that width. In a notebook about 1,000 px wide the output area is about 900 px (the
prompt column and the paddings take the rest), so a text's height on screen is its font size in pixels (the
height of its em square, what CSS calls font-size: points x dpi / 72) times min(1, 900 / the PNG's width).
Each figure is drawn as a lesson or a stepper draws it, and every Text artist it drew is measured.
"""

from __future__ import annotations

from functools import cache

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from agentlab.core.paths import data_dir
from agentlab.lab import scenario_loop
from agentlab.ui import plots
from agentlab.ui.widgets import PLOT_DPI

OUTPUT_AREA_PX = 900
MIN_PX = 9.0
SCENARIOS = ("tour", "context_window_full")   # every panel of the dashboard; a compaction, a failed call


@cache
def events(scenario: str) -> tuple:
    loop = scenario_loop(scenario)
    loop.run()
    return tuple(loop.trace.events)


@cache
def session_trace():
    from agentlab.sessions.transcript import read_session
    from agentlab.sessions.trace import session_to_trace

    return session_to_trace(read_session(data_dir() / "sessions/claude-code/2.1.332/context_window_full.jsonl"))


def too_small(fig) -> tuple[int, list[str]]:
    """The PNG's width, and each drawn text under MIN_PX on screen with its size there."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    width = fig.bbox.width   # pixels: the figure's inches times its dpi
    scale = min(1.0, OUTPUT_AREA_PX / width)
    small = []
    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text().strip():
            continue
        box = text.get_window_extent()
        if box.x1 < 0 or box.x0 > fig.bbox.x1 or box.y1 < 0 or box.y0 > fig.bbox.y1:
            continue   # not on the figure (a tick label outside the view is never drawn)
        px = text.get_fontsize() * fig.dpi / 72 * scale
        if px < MIN_PX:
            small.append(f"{text.get_text()[:40]!r}: {px:.1f} px")
    return round(width), small


def assert_readable(fig, what: str) -> None:
    width, small = too_small(fig)
    assert not small, (f"{what} ({width} px wide, shown at {min(width, OUTPUT_AREA_PX)} px): {len(small)} texts "
                       f"under {MIN_PX} px: {', '.join(small[:6])}")


LESSON_FIGURES = {   # as the lessons call them, at the figures' own dpi
    "decision_path": plots.decision_path, "recovery_attempts": plots.recovery_attempts,
    "context_fill": plots.context_fill, "compaction_bars": plots.compaction_bars, "token_usage": plots.token_usage,
    "dashboard": plots.dashboard, "cost_overview": plots.cost_overview,
}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", LESSON_FIGURES)
def test_every_lesson_figure_is_readable_at_the_notebooks_width(name, scenario):
    assert_readable(LESSON_FIGURES[name](list(events(scenario))), f"{name} of {scenario}")


@pytest.mark.parametrize("scenario", [*SCENARIOS, None])
@pytest.mark.parametrize("kind", sorted(plots.PLOTS))
def test_every_stepper_plot_is_readable_as_the_stepper_shows_it(kind, scenario):
    source = session_trace() if kind == "session" and scenario is None else list(events(scenario) if scenario else [])
    fig = plots.LiveFigure(kind, dpi=PLOT_DPI[kind]).draw(source)
    assert_readable(fig, f"the stepper's {kind} plot of {scenario or 'a run before its first call'}")


def test_the_side_by_side_paths_and_a_session_are_readable():
    assert_readable(plots.compare_paths("max_tokens_give_up"), "compare_paths")
    assert_readable(plots.session_overview(session_trace()), "session_overview")


def test_the_grade_heatmap_is_readable():
    from agentlab_grade import grade_heatmap

    from agentlab.exercises.lesson12 import report_cards

    assert_readable(grade_heatmap(report_cards()), "the grade heatmap of the recorded clients")


def test_the_measure_fails_a_figure_too_wide_for_its_fonts():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 3), dpi=100)   # 1,500 px shown at 900: a 9-point text is 7.5 px
    fig.text(0.1, 0.5, "model call", fontsize=9)
    width, small = too_small(fig)
    assert width == 1500 and small == ["'model call': 7.5 px"]
