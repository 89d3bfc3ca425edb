"""agentlab-grade: ``agentlab grade`` as a product for a framework's CI.

The distribution holds what a framework maintainer installs: the pytest plugin (:mod:`agentlab_grade.pytest_plugin`,
registered as ``pytest11``), the ``agentlab-grade`` command (:mod:`agentlab_grade.cli`, the same as ``agentlab
grade``) and the grade heatmap (:mod:`agentlab_grade.heatmap`, the ``heatmap`` extra: matplotlib). The grading
engine (the rules, the verdicts, the scripted server, the reports) stays in the workbench, in
``agentlab.grading.command*``, where the lessons read it; the names below are its public API, re-exported.

The re-exports are loaded on first use (PEP 562): ``import agentlab_grade``, and the plugin that pytest loads in
every run, import nothing of agentlab.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module of the workbench it comes from
_EXPORTS = {
    "grade_command": "agentlab.grading.command",
    "grade_function": "agentlab.grading.command",
    "grade_main": "agentlab.grading.command",
    "gradeable_scenarios": "agentlab.grading.command",
    "observed_reports": "agentlab.grading.command",
    "load_document": "agentlab.grading.command",
    "read_baseline": "agentlab.grading.command",
    "check_baseline": "agentlab.grading.command",
    "Report": "agentlab.grading.command",
    "ScenarioGrade": "agentlab.grading.command",
    "Check": "agentlab.grading.command",
    "Rule": "agentlab.grading.command",
    "RULES": "agentlab.grading.command",
    "RULE_NAMES": "agentlab.grading.command",
    "SCHEMA_PATH": "agentlab.grading.command",
    "VERDICTS": "agentlab.grading.command",
    "POLICY_MODES": "agentlab.grading.command",
    "grade_heatmap": "agentlab_grade.heatmap",
}

__all__ = ["__version__", "grade_command", "grade_function", "grade_main", "gradeable_scenarios", "observed_reports",
           "load_document", "read_baseline", "check_baseline", "Report", "ScenarioGrade", "Check", "Rule", "RULES",
           "RULE_NAMES", "SCHEMA_PATH", "VERDICTS", "POLICY_MODES", "grade_heatmap"]

if TYPE_CHECKING:
    from agentlab.grading.command import (
        POLICY_MODES,
        RULE_NAMES,
        RULES,
        SCHEMA_PATH,
        VERDICTS,
        Check,
        Report,
        Rule,
        ScenarioGrade,
        check_baseline,
        grade_command,
        grade_function,
        grade_main,
        gradeable_scenarios,
        load_document,
        observed_reports,
        read_baseline,
    )

    from .heatmap import grade_heatmap


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's, which is the workbench's (released together)
        from importlib.metadata import version

        return version("agentlab-grade")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentlab_grade' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
