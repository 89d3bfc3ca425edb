"""docs/grade.md's sample reports are what ``agentlab grade`` prints now: each block between
``<!-- grade:sample COMMAND -->`` and ``<!-- /grade:sample -->`` holds the stdout of COMMAND, run in process on the
committed records. ``make grade-docs`` (this file run as a script) writes them again."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "grade.md"
SAMPLE = re.compile(r"(<!-- grade:sample (?P<command>.+?) -->\n```\n)(?P<output>.*?)(```\n<!-- /grade:sample -->)",
                    re.S)


def run(command: str) -> tuple[int, str]:
    """``agentlab grade ...`` in this process: its exit status and its stdout."""
    from agentlab.cli import main

    argv = shlex.split(command)
    assert argv[:2] == ["agentlab", "grade"], command
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv[1:])
    return code, out.getvalue()


def rendered(text: str) -> str:
    return SAMPLE.sub(lambda m: m.group(1) + run(m.group("command"))[1].rstrip("\n") + "\n" + m.group(4), text)


def test_the_samples_are_what_grade_prints_now():
    text = DOC.read_text(encoding="utf-8")
    samples = list(SAMPLE.finditer(text))
    assert len(samples) == 2
    for match in samples:
        code, out = run(match.group("command"))
        assert code == 1  # both samples hold failures
        assert match.group("output") == out.rstrip("\n") + "\n", \
            f"docs/grade.md: the sample of `{match.group('command')}` is out of date: make grade-docs"


def test_the_samples_show_every_verdict():
    text = DOC.read_text(encoding="utf-8")
    shown = "".join(m.group("output") for m in SAMPLE.finditer(text))
    for mark in ("✓", "✗", "≠", "–"):
        assert f"\n{mark} " in shown, mark
    assert "✗ ends_cleanly" in shown and "✓ ends_cleanly" in shown
    assert "policy: differs from the reference loop's choice (2 behaviours, each listed once" in shown


SOURCES = re.compile(r"<!-- grade:sources -->\n(?P<table>.*?)<!-- /grade:sources -->", re.S)
# the rules of the refusal path (row 5) and of server-side compaction, each with the sentence it enforces
SOURCED_ROWS = ("5",)
SOURCED_RULES = ("pause_turn_resume", "compaction_block_unchanged")


def test_each_refusal_and_compaction_rule_names_its_source():
    from agentlab.grading.command import RULES

    table = SOURCES.search(DOC.read_text(encoding="utf-8"))
    assert table is not None, "docs/grade.md: no <!-- grade:sources --> table"
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z_]+)`[^|]*\|[^|]+\|(.+)\|$",
                                                         table.group("table"), re.M)}
    wanted = {r.name for r in RULES if r.row in SOURCED_ROWS or r.name in SOURCED_RULES}
    assert set(rows) == wanted, f"docs/grade.md's sources table: missing {sorted(wanted - set(rows))}, " \
                                f"not rules of the refusal path or compaction {sorted(set(rows) - wanted)}"
    for rule, source in rows.items():
        assert "https://platform.claude.com/docs/en/" in source, f"{rule}: no docs page named"


if __name__ == "__main__":
    DOC.write_text(rendered(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"{DOC}: samples written", file=sys.stderr)
