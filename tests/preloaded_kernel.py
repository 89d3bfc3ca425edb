"""A pytest plugin for ``make test`` (``-p tests.preloaded_kernel --nbval-kernel-name agentlab-preloaded``): the
lessons' kernels do not start Python and import the SDK again for each lesson.

A lesson's kernel spends some 4 s of CPU importing before and in its first cells: the anthropic SDK (2.8 s) and
ipykernel itself (0.6 s) among them. Here, on each worker, a server (tests/forked_agent.py) imports those once,
and the kernel spec ``agentlab-preloaded`` (written to a temporary folder put first on JUPYTER_PATH) starts each
kernel as a fork of it: ``python -m ipykernel_launcher -f CONNECTION_FILE`` with the environment, folder and
stdio jupyter_client gave the process it started, whose exit is the kernel's. An interrupt jupyter_client sends
that process is passed on to the kernel, and killing it kills the kernel. The server is started when the first
lesson cell runs.

What is preloaded is only what the lessons would import anyway, imported as a kernel imports it: the SDK,
ipykernel, matplotlib and agentlab's modules that the lessons import (1.6 s of CPU more a kernel). matplotlib
reads the backend from MPLBACKEND at import, which ipykernel sets, when it is not set, before any cell runs: the
server imports it with the same value. pandas and ipywidgets are left out, as their set-up depends on running
in a kernel (pandas sizes its tables for a terminal when imported outside one, ipywidgets registers its comm
target with the kernel); agentlab imports neither at import. The lessons' own imports run in the kernel as they
are written. What a kernel started afresh proves beyond this, that a lesson runs from a new process outside the
checkout, test_wheel proves.

The tests that run a notebook of their own through nbclient (a wrong answer as a learner sees it, a mistyped
name, the stepper's stored outputs) ask ``kernel_for(pytestconfig)`` for the same kernel.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

import pytest

KERNEL_NAME = "agentlab-preloaded"
PLUGIN_NAME = "agentlab-preloaded-kernels"
PRELOAD = ("agentlab.core.sdk", "ipykernel.kernelapp", "matplotlib", "agentlab.lab", "agentlab.ui.plots",
           "agentlab.ui.report", "agentlab.exercises", "agentlab.observatory.compare")
INLINE = "module://matplotlib_inline.backend_inline"   # ipykernel's MPLBACKEND when none is set


class PreloadedKernels:
    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.started = False

    def start(self) -> None:
        from tests.forked_agent import command, preloaded

        self.started = True
        env = {**os.environ, "MPLBACKEND": os.environ.get("MPLBACKEND") or INLINE}
        address = self.stack.enter_context(preloaded(PRELOAD, env=env))
        folder = Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="agentlab-kernels-")))
        spec = folder / "kernels" / KERNEL_NAME
        spec.mkdir(parents=True)
        argv = command(address, "-m", "ipykernel_launcher", "-f", "{connection_file}", forward_interrupt=True)
        (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3 (preloaded)",
                                                      "language": "python"}), encoding="utf-8")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(folder), os.environ.get("JUPYTER_PATH")) if p)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if not self.started and type(item).__name__ == "IPyNbCell":   # nbval starts the kernel in this setup
            self.start()

    def pytest_unconfigure(self) -> None:
        self.stack.close()


def kernel_for(config: pytest.Config) -> str:
    """The kernel a test that runs a notebook (nbclient) asks for: under make test the preloaded one, its server
    started now if no lesson has started it yet; ``python3`` where the plugin is not loaded."""
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if plugin is None:
        return "python3"
    if not plugin.started:
        plugin.start()
    return KERNEL_NAME


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "nbval_kernel_name", None) == KERNEL_NAME:
        config.pluginmanager.register(PreloadedKernels(), PLUGIN_NAME)
