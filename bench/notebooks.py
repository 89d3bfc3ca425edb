"""Time the lesson suite: execute every notebook in notebooks/ once, print the time each took and the total.

    .venv/bin/python bench/notebooks.py

Each notebook runs in a fresh kernel (as nbval runs it), so the times include kernel start-up and imports.
The suite's budget is 90 seconds on 2 cores.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
BUDGET_S = 90.0


def main() -> int:
    total = 0.0
    print(f"{'notebook':<34} {'seconds':>8}")
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        started = time.perf_counter()
        client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS)}})
        client.execute()
        seconds = time.perf_counter() - started
        total += seconds
        print(f"{path.name:<34} {seconds:8.1f}")
    print(f"{'total':<34} {total:8.1f}   (budget {BUDGET_S:.0f} s)")
    return 0 if total <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
