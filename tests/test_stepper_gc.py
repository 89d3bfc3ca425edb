"""The garbage collector: importing agentlab leaves what it loaded out of the collector's reach; a stepper leaves
the learner's kernel's collector as it was."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from agentlab.ui.widgets import Stepper


def test_building_and_stepping_a_stepper_leaves_the_kernels_collector_alone():
    """A stepper freezes nothing: what the learner's kernel held before is still walked and freed by the
    collector (a cycle the learner made is collected), and the collector stays as it was."""
    class Cycle:
        pass

    before = gc.get_freeze_count()
    mine = Cycle()
    mine.self = mine   # a reference cycle of the learner's, freed only by the collector
    gc.collect()   # what earlier tests of this worker left as garbage is not counted as the learner's
    alive = len(gc.get_objects())
    stepper = Stepper("tour", show_plots=True)
    while not stepper.step_button.disabled:
        stepper.step_button.click()
    assert gc.get_freeze_count() <= before and gc.isenabled()   # nothing more frozen (frozen objects freed)
    assert any(o is mine for o in gc.get_objects())   # still in the collector's reach
    import weakref

    gone = weakref.ref(mine)
    del mine
    gc.collect()
    assert gone() is None
    assert len(gc.get_objects()) > alive / 2


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
        "from agentlab.grading.command import grade_main\n"
        "from agentlab.backend.serve import serve_main\n"
        "print('anthropic' in sys.modules)\n"
        "agentlab.Limits\n"
        "print('anthropic' in sys.modules, callable(agentlab.AgentLoop), 'AgentLoop' in dir(agentlab))")
    assert loaded == ["False", "True", "True", "True"]
