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
    "hint": "from agentlab.exercises import hint\nhint('no_such')",
    "show_solution": "from agentlab.exercises import show_solution\nshow_solution('no_such')",
}


@pytest.fixture(scope="module")
def notebook_errors(pytestconfig) -> dict[str, dict]:
    """Each call of NOTEBOOK_CALLS as a cell of one notebook, run in a real kernel as JupyterLab runs it: the
    error output of each cell."""
    import nbformat
    from nbclient import NotebookClient

    from tests.preloaded_kernel import kernel_for

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in NOTEBOOK_CALLS.values()])
    NotebookClient(nb, kernel_name=kernel_for(pytestconfig), timeout=120, allow_errors=True).execute()
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


# --- every report is written whole or not at all, through one function ---------------------------------------------

def test_write_output_replaces_a_file_whole_keeping_its_permissions_and_a_link_to_it(tmp_path):
    from agentlab.core.paths import write_output

    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_output(link, "new", "--save")
    assert link.is_symlink() and real.read_text() == "new" and real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def _under_a_file_size_limit(write) -> str:
    """``write()`` in a forked child whose file-size limit (100 bytes) stands for a full disk: the ConfigError it
    raised, or "no error"."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        import resource

        said = b"no error"
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
            write()
        except ConfigError as exc:
            said = str(exc).encode()
        finally:
            os.write(write_end, said)
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    return said


def test_write_output_that_fails_midway_leaves_the_old_file_and_nothing_beside_it(tmp_path):
    from agentlab.core.paths import write_output

    report = tmp_path / "report.json"
    report.write_text("the last good report")
    said = _under_a_file_size_limit(lambda: write_output(report, "x" * 10_000, "--save"))
    assert said == f"--save {report}: cannot write it: File too large; the previous file is kept as it was"
    assert report.read_text() == "the last good report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_record_written_again_on_a_full_disk_keeps_the_committed_one(tmp_path):
    from agentlab.observatory.records import record_path, write_record

    record = {"client": "c", "version": "1", "scenario": "end_turn", "requests": ["x" * 10_000]}
    path = record_path(tmp_path, "c", "1", "end_turn")
    path.parent.mkdir(parents=True)
    path.write_text("the committed record")
    said = _under_a_file_size_limit(lambda: write_record(record, tmp_path))
    assert said.endswith("File too large; the previous file is kept as it was"), said
    assert path.read_text() == "the committed record"
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_session_fixtures_are_written_whole_and_a_failed_rewrite_keeps_the_committed_ones(tmp_path):
    from agentlab.sessions.command import write_fixtures

    found = {"tool_use": {"s.jsonl": "{}\n", "s/agent-1.jsonl": "{}\n"}}
    main, agent = write_fixtures("9.9.9", found, tmp_path)
    assert (main.relative_to(tmp_path).as_posix(), agent.relative_to(tmp_path).as_posix()) == (
        "claude-code/9.9.9/tool_use.jsonl", "claude-code/9.9.9/tool_use/agent-1.jsonl")
    assert main.read_text() == agent.read_text() == "{}\n"
    said = _under_a_file_size_limit(lambda: write_fixtures("9.9.9", {"tool_use": {"s.jsonl": "x" * 10_000}}, tmp_path))
    assert said == f"sessions --record {main}: cannot write it: File too large; the previous file is kept as it was"
    assert main.read_text() == "{}\n"
    assert sorted(p.name for p in main.parent.iterdir()) == ["tool_use", "tool_use.jsonl"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_write_output_into_a_pipe_that_is_read_writes_it_whole_and_refuses_one_no_one_reads(tmp_path):
    from agentlab.core.paths import write_output

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"^--junit .*out\.fifo: a named pipe that nothing reads"):
        write_output(fifo, "<xml/>", "--junit")
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there before the write starts
    try:
        write_output(fifo, "<xml/>", "--junit")
        assert os.read(reader, 100) == b"<xml/>" and fifo.is_fifo()
    finally:
        os.close(reader)
