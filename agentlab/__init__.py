"""agentlab: a workbench for the end of an agent's turn (every stop_reason branch, stepped, traced, plotted).

The package, by role; imports point down this list only (checked by tests/test_layout.py):

core/         the decision and the loop; imports nothing else of agentlab
  errors        exceptions for bad input
  guard         printable-only terminal output, redaction, outputs checked against inputs, file locks
  paths         where the data lives
  transitions   the decision table, Limits, LoopState, the pure ``decide()``
  compaction    context accounting and the compaction strategies
  tools         the tool registry and the demo tools
  hooks         Claude Code's hook protocol (Python callables and shell commands)
  caching       cache_control breakpoints, and the scripted backend's prompt cache
  cost          the dated price table applied to a response's usage (cost_usd)
  events        one frozen dataclass per event kind, with its JSONL form
  trace         the event stream (Trace), JSONL, a pandas frame
  sdk           the SDK, imported with the collector paused and then frozen
  wire          one API call through the SDK; what came back, a Message or a classified Failure
  config        RunConfig: a run's settings, one frozen value that checks itself
  loop          AgentLoop(client, config): performs what ``decide()`` says (sync ``run()``, async ``arun()``)
backend/      the scripted model: scenario files, the engine, ``agentlab serve``
lab           a RunConfig built from a scenario or from flags, and its loop (the one configuration path)
observatory/  recorded real clients: observe, records, compare, replay, facts
grading/      ``agentlab grade``: the rules, the verdicts, the report cards, the serving
sessions/     Claude Code's own session files: ``agentlab sessions``, ``agentlab replay``
ui/           the notebook UI: plots, report, widgets (Stepper, ReplayStepper)
exercises/    the lessons' checks
cli           the ``agentlab`` command; nothing imports it
"""

from __future__ import annotations

import functools as _functools
import importlib as _importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend.scenario import Scenario, list_scenarios, load_scenario
    from .backend.scripted import ScenarioEngine, scripted_client
    from .core.config import RunConfig
    from .core.errors import AgentlabError, ConfigError, ScenarioError
    from .core.loop import AgentLoop, Result
    from .core.trace import Event, Trace
    from .core.transitions import ROWS, Limits, LoopState, decide
    from .lab import run_scenario, scenario_loop

# Each name below is imported when it is first used, not by ``import agentlab``: the commands that serve, grade
# or observe (and the pytest plugin) never load the SDK, whose import costs a second or two of CPU in every
# process that makes it. ``agentlab grade`` runs in CI once per build; the agent it grades pays for its own SDK.
_WHERE = {
    "Scenario": ".backend.scenario", "list_scenarios": ".backend.scenario", "load_scenario": ".backend.scenario",
    "ScenarioEngine": ".backend.scripted", "scripted_client": ".backend.scripted",
    "AgentlabError": ".core.errors", "ConfigError": ".core.errors", "ScenarioError": ".core.errors",
    "AgentLoop": ".core.loop", "Result": ".core.loop", "RunConfig": ".core.config",
    "Event": ".core.trace", "Trace": ".core.trace",
    "ROWS": ".core.transitions", "Limits": ".core.transitions", "LoopState": ".core.transitions",
    "decide": ".core.transitions", "run_scenario": ".lab", "scenario_loop": ".lab",
}


@_functools.cache
def _load_everything() -> None:
    """The first use of a package-level name loads the modules that hold them (the loop, the SDK, the scripted
    backend) with the collector paused and what they made frozen afterwards, as ``agentlab.core.sdk`` does for
    the SDK alone: later full collections skip those objects, which live as long as the process."""
    from .core.sdk import collector_paused_then_frozen

    with collector_paused_then_frozen():
        for module in sorted(set(_WHERE.values())):
            _importlib.import_module(module, __name__)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _load_everything()
    value = getattr(_importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "ROWS", "AgentLoop", "AgentlabError", "ConfigError", "Event", "Limits", "LoopState", "Result", "RunConfig",
    "Scenario", "ScenarioEngine", "ScenarioError", "Trace", "decide", "list_scenarios", "load_scenario", "run_scenario",
    "scenario_loop", "scripted_client",
]
__version__ = "0.1.0"
