"""Time the lesson suite: execute every notebook in notebooks/ once, print the time each took and the total.

    .venv/bin/python bench/notebooks.py            # writes bench/results/notebooks.json
    .venv/bin/python bench/notebooks.py --quick    # one small notebook instead (the tests run it)

Each notebook runs in a fresh kernel (as nbval runs it), so the times include kernel start-up and imports.
The suite's budget is 90 seconds on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Printer, add_arguments, record  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
BUDGET_S = 90.0


def quick_notebook(folder: Path) -> Path:
    """A one-cell notebook that imports agentlab and runs a scenario: the path every lesson takes."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_code_cell(
        "from agentlab.lab import run_scenario\nprint(run_scenario('end_turn').subtype)"))
    path = folder / "quick.ipynb"
    nbformat.write(notebook, path)
    return path


def execute(path: Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    out = Printer()
    load_before = os.getloadavg()[0]
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="agentlab-bench-") as tmp:
        paths = [quick_notebook(Path(tmp))] if args.quick else sorted(NOTEBOOKS.glob("*.ipynb"))
        out(f"{'notebook':<34} {'seconds':>8}")
        for path in paths:
            times[path.name] = seconds = execute(path)
            out(f"{path.name:<34} {seconds:8.1f}")
    total = sum(times.values())
    out(f"{'total':<34} {total:8.1f}   (budget {BUDGET_S:.0f} s)")
    out(f"load average (1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} after, {os.cpu_count()} cores")
    figures = {"seconds": {name: round(s, 2) for name, s in times.items()}, "total_s": round(total, 2),
               "budget_s": BUDGET_S}
    record("notebooks", figures, out.text, args=args, command="bench/notebooks.py" + (" --quick" if args.quick else ""))
    return 0 if total <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
