"""An Agg canvas that lays out and rasterises each distinct text once, for figures drawn again and again.

Matplotlib's Agg renderer lays out and rasterises every text glyph by glyph on every draw; in the stepper's
plots that is a large part of the time of a redraw, though most labels (tick labels, titles, legend entries,
the rows of the decision table) are the same from one Step to the next. ``CachingCanvas`` keeps, per canvas,
the coverage bitmap and the metrics of every text it has drawn, keyed by everything the bitmap depends on:
the string, every font property, the dpi, the hinting and antialiasing. A label whose string or font changed
has a new key and is rasterised afresh; a cached bitmap is drawn in the colour and alpha of the current draw.

Only matplotlib's public API is used: the font is found with ``font_manager.findfont`` and ``get_font``,
rasterised whole with ``FT2Font.draw_glyphs_to_bitmap``, and composited with ``RendererAgg.draw_image`` at a
whole-pixel position. A text at another angle than 0 or 90 degrees, or one with math, is drawn by Agg as
usual. The pixels of a text can differ slightly from the stock canvas's (whole pixels, no subpixel glyph
positions); a figure drawn by this canvas is the same, pixel for pixel, whether its texts came from the cache
or not.
"""

from __future__ import annotations

from typing import Any

from ..core.extras import missing_extra

try:  # the notebook stack: the lab extra
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg, get_hinting_flag
    from matplotlib.font_manager import FontProperties, findfont, get_font
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
    """Every property a FontProperties has, read through its public getters, as a hashable value."""
    return (tuple(prop.get_family()), prop.get_style(), prop.get_variant(), prop.get_weight(),
            prop.get_stretch(), prop.get_size_in_points(), _freeze(prop.get_file()), prop.get_math_fontfamily())


class TextCache:
    """Bitmaps and metrics of texts already drawn: ``hits`` and ``misses`` count the rasterisations."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.bitmaps: dict[tuple[Any, ...], tuple[np.ndarray, int, int]] = {}
        self.metrics: dict[tuple[Any, ...], Any] = {}   # text extents
        self.hits = 0
        self.misses = 0

    def clear(self) -> None:
        self.bitmaps.clear()
        self.metrics.clear()

    def room(self, table: dict[Any, Any]) -> None:
        if len(table) >= self.max_entries:
            table.clear()


class CachingRenderer(RendererAgg):
    """RendererAgg whose plain (not math, not TeX), level or upright text goes through a TextCache."""

    def __init__(self, width: float, height: float, dpi: float, cache: TextCache) -> None:
        super().__init__(width, height, dpi)
        self.text_cache = cache

    def _text_key(self, s: str, prop: FontProperties, *extra: Any) -> tuple[Any, ...]:
        return (s, font_key(prop), float(self.dpi), str(get_hinting_flag()), *extra)

    def _bitmap(self, s: str, prop: FontProperties, antialiased: bool) -> tuple[np.ndarray, int, int]:
        """The text's coverage (rows top to bottom), and where its top-left pixel lies from the text's origin
        on the baseline: pixels right and pixels up."""
        cache = self.text_cache
        key = self._text_key(s, prop, bool(antialiased))
        entry = cache.bitmaps.get(key)
        if entry is not None:
            cache.hits += 1
            return entry
        cache.misses += 1
        font = get_font(findfont(prop))
        font.clear()
        font.set_size(prop.get_size_in_points(), self.dpi)
        font.set_text(s, 0, flags=get_hinting_flag())
        font.draw_glyphs_to_bitmap(antialiased=antialiased)
        xo, yo = font.get_bitmap_offset()
        image = np.array(font.get_image(), dtype=np.uint8)   # a copy: the font's buffer is reused
        descent = font.get_descent() / 64.0
        # as Agg's own text drawing places it: one pixel further down the text than the offsets say
        entry = (image, round(xo / 64.0), round(image.shape[0] - descent - yo / 64.0) - 1)
        cache.room(cache.bitmaps)
        cache.bitmaps[key] = entry
        return entry

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):  # type: ignore[override]
        if ismath or angle not in (0, 90):
            return super().draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)
        coverage, right, up = self._bitmap(s, prop, gc.get_antialiased())
        if not coverage.size:
            return None
        if angle == 90:   # turned a quarter anticlockwise about the origin
            coverage, right, up = np.rot90(coverage), -up, right + coverage.shape[1]
        red, green, blue, alpha = gc.get_rgb()   # the text's colour, its alpha applied
        rgba = np.empty((*coverage.shape, 4), dtype=np.uint8)
        rgba[..., 0], rgba[..., 1], rgba[..., 2] = round(red * 255), round(green * 255), round(blue * 255)
        rgba[..., 3] = coverage if alpha >= 1 else (coverage * alpha).astype(np.uint8)
        # draw_image takes the image's bottom-left corner, counted from the canvas's bottom-left
        self.draw_image(gc, round(x) + right, round(self.height - y) + up - coverage.shape[0], rgba[::-1])
        return None

    def get_text_width_height_descent(self, s, prop, ismath):  # type: ignore[override]
        if ismath:
            return super().get_text_width_height_descent(s, prop, ismath)
        cache = self.text_cache
        key = self._text_key(s, prop)
        found = cache.metrics.get(key)
        if found is None:
            found = super().get_text_width_height_descent(s, prop, ismath)
            cache.room(cache.metrics)
            cache.metrics[key] = found
        return found


class CachingCanvas(FigureCanvasAgg):
    """FigureCanvasAgg drawing with a CachingRenderer; the TextCache lives as long as the canvas."""

    def __init__(self, figure: Any = None, cache: TextCache | None = None) -> None:
        super().__init__(figure)
        self.text_cache = cache if cache is not None else TextCache()
        self.caching_renderer: CachingRenderer | None = None

    def get_renderer(self) -> RendererAgg:
        w, h = self.get_width_height(physical=True)
        found = self.caching_renderer
        if found is None or (found.width, found.height, found.dpi) != (w, h, self.figure.dpi):
            found = self.caching_renderer = CachingRenderer(w, h, self.figure.dpi, self.text_cache)
        self.renderer = found
        return found
