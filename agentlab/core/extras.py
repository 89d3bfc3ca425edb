"""The notebook stack is an extra: ``pip install 'agentlab-workbench[lab]'`` (pandas, matplotlib, ipywidgets,
JupyterLab). The plain install runs, serves, observes and grades without it; what needs it says so."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import AgentlabError

DISTRIBUTION = "agentlab-workbench"  # the name on the package index; the import name is agentlab
LAB_EXTRA = "lab"
LAB_MODULES = frozenset({"pandas", "matplotlib", "ipywidgets", "IPython", "numpy"})


class MissingExtra(AgentlabError, ImportError):
    """A feature of the notebook stack used on the plain install: the message names the extra to install."""


def missing_extra(exc: ImportError, what: str) -> ImportError:
    """``exc`` as a :class:`MissingExtra` naming ``what`` and the extra when the missing module is one of the
    lab extra's; any other ImportError is returned as it is."""
    top = (exc.name or "").split(".")[0]
    if top not in LAB_MODULES:
        return exc
    return MissingExtra(f"{what} needs {top}, which comes with the '{LAB_EXTRA}' extra: "
                        f"pip install '{DISTRIBUTION}[{LAB_EXTRA}]' (in the checkout: make lab)")


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` (one of the lab extra's), or raise :class:`MissingExtra` saying what needs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(exc, what) from None
