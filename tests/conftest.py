"""Fixtures the test files share: the run's one JupyterLab for the browser tests (tests/browser_lab.py)."""

from browser_lab import jupyterlab  # noqa: F401  (registered here once, so one lab per process, not per file)
