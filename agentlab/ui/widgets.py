"""The stepper: a notebook widget that drives an AgentLoop one model call at a time and shows every decision.

Pick a scenario, press Step, and watch the loop: the transcript of each call (text, tool_use, tool_result and
server-tool blocks each look different), the row of the decision table that fired and why, the result
banner when the run ends, and a plot of tokens, context fill and recovery budget, redrawn after every step.

Every decision is the loop's: ``step()`` advances it, ``update()`` renders every pane from the loop and its
trace, and each button handler is ``step(); update()``, guarded so that an error (a malformed scenario, a
broken expectation) shows in the error pane instead of leaving a dead widget. The widget itself keeps only
the view's state: the scenario picker, the controls (which rebuild the loop through ``agentlab.lab``) and
where the last step began. ``ReplayStepper`` shows a recorded client run the same way, and ``static_html``
draws any widget as plain HTML for pages without a kernel. Only core ipywidgets are used (no custom
front-end code), so it works in JupyterLab, Notebook, Voilà and VS Code.
"""

from __future__ import annotations

import functools
import html
import json
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.extras import missing_extra

try:  # the notebook stack: the lab extra
    import ipywidgets as widgets
except ImportError as _exc:
    raise missing_extra(_exc, "agentlab.ui.widgets (the Stepper)") from None

from ..backend.scenario import Scenario, load_scenario, scenario_names
from ..core.blocks import summarise_block
from ..core.loop import AgentLoop, Result
from ..core.events import (
    Append,
    ApiError,
    CompactionEvent,
    Fallback,
    HookEvent,
    Request,
    Response,
    ResultEvent,
    RetryEvent,
    Start,
    TransitionEvent,
)
from ..backend.models import model_limits
from ..core.text import printable
from ..core.trace import Event, Trace
from ..core.transitions import DEFAULT_MAX_OUTPUT, DEFAULT_MODEL, ROWS
from ..lab import LabLoop, scenario_loop
from ..observatory.replay import client_label, load_record, record_to_trace, step_ends
from ..sessions.transcript import Session, detect_kind, read_session
from ..sessions.trace import session_to_trace
from . import plots
from .report import cache_note

PLOT_CHOICES = (("tokens · context · budget", "overview"), ("decision path", "path"),
                ("recoveries vs limits", "recoveries"), ("compactions", "compaction"),
                ("tokens per call", "tokens"), ("context fill", "context"), ("dashboard (slow)", "dashboard"))
# The plots are drawn at 72 dpi, one pixel a point: the figures keep their texts at 9 points or more and their
# width within 12.4 inches (plots.MIN_FONT), so every text is at least 9 px tall in a PNG of at most 893 px,
# which JupyterLab shows at its own size
PLOT_DPI = dict.fromkeys(plots.PLOTS, 72)

# Block styles: a learner tells text, tool calls, tool results and server tools apart at a glance.
BLOCK_STYLES = {
    "text": ("#FFFFFF", "#9E9E9E"),
    "tool_use": ("#E8F0FE", "#1A73E8"),
    "tool_result": ("#E6F4EA", "#188038"),
    "tool_result_error": ("#FCE8E6", "#D93025"),
    "server_tool_use": ("#F3E8FD", "#8430CE"),
    "web_search_tool_result": ("#F8F1FE", "#A142F4"),
    "thinking": ("#F5F5F5", "#BDBDBD"),
    "redacted_thinking": ("#EEEEEE", "#9E9E9E"),
    "marker": ("#FFF4E5", "#E37400"),
}


def _e(value: Any) -> str:
    """``value`` for the page: printable (a model's, a tool's or a hook's escape sequences removed), then escaped."""
    return html.escape(printable(str(value)), quote=True)


def _clip(text: str, limit: int = 700) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


# --- rendering blocks and calls (pure functions of the trace) ---------------------------------------------

def render_block(block: dict[str, Any]) -> str:
    """One content block as a styled div with the class ``agentlab-block-<type>``."""
    s = summarise_block(block)
    kind = s.type
    style_key = "tool_result_error" if s.kind == "tool_result" and s.is_error else kind
    background, border = BLOCK_STYLES.get(style_key, ("#FAFAFA", "#757575"))
    if s.kind == "text":
        title, body = "text", _e(_clip(s.text)) or "<i>(empty text)</i>"
    elif s.kind == "tool_call":
        title = f"{kind} · {_e(s.name)} · {_e('' if s.id is None else s.id)}"
        body = f"<code>{_e(_clip(_json({} if s.input is None else s.input), 400))}</code>"
    elif s.kind == "tool_result":
        title = f"tool_result for {_e(s.id)}{' · is_error' if s.is_error else ''}"
        body = _e(_clip(s.text))
    elif s.kind == "search_results":
        title = f"web_search_tool_result for {_e(s.id)}"
        items: list[Any] = s.content if isinstance(s.content, list) else []
        body = "<br>".join(f"{_e(i.get('title', ''))} <code>{_e(i.get('url', ''))}</code>"
                           for i in items if isinstance(i, dict)) or "(no results)"
    elif s.kind == "thinking":
        return _render_thinking(block, background, border)
    else:
        title, body = kind, f"<code>{_e(_clip(_json(block), 300))}</code>"
    return (f'<div class="agentlab-block agentlab-block-{_e(kind)}" style="background:{background};'
            f'border-left:4px solid {border};margin:3px 0;padding:3px 7px;border-radius:3px;'
            f'white-space:pre-wrap;word-break:break-word">'
            f'<div style="font-size:10px;font-weight:600;color:{border};text-transform:none">{title}</div>'
            f'{body}</div>')


def _render_thinking(block: dict[str, Any], background: str, border: str) -> str:
    """A thinking block collapsed to one line (click to open); a redacted one shows only that it is opaque.
    Either goes back to the API exactly as received, signature and data included."""
    kind = str(block.get("type"))
    if kind == "thinking":
        text = str(block.get("thinking", ""))
        summary = f"thinking · {len(text)} characters · signed"
        body = f"<i>{_e(_clip(text))}</i>"
    else:
        data = str(block.get("data", ""))
        summary = f"redacted_thinking · {len(data)} characters of encrypted data"
        body = "<i>Encrypted by the API: nothing to read, sent back unchanged.</i>"
    return (f'<details class="agentlab-block agentlab-block-{_e(kind)}" style="background:{background};'
            f'border-left:4px solid {border};margin:3px 0;padding:3px 7px;border-radius:3px;'
            f'white-space:pre-wrap;word-break:break-word">'
            f'<summary style="font-size:10px;font-weight:600;color:{border};cursor:pointer">{_e(summary)}</summary>'
            f'{body}</details>')


def _render_blocks(blocks: Sequence[dict[str, Any]]) -> str:
    if not blocks:
        return '<div class="agentlab-block agentlab-block-empty" style="color:#777;font-style:italic">' \
               '(empty content)</div>'
    return "".join(render_block(b) for b in blocks)


def _line(css: str, text: str, color: str = "#444") -> str:
    return f'<div class="{css}" style="font-size:11px;color:{color};margin:2px 0">{text}</div>'


def render_event(e: Event, staged: str | None = None) -> str:
    """The HTML for one event inside a call's box ('' for events the box does not show).

    ``staged`` says why the scenario stages this call's usage numbers; it is shown next to them.
    """
    d = e.payload
    note = (f' <span class="agentlab-staged" style="color:#B06000">(staged by the scenario: {_e(staged)})</span>'
            if staged else "")
    if isinstance(d, Request):
        purpose = " · <b>summary request (compaction)</b>" if d.purpose == "summary" else ""
        return _line("agentlab-request", f"request · {_e(d.model)} · max_tokens {_e(d.max_tokens)}"
                     f" · {_e(d.messages)} message(s) · context ≈ {_e(d.context_tokens)} tokens"
                     f"{purpose}", "#555")
    if isinstance(d, Response):
        head = _line("agentlab-response", f"response · stop_reason <b>{_e(d.stop_reason)}</b> · tokens in/out "
                     f"{_e(d.prompt_tokens)}/{_e(d.output_tokens)}{_e(cache_note(d))}{note}", "#222")
        return head + _render_blocks(d.content)
    if isinstance(d, ApiError):
        return (f'<div class="agentlab-api-error" style="background:#FCE8E6;border-left:4px solid #D93025;'
                f'padding:3px 7px;margin:3px 0">HTTP {_e(d.status)} {_e(d.error_type)}: '
                f'{_e(_clip(str(d.message), 300))}{note}</div>')
    if isinstance(d, TransitionEvent):
        return (f'<div class="agentlab-branch" style="margin:4px 0;font-size:12px">'
                f'<span style="background:#FFF3C4;border:1px solid #E0B800;border-radius:10px;padding:0 7px">'
                f'row {_e(d.row)} · <b>{_e(d.branch)}</b></span> '
                f'<span style="color:#444">{_e(d.reason)}</span></div>')
    if isinstance(d, Append):
        role = str(d.role)
        if role == "assistant":
            how = "joined to the previous assistant message" if d.merged else "appended"
            return _line("agentlab-append", f"↳ assistant message {how} ({_e(d.blocks)})", "#777")
        if role == "marker":
            return "".join(_line("agentlab-append agentlab-marker", f"↳ {_e(b.get('text'))}", "#E37400")
                           for b in d.content)
        return _line("agentlab-append", "↳ user message appended:", "#777") + _render_blocks(d.content)
    if isinstance(d, HookEvent):
        verdict = d.decision or ("error" if d.error else "no opinion")
        why = f": {_e(_clip(str(d.reason or d.error or ''), 200))}" if (d.reason or d.error) else ""
        return _line("agentlab-hook", f"hook {_e(d.event)} [{_e(d.source)}] → <b>{_e(verdict)}</b>{why}",
                     "#8430CE")
    if isinstance(d, RetryEvent):
        return _line("agentlab-retry", f"retry: attempt {_e(d.attempt)} after {_e(d.delay_s)} s on "
                     f"{_e(d.model)}", "#B06000")
    if isinstance(d, Fallback):
        return _line("agentlab-fallback", f"fallback: {_e(d.from_model)} → <b>{_e(d.to_model)}</b> "
                     f"({_e(d.cause)})", "#B06000")
    if isinstance(d, CompactionEvent):
        return _line("agentlab-compaction", f"compaction ({_e(d.strategy)}, {_e(d.trigger)}): history "
                     f"≈{_e(d.tokens_before)} → ≈{_e(d.tokens_after)} tokens, "
                     f"{_e(d.messages_before)} → {_e(d.messages_after)} messages", "#8172B3")
    return ""


def render_transcript(events: list[Event], *, latest_from: int | None = None,
                      staged: dict[int, str] | None = None) -> str:
    """The run so far, one box per model call (class ``agentlab-call``), newest at the bottom and in view.

    Events before the first call (the prompt) come first; events of the step that began at sequence number
    ``latest_from`` are outlined so the learner sees what the last Step did. ``staged`` maps a call number
    to why the scenario stages its usage numbers.
    """
    staged = staged or {}
    prompt = [e for e in events if e.call == 0 and e.kind == "append"]
    head = "".join(_render_blocks(e.payload.content) for e in prompt if isinstance(e.payload, Append))
    calls: dict[int, list[Event]] = {}
    for e in events:
        if e.call > 0 and e.kind not in ("start", "result", "tool"):
            calls.setdefault(e.call, []).append(e)
    boxes = []
    for n, group in calls.items():
        latest = latest_from is not None and group[-1].seq >= latest_from
        purpose = " (summary for compaction)" if any(isinstance(e.payload, Request) and e.payload.purpose == "summary"
                                                     for e in group) else ""
        border = "2px solid #1A73E8" if latest else "1px solid #DADCE0"
        css = "agentlab-call agentlab-call-latest" if latest else "agentlab-call"
        body = "".join(render_event(e, staged.get(n)) for e in group)
        boxes.append(f'<div class="{css}" data-call="{n}" style="border:{border};border-radius:5px;'
                     f'padding:4px 8px;margin:5px 0;background:#FFFFFF">'
                     f'<div style="font-weight:600;font-size:12px">Call {n}{purpose}</div>{body}</div>')
    prompt_box = (f'<div class="agentlab-prompt" style="margin:4px 0"><div style="font-weight:600;font-size:12px">'
                  f'Prompt</div>{head}</div>' if prompt else "")
    if not prompt and not boxes:
        prompt_box = '<div class="agentlab-empty" style="color:#777">Nothing yet: press Step.</div>'
    # column-reverse keeps the scroll position at the bottom, so the newest call is what you see.
    inner = prompt_box + "".join(boxes)
    return (f'<div class="agentlab-transcript-scroll" style="display:flex;flex-direction:column-reverse;'
            f'max-height:460px;overflow-y:auto;font-size:12px;line-height:1.35;padding-right:4px">'
            f'<div>{inner}</div></div>')


def render_decision(step_events: list[Event], all_events: list[Event], loop: AgentLoop | None, *,
                    replay: bool = False) -> str:
    """The decision table with the row(s) the last step took highlighted, the reason, and the counters.

    For a ``replay`` of a recorded client the reason is what that client did; the table's descriptions are
    agentlab's, so the box leaves them out and the column says whose they are."""
    taken = [e.payload for e in step_events if isinstance(e.payload, TransitionEvent)]
    fired: dict[str, int] = {}
    for e in all_events:
        if isinstance(e.payload, TransitionEvent):
            fired[e.payload.branch] = fired.get(e.payload.branch, 0) + 1
    current = taken[-1].branch if taken else None
    earlier = {t.branch for t in taken[:-1]}
    if taken:
        t = taken[-1]
        call = step_events[-1].call if step_events else 0
        what = "" if replay else next((w for _, b, w in ROWS if b == current), "")
        before = "".join(f"row {_e(x.row)} · {_e(x.branch)}: {_e(x.reason)}<br>"
                         for x in taken[:-1])
        reason = (f'<div class="agentlab-reason" style="background:#FFF3C4;border:1px solid #E0B800;'
                  f'border-radius:4px;padding:4px 8px;margin-bottom:6px;font-size:12px">'
                  f'{"<span style=color:#666>" + before + "</span>" if before else ""}'
                  f'<b>After call {call}: row {_e(t.row)} · {_e(t.branch)}</b><br>'
                  + ("What it did: " if replay else f'<span style="color:#555">{_e(what)}</span><br>Why: ')
                  + f'{_e(t.reason)}</div>')
    else:
        reason = ('<div class="agentlab-reason" style="color:#777;margin-bottom:6px">No decision yet: press Step '
                  'to make the first model call.</div>')
    rows = []
    cell = "padding:0 5px;line-height:17px;border:none;white-space:nowrap"
    wrap = "padding:0 5px;line-height:15px;border:none;white-space:normal;vertical-align:top"  # read whole
    for row, branch, what in ROWS:
        css, style = "", ""
        if branch == current:
            css, style = "agentlab-current", "background:#FFE082;font-weight:600"
        elif branch in earlier:
            css, style = "agentlab-earlier", "background:#FFF3C4"
        count = fired.get(branch, 0)
        rows.append(f'<tr class="{css}" data-branch="{_e(branch)}" title="{_e(what)}" style="{style}">'
                    f'<td style="{cell};text-align:right;color:#666">{_e(row)}</td>'
                    f'<td style="{cell};font-family:monospace">{_e(branch)}</td>'
                    f'<td style="{cell};text-align:right;color:#555">{"×" + str(count) if count else ""}</td>'
                    f'<td style="{wrap};color:#666">{_e(what)}</td></tr>')
    table = ('<table class="agentlab-rows" style="border-collapse:collapse;font-size:11px;width:100%;'
             'table-layout:fixed"><colgroup><col style="width:28px"><col style="width:150px">'
             '<col style="width:38px"><col></colgroup>'
             '<thead><tr style="border-bottom:1px solid #999;text-align:left">'
             f'<th style="{cell}">row</th><th style="{cell}">branch</th>'
             f'<th style="{cell}" title="times this branch fired so far">fired</th>'
             f'<th style="{cell}">{"what agentlab does there" if replay else "what happens"}</th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>')
    return reason + table + _render_counters(loop)


def _render_counters(loop: AgentLoop | None) -> str:
    if loop is None:
        return ""
    s, lim = loop.state, loop.limits
    parts = [f"model {s.model}", f"max_tokens {s.max_tokens}",
             f"turns {s.num_turns}/{lim.max_turns if lim.max_turns is not None else 'none'}",
             f"escalations {s.escalations}/{lim.max_escalations}",
             f"continuations in a row {s.continuations_in_a_row}/{lim.max_continuations}",
             f"compactions in a row {s.consecutive_compactions}/{lim.max_compactions}",
             f"pauses in a row {s.pauses_in_a_row}/{lim.max_pause_continuations}",
             f"Stop-hook blocks {s.stop_hook_blocks}/{lim.stop_hook_block_cap}"]
    return (f'<div class="agentlab-counters" style="font-size:11px;color:#555;margin-top:6px">'
            f'Loop state: {" · ".join(_e(p) for p in parts)}</div>')


def render_result(loop: AgentLoop | _ShownRun | None, error: str | None = None) -> str:
    """The banner: running, or the result (subtype, turns, requests, the counts that moved, the final text)."""
    if loop is None:
        return ('<div class="agentlab-banner agentlab-no-run" style="padding:6px 10px;background:#EEEEEE;'
                'border-radius:4px">No run: fix the problem shown above, or pick another scenario.</div>')
    if loop.result is None:
        if error:
            return (f'<div class="agentlab-banner agentlab-stopped" data-subtype="" style="padding:6px 10px;'
                    f'background:#FCE8E6;border-radius:4px">Run stopped by the error above after '
                    f'{loop.requests} model call(s). Press <b>Reset</b> to start again.</div>')
        return (f'<div class="agentlab-banner agentlab-running" data-subtype="" style="padding:6px 10px;'
                f'background:#E8F0FE;border-radius:4px">Run in progress: {loop.requests} model call(s), '
                f'{loop.state.num_turns} turn(s) so far. Press <b>Step</b> for the next call, or '
                f'<b>Run to end</b>.</div>')
    r = loop.result
    ok = not r.is_error
    counts = ", ".join(f"{name} {getattr(r, name)}" for name in (
        "escalations", "continuations", "compactions", "retries", "fallbacks", "pause_continuations", "nudges",
        "stop_hook_blocks") if getattr(r, name))
    usage = f"{r.usage.get('input_tokens', 0)}/{r.usage.get('output_tokens', 0)}"
    return (f'<div class="agentlab-banner agentlab-{"success" if ok else "failure"}" data-subtype="{_e(r.subtype)}" '
            f'style="padding:6px 10px;border-radius:4px;background:{"#E6F4EA" if ok else "#FCE8E6"};'
            f'border-left:5px solid {"#188038" if ok else "#D93025"}">'
            f'<b>Result: <span class="agentlab-subtype">{_e(r.subtype)}</span></b> · is_error {r.is_error} · '
            f'{r.num_turns} turn(s), {r.requests} model call(s) · stop_reason {_e(r.stop_reason)} · '
            f'tokens in/out {usage}{" · " + _e(counts) if counts else ""}'
            f'<div style="margin-top:3px;color:#333">{_e(_clip(str(r.result or ""), 400))}</div></div>')


def render_error(error: str | None) -> str:
    if not error:
        return ""
    return (f'<div class="agentlab-error-message" style="background:#FCE8E6;border:1px solid #D93025;'
            f'border-radius:4px;padding:6px 10px;white-space:pre-wrap;font-family:monospace;font-size:12px">'
            f'{_e(error)}</div>')


# --- the widget ------------------------------------------------------------------------------------------

class WidgetView:
    """Shows ``self.view`` in a notebook.

    The plain-text form of the display is what a reader sees where the widget cannot be drawn: a notebook
    opened with its stored outputs before its cells run (JupyterLab has no widget model for them yet and shows
    the text), a static page of the lesson, a terminal. It says what the widget is and how to get it, and is
    never the object's repr (``Stepper('tour')`` tells a reader nothing); it is the same on every run, so nbval
    can compare it.
    """

    view: Any

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = self.view._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = self.fallback_text()
        return bundle

    def shown_as(self) -> str:
        """What the widget shows, in a few words (the start of :meth:`fallback_text`)."""
        return repr(self)

    def fallback_text(self) -> str:
        """The display's plain-text form: what this is, and that running the cell draws it."""
        return (f"[{self.shown_as()}: an interactive widget, drawn when this cell runs in JupyterLab or "
                "Jupyter Notebook]")


class Stepper(WidgetView):
    """Step an agent loop call by call in a notebook.

    ``Stepper("tour")`` (a scenario name), ``Stepper("path/to/scenario.yaml")``, ``Stepper(scenario)`` (a
    Scenario) or ``Stepper(loop)`` (any AgentLoop, e.g. one against the live API; it cannot be reset with
    other settings). ``max_turns``, ``max_tokens`` and ``context_window`` override the scenario's values.
    Display it as the last expression of a cell. Drive it from code with ``step()``, ``run_to_end()``,
    ``reset()``, ``select(name)``, or by clicking the buttons (``stepper.step_button.click()``).
    """

    def __init__(self, scenario_or_loop: str | Path | Scenario | AgentLoop | None = None, *,
                 max_turns: int | None = None, max_tokens: int | None = None,
                 context_window: int | None = None, plot: str = "overview", show_plots: bool = True) -> None:
        self.loop: AgentLoop | None = None
        self.error: str | None = None
        self.show_plots = show_plots
        self._fixed_loop: AgentLoop | None = None
        self._fixed_label: str | None = None      # the picker option that stands for the loop passed in
        self._custom: dict[str, str | Scenario] = {}
        self._step_from: int | None = None       # trace length before the last step
        self._plot_key: tuple[Any, ...] | None = None
        self._quiet = False                      # set while controls are changed from code
        self._build_view(plot)
        choice = self._register(scenario_or_loop)
        self._quiet = True
        try:
            self.scenario_picker.value = choice
        finally:
            self._quiet = False
        self._guarded(lambda: self._load(choice, max_turns=max_turns, max_tokens=max_tokens,
                                         context_window=context_window))()

    # -- view -------------------------------------------------------------------------------------------
    def _build_view(self, plot: str) -> None:
        initial = "initial"
        self.scenario_picker = widgets.Dropdown(options=scenario_names(), description="scenario",
                                                style={"description_width": initial},
                                                layout=widgets.Layout(width="300px"))
        self.max_turns_input = widgets.BoundedIntText(value=0, min=0, max=10_000, description="max_turns (0 = none)",
                                                      style={"description_width": initial},
                                                      layout=widgets.Layout(width="190px"))
        self.max_tokens_input = widgets.BoundedIntText(value=1024, min=1, max=DEFAULT_MAX_OUTPUT,
                                                       description="max_tokens",
                                                       style={"description_width": initial},
                                                       layout=widgets.Layout(width="170px"))
        self.context_window_input = widgets.BoundedIntText(value=model_limits(DEFAULT_MODEL).context_window, min=100,
                                                           max=2_000_000,
                                                           step=1000, description="context window",
                                                           style={"description_width": initial},
                                                           layout=widgets.Layout(width="210px"))
        self.step_button = widgets.Button(description="Step", button_style="primary", icon="step-forward",
                                          tooltip="one model call and the decision after it")
        self.run_button = widgets.Button(description="Run to end", icon="fast-forward",
                                         tooltip="step until the run ends")
        self.reset_button = widgets.Button(description="Reset", icon="undo",
                                           tooltip="start the run again with the settings above")
        self.plot_picker = widgets.Dropdown(options=PLOT_CHOICES, value=plot, description="plot",
                                            style={"description_width": initial},
                                            layout=widgets.Layout(width="290px"))
        self.header = widgets.HTML()
        self.error_pane = widgets.HTML(layout=widgets.Layout(display="none"))
        self.result_pane = widgets.HTML()
        self.transcript_pane = widgets.HTML(layout=widgets.Layout(flex="1 1 55%", min_width="0", width="55%"))
        self.decision_pane = widgets.HTML(layout=widgets.Layout(flex="1 1 45%", min_width="0", width="45%",
                                                                overflow="hidden"))
        self.plot_image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        for widget, css in ((self.step_button, "agentlab-step"), (self.run_button, "agentlab-run"),
                            (self.reset_button, "agentlab-reset"), (self.scenario_picker, "agentlab-scenario"),
                            (self.max_turns_input, "agentlab-max-turns"),
                            (self.max_tokens_input, "agentlab-max-tokens"),
                            (self.context_window_input, "agentlab-context-window"),
                            (self.plot_picker, "agentlab-plot-picker"), (self.header, "agentlab-header"),
                            (self.error_pane, "agentlab-error"), (self.result_pane, "agentlab-result"),
                            (self.transcript_pane, "agentlab-transcript"),
                            (self.decision_pane, "agentlab-decision"), (self.plot_image, "agentlab-plot")):
            widget.add_class(css)
        self.step_button.on_click(self._guarded(self.step))
        self.run_button.on_click(self._guarded(self.run_to_end))
        self.reset_button.on_click(self._guarded(self.reset))
        self.scenario_picker.observe(self._on_scenario, names="value")
        for control in (self.max_turns_input, self.max_tokens_input, self.context_window_input):
            control.observe(self._on_control, names="value")
        self.plot_picker.observe(self._guarded(lambda: None, on_change=True), names="value")
        panes = widgets.HBox([self.transcript_pane, self.decision_pane],
                             layout=widgets.Layout(align_items="flex-start", width="100%", grid_gap="12px"))
        self.view = widgets.VBox([
            self.header,
            widgets.HBox([self.scenario_picker, self.max_turns_input, self.max_tokens_input,
                          self.context_window_input], layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HBox([self.step_button, self.run_button, self.reset_button, self.plot_picker],
                         layout=widgets.Layout(flex_flow="row wrap")),
            self.error_pane, self.result_pane, panes, self.plot_image,
        ], layout=widgets.Layout(width="100%"))
        self.view.add_class("agentlab-stepper")

    def __repr__(self) -> str:
        return f"Stepper({self.scenario_picker.value!r})"

    def shown_as(self) -> str:
        return f"the stepper on the scenario {self.scenario_picker.value}"

    # -- handlers ---------------------------------------------------------------------------------------
    def _guarded(self, action: Callable[[], Any], *, on_change: bool = False) -> Callable[..., None]:
        """A handler that runs ``action`` then ``update()``; an exception lands in the error pane."""
        def handler(*_args: Any) -> None:
            if on_change and self._quiet:
                return
            try:
                action()
            except Exception as exc:  # any failure must reach the learner, not kill the widget
                self.error = _describe(exc)
            try:
                self.update()
            except Exception as exc:  # the pane shows it; the widget stays alive
                self.error = _describe(exc)
                self.error_pane.value = render_error(self.error)
                self.error_pane.layout.display = None
        return handler

    def _on_scenario(self, change: dict[str, Any]) -> None:
        if self._quiet:
            return
        self._guarded(lambda: self._load(change["new"]))()

    def _on_control(self, change: dict[str, Any]) -> None:
        if self._quiet:
            return
        self._guarded(self.reset)()

    # -- state ------------------------------------------------------------------------------------------
    def _register(self, source: str | Path | Scenario | AgentLoop | None) -> str:
        """Put the source in the picker's options; return the option value that selects it."""
        names = list(scenario_names())
        if source is None:
            return "tour" if "tour" in names else (names[0] if names else "")
        if isinstance(source, AgentLoop):
            self._fixed_loop = source
            sc = getattr(source, "scenario", None)
            label = f"(loop) {sc.name}" if isinstance(sc, Scenario) else "(loop passed in)"
            if isinstance(sc, Scenario):
                self._custom[label] = sc
            self._fixed_label = label
            self._add_option(label)
            return label
        if isinstance(source, Scenario):
            label = source.name if source.name not in names else f"{source.name} (custom)"
            self._custom[label] = source
            self._add_option(label)
            return label
        text = str(source)
        if text in names:
            return text
        self._custom[text] = text
        self._add_option(text)
        return text

    def _add_option(self, label: str) -> None:
        options = list(self.scenario_picker.options)
        if label not in options:
            self._quiet = True
            try:
                self.scenario_picker.options = [label, *options]
            finally:
                self._quiet = False

    def _scenario(self, choice: str) -> Scenario:
        source = self._custom.get(choice, choice)
        if isinstance(source, Scenario):
            return source
        return load_scenario(source)

    def _load(self, choice: str, *, max_turns: int | None = None, max_tokens: int | None = None,
              context_window: int | None = None) -> None:
        """Select a scenario: set the controls to its values (or the ones given), then start a fresh run."""
        self.loop, self.error, self._step_from = None, None, None
        if self._fixed_loop is not None and choice == self._fixed_label:
            loop = self._fixed_loop
            self._set_controls(loop.limits.max_turns, loop.state.max_tokens, loop.context_window)
            self.loop = loop
            return
        sc = self._scenario(choice)
        self._set_controls(max_turns if max_turns is not None else sc.max_turns,
                           max_tokens if max_tokens is not None else sc.max_tokens,
                           context_window if context_window is not None
                           else sc.context_window or model_limits(sc.model).context_window)
        self.reset()

    def _set_controls(self, max_turns: int | None, max_tokens: int, context_window: int) -> None:
        self._quiet = True
        try:
            self.max_turns_input.value = max_turns or 0
            self.max_tokens_input.value = max_tokens
            self.context_window_input.value = context_window
        finally:
            self._quiet = False

    @property
    def settings(self) -> dict[str, Any]:
        """The loop options the controls hold (max_turns None means no limit)."""
        return {"max_turns": self.max_turns_input.value or None, "max_tokens": self.max_tokens_input.value,
                "context_window": self.context_window_input.value}

    def reset(self) -> None:
        """Start the selected scenario again from its first call, with the values in the controls."""
        self.loop, self.error, self._step_from, self._plot_key = None, None, None, None
        choice = self.scenario_picker.value
        if choice == self._fixed_label and choice not in self._custom:
            raise RuntimeError("this loop was passed in ready-made and cannot be restarted; "
                               "pass a scenario name to the Stepper to be able to reset")
        sc = self._scenario(choice)
        settings = self.settings
        # built as every run is (RunSetup.from_scenario), the controls' values as overrides; the scripted server
        # gets the same context window (RunSetup.engine)
        self.loop = scenario_loop(sc, **settings)

    def select(self, name: str) -> None:
        """Pick a scenario by name or path (as if chosen in the dropdown)."""
        choice = self._register(name)
        self._quiet = True
        try:
            self.scenario_picker.value = choice
        finally:
            self._quiet = False
        self._guarded(lambda: self._load(choice))()

    def step(self) -> None:
        """One step of the loop: one model call and the decision after it."""
        if self.loop is None or self.loop.done:
            return
        self._step_from = len(self.loop.trace)
        self.loop.step()

    def run_to_end(self) -> None:
        """Step until the run ends (at most ``Limits.max_steps`` steps)."""
        if self.loop is None or self.loop.done:
            return
        start = len(self.loop.trace)
        cap = self.loop.limits.max_steps
        for _ in range(cap):
            if self.loop.done:
                break
            self._step_from = len(self.loop.trace)
            self.loop.step()
        else:
            raise RuntimeError(f"the run did not end after {cap} steps (Limits.max_steps)")
        self._step_from = start if self._step_from is None else self._step_from

    # -- rendering --------------------------------------------------------------------------------------
    def update(self) -> None:
        """Render every pane from the loop and its trace."""
        loop = self.loop
        events = loop.trace.events if loop is not None else []
        step_events = events[self._step_from:] if self._step_from is not None else []
        self.header.value = _pane(self._render_header())
        engine = getattr(loop, "engine", None)
        staged = engine.staged_calls() if engine is not None and hasattr(engine, "staged_calls") else None
        self.transcript_pane.value = _pane(render_transcript(events, latest_from=self._step_from, staged=staged))
        self.decision_pane.value = _pane(render_decision(step_events, events, loop))
        self.result_pane.value = _pane(render_result(loop, self.error))
        runnable = loop is not None and not loop.done and self.error is None
        self.step_button.disabled = self.run_button.disabled = not runnable
        fixed_only = self.scenario_picker.value == self._fixed_label and self._fixed_label not in self._custom
        self.reset_button.disabled = fixed_only
        for control in (self.max_turns_input, self.max_tokens_input, self.context_window_input):
            control.disabled = fixed_only
        self._render_plot()
        self.error_pane.value = _pane(render_error(self.error))
        self.error_pane.layout.display = None if self.error else "none"

    def _render_header(self) -> str:
        choice = self.scenario_picker.value
        description = ""
        source = self._custom.get(choice, choice)
        if isinstance(source, Scenario):
            description = source.description
        elif isinstance(self.loop, LabLoop) and self.loop.scenario is not None:
            description = self.loop.scenario.description
        prompt = f" · prompt: <i>{_e(_clip(self.loop.prompt or '', 160))}</i>" if self.loop is not None else ""
        return (f'<div style="font-size:13px"><b>agentlab stepper</b> · <code>{_e(choice)}</code>'
                f'{" — " + _e(description) if description else ""}{prompt}</div>')

    def _render_plot(self) -> None:
        if not self.show_plots:
            self.plot_image.layout.display = "none"
            return
        kind = self.plot_picker.value
        events = self.loop.trace.events if self.loop is not None else []
        key = (id(self.loop), len(events), kind) if events else (None, 0, kind)
        if key == self._plot_key:
            return
        self.plot_image.value = _plot_png(kind, PLOT_DPI[kind], events)
        self._plot_key = key

    # -- conveniences -----------------------------------------------------------------------------------
    @property
    def call_count(self) -> int:
        """Model calls shown in the transcript."""
        return self.transcript_pane.value.count('class="agentlab-call')


@functools.cache
def empty_plot(kind: str, dpi: int) -> bytes:
    """The plot of a run before its first call, as PNG bytes, drawn once per kind and dpi in a process.

    A plot is drawn from the trace's events alone, and before the first call there are none, so every
    scenario, every Reset and every pick in the dropdown shows the same picture. Drawing it again took a
    live dashboard 150-260 ms, and made the stepper's live figure lay out the empty plot's panels and then
    the run's again at the next Step."""
    return plots.LiveFigure(kind, dpi=dpi).render([])


def _plot_png(kind: str, dpi: int, events: list[Event]) -> bytes:
    """A widget's plot of ``events``: drawn again in the process's live figure for that kind, or, before the
    first call, the ``empty_plot``; the live figure then keeps the layout of the last run it drew, which
    the next Step is likely to reuse."""
    if not events:
        return empty_plot(kind, dpi)
    return live_figure(kind, dpi).render(list(events))


@functools.cache
def live_figure(kind: str, dpi: int) -> plots.LiveFigure:
    """The figure of a plot kind drawn again at every Step of every stepper in the process. A kernel runs one
    click at a time and a Step takes its picture as PNG bytes, so the steppers can share it: a new stepper's
    first Step (or another stepper's next one) draws into the axes the last Step left, and only the panels
    whose place changed get new axes (building a figure and its axes afresh took a first Step twice as
    long as the next ones)."""
    return plots.LiveFigure(kind, dpi=dpi)


def _pane(body: str) -> str:
    """Pane content with its own line height and wrapping (widget HTML defaults to one-line label styles)."""
    return f'<div style="line-height:1.35;white-space:normal;font-size:12px">{body}</div>'


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    place = f"\n(raised in {Path(where.filename).name}:{where.lineno}, {where.name})" if where else ""
    return f"{type(exc).__name__}: {exc}{place}"


# -- the replay of a recorded client run ----------

@dataclass
class _ShownState:
    num_turns: int


@dataclass
class _ShownRun:
    """The part of an AgentLoop that ``widgets.render_result`` reads, for the events revealed so far."""

    requests: int
    state: _ShownState
    result: Result | None

    @classmethod
    def of(cls, events: list[Event]) -> _ShownRun:
        requests = sum(1 for e in events if e.kind == "request")
        turns = sum(1 for e in events if isinstance(e.payload, Response) and e.payload.purpose == "turn")
        end = next((e.payload for e in events if isinstance(e.payload, ResultEvent)), None)
        return cls(requests, _ShownState(turns), Result.from_event(end) if end is not None else None)


REPLAY_PLOTS = (("decision path", "path"), ("tokens · context · budget (estimated)", "overview"))
SESSION_PLOTS = (("decision path", "path"), ("session: context, cost, path, compactions", "session"),
                 ("context fill", "context"), ("recoveries vs limits", "recoveries"),
                 ("compactions", "compaction"), ("cost", "spend"))


def _transcript(source: Any) -> Session | None:
    """A Claude Code session, when ``source`` is one or names a transcript file; None for a record."""
    if isinstance(source, Session):
        return source
    if isinstance(source, (str, Path)) and str(source).endswith(".jsonl") and Path(source).is_file() \
            and detect_kind(source) == "claude-code":
        return read_session(source)
    return None


def _agentlab_run(source: Any) -> tuple[Trace, str] | None:
    """An agentlab run and where it came from, when ``source`` is a Trace, an AgentLoop (its trace) or an
    agentlab trace file (``agentlab run --trace FILE``, ``scenario_loop(..., trace=FILE)``); None otherwise."""
    if isinstance(source, AgentLoop):
        return source.trace, "a loop of this kernel"
    if isinstance(source, Trace):
        return source, "a trace of this kernel"
    if isinstance(source, (str, Path)) and str(source).endswith(".jsonl") and Path(source).is_file() \
            and detect_kind(source) == "agentlab-trace":
        return Trace.load(source), Path(source).name
    return None


class ReplayStepper(WidgetView):
    """Step through a recorded client run, one model call at a time, with the Stepper's panes and plots.

    ``ReplayStepper("max_tokens_give_up")`` replays the newest Claude Code record of that scenario;
    a record dict, a ``.json`` path or ``client/version/scenario`` work too, and so does a Claude Code session
    transcript (a ``.jsonl`` path from ``~/.claude/projects``, or a ``Session``), whose token counts are the
    ones Claude Code wrote. Drive it with ``step()``,
    ``run_to_end()`` and ``reset()`` or the buttons; display it as the last expression of a cell.
    """

    def __init__(self, record_or_path: dict[str, Any] | str | Path | Trace | AgentLoop, *, plot: str = "path",
                 show_plots: bool = True) -> None:
        self.session = _transcript(record_or_path)
        run = None if self.session is not None else _agentlab_run(record_or_path)
        self.run_source: str | None = run[1] if run else None   # an agentlab run: where its trace came from
        self.record: dict[str, Any] = {}
        if self.session is not None:
            import os

            self.trace = session_to_trace(self.session, secrets=tuple(
                v for v in (os.environ.get("ANTHROPIC_API_KEY"),) if v))
        elif run is not None:
            self.trace = run[0]
        else:
            assert not isinstance(record_or_path, Trace | AgentLoop)   # _agentlab_run took those
            self.record = load_record(record_or_path)
            self.trace = record_to_trace(self.record)
        real_tokens = not self.record
        if real_tokens:
            plot = plot if plot in {value for _, value in SESSION_PLOTS} else "path"
        self.segments = step_ends(self.trace.events)
        self.shown = 0                       # events revealed
        self.show_plots = show_plots
        self._step_from: int | None = None
        self._plot_key: tuple[Any, ...] | None = None
        self.header = widgets.HTML()
        self.step_button = widgets.Button(description="Step", button_style="primary", icon="step-forward",
                                          tooltip="reveal the next recorded model call and what the client did")
        self.run_button = widgets.Button(description="Run to end", icon="fast-forward")
        self.reset_button = widgets.Button(description="Reset", icon="undo")
        self.plot_picker = widgets.Dropdown(options=SESSION_PLOTS if real_tokens else REPLAY_PLOTS, value=plot,
                                            description="plot",
                                            layout=widgets.Layout(width="330px"))
        self.result_pane = widgets.HTML()
        self.transcript_pane = widgets.HTML(layout=widgets.Layout(flex="1 1 55%", min_width="0", width="55%"))
        self.decision_pane = widgets.HTML(layout=widgets.Layout(flex="1 1 45%", min_width="0", width="45%",
                                                                overflow="hidden"))
        self.plot_image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        self.step_button.on_click(lambda _b: self._do(self.step))
        self.run_button.on_click(lambda _b: self._do(self.run_to_end))
        self.reset_button.on_click(lambda _b: self._do(self.reset))
        self.plot_picker.observe(lambda _c: self._do(lambda: None), names="value")
        panes = widgets.HBox([self.transcript_pane, self.decision_pane],
                             layout=widgets.Layout(align_items="flex-start", width="100%", grid_gap="12px"))
        self.view = widgets.VBox([
            self.header,
            widgets.HBox([self.step_button, self.run_button, self.reset_button, self.plot_picker],
                         layout=widgets.Layout(flex_flow="row wrap")),
            self.result_pane, panes, self.plot_image], layout=widgets.Layout(width="100%"))
        self.view.add_class("agentlab-replay")
        self.update()

    def __repr__(self) -> str:
        if self.session is not None:
            return f"ReplayStepper(claude-code {self.session.version} session, {len(self.session.calls)} call(s))"
        if self.run_source is not None:
            return f"ReplayStepper(agentlab run: {self.run_source}, {self._requests()} call(s))"
        return f"ReplayStepper({self.record['client']}/{self.record['version']}/{self.record['scenario']})"

    def shown_as(self) -> str:
        if self.session is not None:
            return (f"the replay stepper on a Claude Code {self.session.version or ''} session of "
                    f"{len(self.session.calls)} call(s)").replace("  ", " ")
        if self.run_source is not None:
            return f"the replay stepper on an agentlab run ({self.run_source}) of {self._requests()} call(s)"
        return (f"the replay stepper on {self.record['client']} {self.record['version']}, scenario "
                f"{self.record['scenario']}")

    def _requests(self) -> int:
        return sum(1 for e in self.trace.events if e.kind == "request")

    def _do(self, action: Callable[[], None]) -> None:
        action()
        self.update()

    @property
    def done(self) -> bool:
        return self.shown >= len(self.trace.events)

    @property
    def events(self) -> list[Event]:
        return self.trace.events[:self.shown]

    def step(self) -> None:
        """Reveal the next model call (a summary call comes with the call after it) and the decision."""
        if self.done:
            return
        self._step_from = self.shown
        self.shown = next(end for end in self.segments if end > self.shown)

    def run_to_end(self) -> None:
        if self.done:
            return
        self._step_from = self.shown
        self.shown = len(self.trace.events)

    def reset(self) -> None:
        self.shown, self._step_from = 0, None

    @property
    def call_count(self) -> int:
        """Model calls shown in the transcript."""
        return self.transcript_pane.value.count('class="agentlab-call')

    def update(self) -> None:
        events = self.events
        step_events = events[self._step_from:] if self._step_from is not None else []
        record = self.record
        prompt = next((e.payload.prompt for e in self.trace.events if isinstance(e.payload, Start)), None)
        if self.session is not None:
            self.header.value = _pane(_session_header(self.session, prompt))
        elif self.run_source is not None:
            self.header.value = _pane(_run_header(self.trace, self.run_source, prompt, self._requests()))
        else:
            self.header.value = _pane(
                f'<div style="font-size:13px"><b>replay</b> of a recorded run · {_e(client_label(record))} · '
                f'scenario <code>{_e(record["scenario"])}</code>'
                f'{" · prompt: <i>" + _e(prompt) + "</i>" if prompt else ""} · {len(record["requests"])} recorded '
                f'request(s) · token counts are estimates</div>')
        self.transcript_pane.value = _pane(render_transcript(events, latest_from=self._step_from))
        self.decision_pane.value = _pane(render_decision(step_events, events, None, replay=True))
        self.result_pane.value = _pane(render_result(_ShownRun.of(events)))
        self.step_button.disabled = self.run_button.disabled = self.done
        self._render_plot(events)

    def _render_plot(self, events: list[Event]) -> None:
        if not self.show_plots:
            self.plot_image.layout.display = "none"
            return
        key = (self.shown, self.plot_picker.value)
        if key == self._plot_key:
            return
        kind = self.plot_picker.value
        self.plot_image.value = _plot_png(kind, PLOT_DPI[kind], events)
        self._plot_key = key



def _run_header(trace: Trace, source: str, prompt: str | None, requests: int) -> str:
    start = next((e.payload for e in trace.events if isinstance(e.payload, Start)), None)
    failed = sum(1 for e in trace.events if e.kind == "api_error")
    model = f" · <code>{_e(start.model)}</code>" if start is not None and start.model else ""
    return (f'<div style="font-size:13px"><b>replay</b> of an agentlab run · {_e(source)}{model} · '
            f'{requests} model call(s){f", {failed} failed" if failed else ""}'
            f'{" · prompt: <i>" + _e(prompt[:200]) + "</i>" if prompt else ""} · token counts as the server '
            f'reported them</div>')


def _session_header(session: Session, prompt: str | None) -> str:
    notes = "".join(f"<br><span style='color:#B06000'>{_e(n)}</span>" for n in session.notes())
    side = f" · {len(session.sidechain_calls)} sub-agent call(s) shown apart" if session.sidechain_calls else ""
    return (f'<div style="font-size:13px"><b>replay</b> of a Claude Code {_e(session.version)} session · '
            f'{len(session.calls)} model call(s){side} · ended: {_e(session.ending)}'
            f'{" · prompt: <i>" + _e(prompt[:200]) + "</i>" if prompt else ""} · token counts as Claude Code '
            f'wrote them{notes}</div>')


# --- a widget as static HTML (no kernel) ------------------------------------------------------------------

def static_html(widget: Any) -> str:
    """A widget tree as plain HTML, as it looks now: HTML panes as they are, images inline, buttons and
    inputs drawn disabled. For pages read without a kernel (the lesson website), where a live widget
    would show nothing."""
    import base64

    if getattr(widget.layout, "display", None) == "none":
        return ""
    classes = " ".join(getattr(widget, "_dom_classes", ()))
    if isinstance(widget, widgets.Box):
        vertical = isinstance(widget, widgets.VBox)
        style = (f"display:flex;flex-direction:{'column' if vertical else 'row'};"
                 f"{'' if vertical else 'flex-wrap:wrap;align-items:flex-start;'}gap:6px;width:100%")
        inner = "".join(static_html(child) for child in widget.children)
        return f'<div class="{_e(classes)}" style="{style}">{inner}</div>'
    flex = getattr(widget.layout, "flex", None)
    box = f"flex:{flex};min-width:0;" if flex else ""
    if isinstance(widget, widgets.HTML):
        return f'<div class="{_e(classes)}" style="{box}">{widget.value}</div>'
    if isinstance(widget, widgets.Image):
        if not widget.value:
            return ""
        data = base64.b64encode(widget.value).decode("ascii")
        mime = "image/svg+xml" if widget.format.startswith("svg") else f"image/{widget.format}"
        return (f'<img class="{_e(classes)}" style="max-width:100%;height:auto" alt="plot" '
                f'src="data:{mime};base64,{data}">')
    if isinstance(widget, widgets.Button):
        return f'<button class="{_e(classes)}" disabled>{_e(widget.description)}</button>'
    description = f"{_e(widget.description)} " if getattr(widget, "description", "") else ""
    if isinstance(widget, widgets.Dropdown):
        return (f'<label class="{_e(classes)}">{description}<select disabled><option selected>'
                f'{_e(widget.label)}</option></select></label>')
    if hasattr(widget, "value"):
        return (f'<label class="{_e(classes)}">{description}<input disabled size="8" '
                f'value="{_e(widget.value)}"></label>')
    return ""
