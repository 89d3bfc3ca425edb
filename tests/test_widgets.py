"""The stepper driven from code: click the buttons, change the controls, read the panes after each step."""

from __future__ import annotations

import html
import re

import pytest

from agentlab.backend.models import model_limits

from agentlab.backend.scenario import load_scenario, scenario_names
from agentlab.lab import run_scenario, scenario_loop
from agentlab.ui import widgets
from agentlab.ui.widgets import Stepper


def fresh(scenario="tour", **kwargs) -> Stepper:
    return Stepper(scenario, show_plots=False, **kwargs)


def current_branch(s: Stepper) -> str | None:
    match = re.search(r'<tr class="agentlab-current" data-branch="([^"]+)"', s.decision_pane.value)
    return match.group(1) if match else None


def test_starts_ready_with_nothing_run():
    s = fresh()
    assert s.scenario_picker.value == "tour"
    assert s.loop is not None and s.loop.requests == 0
    assert s.call_count == 0
    assert "Nothing yet" in s.transcript_pane.value
    assert "No decision yet" in s.decision_pane.value
    assert "agentlab-running" in s.result_pane.value
    assert not s.step_button.disabled and not s.run_button.disabled
    assert s.error_pane.layout.display == "none"
    assert "a tour of the decision table" in s.header.value


def test_default_is_the_tour():
    assert Stepper(show_plots=False).scenario_picker.value == "tour"


def test_each_step_is_one_call_and_shows_its_decision():
    s = fresh()
    expected = ["api_retry", "tool_use", "tool_use", "max_tokens_escalate", "pause_turn"]
    for n, branch in enumerate(expected, start=1):
        s.step_button.click()
        assert s.call_count == n
        assert f'data-call="{n}"' in s.transcript_pane.value
        assert current_branch(s) == branch
        assert f"After call {n}:" in s.decision_pane.value
        assert s.loop.requests == n
    # the latest call is outlined, and only that one
    assert s.transcript_pane.value.count("agentlab-call-latest") == 1
    assert re.search(r'agentlab-call agentlab-call-latest" data-call="5"', s.transcript_pane.value)


def test_transcript_blocks_are_distinct():
    s = fresh()
    for _ in range(6):
        s.step_button.click()
    text = s.transcript_pane.value
    for kind in ("text", "tool_use", "tool_result", "server_tool_use", "web_search_tool_result"):
        assert f"agentlab-block agentlab-block-{kind}" in text, kind
    assert "HTTP 529 overloaded_error" in text            # the failed first call
    assert "retry: attempt 1" in text
    assert "Frognerparken" in text                        # a web search result
    styles = {re.search(rf'agentlab-block-{kind}" style="background:(#\w+)', text).group(1)
              for kind in ("text", "tool_use", "tool_result", "server_tool_use", "web_search_tool_result")}
    assert len(styles) == 5                               # five kinds, five looks


def test_stop_hook_block_shows_both_decisions_of_the_step():
    s = fresh()
    for _ in range(8):
        s.step_button.click()
    assert current_branch(s) == "stop_hook_block"
    assert 'class="agentlab-earlier" data-branch="complete"' in s.decision_pane.value
    assert "hook Stop [python] → <b>block</b>" in s.transcript_pane.value


def test_run_to_end_shows_the_result_and_disables_stepping():
    s = fresh()
    s.run_button.click()
    expected = run_scenario("tour")
    assert s.loop.done and s.loop.result.subtype == expected.subtype == "success"
    assert 'data-subtype="success"' in s.result_pane.value
    assert f"{expected.num_turns} turn(s), {expected.requests} model call(s)" in s.result_pane.value
    assert "Tests pass." in s.result_pane.value
    assert s.step_button.disabled and s.run_button.disabled and not s.reset_button.disabled
    assert s.call_count == expected.requests
    s.step_button.click()                                  # a click on a finished run changes nothing
    assert s.error is None and s.call_count == expected.requests


def test_reset_starts_again():
    s = fresh()
    s.run_button.click()
    s.reset_button.click()
    assert s.loop.requests == 0 and s.call_count == 0
    assert "agentlab-running" in s.result_pane.value
    assert not s.step_button.disabled


@pytest.mark.parametrize("name", scenario_names())
def test_every_scenario_runs_to_its_end(name):
    s = fresh()
    s.scenario_picker.value = name
    assert s.loop.requests == 0
    s.run_button.click()
    assert s.error is None, s.error
    subtype = run_scenario(name).subtype
    assert f'data-subtype="{subtype}"' in s.result_pane.value


def test_picking_a_scenario_sets_the_controls_to_its_values():
    s = fresh()
    s.scenario_picker.value = "max_tokens_give_up"
    sc = load_scenario("max_tokens_give_up")
    assert s.max_tokens_input.value == sc.max_tokens
    assert s.max_turns_input.value == (sc.max_turns or 0)
    assert s.context_window_input.value == (sc.context_window or model_limits(sc.model).context_window)
    assert "max_tokens_give_up" in s.header.value


def test_the_window_control_follows_the_scenario_model():
    """A scenario without a window of its own starts with its model's (data/models.yaml): 1M for the default
    model, not the 200,000 of a model with a smaller window."""
    s = fresh()
    s.scenario_picker.value = "end_turn"
    assert load_scenario("end_turn").context_window is None
    assert s.context_window_input.value == model_limits(load_scenario("end_turn").model).context_window == 1_000_000


def test_max_turns_control_resets_with_the_new_limit():
    s = fresh()
    s.step_button.click()
    s.max_turns_input.value = 2
    assert s.loop.requests == 0 and s.loop.limits.max_turns == 2       # a fresh run with the new limit
    s.run_button.click()
    assert 'data-subtype="error_max_turns"' in s.result_pane.value
    assert "[max_turns_reached]" in s.transcript_pane.value
    assert current_branch(s) == "max_turns"
    s.max_turns_input.value = 0                                         # 0 means no limit
    assert s.loop.limits.max_turns is None


def test_max_tokens_control():
    s = fresh("end_turn")
    s.max_tokens_input.value = 300
    s.step_button.click()
    assert "max_tokens 300" in s.transcript_pane.value
    assert s.loop.state.max_tokens == 300


def test_context_window_control_reaches_the_loop_and_the_scripted_server():
    s = fresh("prompt_too_long")
    s.context_window_input.value = 150
    assert s.loop.context_window == 150
    assert s.loop.scenario.context_window == 150
    s.run_button.click()
    assert s.error is None
    assert "prompt is too long" in s.transcript_pane.value          # the server now refuses big requests
    assert "agentlab-banner agentlab-" in s.result_pane.value


def test_constructor_overrides():
    s = fresh("tour", max_turns=3, max_tokens=700, context_window=90_000)
    assert (s.loop.limits.max_turns, s.loop.state.max_tokens, s.loop.context_window) == (3, 700, 90_000)
    assert s.settings == {"max_turns": 3, "max_tokens": 700, "context_window": 90_000}


def test_a_malformed_scenario_file_shows_in_the_error_pane(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("description: broken\nsteps:\n  - content: [{type: text}]\n    stop_reason: end_turn\n")
    s = fresh(str(bad))
    assert s.loop is None
    assert s.error_pane.layout.display is None
    assert "ScenarioError" in s.error_pane.value and "bad.yaml" in s.error_pane.value
    assert "steps[0].content[0]" in s.error_pane.value
    assert "No run" in s.result_pane.value
    assert s.step_button.disabled and s.run_button.disabled
    s.step_button.click()                                              # still alive, nothing happens
    s.scenario_picker.value = "end_turn"                               # pick a good one: the error goes
    assert s.error is None and s.error_pane.layout.display == "none"
    s.run_button.click()
    assert 'data-subtype="success"' in s.result_pane.value


def test_a_missing_scenario_path_shows_in_the_error_pane():
    s = fresh()
    s.select("/no/such/scenario.yaml")
    assert "no scenario '/no/such/scenario.yaml'" in html.unescape(s.error_pane.value)
    assert "/no/such/scenario.yaml" in s.scenario_picker.options


def test_an_error_during_a_step_keeps_the_widget_alive(monkeypatch):
    s = fresh()
    s.step_button.click()

    def boom():
        raise RuntimeError("the transport fell over")

    monkeypatch.setattr(s.loop, "step", boom)
    s.step_button.click()
    assert "RuntimeError: the transport fell over" in s.error_pane.value
    assert s.error_pane.layout.display is None
    assert "agentlab-stopped" in s.result_pane.value
    assert s.call_count == 1                                           # the transcript so far is kept
    assert s.step_button.disabled and not s.reset_button.disabled
    s.reset_button.click()
    assert s.error is None and s.loop.requests == 0
    s.step_button.click()
    assert s.call_count == 1


def test_an_error_while_rendering_is_shown(monkeypatch):
    s = fresh()
    monkeypatch.setattr(widgets, "render_decision", lambda *a: 1 / 0)
    s.step_button.click()
    assert "ZeroDivisionError" in s.error_pane.value


def test_a_loop_passed_in_is_stepped_but_not_rebuilt():
    loop = scenario_loop("tool_use")
    s = Stepper(loop, show_plots=False)
    assert s.loop is loop
    assert s.scenario_picker.value == "(loop) tool_use"
    s.step_button.click()
    assert loop.requests == 1
    s.reset_button.click()                     # the loop came from a scenario, so it can be rebuilt
    assert s.loop is not loop and s.loop.requests == 0


def test_a_scenario_object():
    sc = load_scenario("stop_sequence")
    s = Stepper(sc, show_plots=False)
    s.run_button.click()
    assert 'data-subtype="success"' in s.result_pane.value
    assert "stop_sequence" in s.decision_pane.value


def test_plots_update_on_each_step_and_on_a_new_choice():
    s = Stepper("tour")
    first = bytes(s.plot_image.value)
    assert first.startswith(b"\x89PNG")
    s.step_button.click()
    second = bytes(s.plot_image.value)
    assert second != first
    s.plot_picker.value = "path"
    third = s.plot_image.value
    assert bytes(third) not in (first, second)
    s.update()                                                          # nothing changed: no redraw
    assert s.plot_image.value is third


def test_repr_is_short_and_the_display_text_says_what_the_widget_is():
    s = fresh()
    assert repr(s) == "Stepper('tour')"
    bundle = s._repr_mimebundle_()
    # what a notebook opened before its cells run (or a static page) shows in place of the widget
    assert bundle["text/plain"] == ("[the stepper on the scenario tour: an interactive widget, drawn when this cell "
                                    "runs in JupyterLab or Jupyter Notebook]")
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_css_classes_for_tests_and_styling():
    s = fresh()
    classes = {c for w in (s.step_button, s.run_button, s.reset_button, s.transcript_pane, s.decision_pane,
                           s.result_pane, s.error_pane, s.plot_image, s.view) for c in w._dom_classes}
    assert {"agentlab-step", "agentlab-run", "agentlab-reset", "agentlab-transcript", "agentlab-decision",
            "agentlab-result", "agentlab-error", "agentlab-plot", "agentlab-stepper"} <= classes


def test_html_is_escaped():
    s = fresh()
    block = widgets.render_block({"type": "text", "text": "<script>alert(1)</script>"})
    assert "<script>" not in block and "&lt;script&gt;" in block
    assert s.error is None


def test_a_replay_describes_what_the_recorded_client_did_not_agentlab():
    """The replay's reason box says what the replayed client did, without agentlab's description of the row;
    the table's descriptions are labelled as agentlab's."""
    from agentlab.core.transitions import ROWS
    from agentlab.ui.widgets import ReplayStepper

    replay = ReplayStepper("max_tokens_give_up")
    for _ in range(2):
        replay.step_button.click()
    pane = replay.decision_pane.value
    reason = pane[pane.index('class="agentlab-reason"'):pane.index("</div>", pane.index('class="agentlab-reason"'))]
    agentlab_says = next(w for _, b, w in ROWS if b == "max_tokens_continue")
    assert "What it did: " in reason and "Claude Code" in reason
    assert agentlab_says not in reason
    assert "what agentlab does there" in pane


def test_the_stepper_shows_each_row_s_description_whole():
    from agentlab.ui.widgets import Stepper

    pane = Stepper("tour").decision_pane.value
    assert "text-overflow:ellipsis" not in pane and "white-space:normal" in pane


def test_the_budget_before_the_first_call_claims_no_limits():
    """Before the first call the trace holds no limits: the budget panel says so instead of "0 / none"."""
    from agentlab.ui import plots

    fig = plots.overview([])
    texts = [t.get_text() for ax in fig.figure.axes for t in ax.texts] if hasattr(fig, "figure") else []
    assert texts and not any("/ none" in t for t in texts)
    assert any(t == plots.BUDGET_BEFORE_START for t in texts)
