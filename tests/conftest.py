"""Fixtures the test files share: the run's one JupyterLab for the browser tests (tests/browser_lab.py); and the
order the files are handed to make test's workers, longest first (tests/file_order.py)."""

from browser_lab import jupyterlab  # noqa: F401  (registered here once, so one lab per process, not per file)
from file_order import pytest_collection_modifyitems, pytest_configure  # noqa: F401
