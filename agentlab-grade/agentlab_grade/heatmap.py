"""The grade heatmap: report cards side by side, one row per client, one column per branch of the decision table
(``agentlab grade --heatmap FILE.png``; in a notebook, the figure shows itself). It needs matplotlib, the
``heatmap`` extra: ``pip install 'agentlab-grade[heatmap]'``; it is drawn with the workbench's figure helpers
(agentlab.ui.plots), and every count comes from agentlab.grading.verdict."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from agentlab.core.extras import MissingExtra

try:
    import matplotlib  # noqa: F401  (checked here, so that the message names this distribution's extra)
except ImportError as exc:
    _missing = (exc.name or "").split(".")[0]
    if _missing not in ("matplotlib", "numpy"):
        raise
    raise MissingExtra(f"the grade heatmap (agentlab_grade.heatmap) needs {_missing}, which comes "
                       "with the 'heatmap' extra: pip install 'agentlab-grade[heatmap]'") from None

from agentlab.ui.plots import (
    DPI,
    ERROR_COLOR,
    MIN_FONT,
    OK_COLOR,
    PlotFigure,
    _empty,
    _finish,
    _heading,
    new_figure,
    place,
)

__all__ = ["grade_heatmap"]

LEFT, RIGHT, TOP, ROW_H = 2.2, 0.75, 2.35, 0.55   # inches: the clients' names, the last header's slant, the headers


def unreached_scenarios(report: Any, rule: str) -> int:
    """How many scenarios judged ``rule`` although their own branch was not reached (a thinking scenario whose
    request enabled no thinking still judges its cut-off reply): counted in the cell, marked apart."""
    return sum(1 for g in report.grades if g.not_reached and (c := g.check(rule)) is not None
               and c.status != "not_reached")


def grade_heatmap(reports: Iterable[Any], *, save: str | os.PathLike | None = None, dpi: int = DPI,
                  title: str = "Careful-loop rules: scenarios passed per branch") -> PlotFigure:
    """Report cards side by side (``agentlab.grading.command.Report``): one row per client, one column per branch (a
    rule of the decision table), each cell the share of the client's scenarios where the rule held — green
    all, red none, grey where the branch was never reached — with the count written in (``≠n``: n scenarios
    where it differs from the reference loop's choice, counted as held unless ``--policy strict``; ``n in –``: n
    scenarios whose own branch was not reached, which a rule they did reach still judges). Every count
    comes from ``agentlab.grading.verdict``: a rule reached in a scenario whose own branch was not
    reached counts too."""
    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap

    from agentlab.grading.command import RULES
    from agentlab.grading.verdict import cell, counts

    reports = list(reports)
    cells = {(y, r.name): cell([c for g in rep.grades if (c := g.check(r.name)) is not None], rep.policy)
             for y, rep in enumerate(reports) for r in RULES}
    rules = [r for r in RULES if any(cells[(y, r.name)][3] for y in range(len(reports)))]
    cols, rows = max(1, len(rules)), max(1, len(reports))
    # at most 12.4 inches wide (agentlab.ui.plots.MIN_FONT): JupyterLab shows it at the notebook's width, where
    # its 9-point texts stay 9 px tall
    col_w = min(0.5, (12.4 - LEFT - RIGHT) / cols)
    fig = new_figure(LEFT + col_w * cols + RIGHT, TOP + ROW_H * rows + 0.85, dpi)
    ax = place(fig, LEFT, TOP, col_w * cols, ROW_H * rows)
    _heading(fig, 0.15, 0.12, title, fontsize=12, fontweight="bold")
    if not reports or not rules:
        _empty(ax, "nothing graded")
        return _finish(fig, save)
    values = np.full((len(reports), cols), np.nan)
    labels: list[list[str]] = [["" for _ in rules] for _ in reports]
    for y in range(len(reports)):
        for x, rule in enumerate(rules):
            held, _, differs, reached = cells[(y, rule.name)]
            if reached:
                values[y, x] = (held + differs) / reached
                aside = unreached_scenarios(reports[y], rule.name)
                labels[y][x] = (f"{held + differs}/{reached}" + (f"\n≠{differs}" if differs else "")
                                + (f"\n{aside} in –" if aside else ""))
            else:
                labels[y][x] = "–"
    cmap = LinearSegmentedColormap.from_list("grade", [ERROR_COLOR, "#F2D16B", OK_COLOR]).with_extremes(
        bad="#E6E6E6")
    ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    for y in range(len(reports)):
        for x in range(cols):
            ax.text(x, y, labels[y][x], ha="center", va="center", fontsize=MIN_FONT, linespacing=1.0,
                    color="#555555" if np.isnan(values[y, x]) else "black")
    ax.set_xticks(range(cols))
    ax.set_xticklabels([f"{r.branch}\n{r.name}" for r in rules], rotation=60, ha="left", fontsize=MIN_FONT,
                       rotation_mode="anchor")
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(reports)))
    tallies = [counts(g.verdict for g in rep.grades) for rep in reports]
    ax.set_yticklabels([f"{rep.client}  ({n['pass'] + n['policy']}/{len(rep.grades) - n['not_reached']})"
                        for rep, n in zip(reports, tallies, strict=True)], fontsize=MIN_FONT)
    ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, len(reports), 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=2)
    ax.tick_params(which="both", length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    fig_w, fig_h = fig.get_size_inches()
    fig.text(0.15 / fig_w, 0.1 / fig_h, "cell: scenarios where the rule held / scenarios that reached it;  ≠n: n of "
             "them differ from the reference loop's choice;\nn in –: n of them in scenarios whose own branch was not "
             "reached (– on the report card);  –: never reached;\n(n/m) after a client: scenarios with no failure / "
             "scenarios judged", fontsize=MIN_FONT, color="#555555", va="bottom")
    return _finish(fig, save)
