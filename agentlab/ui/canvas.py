"""An Agg canvas that lays out and rasterises each distinct text once, for figures drawn again and again.

Matplotlib's Agg renderer lays out and rasterises every text glyph by glyph on every draw, and measures it
again for every layout pass; in the stepper's plots that is most of the time of a redraw, though most
labels (tick labels, titles, legend entries, the rows of the decision table) are the same from one Step
to the next. ``CachingCanvas`` keeps, per canvas, the coverage bitmap and the metrics of every text it
has drawn, keyed by everything the bitmap depends on: the string, every font property, the dpi, the
hinting and antialiasing. A label whose string or font changed has a new key and is rasterised afresh;
a cached bitmap is drawn in the colour and alpha of the current draw.

A text is rasterised whole at a whole-pixel position and composited as one image (the way Agg drew text
up to matplotlib 3.10), not glyph by glyph at subpixel positions, so its pixels can differ slightly from
the stock canvas's; a figure drawn by this canvas is the same, pixel for pixel, whether its texts came
from the cache or not.
"""

from __future__ import annotations

import math
from typing import Any

from ..core.extras import missing_extra

try:  # the notebook stack: the lab extra
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg, get_hinting_flag
    from matplotlib.font_manager import FontProperties, fontManager, get_font
except ImportError as _exc:
    raise missing_extra(_exc, "agentlab.ui.canvas (the plots' canvas)") from None

MAX_ENTRIES = 4096   # distinct texts kept per canvas; the cache starts over when it holds more


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def font_key(prop: FontProperties) -> tuple[Any, ...]:
    """Every property of a FontProperties, as a hashable value that does not change when it does."""
    key = tuple(vars(prop).items())
    try:
        hash(key)
    except TypeError:
        key = tuple((name, _freeze(value)) for name, value in key)
    return key


class TextCache:
    """Bitmaps and metrics of texts already drawn: ``hits`` and ``misses`` count the rasterisations."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.bitmaps: dict[tuple[Any, ...], tuple[np.ndarray, float, float, float]] = {}
        self.metrics: dict[tuple[Any, ...], Any] = {}   # text extents; font heights
        self.hits = 0
        self.misses = 0

    def clear(self) -> None:
        self.bitmaps.clear()
        self.metrics.clear()

    def _room(self, table: dict[Any, Any]) -> None:
        if len(table) >= self.max_entries:
            table.clear()


class CachingRenderer(RendererAgg):
    """RendererAgg whose plain (not math, not TeX) text goes through a TextCache."""

    def __init__(self, width: float, height: float, dpi: float, cache: TextCache) -> None:
        super().__init__(width, height, dpi)
        self.text_cache = cache

    def _text_key(self, s: str, prop: FontProperties, *extra: Any) -> tuple[Any, ...]:
        return (s, font_key(prop), float(self.dpi), str(get_hinting_flag()), *extra)

    def _bitmap(self, s: str, prop: FontProperties, antialiased: bool) -> tuple[np.ndarray, float, float, float]:
        cache = self.text_cache
        key = self._text_key(s, prop, bool(antialiased))
        entry = cache.bitmaps.get(key)
        if entry is not None:
            cache.hits += 1
            return entry
        cache.misses += 1
        font = self._prepare_font(prop)
        font.set_text(s, 0, flags=get_hinting_flag())
        font.draw_glyphs_to_bitmap(antialiased=antialiased)
        xo, yo = font.get_bitmap_offset()
        image = np.array(font.get_image(), dtype=np.uint8)   # a copy: the font's buffer is reused
        entry = (image, xo / 64.0, yo / 64.0, font.get_descent() / 64.0)
        cache._room(cache.bitmaps)
        cache.bitmaps[key] = entry
        return entry

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):  # type: ignore[override]
        if ismath:
            return super().draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)
        image, xo, yo, descent = self._bitmap(s, prop, gc.get_antialiased())
        if not image.size:
            return None
        # The bitmap's bottom-left corner sits ``descent`` below the baseline; Agg rotates about that corner.
        xd = descent * math.sin(math.radians(angle))
        yd = descent * math.cos(math.radians(angle))
        self._renderer.draw_text_image(image, round(x + xo + xd), round(y + yo + yd) + 1, angle, gc)
        return None

    def _get_font_height_metrics(self, prop: FontProperties) -> Any:
        """Ascent, descent and line gap of the font (what ``Text`` reads from its sfnt tables at every layout
        when the renderer does not say), computed as ``Text`` does and kept per font and dpi."""
        cache = self.text_cache
        key = ("font height", font_key(prop), float(self.dpi))
        found = cache.metrics.get(key)
        if found is None:
            found = (None, None, None)
            font: Any = get_font(fontManager._find_fonts_by_props(prop))
            for table_name, gap_key, ascent_key, descent_key in (
                    ("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
                    ("hhea", "lineGap", "ascent", "descent")):
                table = font.get_sfnt_table(table_name)
                if table is None:
                    continue
                fontsize = prop.get_size_in_points()
                units_per_em = font.get_sfnt_table("head")["unitsPerEm"]
                scale = 1 / units_per_em * fontsize * self.dpi / 72
                found = (table[ascent_key] * scale, -table[descent_key] * scale, table[gap_key] * scale)
                break
            cache._room(cache.metrics)
            cache.metrics[key] = found
        return found

    def get_text_width_height_descent(self, s, prop, ismath):  # type: ignore[override]
        if ismath:
            return super().get_text_width_height_descent(s, prop, ismath)
        cache = self.text_cache
        key = self._text_key(s, prop)
        found = cache.metrics.get(key)
        if found is None:
            found = super().get_text_width_height_descent(s, prop, ismath)
            cache._room(cache.metrics)
            cache.metrics[key] = found
        return found


class CachingCanvas(FigureCanvasAgg):
    """FigureCanvasAgg drawing with a CachingRenderer; the TextCache lives as long as the canvas."""

    def __init__(self, figure: Any = None, cache: TextCache | None = None) -> None:
        super().__init__(figure)
        self.text_cache = cache if cache is not None else TextCache()

    def get_renderer(self) -> RendererAgg:
        w, h = self.get_width_height(physical=True)
        key = w, h, self.figure.dpi
        if self._lastKey != key:
            self.renderer = CachingRenderer(w, h, self.figure.dpi, self.text_cache)
            self._lastKey = key  # type: ignore[assignment]
        return self.renderer
