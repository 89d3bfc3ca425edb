"""The stepper's figure, drawn again at every Step: the same pixels as a figure drawn afresh, labels never stale.

``plots.LiveFigure`` draws every Step into the axes of the Step before (emptied; new axes where the layout
changed) on a ``canvas.CachingCanvas`` that keeps one text cache between Steps, so each distinct text is
rasterised once; both through matplotlib's public API only. Neither may change the picture: after any number
of Steps the live figure must give the PNG that a new figure of the same kind and dpi gives, drawn on a canvas
with an empty cache, and a text that changed must be drawn as it is now.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from agentlab.lab import scenario_loop
from agentlab.ui import plots
from agentlab.ui.canvas import CachingCanvas, TextCache
from agentlab.ui.widgets import PLOT_DPI, ReplayStepper, Stepper, live_figure


def pixels(picture: bytes | np.ndarray) -> np.ndarray:
    if isinstance(picture, np.ndarray):
        return picture
    return np.asarray(Image.open(io.BytesIO(picture)).convert("RGB"))


def fresh_pixels(kind: str, events, dpi: int) -> np.ndarray:
    """The plot drawn the long way: a new figure, a new canvas, nothing cached. Its pixels are read from the
    canvas as ``png_of_canvas`` reads them (RGBA, alpha dropped), without the PNG round trip, which is
    lossless and would only add an encoding and a decoding to every Step of the comparison."""
    fig = plots.PLOTS[kind](list(events), dpi=dpi)
    canvas = CachingCanvas(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def assert_same_picture(live: bytes | np.ndarray, fresh: bytes | np.ndarray, where: str) -> None:
    a, b = pixels(live), pixels(fresh)
    assert a.shape == b.shape, f"{where}: size {a.shape} != {b.shape}"
    differing = int((a != b).any(axis=2).sum())
    assert differing == 0, f"{where}: {differing} pixels differ from a fresh drawing"


def test_the_canvas_pixels_are_the_pixels_of_the_png():
    loop = scenario_loop("tour")
    loop.step()
    fig = plots.PLOTS["dashboard"](list(loop.trace.events), dpi=PLOT_DPI["dashboard"])
    CachingCanvas(fig)
    png = plots.png_of_canvas(fig)
    from_canvas = np.asarray(fig.canvas.buffer_rgba())[..., :3]
    assert np.array_equal(pixels(png), from_canvas)


# tour: the layout of the dashboard changes on the way (recovery panels appear, a second row of them);
# context_window_full: a compaction panel appears, a call fails; stop_hook_cap: the run ends at a limit.
@pytest.mark.parametrize("kind", ["overview", "dashboard"])
@pytest.mark.parametrize("scenario", ["tour", "context_window_full", "stop_hook_cap"])
def test_the_live_figure_draws_what_a_new_figure_draws_after_every_step(kind, scenario):
    loop = scenario_loop(scenario)
    dpi = PLOT_DPI[kind]
    live = plots.LiveFigure(kind, dpi=dpi)
    steps = 0
    while True:
        assert_same_picture(live.render(list(loop.trace.events)), fresh_pixels(kind, loop.trace.events, dpi),
                            f"{kind} of {scenario} after {steps} step(s)")
        if loop.done:
            break
        loop.step()
        steps += 1
    assert steps >= 3
    assert live.text_cache.hits > live.text_cache.misses   # the labels did come from the cache


@pytest.mark.parametrize("kind", [k for k in plots.PLOTS if k not in ("overview", "dashboard")])
def test_every_other_plot_kind_draws_the_same_live_and_fresh(kind):
    loop = scenario_loop("tour")
    live = plots.LiveFigure(kind, dpi=60)
    for steps in range(4):
        assert_same_picture(live.render(list(loop.trace.events)), fresh_pixels(kind, loop.trace.events, 60),
                            f"{kind} after {steps} step(s)")
        loop.step()


def test_the_live_figure_keeps_its_text_cache_between_steps():
    loop = scenario_loop("tour")
    live = plots.LiveFigure("overview", dpi=72)
    live.render(list(loop.trace.events))
    loop.step()
    live.render(list(loop.trace.events))
    hits, misses = live.text_cache.hits, live.text_cache.misses
    loop.step()
    live.render(list(loop.trace.events))
    new, again = live.text_cache.misses - misses, live.text_cache.hits - hits
    assert new < (new + again) / 5   # of the texts a Step draws, few are new


PUBLIC_ONLY = ["agentlab/ui/plots.py", "agentlab/ui/canvas.py", "agentlab/ui/widgets.py",
               "agentlab-grade/agentlab_grade/heatmap.py"]


def test_the_figures_use_only_matplotlibs_public_api():
    """A private name (``_x``) read or written on an object is one agentlab defines itself, never matplotlib's."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    ours: set[str] = set()
    for path in [*(root / "agentlab").rglob("*.py"), *(root / "agentlab-grade").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ours.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id == "self":
                ours.add(node.attr)
    foreign = []
    for name in PUBLIC_ONLY:
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            private = None
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                private = node.attr
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("matplotlib"):
                private = next((a.name for a in node.names if a.name.startswith("_")), None)
            if private is not None and (private not in ours or isinstance(node, ast.ImportFrom)):
                foreign.append(f"{name}:{node.lineno} {private}")
    assert foreign == []


def test_the_live_figure_starts_over_after_a_failed_drawing():
    live = plots.LiveFigure("overview", dpi=72)
    with pytest.raises(TypeError):
        live.render(object())
    loop = scenario_loop("tour")
    loop.step()
    assert_same_picture(live.render(list(loop.trace.events)), fresh_pixels("overview", loop.trace.events, 72),
                        "after a failure")


def text_figure(text: str, **props) -> Figure:
    fig = Figure(figsize=(2, 1), dpi=72)
    fig.patch.set_facecolor("white")
    fig.text(0.1, 0.4, text, **props)
    return fig


def test_a_changed_text_is_rasterised_again_never_taken_from_the_cache():
    cache = TextCache()
    fig = text_figure("1,200 tokens", fontsize=9)
    CachingCanvas(fig, cache)
    first = plots.png_of_canvas(fig)
    label = fig.texts[0]
    for change, expected in ((lambda: label.set_text("1,400 tokens"), text_figure("1,400 tokens", fontsize=9)),
                             (lambda: label.set_fontsize(11), text_figure("1,400 tokens", fontsize=11)),
                             (lambda: label.set_fontweight("bold"),
                              text_figure("1,400 tokens", fontsize=11, fontweight="bold")),
                             (lambda: label.set_color("#C44E52"),
                              text_figure("1,400 tokens", fontsize=11, fontweight="bold", color="#C44E52")),
                             (lambda: label.set_rotation(45),
                              text_figure("1,400 tokens", fontsize=11, fontweight="bold", color="#C44E52",
                                          rotation=45))):
        misses = cache.misses
        change()
        now = plots.png_of_canvas(fig)
        CachingCanvas(expected)
        assert_same_picture(now, plots.png_of_canvas(expected), f"after changing the label to {label}")
        assert now != first
        if label.get_rotation() == 0 and label.get_color() == "black":
            assert cache.misses > misses   # a new string or font: drawn afresh
    # the first text again: from the cache, and as it was
    label.set_text("1,200 tokens")
    label.set(fontsize=9, fontweight="normal", color="black", rotation=0)
    misses = cache.misses
    assert_same_picture(plots.png_of_canvas(fig), first, "back to the first label")
    assert cache.misses == misses


def test_the_cache_is_per_canvas_and_bounded():
    cache = TextCache(max_entries=3)
    fig = Figure(figsize=(2, 2), dpi=50)
    for i in range(5):
        fig.text(0.1, 0.1 + i * 0.15, f"label {i}")
    CachingCanvas(fig, cache)
    plots.png_of_canvas(fig)
    assert len(cache.bitmaps) <= 3 and len(cache.metrics) <= 3
    assert CachingCanvas(Figure()).text_cache is not cache


def test_the_stepper_shows_the_live_figure():
    stepper = Stepper("tour", plot="dashboard")
    for _ in range(3):
        stepper.step_button.click()
    shown = stepper.plot_image.value
    assert_same_picture(shown, fresh_pixels("dashboard", stepper.loop.trace.events, PLOT_DPI["dashboard"]),
                        "the stepper's image")
    assert live_figure("dashboard", PLOT_DPI["dashboard"]).figure is not None


def test_the_live_figure_hides_the_panels_a_drawing_leaves_out_and_shows_them_again():
    dpi = PLOT_DPI["dashboard"]
    live = plots.LiveFigure("dashboard", dpi=dpi)
    whole, first = scenario_loop("tour"), scenario_loop("tour")
    whole.run()
    first.step()
    for events, where in ((whole.trace.events, "the end"), (first.trace.events, "a first Step after the end"),
                          (whole.trace.events, "the end again")):
        picture = live.render(list(events))
        assert_same_picture(picture, fresh_pixels("dashboard", events, dpi), f"tour: {where}")
        if where == "the end":
            panels = list(live.figure.axes)
    shown = [ax for ax in live.figure.axes if ax.get_visible()]
    assert shown == panels   # the recovery panels hidden at the first Step are the ones shown again, in order
    assert len(panels) > len(plots.PLOTS["dashboard"](list(first.trace.events)).axes)


def test_a_new_stepper_draws_into_the_figure_the_last_stepper_left():
    dpi = PLOT_DPI["overview"]
    first = Stepper("tour")
    first.run_button.click()
    left = live_figure("overview", dpi).figure
    axes = list(left.axes)
    second = Stepper("stop_hook_cap")
    second.step_button.click()
    assert live_figure("overview", dpi).figure is left and left.axes[:1] == axes[:1]   # kept, not new
    assert_same_picture(second.plot_image.value, fresh_pixels("overview", second.loop.trace.events, dpi),
                        "the first Step of the second stepper")
    first.reset_button.click()
    first.step_button.click()   # the first stepper again, after the second drew into the figure
    assert_same_picture(first.plot_image.value, fresh_pixels("overview", first.loop.trace.events, dpi),
                        "the first stepper's Step after the second's")


def test_a_run_before_its_first_call_shows_one_empty_plot_for_every_scenario(monkeypatch):
    original_render = plots.LiveFigure.render
    stepper = Stepper("tour", plot="dashboard")
    dpi = PLOT_DPI["dashboard"]
    empty = stepper.plot_image.value
    assert_same_picture(empty, fresh_pixels("dashboard", [], dpi), "before the first call")
    stepper.run_button.click()
    assert stepper.plot_image.value != empty
    stepper.select("max_tokens_give_up")
    assert stepper.plot_image.value == empty   # the same bytes: shown again, not drawn again
    stepper.step_button.click()
    assert_same_picture(stepper.plot_image.value, fresh_pixels("dashboard", stepper.loop.trace.events, dpi),
                        "the first Step of the next scenario")
    stepper.reset_button.click()
    assert stepper.plot_image.value == empty
    replay = ReplayStepper("max_tokens_give_up")   # the decision path, at 72 dpi
    start = replay.plot_image.value
    assert_same_picture(start, fresh_pixels("path", [], 72), "a replay before its first call")
    replay.run_button.click()
    assert replay.plot_image.value != start
    renders = []
    monkeypatch.setattr(plots.LiveFigure, "render",
                        lambda self, source, **kw: renders.append(len(source)) or original_render(self, source, **kw))
    replay.reset_button.click()
    stepper.select("tour")
    assert replay.plot_image.value == start and stepper.plot_image.value == empty   # the same bytes ...
    assert renders == []                                                               # ... not drawn again


# overview: one size always, so every Step draws into the axes of the Step before, and a new run's first
# picture (no call yet) into the axes of the last run's end; dashboard: its height changes with the panels.
@pytest.mark.parametrize("kind,scenarios", [("overview", ("context_window_full", "tour")),
                                            ("dashboard", ("stop_hook_cap", "context_window_full"))])
def test_the_live_figure_keeps_its_axes_and_a_new_run_in_them_draws_as_a_new_figure(kind, scenarios):
    dpi = PLOT_DPI[kind]
    live = plots.LiveFigure(kind, dpi=dpi)
    kept = 0
    for scenario in scenarios:
        loop = scenario_loop(scenario)
        for steps in range(4):
            before = (live.figure, list(live.figure.axes) if live.figure else [])
            picture = live.render(list(loop.trace.events))
            if live.figure is before[0]:
                assert live.figure.axes[:1] == before[1][:1]   # the same axes, not new ones
                kept += 1
            assert_same_picture(picture, fresh_pixels(kind, loop.trace.events, dpi),
                                f"{kind}: {scenario} after {steps} step(s), following {scenarios[0]}")
            if loop.done:
                break
            loop.step()
    assert kept >= 3
