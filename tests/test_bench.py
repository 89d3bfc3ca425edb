"""Every script in bench/ runs (in its --quick mode) and writes its figures; the docs' figures are the ones
bench/render.py renders from bench/results/*.json.

The quick runs check that the scripts work, not how fast anything is: no figure is compared with a limit.
"""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
SCRIPTS = ("overhead", "scaling", "compaction", "stepper", "notebooks", "make_test", "make_lab", "grade", "replay")


def script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_bench_script_is_run_here():
    found = {p.stem for p in BENCH.glob("*.py")} - {"results", "render"}
    assert found == set(SCRIPTS), "a bench script without a quick test (or a test without its script)"


def _quick(name: str, tmp_path: Path, *, in_process: bool = True) -> dict:
    out = tmp_path / f"{name}.json"
    if in_process:
        script(name).main(["--quick", "--out", str(out)])
    else:  # scripts that build widgets or kernels: a process of their own, as they are run
        subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--quick", "--out", str(out)], check=True,
                       capture_output=True, cwd=REPO)
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["name"] == name and document["quick"] is True
    assert {"cores", "python", "cpu"} <= document["machine"].keys()
    assert document["output"].strip()
    return document["figures"]


def test_overhead_quick(tmp_path):
    figures = _quick("overhead", tmp_path)
    assert figures["requests"] == figures["turns"] + 1
    assert set(figures["ratios"]["cpu"]) == {"agentlab/bare", "replayed/bare", "agentlab/tool-runner",
                                             "replayed/bare (raw)"}
    assert set(figures["ms_per_call"]["cpu"]) == {"agentlab", "agentlab (tools replayed)", "bare", "bare (raw)",
                                                  "tool-runner"}
    assert all(value > 0 for value in figures["ratios"]["wall"].values())
    assert set(figures["paired_ratios"]["wall"]) == set(figures["ratios"]["wall"])
    assert figures["pinned"] == "not pinned"  # a quick run leaves the test process on every core it had


def test_overhead_in_several_processes_records_the_median_of_theirs(tmp_path):
    figures = script("overhead").main(["--quick", "--processes", "2", "--out", str(tmp_path / "o.json")])["figures"]
    assert len(figures["processes"]) == 2
    for key, value in figures["paired_ratios"]["cpu"].items():
        each = [process["cpu"][key] for process in figures["processes"]]
        assert value == round(statistics.median(each), 3), key


def test_combined_figures_are_each_the_median_of_the_processes():
    combine = script("overhead").combine

    def run(ratio: float, ms: float) -> dict:
        ratios = {"wall": {"replayed/bare": ratio}, "cpu": {"replayed/bare": ratio}}
        return {"turns": 20, "requests": 21, "rounds": 40, "pinned": "pinned to core 1", "ratios": ratios,
                "paired_ratios": ratios, "ms_per_call": {"wall": {"bare": ms}, "cpu": {"bare": ms}}}

    figures = combine([run(1.2, 3.0), run(1.05, 1.0), run(1.1, 2.0)])
    assert figures["paired_ratios"]["cpu"]["replayed/bare"] == 1.1 and figures["ms_per_call"]["wall"]["bare"] == 2.0
    assert [p["cpu"]["replayed/bare"] for p in figures["processes"]] == [1.2, 1.05, 1.1]
    assert figures["rounds"] == 40 and figures["requests"] == 21


def test_overhead_pins_to_one_core_and_gives_the_others_back():
    import os

    overhead = script("overhead")
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    with overhead.one_core() as pinned:
        if before is not None and len(before) > 1:
            assert pinned.startswith("pinned to core") and len(os.sched_getaffinity(0)) == 1
    if before is not None:
        assert os.sched_getaffinity(0) == before


def test_instructions_per_call_take_the_set_ups_and_the_start_away():
    overhead = script("overhead")
    low, high = overhead.INSTRUCTION_RUNS
    start, setup, call, requests = 5_000_000, 300_000, 7_000, 21
    counts = {(runs, converse): start + runs * setup + (runs * requests * call if converse else 0)
              for runs in (low, high) for converse in (True, False)}
    assert overhead.per_call(counts, requests) == call


def test_scaling_compares_each_large_run_with_the_small_runs_beside_it():
    from types import SimpleNamespace

    scaling = script("scaling")

    def run(ms: float) -> SimpleNamespace:
        return SimpleNamespace(per_call_ms=ms)

    # the machine is twice as slow for the second half: the medians of all runs would give 3.3 / 4.0, but each
    # large run is 1.1 times the small runs that ran beside it
    sequence = [(10, run(2.2)), (1, run(2.0)), (1, run(4.0)), (10, run(4.4)), (1, run(4.0))]
    assert abs(scaling.paired_ratio(sequence, 10) - 1.1) < 1e-9
    assert scaling.paired_ratio([(1, run(1.0))], 10) is None


def test_paired_ratios_are_medians_of_each_rounds_own_ratio():
    overhead = script("overhead")
    times = {"agentlab": [2.0, 4.0, 9.0], "agentlab (tools replayed)": [1.5, 3.0, 6.0], "bare": [1.0, 2.0, 5.0],
             "bare (raw)": [0.5, 2.0, 4.0], "tool-runner": [4.0, 8.0, 10.0]}
    assert overhead._ratios(times, paired=True) == {"agentlab/bare": 2.0, "replayed/bare": 1.5,
                                                    "agentlab/tool-runner": 0.5, "replayed/bare (raw)": 1.5}


def test_overhead_profile_finds_the_loop(capsys):
    """The profile reads the loop's modules by path: it fails loudly if they move again."""
    overhead = script("overhead")
    overhead.profile_agentlab(runs=1, turns=2)
    printed = capsys.readouterr().out
    assert "the SDK call" in printed and "agentlab functions with the most own time" in printed


def test_scaling_quick(tmp_path):
    figures = _quick("scaling", tmp_path)
    assert figures["time_per_call_ratio"] > 0
    assert set(figures["streamed_memory_mb"]) == {str(figures["large"])}
    assert figures["sizes"][str(figures["large"])]["compactions"] > 0


def test_replay_quick_executes_lines_in_proportion_to_the_calls(tmp_path):
    """Replaying twice the calls executes twice the Python lines (a machine-free count; the replay that looked
    through every event after each call executed 2.5 times as many)."""
    figures = _quick("replay", tmp_path)
    assert set(figures["lines"]) == {"100", "200"}
    assert 1.8 < figures["line_ratio"] < 2.2, figures["lines"]
    assert figures["big"] is None and set(figures["sizes"]) == {"100", "200"}


def test_compaction_quick(tmp_path):
    figures = _quick("compaction", tmp_path)
    assert set(figures["operations"]) == {"clear_tool_results", "drop_oldest", "summarize", "ContextMeter.appended"}


def test_stepper_quick(tmp_path):
    figures = _quick("stepper", tmp_path, in_process=False)
    assert set(figures["plots"]) == {"overview", "dashboard", "none"}
    assert all(plot["steps"] > 0 for plot in figures["plots"].values())


def test_notebooks_quick(tmp_path):
    figures = _quick("notebooks", tmp_path, in_process=False)
    assert list(figures["seconds"]) == ["quick.ipynb"] and figures["total_s"] > 0


def test_make_test_quick_does_not_run_the_suite(tmp_path):
    figures = _quick("make_test", tmp_path)
    assert figures["runs"] == [] and figures["median_wall_s"] is None
    assert figures["fresh"] is None and figures["fresh_budget_s"] == 300
    warm, fresh = figures["scaled_budgets_s"]
    assert warm > 0 and fresh / warm == pytest.approx(300 / 180, rel=0.01)


def test_a_budget_is_judged_against_the_reference_of_the_run():
    """The budgets are wall times at the reference they were set at (1.45 s): the run they were set against
    (281.4 s) is over, 180 s at that reference is within, and a machine twice as slow has twice the time."""
    make_test = script("make_test")
    assert make_test.judged(281.4 / 1.45, 1.45, 180)["met"] is False
    assert make_test.judged(180 / 1.45, 1.45, 180) == {"ratio": 124.1, "budget_ratio": 124.1,
                                                          "scaled_budget_s": 180.0, "met": True}
    slower = make_test.judged(359 / 2.9, 2.9, 180)
    assert slower["met"] and slower["scaled_budget_s"] == 360.0
    assert not make_test.judged(361 / 2.9, 2.9, 180)["met"]
    said = make_test.verdict(slower, 359, 180)
    assert "360 s on this machine): met; 180 s unscaled NOT met" in said, said


def test_a_runs_reference_is_the_median_of_the_timings_before_and_after_it(monkeypatch):
    make_test = script("make_test")
    timings = iter([[3.4, 3.3, 3.5, 3.4, 3.6], [2.6, 2.5, 2.7, 2.6, 2.6]])
    monkeypatch.setattr(make_test, "reference_samples", lambda repeat=5: next(timings))
    run = make_test.referenced(lambda: {"wall": 425.0})
    assert run == {"wall": 425.0, "reference": 3.0, "reference_before": 3.4, "reference_after": 2.6}
    assert make_test.said_reference(run) == "reference 3.00 s (before 3.40, after 2.60)"


def test_make_lab_quick(tmp_path):
    figures = _quick("make_lab", tmp_path)
    assert figures["clone_s"] >= 0 and figures["total_s"] is None


# -- the docs' figures ----------------------------------------------------------------------------------------

def test_the_docs_figures_are_rendered_from_the_committed_results():
    render = script("render")
    assert render.stale() == [], "run `.venv/bin/python bench/render.py` (make bench-docs)"


def test_every_committed_result_has_a_block_in_the_docs():
    render = script("render")
    texts = "".join(path.read_text(encoding="utf-8") for path in render.DOCUMENTS)
    assert "<!-- bench:table -->" in texts
    for name in render.NAMES:
        assert f"<!-- bench:{name} -->" in texts, name


def test_a_changed_figure_makes_the_docs_stale(tmp_path):
    render = script("render")
    doc = tmp_path / "doc.md"
    results = render.load()
    doc.write_text("before\n<!-- bench:table -->\nold\n<!-- /bench:table -->\nafter\n", encoding="utf-8")
    assert render.stale((doc,), results) == [doc]
    doc.write_text(render.render_text(doc.read_text(encoding="utf-8"), results), encoding="utf-8")
    assert render.stale((doc,), results) == []
    assert doc.read_text(encoding="utf-8").startswith("before\n") and doc.read_text().endswith("after\n")
    changed = json.loads(json.dumps(results))
    changed["scaling"] = {"date": "d", "machine": {}, "figures": {"time_per_call_ratio": 9.99}}
    assert render.stale((doc,), changed) == [doc]


def test_a_figure_never_measured_says_so():
    render = script("render")
    empty = dict.fromkeys(render.NAMES)
    table = render.table(empty)
    assert table.count("not measured") >= len(render.NAMES)
    without_budgets = re.sub(r"budget \d+ m?s", "", table)
    assert not re.search(r"\*\*[\d.,–]+|\d+(\.\d+)? (ms|s|MB)\b", without_budgets), table
    assert render.run_block("make_test")(empty).startswith("Not measured yet")
    partial = {**empty, "make_test": {"date": "d", "machine": {}, "figures": {"runs": [], "median_wall_s": None}}}
    assert "not measured" in render.table(partial).split("make_test.py")[1].splitlines()[0]


def test_the_overhead_figure_of_several_processes_shows_their_range():
    render = script("render")
    ratios = {"replayed/bare": 1.13, "agentlab/tool-runner": 0.57, "agentlab/bare": 1.2}
    one = {"figures": {"paired_ratios": {"cpu": ratios, "wall": ratios}}}
    assert "processes" not in render._overhead_cell(one)
    several = {"figures": {**one["figures"], "processes": [
        {"cpu": {**ratios, "replayed/bare": value}} for value in (1.18, 1.11, 1.13)]}}
    assert "= **1.13** CPU, the median of 3 processes (1.11–1.18) (1.13 wall; goal ≤ 1.10)" in \
        render._overhead_cell(several)
    assert "own code alone" not in render._overhead_cell(several)  # a run from before the raw way was timed


def test_the_overhead_figure_names_the_loops_own_code_beside_the_raw_call():
    render = script("render")
    ratios = {"replayed/bare": 0.96, "agentlab/tool-runner": 0.49, "agentlab/bare": 1.1, "replayed/bare (raw)": 1.14}
    doc = {"figures": {"paired_ratios": {"cpu": ratios, "wall": ratios},
                       "processes": [{"cpu": {**ratios, "replayed/bare (raw)": v}} for v in (1.12, 1.14, 1.19)],
                       "instructions_per_call": {"agentlab (tools replayed)": 900, "bare": 1000, "bare (raw)": 800}}}
    cell = render._overhead_cell(doc)
    assert "replayed/bare (raw) = 1.14 CPU, the median of 3 processes (1.12–1.19)" in cell
    assert "replayed/bare = 0.900, replayed/bare (raw) = 1.125" in cell


def test_an_unknown_block_is_named():
    render = script("render")
    with pytest.raises(SystemExit, match="bench:nonsense"):
        render.render_text("<!-- bench:nonsense -->\n<!-- /bench:nonsense -->", {})


def test_grade_quick(tmp_path):
    figures = _quick("grade", tmp_path)
    assert figures["rounds"] == 1
    assert set(figures["cpu_s"]) == {"live", "records", "reference"}
    assert all(value > 0 for value in figures["cpu_s"].values())
    assert set(figures["ratio_to_reference"]) == {"live", "records"}
