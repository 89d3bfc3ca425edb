"""The stepper in a real browser: JupyterLab on loopback, Chromium driven by Playwright.

Runs in CI (``.ci/run`` installs Debian's chromium when it is missing); when Chromium or Playwright is not
there the test fails with a message saying what to install, it never skips. Set ``AGENTLAB_SCREENSHOTS`` to
a directory to keep the screenshot (it goes to pytest's temporary directory otherwise).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from browser_lab import CHROMIUM, CHROMIUM_ARGS, STEPPER_DIR, STEPPER_NOTEBOOK, page_url, require_browser

from agentlab.backend.scenario import scenario_names
from agentlab.lab import run_scenario
from tests.preloaded_kernel import kernel_for

pytestmark = pytest.mark.browser

NOTEBOOK = STEPPER_NOTEBOOK

# Installed in the page before a click: stamps the click, the first change of the transcript pane and the
# first change of the plot image, all with the page's own clock.
WATCH_NEXT_STEP = """() => {
  const w = {click: null, transcript: null, plot: null};
  window.__agentlab = w;
  const button = document.querySelector('.agentlab-stepper .agentlab-step');
  button.addEventListener('click', () => { w.click = performance.now(); }, {capture: true, once: true});
  const pane = document.querySelector('.agentlab-stepper .agentlab-transcript');
  const paneWatch = new MutationObserver(() => {
    if (w.click !== null && w.transcript === null) { w.transcript = performance.now(); paneWatch.disconnect(); }
  });
  paneWatch.observe(pane, {childList: true, subtree: true, characterData: true});
  const img = document.querySelector('.agentlab-stepper img.agentlab-plot');
  const imgWatch = new MutationObserver(() => {
    if (w.click !== null && w.plot === null) { w.plot = performance.now(); imgWatch.disconnect(); }
  });
  imgWatch.observe(img, {attributes: true, attributeFilter: ['src']});
}"""


# Installed before Run All: notes every text an output area ever shows that holds the stepper's plain-text
# repr (the widget must be the only thing drawn; a repr flashing before it is what this catches).
WATCH_REPR = """(repr) => {
  const seen = [];
  window.__agentlab_repr = seen;
  const note = (node) => {
    const text = (node && node.textContent) || '';
    if (text.includes(repr) && !seen.includes(text)) { seen.push(text); }
  };
  // every node added and every text changed, read when it happens: a repr drawn and replaced at once counts
  new MutationObserver((records) => {
    for (const r of records) {
      if (r.type === 'characterData') { note(r.target.parentNode); }
      for (const node of r.addedNodes) { note(node); }
    }
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
  document.querySelectorAll('.jp-OutputArea-output').forEach(note);
}"""


@pytest.fixture
def lab(jupyterlab):
    """The run's JupyterLab (tests/browser_lab.py); the stepper's notebook is in it, with this test's kernel."""
    return {**jupyterlab, "notebook": Path(jupyterlab["root"]) / STEPPER_DIR / NOTEBOOK.name}


def _store_outputs(path: Path, kernel: str) -> str:
    """Run the notebook at ``path`` in a kernel and save it with its outputs, as the lessons are committed;
    returns the stepper's stored plain text (what a reader sees until the cell runs again)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, kernel_name=kernel, timeout=120).execute()
    nbformat.write(nb, str(path))
    (shown,) = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    return shown["data"]["text/plain"]


def one_per_ending() -> dict[str, str]:
    """The first scenario in the dropdown's order for each subtype a run can end with: {name: subtype}."""
    first: dict[str, str] = {}
    for name in scenario_names():
        first.setdefault(run_scenario(name).subtype, name)
    return {name: subtype for subtype, name in first.items()}


def test_one_scenario_for_each_ending_is_picked_in_the_browser():
    picked = one_per_ending()
    assert set(picked.values()) == {run_scenario(name).subtype for name in scenario_names()}
    assert "tour" not in picked and len(picked) >= 5, picked     # each pick changes the dropdown's value


def _screenshot_dir(tmp_path: Path) -> Path:
    target = Path(os.environ.get("AGENTLAB_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target


def test_stepper_in_jupyterlab(lab, tmp_path, capsys, pytestconfig):
    sync_playwright = require_browser()
    from playwright.sync_api import expect

    expected = one_per_ending()
    started = time.monotonic()
    # opened as a lesson is: with its stored outputs
    fallback = _store_outputs(lab["notebook"], kernel_for(pytestconfig))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 2000})   # tall: the whole widget in view
        try:
            page.goto(page_url(lab, "stepper", f"{STEPPER_DIR}/{NOTEBOOK.name}"))
            page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=60_000)
            # The execution indicator says idle before a kernel exists; the status bar text does not.
            page.evaluate(WATCH_REPR, "Stepper('tour')")
            # before the cell runs there is no widget model: JupyterLab draws the stored plain text, which must
            # say what the widget is, not be its repr
            expect(page.locator(".jp-OutputArea-output").first).to_have_text(fallback, timeout=30_000)
            expect(page.locator("#jp-main-statusbar")).to_contain_text(re.compile(r"\|\s*Idle"), timeout=60_000)
            page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Run").click()
            page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()

            stepper = page.locator(".agentlab-stepper")
            expect(stepper).to_be_visible(timeout=60_000)
            transcript = stepper.locator(".agentlab-transcript")
            plot = stepper.locator("img.agentlab-plot")
            result = stepper.locator(".agentlab-result")
            expect(transcript).to_contain_text("Nothing yet", timeout=30_000)
            expect(plot).to_have_attribute("src", re.compile(r"^blob:|^data:"), timeout=30_000)
            flashed = page.evaluate("() => window.__agentlab_repr")
            assert flashed == [], f"the stepper's plain-text repr was drawn in the output area: {flashed}"
            shown = page.locator(".jp-OutputArea-output").all_inner_texts()
            assert not any(fallback in text for text in shown), f"the plain text stays beside the widget: {shown}"
            plot_before = plot.get_attribute("src")
            pixels_before = plot.screenshot()

            timings = []
            for n in (1, 2, 3):
                page.evaluate(WATCH_NEXT_STEP)
                stepper.locator(".agentlab-step").click()
                expect(transcript.locator(".agentlab-call")).to_have_count(n, timeout=30_000)
                page.wait_for_function("() => window.__agentlab.transcript !== null && window.__agentlab.plot !== null",
                                       timeout=30_000)
                w = page.evaluate("() => window.__agentlab")
                timings.append((w["transcript"] - w["click"], w["plot"] - w["click"]))
            expect(transcript.locator(".agentlab-call-latest")).to_have_attribute("data-call", "3")
            expect(stepper.locator(".agentlab-decision .agentlab-current")).to_have_attribute("data-branch", "tool_use")
            expect(transcript.locator(".agentlab-block-tool_use").first).to_be_visible()
            expect(result.locator(".agentlab-running")).to_be_visible()
            assert plot.get_attribute("src") != plot_before
            page.wait_for_function("() => document.querySelector('img.agentlab-plot').naturalWidth > 0")
            assert plot.screenshot() != pixels_before, "the plot looks the same after three steps"
            shot = _screenshot_dir(tmp_path) / "stepper.png"
            stepper.screenshot(path=str(shot))

            # A scenario for each way a run ends, picked in the dropdown and run to its end in the page, its plot
            # redrawn (every scenario, the same way in the widget: tests/test_stepper_every_scenario.py).
            picker = stepper.locator(".agentlab-scenario select")
            header = stepper.locator(".agentlab-header")
            for name, subtype in expected.items():
                picker.select_option(name)
                expect(header).to_contain_text(name)
                expect(result.locator(".agentlab-running")).to_be_visible()
                expect(transcript).to_contain_text("Nothing yet")
                before = plot.get_attribute("src")
                stepper.locator(".agentlab-run").click()
                expect(result.locator(".agentlab-subtype")).to_have_text(subtype, timeout=30_000)
                expect(plot).not_to_have_attribute("src", before, timeout=30_000)
                error = stepper.locator(".agentlab-error")
                assert error.is_hidden(), f"{name}: the error pane is showing: {error.inner_text()}"
        finally:
            browser.close()
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print()
        for n, (pane_ms, plot_ms) in enumerate(timings, start=1):
            print(f"  Step {n}: click to transcript update {pane_ms:.0f} ms, to plot update {plot_ms:.0f} ms")
        print(f"  {len(expected)} scenarios (one for each ending) run to their end in the browser; test took "
              f"{elapsed:.1f} s; "
              f"screenshot: {shot}")
