"""tests/preloaded_kernel.py: the kernel spec make test gives nbval starts a working kernel, forked from a process
that imported the SDK, in the folder jupyter_client asks for, that an interrupt reaches and a shutdown ends."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from tests.preloaded_kernel import KERNEL_NAME, PreloadedKernels


@pytest.fixture(scope="module")
def kernels():
    saved = os.environ.get("JUPYTER_PATH")
    plugin = PreloadedKernels()
    plugin.start()
    yield plugin
    plugin.pytest_unconfigure()
    if saved is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = saved


def _run(client, code: str) -> tuple[str, dict]:
    """What ``code`` printed, and its execute reply's content."""
    msg_id = client.execute(code)
    printed = []
    while True:
        msg = client.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    return "".join(printed), client.get_shell_msg(timeout=60)["content"]


@contextlib.contextmanager
def started(kernel_name: str, cwd: Path, *, now: bool = False) -> Iterator[tuple[KernelManager, object]]:
    """A kernel of ``kernel_name`` started in ``cwd``, ready, and its client; shut down when the block ends (at
    once with ``now``, without waiting for the kernel to stop on its own)."""
    manager = KernelManager(kernel_name=kernel_name)
    manager.start_kernel(cwd=str(cwd))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        yield manager, client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=now)


def test_a_preloaded_kernel_runs_code_where_it_was_started_and_stops(kernels, tmp_path: Path):
    with started(KERNEL_NAME, tmp_path) as (manager, client):
        printed, reply = _run(client, "import os, sys\n"
                                      "print(os.getcwd(), 'anthropic' in sys.modules, 'pandas' in sys.modules)")
        assert reply["status"] == "ok" and printed == f"{tmp_path} True False\n"
        sleeping = client.execute("import time\nprint('asleep', flush=True)\ntime.sleep(120)")
        while client.get_iopub_msg(timeout=60)["msg_type"] != "stream":   # until it is running
            pass
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == sleeping and reply["content"]["ename"] == "KeyboardInterrupt"
    assert not manager.is_alive()


SET_UP = ("import sys, matplotlib, pandas\n"
          "print(matplotlib.get_backend(), pandas.get_option('display.max_columns'),"
          " pandas.get_option('display.width'), 'ipywidgets' in sys.modules)")


def _set_up_seen(kernel_name: str, cwd: Path) -> str:
    with started(kernel_name, cwd, now=True) as (_, client):
        printed, reply = _run(client, SET_UP)
    assert reply["status"] == "ok", reply
    return printed


def test_what_a_preloaded_kernel_imported_is_set_up_as_in_a_kernel_started_afresh(kernels, tmp_path: Path):
    """matplotlib's backend (ipykernel's inline one), pandas's table size (for a kernel, not a terminal), and
    ipywidgets not yet imported: the same in a fork of the server as in a kernel started as JupyterLab starts it."""
    preloaded = _set_up_seen(KERNEL_NAME, tmp_path)
    assert preloaded == _set_up_seen("python3", tmp_path)
    assert preloaded.startswith("module://matplotlib_inline.backend_inline 20 ") and preloaded.endswith(" False\n")
