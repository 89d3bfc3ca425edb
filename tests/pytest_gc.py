"""A pytest plugin for ``make test`` (loaded with ``-p tests.pytest_gc``, before the other plugins): the garbage
collector is paused while pytest starts and collects, and what is alive then is frozen.

Starting and collecting imports nbval (whose nbformat builds a URI grammar through jsonschema), the SDK,
matplotlib, pandas and hypothesis, and builds the 2 000 test items: some 500 000 objects that live as long as
the process. The collector, run again and again on the way, walks them and finds nothing to free, and each
full collection after that would walk them again: a worker spent 6-7.4 s of its CPU in collections. So the
collector is off from this plugin's import until the tests are collected (``pytest_collection_finish``), or,
on the xdist controller, which collects nothing, until the run loop starts. Then everything alive is frozen
(``gc.freeze()``) and the collector is put back on. Frozen objects are still freed by reference counting;
only a reference cycle among them stays until the process ends.

It also keeps jsonschema from building the grammars of ``rfc3987_syntax``. nbval imports nbformat, which imports
jsonschema, whose format checkers import that optional package when it is installed (jupyter-events's
``jsonschema[format-nongpl]`` installs it) to check the ``iri`` and ``iri-reference`` formats: building its Lark
grammars took 2.7 s of the 3.4 s that ``import nbval.plugin`` takes, in the controller and in each worker. No
schema the tests or nbformat validate has those formats, and jsonschema checks formats only when asked to, so
the package is marked as not importable here (``sys.modules[name] = None``, Python's documented way): jsonschema
then goes without those two checkers, as it does where the package is not installed.
test_pytest_gc.py checks that a worker has not imported it and that nbformat still validates the lessons.
"""

from __future__ import annotations

import gc
import sys

import pytest

sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

_paused = gc.isenabled()
gc.disable()


def _resume() -> None:
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def pytest_collection_finish(session: pytest.Session) -> None:
    _resume()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    _resume()


def pytest_unconfigure(config: pytest.Config) -> None:
    _resume()
