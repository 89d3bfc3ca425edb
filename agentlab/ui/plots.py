"""Plots of a run, read from the trace: tokens per call, context fill, compactions, recoveries, the decision path.

Every function takes the trace DataFrame (``trace.to_frame()``), a ``Trace`` or an ``AgentLoop``, returns a
matplotlib Figure and, given ``save=PATH``, writes it as a PNG. Nothing here needs pyplot, a display or a
live API: figures are drawn by Agg at a fixed size, dpi and layout, so a scenario always gives the
same picture. The returned figure shows itself as a PNG in any notebook front end.
"""

from __future__ import annotations

import functools
import io
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from ..core.extras import missing_extra

try:  # the notebook stack: the lab extra
    import matplotlib
    import numpy as np
    from matplotlib.backends.backend_agg import get_hinting_flag
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties, findfont, get_font
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, PathPatch
    from matplotlib.path import Path as MplPath
    from matplotlib.ticker import (AutoLocator, FuncFormatter, MaxNLocator, NullFormatter, NullLocator,
                                   ScalarFormatter)
    from matplotlib.transforms import ScaledTranslation
except ImportError as _exc:
    raise missing_extra(_exc, "agentlab.ui.plots (the plots)") from None

from ..core.events import (
    PAYLOADS,
    ApiError,
    CompactionEvent,
    Fallback,
    Payload,
    Request,
    Response,
    ResultEvent,
    RetryEvent,
    Start,
    TransitionEvent,
    payload_from_data,
)
from ..core.transitions import PROMPT_TOO_LONG_SIZES, ROWS, Branch, EndBranch
from ..core.trace import frame_rows

DPI = 100
INPUT_COLOR = "#4C72B0"
OUTPUT_COLOR = "#DD8452"
CACHE_COLOR = "#8C8C8C"
WINDOW_COLOR = "#C44E52"
ERROR_COLOR = "#C44E52"
OK_COLOR = "#55A868"
STEP_COLOR = "#4C72B0"
COMPACTION_COLOR = "#8172B3"
LIMIT_COLOR = "#C44E52"

# What a learner reads: no text under 9 points, and no figure wider than 12.4 inches. JupyterLab shows a PNG at
# its own size up to the width of the notebook's output area (about 900 px in a notebook 1,000 px wide) and
# scales a wider one down to it: at 100 dpi (the lessons) a 12.4-inch figure is 1,240 px, shown at 900, so a
# 9-point text is 9 x 100/72 x 900/1240 = 9.1 px tall; the stepper draws at 72 dpi, one pixel a point
# (tests/test_figure_text.py measures every text of every figure).
MIN_FONT = 9
OVERVIEW_WIDTH = 12.4

TERMINAL_TYPE = "End"   # the Transition type that ends a run

class PlotFigure(Figure):
    """A Figure that renders itself as a PNG in a notebook, whether or not pyplot was ever imported.

    ``spare_axes``: axes of earlier drawings of a ``LiveFigure`` (shown in the last one, or hidden since) that
    ``place`` hands out again (emptied) when asked for the same box for the same panel, instead of building
    new ones; ``boxes``: where ``place`` put each axes, in inches from the top-left corner (the same box in a
    figure resized since)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spare_axes: list[Any] = []
        self.boxes: dict[Any, tuple[float, float, float, float]] = {}

    def _repr_png_(self) -> bytes:
        return to_png(self)


# --- reading a run out of the trace -----------------------------------------------------------------------

@dataclass
class Call:
    """One model call as the trace tells it."""

    n: int
    purpose: str = "turn"
    model: str | None = None
    max_tokens: int | None = None
    context_tokens: int | None = None   # the loop's estimate before sending
    input_tokens: int = 0
    output_tokens: int = 0
    cache_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None       # None: no price for the model (or no answer)
    stop_reason: str | None = None
    error_status: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    answered: bool = False


P = TypeVar("P", bound=Payload)


@dataclass(frozen=True)
class At(Generic[P]):
    """An event's typed payload and the number of the model call it came with."""

    call: int
    event: P


@dataclass
class Run:
    """What the plots need from a trace: the calls in plain values, the decisions, compactions, fallbacks and
    result as the typed payloads of their events."""

    calls: list[Call] = field(default_factory=list)
    transitions: list[At[TransitionEvent]] = field(default_factory=list)
    compactions: list[At[CompactionEvent]] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)                  # call number of each retry
    fallbacks: list[At[Fallback]] = field(default_factory=list)
    limits: dict[str, Any] = field(default_factory=dict)
    context_window: int | None = None
    result: ResultEvent | None = None

    @property
    def last_call(self) -> int:
        numbers = [c.n for c in self.calls] + [t.call for t in self.transitions]
        return max(numbers, default=0)

    def count_until(self, items: Iterable[int], call: int) -> int:
        return sum(1 for n in items if n <= call)


def as_frame(source: Any):
    """The trace DataFrame of a DataFrame, a Trace, an AgentLoop (anything with ``.trace``) or a list of Events."""
    import pandas as pd

    from ..core.trace import Trace, events_to_frame

    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, Trace):
        return source.to_frame()
    trace = getattr(source, "trace", None)
    if isinstance(trace, Trace):
        return trace.to_frame()
    if isinstance(source, (list, tuple)):
        return events_to_frame(list(source))
    raise TypeError(f"expected a trace DataFrame, a Trace or an AgentLoop, got {type(source).__name__}")


def _records(frame) -> list[tuple[str, int, dict[str, Any]]]:
    """(kind, call, payload) per event; the payload is the ``data`` column, or the scalar columns without it."""
    if frame is None or len(frame) == 0 or "kind" not in frame.columns:
        return []
    has_data = "data" in frame.columns
    out = []
    for row in frame_rows(frame):
        data = row.get("data") if has_data else None
        if not isinstance(data, dict):
            data = {k: v for k, v in row.items() if k not in ("seq", "kind", "call", "wall_ms", "data")
                    and not _missing(v)}
        out.append((str(row["kind"]), _int(row.get("call")), data))
    return out


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _int(value: Any, default: int = 0) -> int:
    return default if _missing(value) else int(value)


def _source_payloads(source: Any) -> list[tuple[int, Payload]]:
    """(call, typed payload) per event: the Events' own payloads, or those read back from the frame's rows."""
    from ..core.trace import Event, Trace

    events = source
    if not isinstance(source, (list, tuple, Trace)):
        trace = getattr(source, "trace", None)
        events = trace if isinstance(trace, Trace) else None
    if isinstance(events, Trace):
        events = events.events
    if isinstance(events, (list, tuple)) and all(isinstance(e, Event) for e in events):
        return [(int(e.call or 0), e.payload) for e in events]
    return [(n, payload_from_data(kind, data)) for kind, n, data in _records(as_frame(source)) if kind in PAYLOADS]


def _number(value: Any) -> float | None:
    """A number read from a payload (a frame gives NaN for a value the event did not have)."""
    return None if _missing(value) else float(value)


def read_run(source: Any) -> Run:
    """Parse a trace (DataFrame, Trace or AgentLoop) into a Run, reading each event's typed payload."""
    run = Run()
    calls: dict[int, Call] = {}

    def call(n: int) -> Call:
        if n not in calls:
            calls[n] = Call(n)
        return calls[n]

    for n, p in _source_payloads(source):
        match p:
            case Start():
                run.limits = dict(p.limits or {})
                run.context_window = _int(p.context_window, 0) or run.context_window
            case Request():
                c = call(n)
                c.purpose = str(p.purpose or "turn")
                c.model, c.max_tokens = p.model, _int(p.max_tokens, 0) or None
                c.context_tokens = None if _missing(p.context_tokens) else int(p.context_tokens)
                run.context_window = _int(p.context_window, 0) or run.context_window
            case Response():
                c = call(n)
                usage: Mapping[str, Any] = p.usage if isinstance(p.usage, Mapping) else {}
                c.answered = True
                c.purpose = str(p.purpose or c.purpose)
                c.model = p.model or c.model
                c.stop_reason = p.stop_reason
                c.input_tokens = _int(p.input_tokens) or _int(usage.get("input_tokens"))
                c.output_tokens = _int(p.output_tokens) or _int(usage.get("output_tokens"))
                c.cache_read = _int(p.cache_read_input_tokens) or _int(usage.get("cache_read_input_tokens"))
                c.cache_write = _int(p.cache_creation_input_tokens) or _int(usage.get("cache_creation_input_tokens"))
                c.cache_tokens = c.cache_read + c.cache_write
                c.cost_usd = _number(p.cost_usd)
            case ApiError():
                c = call(n)
                c.error_status = None if p.status is None or _missing(p.status) else int(p.status)
                c.error_type = p.error_type
                c.error_message = None if _missing(p.message) else str(p.message)
                if p.purpose:
                    c.purpose = str(p.purpose)
            case TransitionEvent():
                run.transitions.append(At(n, p))
            case CompactionEvent():
                run.compactions.append(At(n, p))
            case RetryEvent():
                run.retries.append(n)
            case Fallback():
                run.fallbacks.append(At(n, p))
            case ResultEvent():
                run.result = p
    run.calls = [calls[n] for n in sorted(calls) if n > 0]
    return run


# --- figures ----------------------------------------------------------------------------------------------

# the figure a LiveFigure drew last, offered to the next new_figure of the same size and dpi (then taken)
_REUSABLE: ContextVar[PlotFigure | None] = ContextVar("reusable_figure", default=None)


def new_figure(width: float, height: float, dpi: int = DPI) -> PlotFigure:
    """A white figure with no layout engine: axes are placed at fixed inches (fast, and always the same).

    Inside ``reusing(figure)``, a figure of the same dpi is that figure, resized, its texts removed and its
    axes kept as spares for ``place``."""
    kept = _REUSABLE.get()
    if kept is not None and kept.dpi == dpi:
        _REUSABLE.set(None)
        if tuple(kept.get_size_inches()) != (width, height):
            kept.set_size_inches(width, height)
        for text in list(kept.texts):
            text.remove()
        kept.spare_axes = list(kept.axes)
        return kept
    fig = PlotFigure(figsize=(width, height), dpi=dpi)
    fig.patch.set_facecolor("white")
    return fig


@contextmanager
def reusing(fig: PlotFigure | None) -> Iterator[None]:
    """Let the next ``new_figure`` of ``fig``'s dpi hand back ``fig`` (resized, emptied) instead of a new
    figure; axes it kept and nobody asked for again are hidden at the end, kept for a later drawing (the
    dashboard's recovery panels come and go with the runs)."""
    token = _REUSABLE.set(fig)
    try:
        yield
    finally:
        _REUSABLE.reset(token)
        if fig is not None:
            hide_spare_axes(fig)


HIDDEN_AXES = 24   # spare axes a LiveFigure keeps hidden at most; the ones hidden longest go first


def hide_spare_axes(fig: PlotFigure) -> None:
    for ax in fig.spare_axes:
        ax.set_visible(False)
    hidden = [ax for ax in fig.axes if not ax.get_visible()]
    for ax in hidden[:max(0, len(hidden) - HIDDEN_AXES)]:
        fig.boxes.pop(ax, None)
        ax.remove()
    fig.spare_axes = []


def empty_axes(ax) -> None:
    """Axes as ``add_axes`` makes them, keeping their ticks (what takes time to build): no artists, no legend,
    titles or labels; the default locators, formatters, limits, spines and grid."""
    for container in list(ax.containers):
        container.remove()
    for group in (ax.lines, ax.patches, ax.texts, ax.collections, ax.images, ax.artists, ax.tables):
        for artist in list(group):
            artist.remove()
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    for loc in ("left", "center", "right"):
        ax.set_title("", loc=loc)
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.set_axis_on()
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(True)
        spine.set_edgecolor(matplotlib.rcParams["axes.edgecolor"])
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(AutoLocator())
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_locator(NullLocator())
        axis.set_minor_formatter(NullFormatter())
    ax.relim()
    ax.set_xlim(0, 1, auto=True)
    ax.set_ylim(0, 1, auto=True)
    ax.set_visible(True)


def place(fig: Figure, left: float, top: float, width: float, height: float, role: str = ""):
    """Axes at a box given in inches from the figure's top-left corner: new ones, or (drawing a LiveFigure
    again) spare axes emptied, when they are at that box for the same ``role``. Either way they are drawn
    after every axes placed before them, as in a new figure."""
    fig_w, fig_h = fig.get_size_inches()
    box = (left / fig_w, 1 - (top + height) / fig_h, width / fig_w, height / fig_h)
    inches = (left, top, width, height)
    if not isinstance(fig, PlotFigure):
        return fig.add_axes(box, label=role)
    ax = next((a for a in fig.spare_axes if a.get_label() == role and np.allclose(fig.boxes[a], inches)), None)
    if ax is None:
        ax = fig.add_axes(box, label=role)
        fig.boxes[ax] = inches
        return ax
    order = fig.axes
    if any(a in fig.spare_axes for a in order[:order.index(ax)]):   # one placed after it is drawn before it
        fig.delaxes(ax)
        fig.add_axes(ax)
    fig.spare_axes.remove(ax)
    ax.set_position(box)   # the same inches, in a figure that may have been resized
    empty_axes(ax)
    return ax


def _heading(fig: Figure, left: float, top: float, text: str, **kw: Any) -> None:
    fig_w, fig_h = fig.get_size_inches()
    fig.text(left / fig_w, 1 - top / fig_h, text, ha="left", va="top", **kw)


def to_png(fig: Figure, dpi: int | None = None, *, compress_level: int = 6) -> bytes:
    """The figure as PNG bytes: same figure, same bytes (no timestamp or version in the file).

    ``compress_level`` is zlib's (0-9): the widgets, which redraw after every click, pass 1, which encodes
    several times faster for a somewhat larger file; the pixels are the same."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi or fig.dpi, facecolor="white", metadata={"Software": None},
                pil_kwargs={"compress_level": compress_level})
    return buffer.getvalue()


def png_of_canvas(fig: Figure, *, compress_level: int = 1) -> bytes:
    """Draw the figure on its own canvas at its own dpi and encode the pixels as an opaque PNG (the figures
    are white, so no alpha channel); what the widgets show, without ``savefig``'s canvas and dpi swaps."""
    from PIL import Image

    canvas: Any = fig.canvas
    canvas.draw()
    width, height = canvas.get_width_height(physical=True)
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="png", compress_level=compress_level)
    return buffer.getvalue()


def _finish(fig: PlotFigure, save: str | os.PathLike | None) -> PlotFigure:
    if save is not None:
        path = os.fspath(save)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as out:
            out.write(to_png(fig))
    return fig


def _tokens(value: float, _pos: Any = None) -> str:
    value = abs(value)
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 10_000:
        return f"{value / 1000:.1f}".removesuffix(".0") + "k"
    return f"{value:,.0f}"


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, color="#555555")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_color("#DDDDDD")


def _call_ticks(ax, last: int, *, first: int = 1) -> None:
    """Every call number on the axis while they fit, integers only after that."""
    if last - first < 20:
        ax.set_xticks(range(first, last + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=20))


def _call_axis(ax, run: Run, *, label: bool = True) -> None:
    last = max(run.last_call, 1)
    ax.set_xlim(0.4, last + 0.6)
    _call_ticks(ax, last)
    if label:
        ax.set_xlabel("model call")


@functools.lru_cache(maxsize=2048)
def _text_extent(text: str, size: float, family: tuple[str, ...], dpi: float) -> tuple[float, float]:
    """Width and height in points of a one-line text as Agg lays it out at ``dpi`` (its advance, and the
    height of a line, measured on "lp" as matplotlib measures one)."""
    font = get_font(findfont(FontProperties(family=list(family) or None, size=size)))
    font.set_size(size, dpi)
    font.set_text(text, 0, flags=get_hinting_flag())
    width = font.get_width_height()[0] / 64
    font.set_text("lp", 0, flags=get_hinting_flag())
    return width * 72 / dpi, font.get_width_height()[1] / 64 * 72 / dpi


def _tick_labels(axis) -> list[Any]:
    """The axis's major tick labels that a draw will show, their texts as the formatter gives them now."""
    locs = list(axis.get_majorticklocs())
    texts = axis.get_major_formatter().format_ticks(locs)
    low, high = sorted(axis.get_view_interval())
    close = 1e-9 * max(high - low, 1e-300)
    ticks = axis.get_major_ticks(len(locs))
    shown = []
    for tick, loc, text in zip(ticks, locs, texts, strict=False):
        tick.label1.set_in_layout(False)   # placed by the axis; the axis label is placed below from the texts
        tick.label2.set_in_layout(False)
        if low - close <= loc <= high + close and tick.label1.get_visible() and text:
            shown.append((text, tick))
    return shown


def fix_axis_labels(ax, which: str = "xy") -> None:
    """Place the axis labels beside the tick labels once, from the widths and heights of the tick labels' texts
    (level ones), instead of at every draw from the tick labels laid out twice more for it.

    Matplotlib's own placement (``labelpad`` beyond the tick labels' extent) is the same; the tick labels are
    then left out of the layout, so each is laid out once, when it is drawn. ``which``: the axes ("x", "y")
    whose tick labels are level (a slanted one is left to matplotlib)."""
    fig = ax.get_figure()
    for axis, name in ((ax.xaxis, "x"), (ax.yaxis, "y")):
        if name not in which:
            continue
        shown = _tick_labels(axis)
        extent = 0.0
        for text, tick in shown:
            family = tuple(tick.label1.get_fontfamily())
            width, line = _text_extent(text, tick.label1.get_fontsize(), family, fig.dpi)
            extent = max(extent, width if name == "y" else line * (text.count("\n") + 1))
        first = axis.get_major_ticks(1)[0]
        gap = (axis.get_tick_padding() + first.get_pad() if shown else 0.0) + extent + axis.labelpad
        dx, dy = (-gap / 72, 0.0) if name == "y" else (0.0, -gap / 72)
        axis.set_label_coords(0.0 if name == "y" else 0.5, 0.5 if name == "y" else 0.0,
                              ax.transAxes + ScaledTranslation(dx, dy, fig.dpi_scale_trans))


RECTANGLE_CODES = [MplPath.MOVETO, MplPath.LINETO, MplPath.LINETO, MplPath.LINETO, MplPath.CLOSEPOLY]


def rectangles(ax, boxes: Iterable[tuple[float, float, float, float]], *, transform: Any = None,
               **style: Any) -> PathPatch:
    """Rectangles (left, bottom, width, height) as one patch, drawn as ``bar`` draws each of them: one artist
    to build and draw instead of one per bar, and no data limits to update (the panels set their limits)."""
    verts: list[tuple[float, float]] = []
    codes: list[Any] = []
    for x, y, w, h in boxes:
        verts += [(x, y), (x + w, y), (x + w, y + h), (x, y + h), (x, y)]
        codes += RECTANGLE_CODES
    patch = PathPatch(MplPath(verts or [(0.0, 0.0)], codes or None), transform=transform or ax.transData, **style)
    ax.add_artist(patch)
    return patch


def _raised(ax, points: float):
    """Data coordinates, moved up by a number of points (a label just above a bar)."""
    return ax.transData + ScaledTranslation(0, points / 72, ax.get_figure().dpi_scale_trans)


def _stacked_bars(ax, xs: list[int], heights: list[int], bottoms: list[int], hatched: list[bool],
                  **style: Any) -> PathPatch:
    """One layer of stacked bars 0.8 wide (two patches: the plain bars, labelled, and the hatched ones)."""
    label = style.pop("label")
    parts = ([(x - 0.4, b, 0.8, h) for x, b, h, hatch in zip(xs, bottoms, heights, hatched, strict=True)
              if hatch == want] for want in (False, True))
    plain = rectangles(ax, next(parts), label=label, **style)
    if any(hatched):
        rectangles(ax, next(parts), hatch="//", **style)
    return plain


# --- token usage ------------------------------------------------------------------------------------------

def draw_token_usage(ax, run: Run, *, window_note: bool = True) -> None:
    """Stacked input/output tokens per call; the window as a line when a call comes near it, else (with
    ``window_note``) a note of how far away it is."""
    ax.set_title("Tokens per model call", loc="left", fontsize=11, y=1.0)
    if not run.calls:
        _empty(ax, "no model calls in this run")
        return
    xs = [c.n for c in run.calls]
    inputs = [c.input_tokens for c in run.calls]
    cached = [c.cache_tokens for c in run.calls]
    outputs = [c.output_tokens for c in run.calls]
    hatched = [c.purpose == "summary" for c in run.calls]
    bars = [_stacked_bars(ax, xs, inputs, [0] * len(xs), hatched, facecolor=INPUT_COLOR, label="input tokens",
                          edgecolor="white")]
    if any(cached):
        bars.append(_stacked_bars(ax, xs, cached, inputs, [False] * len(xs), facecolor=CACHE_COLOR,
                                  edgecolor="none", label="cache read/write tokens"))
    bottoms = [i + c for i, c in zip(inputs, cached, strict=True)]
    bars.append(_stacked_bars(ax, xs, outputs, bottoms, hatched, facecolor=OUTPUT_COLOR, label="output tokens",
                              edgecolor="white"))
    totals = [b + o for b, o in zip(bottoms, outputs, strict=True)]
    top = max(totals, default=0)
    if len(xs) <= 20:
        above = _raised(ax, 2)
        for x, total in zip(xs, totals, strict=True):
            if total:
                ax.text(x, total, _tokens(total), transform=above, ha="center", va="bottom", fontsize=9,
                        color="#333333")
    errors = [c for c in run.calls if not c.answered]
    if errors:
        ax.plot([c.n for c in errors], [0] * len(errors), marker="x", color=ERROR_COLOR, markersize=9, mew=2,
                linestyle="none")
    for c in errors:
        ax.text(c.n, 0, f"HTTP {c.error_status or '—'}", transform=_raised(ax, 8), ha="center", va="baseline",
                fontsize=9, color=ERROR_COLOR)
    window = run.context_window
    handles: list[Any] = []
    if window and top >= 0.25 * window:
        handles.append(ax.axhline(window, color=WINDOW_COLOR, linestyle="--", linewidth=1.2,
                                  label=f"context window ({_tokens(window)})"))
        ax.set_ylim(0, max(window, top) * 1.1)
    else:
        ax.set_ylim(0, max(top, 4) * 1.4)   # raised below to keep the bars under the legend
        if window and window_note:
            share = f"the largest call used {100 * top / window:.2g}% of it" if top else "no call used any tokens"
            ax.text(0.99, 0.97, f"context window: {window:,} tokens, far above this scale\n({share})",
                    transform=ax.transAxes, ha="right", va="top", fontsize=9, color=WINDOW_COLOR)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(FuncFormatter(_tokens))
    ax.set_ylabel("tokens")
    _call_axis(ax, run)
    handles += bars
    if any(hatched):
        handles.append(Patch(facecolor="white", edgecolor="#555555", hatch="//", label="summary call (compaction)"))
    if errors:
        handles.append(Line2D([], [], marker="x", color=ERROR_COLOR, mew=2, linestyle="none",
                              label="failed call (no tokens)"))
    if not (window and top >= 0.25 * window):   # room above the bars for the legend's lines
        ax.set_ylim(0, max(top, 4) * (1.15 + 0.17 * len(handles)))
    ax.legend(handles=handles, loc="upper left", fontsize=9, frameon=False)
    fix_axis_labels(ax)


def token_usage(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI) -> PlotFigure:
    """Input and output tokens of every model call, stacked, with the context window as a line."""
    fig = new_figure(8, 4, dpi)
    draw_token_usage(place(fig, 0.75, 0.35, 7.05, 3.05), read_run(frame))
    return _finish(fig, save)


# --- context fill -----------------------------------------------------------------------------------------

def draw_context_fill(ax, run: Run, *, legend_columns: int = 3) -> None:
    """The request size before each call against the window, on a linear scale.

    When every request is under a quarter of the window, the scale zooms in on the requests and says how
    far away the window is; otherwise the window is a line and an overflow stands out above it.
    """
    ax.set_title("Context fill before each call", loc="left", fontsize=11, y=1.0)
    turn_calls = [c for c in run.calls if c.purpose == "turn"]
    if not turn_calls:
        _empty(ax, "no model calls in this run")
        return
    window = run.context_window or 0
    est = [(c.n, c.context_tokens) for c in turn_calls if c.context_tokens is not None]
    reported = [(c.n, c.input_tokens + c.cache_tokens) for c in turn_calls if c.answered]
    refused = [(c.n, int(m.group(1))) for c in turn_calls
               if c.error_status == 400 and (m := PROMPT_TOO_LONG_SIZES.search(c.error_message or ""))]
    if est:
        ax.plot([n for n, _ in est], [t for _, t in est], marker="o", color=STEP_COLOR,
                label="estimated before sending")
    if reported:
        ax.plot([n for n, _ in reported], [t for _, t in reported], marker="s", linestyle="none",
                markerfacecolor="none", color=OUTPUT_COLOR, label="input tokens the API reported")
    if refused:
        ax.plot([n for n, _ in refused], [t for _, t in refused], marker="X", linestyle="none", markersize=9,
                color=ERROR_COLOR, label="refused: size the API gave in its 400")
    overs = [c for c in turn_calls if c.stop_reason == "model_context_window_exceeded"]
    top = max([t for _, t in est + reported + refused] + [1])
    for c in overs:
        ax.plot([c.n], [c.input_tokens + c.cache_tokens], marker="v", color=ERROR_COLOR, markersize=9,
                linestyle="none")
    if overs:
        ax.plot([], [], marker="v", color=ERROR_COLOR, linestyle="none",
                label="model_context_window_exceeded")
    if window and top >= 0.25 * window:
        ax.axhline(window, color=WINDOW_COLOR, linestyle="--", linewidth=1.2,
                   label=f"context window ({_tokens(window)})")
        low = 0
        ax.set_ylim(0, max(top, window) * 1.18)
        for n, size in refused:
            ax.annotate(f"{size:,} > {window:,}", (n, size), xytext=(6, 0), textcoords="offset points",
                        fontsize=9, color=ERROR_COLOR, va="center")
    else:
        low = 0
        ax.set_ylim(0, top * 1.45)
        if window:   # top left: a history grows from left to right
            ax.text(0.02, 0.97, f"context window: {window:,} tokens,\nfar above this scale (the largest\n"
                    f"request is {100 * top / window:.2g}% of it)",
                    transform=ax.transAxes, ha="left", va="top", fontsize=9, color=WINDOW_COLOR)
    last = max(run.last_call, 1)
    for i, comp in enumerate(run.compactions):
        x = comp.call + 0.5
        right_half = x > (last + 1) / 2
        ax.axvline(x, color=COMPACTION_COLOR, linestyle=":", linewidth=1.5,
                   label="compaction" if i == 0 else None)
        ax.annotate(f"compacted: {comp.event.strategy}\nhistory ≈{_tokens(_int(comp.event.tokens_before))} → "
                    f"≈{_tokens(_int(comp.event.tokens_after))} tokens", (x, low), xytext=(-3 if right_half else 3, 4),
                    textcoords="offset points", fontsize=9, color=COMPACTION_COLOR, va="bottom",
                    ha="right" if right_half else "left")
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(FuncFormatter(_tokens))
    ax.set_ylabel("tokens")
    _call_axis(ax, run)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=9, frameon=False, ncols=legend_columns)
    fix_axis_labels(ax)


def context_fill(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI) -> PlotFigure:
    """The context estimate before each call against the window, with the compactions marked."""
    fig = new_figure(8, 4, dpi)
    draw_context_fill(place(fig, 0.85, 0.35, 6.95, 2.6), read_run(frame))
    return _finish(fig, save)


# --- compactions ------------------------------------------------------------------------------------------

def draw_compaction_bars(ax, run: Run, *, compact: bool = False) -> None:
    ax.set_title("History before / after each compaction" if compact else
                 "History size before and after each compaction", loc="left", fontsize=10 if compact else 11, y=1.0)
    if not run.compactions:
        _empty(ax, "no compaction in this run")
        return
    xs = list(range(len(run.compactions)))
    before = [_int(c.event.tokens_before) for c in run.compactions]
    after = [_int(c.event.tokens_after) for c in run.compactions]
    width = 0.38
    ax.bar([x - width / 2 for x in xs], before, width, color="#BBBBBB", label="before")
    ax.bar([x + width / 2 for x in xs], after, width, color=COMPACTION_COLOR, label="after")
    top = max(before + after + [1])
    for x, c, b, a in zip(xs, run.compactions, before, after, strict=True):
        saved = f"−{100 * (b - a) / b:.0f}%" if b else ""
        msgs = "" if c.event.messages_before is None else \
            f"\n{c.event.messages_before} → {c.event.messages_after} msgs"
        ax.annotate(f"{saved}{msgs}",
                    (x, max(b, a)), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=9)
    if compact:
        ax.set_xticks(xs, [f"{c.event.strategy}, call {c.call + 1}" for c in run.compactions], fontsize=9)
        ax.set_xlim(-0.7, len(xs) - 0.3)
        ax.tick_params(axis="y", labelsize=9)
    else:
        ax.set_xticks(xs, [f"#{i + 1} before call {c.call + 1}\n{c.event.strategy}\n({c.event.trigger})"
                           for i, c in enumerate(run.compactions)], fontsize=9)
        ax.set_xlim(-1.2, max(len(xs), 2) - 0.8)
        ax.set_ylabel("estimated tokens in history")
    ax.set_ylim(0, top * 1.45)
    ax.yaxis.set_major_formatter(FuncFormatter(_tokens))
    ax.legend(loc="upper right", fontsize=9, frameon=False)
    fix_axis_labels(ax, "xy" if compact else "y")   # not compact, the compactions' labels are three lines


def compaction_bars(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI) -> PlotFigure:
    """Estimated history tokens before and after every compaction (a note when there was none)."""
    fig = new_figure(6, 4, dpi)
    draw_compaction_bars(place(fig, 0.75, 0.35, 5.05, 2.75), read_run(frame))
    return _finish(fig, save)


# --- recoveries -------------------------------------------------------------------------------------------

CountSource = Literal["retry", "fallback", "compaction", "turns"]


@dataclass(frozen=True)
class Series:
    label: str
    what: tuple[Branch, ...] | CountSource       # what to count: branches of the table, or events (see _occurrences)
    limit_key: str | None = None                 # the field of Limits that bounds it
    limit_label: str = ""
    in_a_row: str | None = None                  # the limit bounds a count in a row (or per request): the
                                                 # TransitionEvent field that records it, drawn instead of the total
    budget_label: str = ""                       # its bar in the recovery budget


@dataclass(frozen=True)
class Counter:
    title: str
    series: tuple[Series, ...]
    ends: tuple[EndBranch, ...]                  # branches that end the run at one of these limits


COUNTERS = (
    Counter("max_tokens: escalations and continuations",
            (Series("escalations", ("max_tokens_escalate", "incomplete_tool_use"), "max_escalations",
                    "escalations: limit per run", budget_label="max_tokens escalations"),
             Series("continuations", ("max_tokens_continue",), "max_continuations",
                    "continuations: limit in a row", in_a_row="continuations_in_a_row",
                    budget_label="max_tokens continuations")),
            ("max_tokens_give_up",)),
    Counter("API retries and fallbacks",
            (Series("retries", "retry", "max_api_retries", "retries: limit per request", in_a_row="api_attempts",
                    budget_label="API retries"),
             Series("fallbacks", "fallback")), ("api_error",)),
    Counter("pause_turn continuations",
            (Series("continuations", ("pause_turn",), "max_pause_continuations", "limit in a row",
                    in_a_row="pauses_in_a_row",
                    budget_label="pause_turn continuations"),),
            ("pause_give_up",)),
    Counter("Stop-hook blocks",
            (Series("blocks fed back", ("stop_hook_block",), "stop_hook_block_cap", "cap per run",
                    budget_label="Stop-hook blocks"),),
            ("stop_hook_cap",)),
    Counter("compactions",
            (Series("compactions", "compaction", "max_compactions", "limit in a row",
                    in_a_row="consecutive_compactions",
                    budget_label="compactions"),), ("context_give_up",)),
    Counter("model turns",
            (Series("turns answered", "turns", "max_turns", "max_turns", budget_label="turns (max_turns)"),),
            ("max_turns",)),
)
SERIES_STYLES = (dict(color=STEP_COLOR, marker="o"), dict(color=OUTPUT_COLOR, marker="s"))


def _occurrences(run: Run, what: tuple[Branch, ...] | CountSource) -> list[int]:
    """The call number of every occurrence of a counted thing."""
    if isinstance(what, tuple):
        return [t.call for t in run.transitions if t.event.branch in what]
    if what == "retry":
        return list(run.retries)
    if what == "fallback":
        return [f.call for f in run.fallbacks]
    if what == "compaction":
        return [c.call for c in run.compactions]
    return [c.n for c in run.calls if c.answered and c.purpose == "turn"]   # turns


def _ended_at(run: Run, counter: Counter) -> list[At[TransitionEvent]]:
    return [t for t in run.transitions if t.event.branch in counter.ends and t.event.type == TERMINAL_TYPE]


def active_counters(run: Run) -> list[Counter]:
    """The counters this run moved (or ended at); turns only when max_turns bounds them."""
    out = []
    for counter in COUNTERS:
        if counter.series[0].what == "turns":
            if run.limits.get("max_turns") or _ended_at(run, counter):
                out.append(counter)
        elif _ended_at(run, counter) or any(_occurrences(run, s.what) for s in counter.series):
            out.append(counter)
    return out


# The decisions that add one to a count in a row.
IN_A_ROW_BRANCHES: dict[str, tuple[Branch, ...]] = {
    "continuations_in_a_row": ("max_tokens_continue",), "api_attempts": ("api_retry", "api_fallback"),
    "pauses_in_a_row": ("pause_turn",),
}


def _compactions_in_a_row(run: Run) -> list[tuple[int, int]]:
    """(call, compactions in a row) after each decision and compaction: the compaction events between two
    decisions are one compaction of the history (one strategy or several); a decision on a message that
    came back, other than compacting, starts the count over (as ``transitions.advance`` does)."""
    answered = {c.n for c in run.calls if c.answered and c.purpose == "turn"}
    events: list[tuple[int, int, At[Any]]] = sorted(
        [(t.call, 0, t) for t in run.transitions] + [(c.call, 1, c) for c in run.compactions],
        key=lambda item: (item[0], item[1]))
    count, passing, out = 0, False, []
    for call, is_compaction, item in events:
        if is_compaction:
            count += 0 if passing else 1
            passing = True
        else:
            passing = False
            if item.event.type != "Compact" and call in answered:
                count = 0
        out.append((call, count))
    return out


def in_a_row_after(run: Run, series: Series) -> list[tuple[int, int]]:
    """(call, count in a row after that call's decisions) for a series bounded in a row.

    A transition event records the loop's counters as they were when it was decided: after a decision that
    adds to the count (a continuation, a retry, ...) it is one more; after any other, it is what the next
    decision records (the loop may start the count over between the two)."""
    field_name = series.in_a_row
    assert field_name is not None, series
    if field_name == "consecutive_compactions":
        return _compactions_in_a_row(run)
    recorded = [(t.call, getattr(t.event, field_name), t) for t in run.transitions]
    out: list[tuple[int, int]] = []
    adds = IN_A_ROW_BRANCHES[field_name]
    for i, (call, before, t) in enumerate(recorded):
        if t.event.branch in adds:
            after = None if before is None else before + 1
        elif i + 1 < len(recorded):
            after = recorded[i + 1][1]
        else:   # the run ended: where the count stood, or after a completion (which starts every count over) 0
            after = before if t.event.type == TERMINAL_TYPE else 0
        out.append((call, int(after or 0)))
    return out


def _step_values(points: list[tuple[int, int]], xs: list[int]) -> list[int]:
    """The value at each x: the last point's at or before it (0 before the first)."""
    values, value, k = [], 0, 0
    for x in xs:
        while k < len(points) and points[k][0] <= x:
            value = points[k][1]
            k += 1
        values.append(value)
    return values


RECOVERY_YLABEL = "count so far"


def draw_recovery_counter(ax, run: Run, counter: Counter, *, xlabel: bool = True) -> None:
    """One counter's series over the calls against its limits: a total for a limit per run, the count in a
    row for a limit in a row (which a run's total may pass without ever reaching it)."""
    last = run.last_call
    xs = list(range(0, last + 1))
    top = 1
    drawn: list[list[int]] = []
    for series, style in zip(counter.series, SERIES_STYLES, strict=False):
        hits = _occurrences(run, series.what)
        if series.in_a_row:
            ys = _step_values(in_a_row_after(run, series), xs)
            label = f"{series.label} in a row ({len(hits)} in all)"
        else:
            ys = [run.count_until(hits, x) for x in xs]
            label = f"{series.label} ({len(hits)})"
        drawn.append(ys)
        top = max(top, max(ys, default=0))
        ax.step(xs, ys, where="post", label=label, linewidth=1.6, color=style["color"])
        marks = sorted(set(hits))
        marks = [x for x in marks if 0 <= x < len(ys)]
        ax.plot(marks, [ys[x] for x in marks], linestyle="none", markersize=4, **style)
        limit = run.limits.get(series.limit_key) if series.limit_key else None
        if limit:
            ax.axhline(limit, color=style["color"] if len(counter.series) > 1 else LIMIT_COLOR, linestyle="--",
                       linewidth=1, label=f"{series.limit_label} = {limit}")
            top = max(top, limit)
        elif series.limit_key == "max_turns":
            ax.plot([], [], linestyle="none", label="(no max_turns set)")
    for i, t in enumerate(_ended_at(run, counter)):
        at = max((ys[t.call] for ys in drawn if 0 <= t.call < len(ys)), default=0)
        ax.plot([t.call], [at], marker="X", color=ERROR_COLOR, markersize=9, linestyle="none",
                label="the run ended here" if i == 0 else None)
    ax.set_title(counter.title, loc="left", fontsize=9, y=1.0)
    entries = len(ax.get_legend_handles_labels()[1])   # room above the lines for the legend's lines
    ax.set_ylim(-0.2, top * (1.15 + 0.3 * entries) + 0.6)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
    ax.set_xlim(-0.2, max(last, 1) + 0.4)
    if last <= 10:
        ax.set_xticks(range(0, max(last, 1) + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
    ax.tick_params(labelsize=9)
    if xlabel:
        ax.set_xlabel("model call", fontsize=9)
    ax.set_ylabel(RECOVERY_YLABEL, fontsize=9, labelpad=2)
    ax.legend(loc="upper left", fontsize=9, frameon=False, handlelength=1.6)
    fix_axis_labels(ax)


RECOVERY_HEADING = "Recoveries so far against their limits: totals per run, counts in a row"
NO_RECOVERIES = "no recoveries in this run: nothing was retried, escalated, continued, compacted or blocked"


def recovery_rows(run: Run, columns: int = 3, extra: int = 0) -> int:
    return max(1, math.ceil((len(active_counters(run)) + extra) / columns))


def _extra_cell(i: int, draw: Callable[[Any], None]) -> tuple[str, Callable[[Any, bool], None]]:
    return f"extra {i}", lambda ax, _last: draw(ax)


def _counter_cell(run: Run, counter: Counter) -> tuple[str, Callable[[Any, bool], None]]:
    return f"counter {counter.title}", lambda ax, last: draw_recovery_counter(ax, run, counter, xlabel=last)


def draw_recovery_attempts(fig: Figure, run: Run, left: float, top: float, width: float, height: float,
                           *, columns: int = 3, extra: tuple[Callable[[Any], None], ...] = ()) -> None:
    """The counters this run moved, in rows of ``columns`` filling a box (inches from the top-left corner);
    ``extra`` panels (functions drawing into an axes) take the first cells."""
    _heading(fig, left - 0.4, top, RECOVERY_HEADING, fontsize=11)
    counters = active_counters(run)
    heading, title, ticks, xlabel, gap_x = 0.4, 0.3, 0.3, 0.45, 0.55
    if not counters and not extra:
        _empty(place(fig, left, top + heading, width, max(0.4, height - heading - 0.1), "no recoveries"),
               NO_RECOVERIES)
        return
    cells = [_extra_cell(i, draw) for i, draw in enumerate(extra)] + [_counter_cell(run, c) for c in counters]
    rows = math.ceil(len(cells) / columns)
    panel_w = (width - (columns - 1) * gap_x) / columns
    panel_h = (height - heading - rows * title - (rows - 1) * ticks - xlabel) / rows
    for i, (role, cell) in enumerate(cells):
        row, col = divmod(i, columns)
        y = top + heading + title + row * (panel_h + ticks + title)
        cell(place(fig, left + col * (panel_w + gap_x), y, panel_w, panel_h, role), i + columns >= len(cells))


def recovery_attempts(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI) -> PlotFigure:
    """Escalations, continuations, retries, fallbacks, pause continuations, Stop-hook blocks, compactions
    and turns, counted over the calls, each against the limit that ends the run: one panel for each kind
    the run used (a note when it used none)."""
    run = read_run(frame)
    panels = len(active_counters(run))
    columns = max(1, min(3, panels))
    rows = recovery_rows(run, columns) if panels else 0
    height = 0.9 + 2.4 * rows if rows else 1.4
    width = max(5.5, 0.9 + 3.3 * columns) if panels else 10
    fig = new_figure(width, height, dpi)
    draw_recovery_attempts(fig, run, 0.5, 0.15, width - 0.65, height - 0.25, columns=columns)
    return _finish(fig, save)


# --- the path through the decision table ------------------------------------------------------------------

def _call_label(c: Call) -> str:
    if not c.answered:
        return f"{c.n}\nHTTP {c.error_status or 'error'}"
    if c.purpose == "summary":
        return f"{c.n}\nsummary"
    reason = str(c.stop_reason or "none").replace("model_context_window_exceeded", "ctx_window_exceeded")
    return f"{c.n}\n{reason}"


def draw_decision_path(ax, run: Run) -> None:
    ax.set_title("Path through the decision table", loc="left", fontsize=11, y=1.0)
    labels = [f"{row:>2}  {branch}" for row, branch, _ in ROWS]
    index = {branch: i for i, (_, branch, _) in enumerate(ROWS)}
    ax.set_yticks(range(len(ROWS)), labels, fontsize=9, family="monospace")
    ax.set_ylim(len(ROWS) - 0.5, -0.5)
    last = max(run.last_call, 1)
    rectangles(ax, [(0, i - 0.5, 1, 1) for i, (row, _, _) in enumerate(ROWS) if int(row.rstrip("b")) % 2 == 0],
               transform=ax.get_yaxis_transform(), color="#F3F3F3", zorder=0)   # every other row shaded
    ax.set_xlim(0.4, last + 0.6)
    if not run.transitions:
        ax.text(0.5, 0.5, "no decision taken yet", transform=ax.transAxes, ha="center", va="center",
                color="#555555", bbox=dict(facecolor="white", edgecolor="#DDDDDD"))
        ax.set_xticks([])
        return
    points = []
    per_call: dict[int, int] = {}
    for t in run.transitions:
        branch = t.event.branch
        if branch not in index:
            continue
        k = per_call.get(t.call, 0)
        per_call[t.call] = k + 1
        points.append((t.call + 0.18 * k, index[branch], t))
    ax.plot([p[0] for p in points], [p[1] for p in points], color="#AAAAAA", linewidth=1, zorder=1)
    end = run.result.subtype if run.result else None
    colors = []
    for i, (_x, _y, t) in enumerate(points):
        subtype = t.event.subtype if t.event.type == TERMINAL_TYPE else None
        if i == len(points) - 1 and end is not None:
            subtype = end   # the last decision ended the run (a completion the Stop hooks let through)
        colors.append(STEP_COLOR if subtype is None else OK_COLOR if subtype == "success" else ERROR_COLOR)
    if points:   # one collection, drawn in the order of the decisions
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=70, c=colors, zorder=3, edgecolor="white",
                   linewidth=0.8)
    if end is not None:
        x, y, _ = points[-1]
        ax.annotate(f"end: {end}", (x, y), xytext=(-9, 0), textcoords="offset points", ha="right",
                    va="center", fontsize=9, color=OK_COLOR if end == "success" else ERROR_COLOR,
                    bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
    calls = {c.n: c for c in run.calls}
    ticks = list(range(1, last + 1))
    ax.set_xticks(ticks, [_call_label(calls[n]) if n in calls else str(n) for n in ticks],
                  fontsize=9, rotation=0 if last <= 8 else 45,
                  ha="center" if last <= 8 else "right")
    ax.set_xlabel("model call (and the stop_reason it returned)")
    ax.grid(axis="x", color="#E6E6E6", zorder=0)
    ax.scatter([], [], s=40, color=STEP_COLOR, label="go on")
    ax.scatter([], [], s=40, color=OK_COLOR, label="end: success")
    ax.scatter([], [], s=40, color=ERROR_COLOR, label="end: error")
    for f in run.fallbacks:
        hits = [(x, y) for x, y, t in points if t.call == f.call]
        if hits:
            ax.annotate(f"→ {f.event.to_model}", hits[-1], xytext=(7, 0), textcoords="offset points",
                        va="center", fontsize=9, color="#555555")
    ax.legend(loc="lower right", bbox_to_anchor=(1, 1), fontsize=9, frameon=False, ncols=3,
              borderaxespad=0.1)
    fix_axis_labels(ax, "y")   # the calls' labels below are two lines, or slanted: matplotlib places their label


def decision_path(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI) -> PlotFigure:
    """A grid of model calls × rows of the decision table, a dot where a branch fired, joined in order."""
    run = read_run(frame)
    width = max(8.5, 4.0 + 0.45 * run.last_call)
    fig = new_figure(width, 6, dpi)
    draw_decision_path(place(fig, 2.0, 0.35, width - 2.2, 4.55), run)
    return _finish(fig, save)


# --- the recovery budget at a glance (the widget's live view) ---------------------------------------------

BUDGET_BEFORE_START = "No call yet:\nthe limits and\nwhat is used of\nthem appear at\nthe first Step."


def draw_budget(ax, run: Run) -> None:
    """One horizontal bar per bounded count: how much of its limit the run has used so far (a total for a
    limit per run, the current count in a row for a limit in a row)."""
    ax.set_title("Recovery budget used", loc="right", fontsize=11, y=1.0)
    if not run.limits and not run.calls:   # before the first call the trace holds no limits yet
        ax.set_axis_off()
        ax.text(0, 0.9, BUDGET_BEFORE_START, va="top", fontsize=9, color="#555", wrap=True,
                transform=ax.transAxes)
        return
    labels, used, limits = [], [], []
    for counter in COUNTERS:
        for series in counter.series:
            if series.limit_key is None:
                continue
            labels.append((series.budget_label or series.label) + (" in a row" if series.in_a_row else ""))
            if series.in_a_row:   # where the count in a row stands now, against its limit in a row
                now = in_a_row_after(run, series)
                used.append(now[-1][1] if now else 0)
            else:
                used.append(len(_occurrences(run, series.what)))
            limits.append(run.limits.get(series.limit_key))
    ys = list(range(len(labels)))
    shares = [min(n / lim, 1.0) if lim else 0.0 for n, lim in zip(used, limits, strict=True)]
    rectangles(ax, [(0, y - 0.3, 1.0, 0.6) for y in ys], facecolor="#EEEEEE", edgecolor="none")
    colors = [ERROR_COLOR if s >= 1 else OUTPUT_COLOR if s >= 0.5 else STEP_COLOR for s in shares]
    for color in dict.fromkeys(colors):
        rectangles(ax, [(0, y - 0.3, share, 0.6) for y, share, c in zip(ys, shares, colors, strict=True)
                        if c == color], facecolor=color, edgecolor="none")
    for y, n, lim in zip(ys, used, limits, strict=True):
        ax.text(1.02, y, f"{n} / {lim}" if lim else f"{n} / none", va="center", fontsize=9)
    ax.set_yticks(ys, labels, fontsize=9)
    ax.set_ylim(len(ys) - 0.5, -0.5)
    ax.set_xlim(0, 1)
    ax.set_xticks([0, 0.5, 1], ["0", "half", "limit"], fontsize=9)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    fix_axis_labels(ax)


def overview(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI) -> PlotFigure:
    """A quick one-row view for stepping: tokens per call, context fill, and the recovery budget used."""
    run = read_run(frame)
    fig = new_figure(OVERVIEW_WIDTH, 3.9, dpi)
    draw_token_usage(place(fig, 0.75, 0.35, 3.75, 2.85), run, window_note=False)   # the context fill says it
    draw_context_fill(place(fig, 5.35, 0.35, 2.9, 2.35), run, legend_columns=1)
    draw_budget(place(fig, 10.95, 0.35, 0.85, 2.85), run)
    return _finish(fig, save)


# --- all of it --------------------------------------------------------------------------------------------

def run_title(run: Run) -> str:
    calls = len(run.calls)
    if run.result is None:
        return f"Run in progress: {calls} model call(s) so far"
    r = run.result
    last = f"last stop_reason {r.stop_reason}" if r.stop_reason else "no message came back"
    return (f"Run ended: {r.subtype}  ·  {r.num_turns} turn(s), {r.requests or calls} "
            f"model call(s)  ·  {last}")


def dashboard(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI,
              title: str | None = None) -> PlotFigure:
    """One figure with what the run did: tokens per call, context fill, the path through the decision table,
    and, when the run had any, its compactions and its recoveries against their limits. A panel with
    nothing to show is left out (the recovery budget bars of ``overview`` are the recovery panels here)."""
    run = read_run(frame)
    counters = active_counters(run)
    extra = (lambda ax: draw_compaction_bars(ax, run, compact=True),) if run.compactions else ()
    rec_rows = recovery_rows(run, extra=len(extra)) if counters or extra else 0
    width = 11.0
    path_h, y_path = 3.6, 4.05
    y_next = y_path + path_h + 1.3
    rec_h = (0.95 + 2.15 * rec_rows) if rec_rows else 0.0
    height = y_next + rec_h + 0.1 if rec_rows else y_next - 0.2
    fig = new_figure(width, height, dpi)
    _heading(fig, 0.15, 0.15, title or run_title(run), fontsize=13, fontweight="bold")
    draw_token_usage(place(fig, 0.7, 0.75, 4.5, 2.55), run, window_note=False)
    draw_context_fill(place(fig, 6.2, 0.75, 4.6, 2.2), run, legend_columns=2)
    draw_decision_path(place(fig, 2.0, y_path, width - 2.2, path_h), run)
    if rec_rows:
        draw_recovery_attempts(fig, run, 0.6, y_next - 0.1, width - 0.8, rec_h, extra=extra)
    return _finish(fig, save)


# --- cost and the prompt cache ---------------------------------------------------------------------------

UNCACHED_COLOR = "#4C72B0"
WRITE_COLOR = "#C44E52"
READ_COLOR = "#55A868"


def _mark_compactions(ax, run: Run, *, label: bool = True) -> None:
    """A dashed line before the first call after each compaction (the history changed between the two)."""
    seen: set[int] = set()
    for c in run.compactions:
        # proactive or reactive, a compaction runs before the next request, so it carries the last call's number
        after = c.call + 1
        if after in seen:
            continue
        seen.add(after)
        ax.axvline(after - 0.5, color=COMPACTION_COLOR, linestyle="--", linewidth=1.2)
        if label:
            ax.annotate("compaction:\nthe prefix changed", (after - 0.5, 1), xycoords=("data", "axes fraction"),
                        xytext=(3, -3), textcoords="offset points", ha="left", va="top", fontsize=9,
                        color=COMPACTION_COLOR)


def draw_cache_tokens(ax, run: Run) -> None:
    """Per call: uncached input, cache writes, cache reads and output, stacked; compactions marked."""
    ax.set_title("Tokens per model call, by how they are billed", loc="left", fontsize=11, y=1.0)
    calls = [c for c in run.calls if c.answered]
    if not calls:
        _empty(ax, "no model call came back")
        return
    xs = [c.n for c in calls]
    layers = (("uncached input", [c.input_tokens for c in calls], UNCACHED_COLOR),
              ("cache writes", [c.cache_write for c in calls], WRITE_COLOR),
              ("cache reads", [c.cache_read for c in calls], READ_COLOR),
              ("output", [c.output_tokens for c in calls], OUTPUT_COLOR))
    bottom = [0] * len(calls)
    hatches = ["//" if c.purpose == "summary" else "" for c in calls]
    for label, values, color in layers:
        ax.bar(xs, values, bottom=bottom, color=color, label=label, hatch=hatches, edgecolor="white")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    top = max(bottom, default=0)
    if len(xs) <= 20:
        for x, total in zip(xs, bottom, strict=True):
            ax.annotate(_tokens(total), (x, total), xytext=(0, 2), textcoords="offset points", ha="center",
                        va="bottom", fontsize=9, color="#333333")
    ax.set_ylim(0, max(top, 4) * 1.3)
    _mark_compactions(ax, run)
    ax.yaxis.set_major_formatter(FuncFormatter(_tokens))
    ax.set_ylabel("tokens")
    _call_axis(ax, run)
    handles, _ = ax.get_legend_handles_labels()
    if any(c.purpose == "summary" for c in calls):
        handles.append(Patch(facecolor="white", edgecolor="#555555", hatch="//", label="summary call (compaction)"))
    ax.legend(handles=handles, loc="upper left", fontsize=9, frameon=False, ncol=2)
    fix_axis_labels(ax)


def draw_cumulative_cost(ax, run: Run, prices: Any = None) -> None:
    """The run's cost so far after each call; beside it, the same tokens priced with no caching (derived)."""
    from ..core.cost import default_prices, uncached_cost

    ax.set_title("Cumulative cost", loc="left", fontsize=11, y=1.0)
    calls = [c for c in run.calls if c.answered]
    if not calls:
        _empty(ax, "no model call came back")
        return
    table = prices or default_prices()
    unknown = sorted({str(c.model) for c in calls if c.cost_usd is None and table.price(c.model) is None})
    if unknown:
        _empty(ax, f"cost unknown: no price for {', '.join(unknown)}")
        return
    no_usage = [str(c.n) for c in calls if c.cost_usd is None]
    if no_usage:   # a replayed session's reply whose usage was not written (a refusal, in Claude Code's files)
        _empty(ax, f"cost unknown: call(s) {', '.join(no_usage)} came back without usage")
        return
    xs, paid, plain = [], [], []
    total = total_plain = 0.0
    for c in calls:
        usage = {"input_tokens": c.input_tokens, "output_tokens": c.output_tokens,
                 "cache_read_input_tokens": c.cache_read, "cache_creation_input_tokens": c.cache_write}
        total += c.cost_usd or 0.0
        total_plain += uncached_cost(usage, table.price(c.model)) or 0.0
        xs.append(c.n)
        paid.append(total)
        plain.append(total_plain)
    ax.plot(xs, paid, marker="o", color=INPUT_COLOR, label=f"this run: ${total:.4f}")
    if any(c.cache_tokens for c in calls):
        ax.plot(xs, plain, marker=".", linestyle=":", color="#777777",
                label=f"same tokens, no caching (derived): ${total_plain:.4f}")
    _mark_compactions(ax, run, label=False)
    ax.set_ylim(0, max(paid + plain) * 1.25)
    ax.yaxis.set_major_formatter(FuncFormatter(_dollars(max(paid + plain))))
    ax.set_ylabel("US dollars")
    _call_axis(ax, run)
    ax.legend(loc="upper left", fontsize=9, frameon=False)
    fix_axis_labels(ax)


def _dollars(top: float) -> Callable[[float, Any], str]:
    """A tick label in dollars with enough decimals that the ticks up to ``top`` read apart ($0.0002 runs too)."""
    import math

    decimals = 3 if top <= 0 or top >= 0.01 else min(8, 1 - math.floor(math.log10(top)))
    return lambda v, _p: f"${v:.{decimals}f}"


def cache_tokens(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI) -> PlotFigure:
    """Tokens per call stacked as uncached input, cache writes, cache reads and output."""
    fig = new_figure(8, 4, dpi)
    draw_cache_tokens(place(fig, 0.75, 0.35, 7.05, 3.05), read_run(frame))
    return _finish(fig, save)


def cumulative_cost(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI) -> PlotFigure:
    """The run's cost after each call, and the same tokens priced without caching."""
    fig = new_figure(8, 3.5, dpi)
    draw_cumulative_cost(place(fig, 0.85, 0.35, 6.95, 2.6), read_run(frame))
    return _finish(fig, save)


def cost_overview(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI) -> PlotFigure:
    """Tokens by billing kind per call above, cumulative cost below, compactions marked on both."""
    run = read_run(frame)
    fig = new_figure(9, 7.4, dpi)
    draw_cache_tokens(place(fig, 0.85, 0.35, 7.95, 3.2), run)
    draw_cumulative_cost(place(fig, 0.85, 4.3, 7.95, 2.55), run)
    return _finish(fig, save)


PLOTS = {
    "overview": overview,
    "cost": cost_overview,
    "cache": cache_tokens,
    "spend": cumulative_cost,
    "dashboard": dashboard,
    "tokens": token_usage,
    "context": context_fill,
    "compaction": compaction_bars,
    "recoveries": recovery_attempts,
    "path": decision_path,
}


# -- one plot, drawn again after every Step ----------------------------------------------------------------

class LiveFigure:
    """One plot kind drawn again and again: the stepper's plot after every Step.

    ``render(source)`` draws ``PLOTS[kind](source)`` into the figure of the last drawing while its size is the
    same: every axes at the same box for the same panel is kept, with its ticks (the slowest part of building
    axes), and emptied of artists, legend, titles, labels, locators and limits before the panel is drawn into
    it again (``reusing``, ``place``); a panel that appears, moves or goes gets new axes from there on, and a
    figure of another size is a new figure. The canvas, a ``CachingCanvas``, keeps one ``TextCache`` for every
    drawing, so a label drawn before is not laid out and rasterised again. The picture is the one a new figure
    of the same kind and dpi gives on a CachingCanvas, pixel for pixel (the tests compare them).
    """

    def __init__(self, kind: str, dpi: int = DPI) -> None:
        from .canvas import TextCache

        if kind not in PLOTS:
            raise KeyError(f"no plot called {kind!r}; the plots are {', '.join(PLOTS)}")
        self.kind, self.dpi = kind, dpi
        self.figure: PlotFigure | None = None   # the last drawing
        self.text_cache = TextCache()

    def render(self, source: Any, *, compress_level: int = 1) -> bytes:
        """The plot of ``source`` (what ``PLOTS[kind]`` takes) as PNG bytes."""
        return png_of_canvas(self.draw(source), compress_level=compress_level)

    def draw(self, source: Any) -> PlotFigure:
        """The figure with the plot of ``source`` built into it (not yet drawn), on the caching canvas."""
        from .canvas import CachingCanvas

        kept, self.figure = self.figure, None   # a drawing that fails leaves nothing to reuse
        with reusing(kept):
            fig = PLOTS[self.kind](source, dpi=self.dpi)
        if fig is not kept:
            CachingCanvas(fig, self.text_cache)
        self.figure = fig
        return fig


# -- side by side -----------------------------------------------------------------------------------------------

def compare_paths(record: dict[str, Any] | str | Path, other: Any = None, *, other_title: str | None = None,
                  save: str | Path | None = None, dpi: int = 100):
    """The replayed record's path through the decision table next to agentlab's own run of the same scenario
    (or ``other``: any trace, loop or record), in one figure with the rows shared."""
    from ..lab import scenario_loop
    from ..observatory.replay import client_label, load_record, record_to_trace

    record = load_record(record)
    if other is None:
        other = scenario_loop(record["scenario"])
        other.run()
        other_title = other_title or "agentlab (run now)"
    elif isinstance(other, dict) and "requests" in other:
        other_title = other_title or f"{client_label(other)} (record)"
        other = record_to_trace(other)
    left, right = read_run(record_to_trace(record)), read_run(other)
    w1, w2 = (max(3.2, 0.6 * r.last_call + 1.4) for r in (left, right))
    height = 5.6 if max(left.last_call, right.last_call) <= 8 else 6.1   # room for slanted call labels
    fig = new_figure(2.1 + w1 + 0.35 + w2 + 0.2, height, dpi)
    for run, x, w, title in ((left, 2.1, w1, f"{client_label(record)} (record)"),
                             (right, 2.1 + w1 + 0.35, w2, other_title or "other run")):
        ax = place(fig, x, 0.75, w, 4.1)
        draw_decision_path(ax, run)
        ax.set_title(title, loc="left", fontsize=10, pad=24)
        if x > 2.1:
            ax.tick_params(axis="y", labelleft=False)
    fig.text(0.01, 0.985, f"{record['scenario']}: path through the decision table", ha="left", va="top",
             fontsize=12)
    return _finish(fig, save)


# -- a whole session (a Claude Code transcript, or any run) --------------------------------------------------

def session_overview(frame: Any, *, save: str | os.PathLike | None = None, dpi: int = DPI,
                     title: str | None = None) -> PlotFigure:
    """A session on one page: context fill per call, the cost so far, the path through the decision table
    (where it continued, retried, compacted, was blocked by a hook), and what each compaction freed."""
    run = read_run(frame)
    width = 12.0
    path_h = 3.4 if run.last_call <= 12 else 3.8
    top = 4.45
    fig = new_figure(width, top + path_h + 1.4 + 2.6, dpi)
    _heading(fig, 0.15, 0.15, title or run_title(run), fontsize=13, fontweight="bold")
    draw_context_fill(place(fig, 0.8, 0.75, 5.0, 2.3), run, legend_columns=2)
    draw_cumulative_cost(place(fig, 6.9, 0.75, 4.8, 2.3), run)
    draw_decision_path(place(fig, 2.0, top, width - 2.3, path_h), run)
    draw_compaction_bars(place(fig, 0.8, top + path_h + 1.2, 5.0, 2.2), run, compact=True)
    counters = active_counters(run)
    if counters:
        draw_recovery_counter(place(fig, 6.9, top + path_h + 1.2, 4.8, 2.2), run, counters[0])
    return _finish(fig, save)


PLOTS["session"] = session_overview
