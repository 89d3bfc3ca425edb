"""The ``agentlab-grade`` command: ``agentlab grade`` under its own name (the same options, exit status and
reports; ``agentlab-grade --help`` lists them)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from agentlab.cli import main as agentlab_main

    return agentlab_main(["grade", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
