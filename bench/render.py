"""Write the benchmark figures of README.md and docs/benchmarks.md from bench/results/*.json.

    .venv/bin/python bench/render.py           # rewrite the generated blocks (also: make bench-docs)
    .venv/bin/python bench/render.py --check   # exit 1 and name the files whose blocks are out of date

A generated block sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``; everything between the
two markers is replaced, nothing outside them is touched. A figure that no run has measured yet (no JSON
file, or a null in it) is rendered as "not measured", never guessed. tests/test_bench.py fails when a
document differs from what its JSON files render.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
DOCUMENTS = (REPO / "README.md", REPO / "docs" / "benchmarks.md")
NAMES = ("overhead", "scaling", "compaction", "stepper", "notebooks", "make_test", "make_lab", "grade")
NOT_MEASURED = "not measured"
BLOCK = re.compile(r"(<!-- bench:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)", re.DOTALL)

Results = dict[str, dict[str, Any] | None]


def load(folder: Path = RESULTS) -> Results:
    """Every bench's JSON document, None for a bench with no file."""
    out: Results = {}
    for name in NAMES:
        path = folder / f"{name}.json"
        out[name] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    return out


def fig(value: Any, fmt: str = "{}", bold: bool = False) -> str:
    """A figure, formatted; "not measured" when it is missing."""
    if value is None:
        return NOT_MEASURED
    text = fmt.format(value)
    return f"**{text}**" if bold else text


def get(doc: dict[str, Any] | None, *path: str) -> Any:
    value: Any = doc.get("figures") if doc else None
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def when(doc: dict[str, Any] | None) -> str:
    """Date and machine of a run, in words."""
    if doc is None:
        return NOT_MEASURED
    m = doc.get("machine") or {}
    load = f", load average {m['load_1min']}" if m.get("load_1min") is not None else ""
    return f"{doc.get('date')}, {m.get('cores')} cores ({m.get('cpu')}), Python {m.get('python')}{load}"


# -- the README's table: one row per script ----------------------------------------------------------------

def _overhead_cell(doc: dict[str, Any] | None) -> str:
    processes = get(doc, "processes") or []

    def ratio(clock: str, key: str, bold: bool = False) -> str:  # the median of the rounds' own ratios
        return fig(get(doc, "paired_ratios", clock, key), "{:.2f}", bold)

    def spread(key: str) -> str:  # run in several processes: the figure is the median of theirs
        each = [p["cpu"][key] for p in processes if key in p.get("cpu", {})]
        return f", the median of {len(each)} processes ({min(each):.2f}–{max(each):.2f})" if len(each) > 1 else ""

    counted = get(doc, "instructions_per_call") or {}
    replayed, bare, raw = (counted.get(k) for k in ("agentlab (tools replayed)", "bare", "bare (raw)"))
    instructions = (f"; instructions per call (valgrind) replayed/bare = {replayed / bare:.3f}"
                    if replayed and bare else "")
    if instructions and raw:
        instructions += f", replayed/bare (raw) = {replayed / raw:.3f}"
    own = ""  # runs before the raw way was timed have no such ratio
    if get(doc, "paired_ratios", "cpu", "replayed/bare (raw)") is not None:
        own = (f"; the loop's own code alone, replayed/bare (raw) = {ratio('cpu', 'replayed/bare (raw)')} CPU"
               f"{spread('replayed/bare (raw)')} (bare (raw) reads the reply's JSON as agentlab does, builds no "
               "`Message`)")
    return (f"the loop's own overhead, agentlab (tools replayed)/bare = {ratio('cpu', 'replayed/bare', True)} CPU"
            f"{spread('replayed/bare')} ({ratio('wall', 'replayed/bare')} wall; goal ≤ 1.10); agentlab/tool-runner = "
            f"{ratio('cpu', 'agentlab/tool-runner', True)} CPU{spread('agentlab/tool-runner')} "
            f"({ratio('wall', 'agentlab/tool-runner')} wall; goal ≤ 0.55){own}; "
            f"agentlab/bare {ratio('cpu', 'agentlab/bare')} CPU (bare runs no tools){instructions}")


def _scaling_cell(doc: dict[str, Any] | None) -> str:
    streamed = get(doc, "streamed_memory_mb") or {}
    small, large = get(doc, "small"), get(doc, "large")
    # paired: each 10k run against the 1k runs just before and after it
    return (f"time per call 10k/1k = {fig(get(doc, 'paired_cpu_time_per_call_ratio'), '{:.2f}', True)} CPU "
            f"({fig(get(doc, 'paired_time_per_call_ratio'), '{:.2f}')} wall, paired; flat = 1, linear growth = 10; "
            "goal ≤ 1.10); "
            f"peak memory with `Trace(keep=False)` "
            f"{fig(streamed.get(str(small)), '{:.1f} MB')} at {fig(small, '{:,}')} turns and "
            f"{fig(streamed.get(str(large)), '{:.1f} MB')} at {fig(large, '{:,}')}")


def _compaction_cell(doc: dict[str, Any] | None) -> str:
    ratios = [op["per_turn_ratio"] for op in (get(doc, "operations") or {}).values()]
    span = f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else None
    return f"per-turn ratio 10k/1k {fig(span, bold=True)} (linear; quadratic would be 10)"


def _stepper_cell(doc: dict[str, Any] | None) -> str:
    p = lambda plot, key: get(doc, "plots", plot, key)  # noqa: E731
    return (f"overview wall p95 {fig(p('overview', 'wall_p95_ms'), '{:.0f} ms', True)} (budget 150 ms; CPU p95 "
            f"{fig(p('overview', 'cpu_p95_ms'), '{:.0f} ms')}), dashboard wall p95 "
            f"{fig(p('dashboard', 'wall_p95_ms'), '{:.0f} ms', True)} (budget 400 ms; CPU p95 "
            f"{fig(p('dashboard', 'cpu_p95_ms'), '{:.0f} ms')}), panes without a plot "
            f"{fig(p('none', 'wall_median_ms'), '{:.0f} ms')} (median)")


def _notebooks_cell(doc: dict[str, Any] | None) -> str:
    seconds = list((get(doc, "seconds") or {}).values())
    span = f"{min(seconds):.1f}–{max(seconds):.1f} s each" if seconds else NOT_MEASURED
    return (f"{len(seconds) or NOT_MEASURED} notebooks in {fig(get(doc, 'total_s'), '{:.1f} s', True)} ({span}; "
            f"budget 90 s)")


def _budget(judgement: dict[str, Any] | None, budget: float) -> str:
    """A run's wall / reference against its budget, or the budget in seconds when the run was not judged so."""
    if not judgement:
        return f"budget {budget:.0f} s"
    return (f"{judgement['ratio']:.0f} × the reference against a budget of {judgement['budget_ratio']:.0f} ×, "
            f"{budget:.0f} s at the reference it was set at, {judgement['scaled_budget_s']:.0f} s at this run's: "
            + ("met" if judgement["met"] else "**not met**"))


def _make_test_cell(doc: dict[str, Any] | None) -> str:
    runs = get(doc, "runs") or []
    fresh = get(doc, "fresh") or {}
    warm = _budget(get(doc, "warm"), get(doc, "budget_s") or 180)
    cold = _budget(get(doc, "cold"), get(doc, "fresh_budget_s") or 300)
    return (f"warm: median of {len(runs) or NOT_MEASURED} runs {fig(get(doc, 'median_wall_s'), '{:.1f} s', True)} "
            f"wall, {fig(get(doc, 'median_cpu_s'), '{:.0f} s')} CPU ({warm}); a fresh clone in a private folder, "
            f"venv and install included: {fig(fresh.get('wall'), '{:.1f} s', True)} wall ({cold}; pip's download "
            "cache warm)")


def _make_lab_cell(doc: dict[str, Any] | None) -> str:
    return (f"{fig(get(doc, 'total_s'), '{:.0f} s', True)} (venv + install {fig(get(doc, 'install_s'), '{:.0f} s')}, "
            f"JupyterLab start {fig(get(doc, 'start_s'), '{:.1f} s')}; pip's download cache warm)")


def _grade_cell(doc: dict[str, Any] | None) -> str:
    ratio = get(doc, "ratio_to_reference") or {}
    cpu = get(doc, "cpu_s") or {}
    return (f"one client graded live on every gradeable scenario {fig(cpu.get('live'), '{:.2f} s', True)} CPU "
            f"(/reference {fig(ratio.get('live'), '{:.2f}')}); every committed record graded again and written as "
            f"text, JSON and JUnit {fig(cpu.get('records'), '{:.3f} s', True)} CPU (/reference "
            f"{fig(ratio.get('records'), '{:.2f}')}); medians of {fig(get(doc, 'rounds'))} rounds")


ROWS: tuple[tuple[str, str, Callable[[dict[str, Any] | None], str]], ...] = (
    ("overhead", "one 20-turn tool transcript: agentlab vs bare `messages.create` replaying the same requests vs "
     "the SDK's beta tool runner", _overhead_cell),
    ("scaling", "time per call at 1,000 and 10,000 scripted turns with compaction on", _scaling_cell),
    ("compaction", "each compaction strategy and the context meter on 1,000- and 10,000-turn histories",
     _compaction_cell),
    ("stepper", "a Step in the stepper on the tour scenario, plot included", _stepper_cell),
    ("notebooks", "every lesson executed in a fresh kernel", _notebooks_cell),
    ("make_test", "`make test`, warm and on a fresh clone: every test and every lesson, one pytest run",
     _make_test_cell),
    ("make_lab", "a fresh clone to an open JupyterLab with `make lab`", _make_lab_cell),
    ("grade", "`agentlab grade`: lesson 12's careful loop graded live, and every committed record graded again",
     _grade_cell),
)


def table(results: Results) -> str:
    lines = ["| Script | Measures | Result (this round's run) | Measured |", "|---|---|---|---|"]
    for name, what, cell in ROWS:
        doc = results.get(name)
        result = cell(doc) if doc is not None else f"{NOT_MEASURED} (no bench/results/{name}.json yet)"
        lines.append(f"| `.venv/bin/python bench/{name}.py` | {what} | {result} | {when(doc)} |")
    return "\n".join(lines) + "\n"


def run_block(name: str) -> Callable[[Results], str]:
    """docs/benchmarks.md: the date and machine of a script's run, and what it printed."""
    def render(results: Results) -> str:
        doc = results.get(name)
        if doc is None:
            return f"Not measured yet: run `.venv/bin/python bench/{name}.py`.\n"
        return (f"Measured {when(doc)}, with `{doc.get('command')}`:\n\n```\n{doc.get('output', '').rstrip()}\n```\n")
    return render


RENDERERS: dict[str, Callable[[Results], str]] = {"table": table, **{name: run_block(name) for name in NAMES}}


def render_text(text: str, results: Results) -> str:
    """``text`` with every generated block rendered again from ``results``."""
    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise SystemExit(f"unknown generated block <!-- bench:{name} --> (known: {', '.join(RENDERERS)})")
        return match.group(1) + RENDERERS[name](results) + match.group(4)
    return BLOCK.sub(replace, text)


def stale(documents: tuple[Path, ...] = DOCUMENTS, results: Results | None = None) -> list[Path]:
    """The documents whose generated blocks differ from what the JSON files render."""
    results = load() if results is None else results
    return [path for path in documents
            if render_text(path.read_text(encoding="utf-8"), results) != path.read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say which documents are out of date")
    args = parser.parse_args(argv)
    if args.check:
        out_of_date = stale()
        for path in out_of_date:
            print(f"{path.relative_to(REPO)}: its benchmark figures differ from bench/results (run bench/render.py)")
        return 1 if out_of_date else 0
    results = load()
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        new = render_text(text, results)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote the benchmark figures in {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
