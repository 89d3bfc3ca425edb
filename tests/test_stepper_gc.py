"""A full garbage collection inside a Step walks only what was made after the first stepper was built."""

from __future__ import annotations

import gc

from agentlab.ui.widgets import Stepper


def test_the_first_stepper_freezes_the_objects_alive_then_and_later_ones_leave_the_freeze_alone():
    gc.unfreeze()   # as in a fresh kernel: nothing frozen yet
    assert gc.get_freeze_count() == 0
    first = Stepper("tour", show_plots=True)
    frozen = gc.get_freeze_count()
    # the modules and their caches are out of the collector's reach; what it still walks is far smaller
    assert frozen > 4 * len(gc.get_objects())
    second = Stepper("tour", show_plots=True)
    while not second.step_button.disabled:
        second.step_button.click()
    assert second.loop is not None and second.loop.done
    # once per process: the second stepper froze nothing more (frozen objects freed since leave the count)
    assert gc.get_freeze_count() <= frozen
    assert first.loop is not None and first.loop.requests == 0
