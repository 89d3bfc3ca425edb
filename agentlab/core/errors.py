"""Errors agentlab raises for bad input. Each message names what is wrong and where."""

from __future__ import annotations


class AgentlabError(Exception):
    """Base class: bad input or configuration (the CLI exits with status 2 on these)."""


class ScenarioError(AgentlabError, ValueError):
    """A scenario file is malformed: the message names the file, the step and the field."""


class ConfigError(AgentlabError, ValueError):
    """A loop option or a settings file is invalid."""
