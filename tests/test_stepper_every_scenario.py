"""Every scenario picked in one stepper and run to its end, as tests/test_browser.py once did for each in Chromium.

What the browser test read from the page for each scenario is what the widget's models hold, and JupyterLab draws
those models the same way whichever scenario is picked: the picker offers the scenario, the header names it, the
result says the run is going and the transcript is empty until Run to end, then the result's subtype is the
scenario's own, the plot is a new PNG and the error pane stays hidden. Those are checked here for every scenario,
in the order the dropdown lists them, on one widget (a scenario picked after another starts clean). The browser
test still picks and runs a few scenarios in a real page, so the dropdown, the button and the redrawn plot are
seen working end to end there.
"""

from __future__ import annotations

import re

from agentlab.backend.scenario import scenario_names
from agentlab.lab import run_scenario
from agentlab.ui.widgets import Stepper

SUBTYPE = re.compile(r'<span class="agentlab-subtype">([^<]*)</span>')


def test_every_scenario_picked_in_turn_runs_to_its_own_end():
    stepper = Stepper("tour")
    names = scenario_names()
    assert list(stepper.scenario_picker.options) == names
    for name in names:
        stepper.scenario_picker.value = name
        assert name in stepper.header.value, name
        assert "agentlab-running" in stepper.result_pane.value, name
        assert "Nothing yet" in stepper.transcript_pane.value, name
        before = bytes(stepper.plot_image.value)
        stepper.run_button.click()
        shown = SUBTYPE.findall(stepper.result_pane.value)
        assert shown == [run_scenario(name).subtype], (name, shown)
        after = bytes(stepper.plot_image.value)
        assert after.startswith(b"\x89PNG") and after != before, f"{name}: the plot was not redrawn"
        assert stepper.error is None and stepper.error_pane.layout.display == "none", (name, stepper.error)
