"""agentlab: a workbench for the end of an agent's turn (every stop_reason branch, stepped, traced, plotted)."""

from .errors import AgentlabError, ConfigError, ScenarioError
from .lab import run_scenario, scenario_loop
from .loop import AgentLoop, Result
from .scenario import Scenario, list_scenarios, load_scenario
from .scripted import ScenarioEngine, scripted_client
from .trace import Event, Trace
from .transitions import ROWS, Limits, LoopState, decide

__all__ = [
    "ROWS", "AgentLoop", "AgentlabError", "ConfigError", "Event", "Limits", "LoopState", "Result", "Scenario",
    "ScenarioEngine", "ScenarioError", "Trace", "decide", "list_scenarios", "load_scenario", "run_scenario",
    "scenario_loop", "scripted_client",
]
__version__ = "0.1.0"
