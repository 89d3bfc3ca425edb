"""A full garbage collection inside a Step walks only what was made after the stepper was built."""

from __future__ import annotations

import gc

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
