"""Where agentlab's data lives, resolved in one place.

The scenarios, the example hooks, the sandbox files and the observed records are kept in ``data/`` at the top
of the repository, where readers find them. A built wheel carries the same folder as package data,
``agentlab/data/``, found with :mod:`importlib.resources`. In a checkout (an editable install) the package
has no ``data`` folder of its own and the repository's ``data/`` is used.

Every other module asks this one: :func:`data_dir` and the named folders below, and :func:`project_dir`,
the folder that holds ``data/`` (the ``$CLAUDE_PROJECT_DIR`` of the example hook settings).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from .errors import ConfigError

__all__ = ["data_dir", "hooks_dir", "observed_dir", "project_dir", "sandbox_dir", "scenarios_dir"]


def _package_dir() -> Path:
    package = files("agentlab")
    if not isinstance(package, Path):
        raise ConfigError(f"agentlab is installed as {package!r}, not as files on disk; its data (scenarios, "
                          "hook scripts) must be real files: install the wheel with pip, not a zipped copy")
    return package


def project_dir() -> Path:
    """The folder that holds ``data/``: the installed package folder, or the repository in a checkout."""
    package = _package_dir()
    if (package / "data").is_dir():
        return package
    checkout = package.resolve().parent
    if (checkout / "data").is_dir():
        return checkout
    raise ConfigError(f"agentlab's data folder is missing: neither {package / 'data'} (an installed wheel) "
                      f"nor {checkout / 'data'} (a checkout) exists; reinstall agentlab")


def data_dir() -> Path:
    """``data/``: scenarios, hooks, sandbox and observed records."""
    return project_dir() / "data"


def scenarios_dir() -> Path:
    return data_dir() / "scenarios"


def hooks_dir() -> Path:
    return data_dir() / "hooks"


def sandbox_dir() -> Path:
    return data_dir() / "sandbox"


def observed_dir() -> Path:
    return data_dir() / "observed"
