"""The figures a bench script measured, as a JSON file in bench/results/ that the docs are rendered from.

Each script calls ``record(name, figures, output, quick=...)`` at its end: ``figures`` are the numbers the
README and docs/benchmarks.md quote, ``output`` what the script printed. A full run writes
``bench/results/<name>.json`` (committed; ``bench/render.py`` makes the docs' tables from it); a ``--quick``
run (the tests run every script that way) writes only where ``--out`` says, so it never replaces a
measured figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_model() -> str:
    """The processor's name (Linux /proc/cpuinfo; platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> dict[str, Any]:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cores": os.cpu_count(), "python": platform.python_version(), "cpu": cpu_model(),
            "system": platform.system(), "load_1min": round(load, 2) if load is not None else None}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--quick`` and ``--out``, the same in every script."""
    parser.add_argument("--quick", action="store_true",
                        help="a small run that checks the script works (its figures are not written to bench/results)")
    parser.add_argument("--out", type=Path, help="write the figures to this JSON file "
                        "(default: bench/results/<name>.json for a full run, nowhere for --quick)")


def record(name: str, figures: dict[str, Any], output: str, *, args: argparse.Namespace,
           command: str) -> dict[str, Any]:
    """The run's JSON document; written to ``args.out``, or to bench/results/<name>.json when not quick."""
    document = {"name": name, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": command,
                "quick": bool(args.quick), "machine": machine(), "figures": figures, "output": output.rstrip("\n")}
    out = args.out or (None if args.quick else RESULTS / f"{name}.json")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"figures written to {out}", file=sys.stderr)
    return document


class Printer:
    """``print`` that also keeps the text, for the JSON document's ``output``."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, *parts: Any) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.lines.append(line)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)
