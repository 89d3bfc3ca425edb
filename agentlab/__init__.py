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
  loop          AgentLoop: performs what ``decide()`` says (sync ``run()``, async ``arun()``)
backend/      the scripted model: scenario files, the engine, ``agentlab serve``
lab           a run built from a scenario or from flags (the one configuration path)
observatory/  recorded real clients: observe, compare, replay, facts, grade
ui/           the notebook UI: plots, report, widgets (Stepper, ReplayStepper)
exercises/    the lessons' checks
cli           the ``agentlab`` command; nothing imports it
"""

import gc as _gc

# Importing the SDK and the rest makes some 200 000 objects that live as long as the process (modules,
# classes, the SDK's pydantic models). The garbage collector, run again and again on the way, walks them and
# finds nothing to free, and every full collection after that walks them again. So the collector is paused
# while agentlab's modules load, and then everything alive is frozen (``gc.freeze()``): later collections
# skip it. Frozen objects are still freed by reference counting; only a reference cycle among objects that
# existed at this import (about a thousand objects of garbage the import itself left, and any cycle the
# caller had already made) stays until ``gc.unfreeze()``. The import takes about a third less CPU, and a
# Step or a CLI run pays less for each full collection. A caller that had turned the collector off finds
# it off.
_collecting = _gc.isenabled()
_gc.disable()
try:
    from .backend.scenario import Scenario, list_scenarios, load_scenario
    from .backend.scripted import ScenarioEngine, scripted_client
    from .core.errors import AgentlabError, ConfigError, ScenarioError
    from .core.loop import AgentLoop, Result
    from .core.trace import Event, Trace
    from .core.transitions import ROWS, Limits, LoopState, decide
    from .lab import run_scenario, scenario_loop
finally:
    _gc.freeze()
    if _collecting:
        _gc.enable()
    del _collecting

__all__ = [
    "ROWS", "AgentLoop", "AgentlabError", "ConfigError", "Event", "Limits", "LoopState", "Result", "Scenario",
    "ScenarioEngine", "ScenarioError", "Trace", "decide", "list_scenarios", "load_scenario", "run_scenario",
    "scenario_loop", "scripted_client",
]
__version__ = "0.1.0"
