"""The Python API under faults a learner meets in a notebook: a trace that cannot be written is said (a warning at
the end of the run, an error when the loop is built), never a success without a word and without the file."""

from __future__ import annotations

import json
import os
import warnings

import pytest

from agentlab.core.errors import ConfigError
from agentlab.core.trace import Trace, TraceWriteWarning
from agentlab.lab import run_scenario, scenario_loop


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_trace_on_a_full_disk_ends_the_run_with_a_warning_naming_the_file():
    loop = scenario_loop("end_turn", trace="/dev/full")
    with pytest.warns(TraceWriteWarning, match=r"^trace /dev/full: could not write event 0 \(start\): No space left"):
        result = loop.run()
    assert result.subtype == "success"  # the run and its events are kept
    assert loop.trace.events[-1].kind == "result" and "No space left" in loop.trace.write_error


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_the_warning_comes_at_every_run_that_loses_its_file_and_points_at_the_callers_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):
            run_scenario("end_turn", trace="/dev/full")
    assert [w.category for w in caught] == [TraceWriteWarning, TraceWriteWarning]
    assert all(w.filename == __file__ for w in caught)


def test_a_trace_file_another_run_holds_is_refused_when_the_loop_is_built(tmp_path):
    path = tmp_path / "t.jsonl"
    holder = scenario_loop("tool_use", trace=str(path))
    holder.step()  # its first call is written: the file is open and locked until the run ends
    assert not holder.done
    with pytest.raises(ConfigError, match=r"^trace .*t\.jsonl: another run is writing this file now"):
        scenario_loop("tool_use", trace=str(path))
    holder.run()


def test_a_finished_run_frees_its_trace_for_the_next_run_with_the_same_path(tmp_path):
    path = tmp_path / "t.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = scenario_loop("tool_use", trace=str(path))  # the loop is kept: only the end of the run frees the file
        first.run()
        second = scenario_loop("tool_use", trace=str(path))
        second.run()
    assert first.trace.write_error is None and second.trace.write_error is None
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert kinds[0] == "start" and kinds[-1] == "result" and kinds.count("result") == 1


def test_a_trace_whose_folder_cannot_be_made_is_refused_when_the_loop_is_built(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"^trace .*file/t\.jsonl: cannot create its folder"):
        scenario_loop("end_turn", trace=str(tmp_path / "file" / "t.jsonl"))


def test_a_trace_object_of_the_caller_warns_at_the_end_too_and_events_after_the_result_are_appended(tmp_path):
    path = tmp_path / "t.jsonl"
    trace = Trace(path)
    scenario_loop("end_turn", trace=trace).run()
    from agentlab.core.events import ResultEvent

    trace.emit(ResultEvent(subtype="success"), call=9)  # an event after the end: appended, never emptying the file
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "start" and json.loads(lines[-1])["call"] == 9


def test_the_cli_trace_does_not_warn_it_says_the_failure_in_its_own_words():
    trace = Trace("/dev/full", warn=False)
    from agentlab.core.events import ResultEvent

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace.emit(ResultEvent(subtype="success"), call=1)
    assert "No space left" in trace.write_error


# --- a mistyped name in a notebook: one short message, as the CLI says it ---------------------------------------

NOTEBOOK_CALLS = {
    "scenario_loop": "from agentlab import scenario_loop\nscenario_loop('no_such')",
    "run_scenario": "from agentlab.lab import run_scenario\nrun_scenario('no_such')",
    "load_scenario": "from agentlab import load_scenario\nload_scenario('no_such')",
    "unknown_setting": "from agentlab import scenario_loop\nscenario_loop('end_turn', max_turnz=3)",
    "ReplayStepper": "from agentlab.ui.widgets import ReplayStepper\nReplayStepper('no_such')",
    "show_requests": "from agentlab.exercises.lesson11 import show_requests\nshow_requests('no_such')",
}


@pytest.fixture(scope="module")
def notebook_errors() -> dict[str, dict]:
    """Each call of NOTEBOOK_CALLS as a cell of one notebook, run in a real kernel as JupyterLab runs it: the
    error output of each cell."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in NOTEBOOK_CALLS.values()])
    NotebookClient(nb, kernel_name="python3", timeout=120, allow_errors=True).execute()
    return {name: next(o for o in cell.outputs if o["output_type"] == "error")
            for name, cell in zip(NOTEBOOK_CALLS, nb.cells, strict=True)}


@pytest.mark.parametrize("name", list(NOTEBOOK_CALLS))
def test_a_mistyped_name_in_a_notebook_is_one_line_without_agentlabs_frames(notebook_errors, name):
    import re

    error = notebook_errors[name]
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    assert shown == f"{error['ename']}: {error['evalue']}", shown[:2000]
    assert error["ename"] in ("ScenarioError", "ConfigError")
    assert "no_such" in shown or "max_turnz" in shown
