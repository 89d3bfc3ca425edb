"""The garbage collector: importing agentlab leaves what it loaded out of the collector's reach, and a full
collection inside a Step walks only what was made after the stepper was built."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from agentlab.ui.widgets import Stepper


def test_building_a_stepper_moves_the_objects_alive_then_out_of_the_collectors_reach():
    gc.unfreeze()   # as in a fresh kernel: nothing frozen yet
    assert gc.get_freeze_count() == 0
    first = Stepper("tour", show_plots=True)
    frozen = gc.get_freeze_count()
    # the modules, their caches and the stepper are frozen; what the collector still walks is far smaller
    assert frozen > 20 * len(gc.get_objects())
    while not first.step_button.disabled:
        first.step_button.click()
    made_by_the_run = len(gc.get_objects())
    assert made_by_the_run < frozen / 4
    second = Stepper("tour", show_plots=True)
    # the first stepper's run is frozen in its turn: the second one starts with as little to walk
    assert gc.get_freeze_count() > frozen
    assert len(gc.get_objects()) < made_by_the_run
    assert second.loop is not None and second.loop.requests == 0


def _python(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("load", ["from agentlab import AgentLoop", "import agentlab.core.loop"])
def test_loading_the_loop_freezes_what_it_loaded_and_leaves_the_collector_on(load):
    enabled, frozen, walked, sdk_frozen, cycle_freed = _python(
        f"import gc, weakref\n{load}\nimport anthropic.types\n"
        "print(gc.isenabled(), gc.get_freeze_count(), len(gc.get_objects()),\n"
        "      not any(o is anthropic.types.Message for o in gc.get_objects()))\n"
        "class Node: pass\n"
        "a, b = Node(), Node(); a.other, b.other = b, a\n"
        "gone = weakref.ref(a); del a, b\n"
        "gc.collect(); print(gone() is None)")
    assert enabled == "True"
    assert int(frozen) > 100_000 > 10 * int(walked), (frozen, walked)
    assert sdk_frozen == "True"    # the SDK's model classes are among the frozen, not walked by any collection
    assert cycle_freed == "True"   # a cycle made after the import is collected as before


def test_a_collector_turned_off_before_the_import_stays_off():
    assert _python("import gc; gc.disable(); from agentlab import Trace; print(gc.isenabled())") == ["False"]


def test_the_commands_that_serve_and_grade_and_the_plugin_do_not_load_the_sdk():
    """``import agentlab`` loads nothing; a package-level name loads the loop on first use; grading, serving
    and the pytest plugin never need the SDK (its import is a second or two of CPU in each such process)."""
    loaded = _python(
        "import sys, agentlab, agentlab.cli, agentlab_grade.pytest_plugin\n"
        "from agentlab.observatory.grade import grade_main\n"
        "from agentlab.backend.serve import serve_main\n"
        "print('anthropic' in sys.modules)\n"
        "agentlab.Limits\n"
        "print('anthropic' in sys.modules, callable(agentlab.AgentLoop), 'AgentLoop' in dir(agentlab))")
    assert loaded == ["False", "True", "True", "True"]
