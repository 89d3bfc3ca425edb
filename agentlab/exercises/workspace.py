"""The learner's own copy of the lessons, and taking new lessons into it without losing an answer.

The lessons in ``notebooks/`` belong to the repository: a ``git pull`` replaces them. A learner answers in a copy,
``my-lessons/`` (git ignores it), which ``make lab`` makes and opens. Beside each copy, ``my-lessons/.lessons-base/``
keeps the lesson as it was when it was copied or last merged: the base of a three-way merge, cell by cell, by the
cells' ids (nbformat 4.5), when the lessons change (``make lab`` after a ``git pull``, or ``make lessons``):

- a cell the learner did not change (its source as in the base) becomes the new lesson's cell, outputs and all;
- a cell the learner changed (an answer, a note) is kept as the learner left it, where the new lesson has it;
  when the lesson changed that cell too, the lesson's new version follows it, tagged ``lesson-update``;
- a cell the learner added, or changed and the new lesson no longer has, is kept after the cell it followed;
- a lesson that is new is copied; a file that is not a notebook (the glossary) is replaced unless the learner
  changed it, in which case the new one is written beside it as ``NAME.new``;
- a file that has left ``notebooks/`` (removed, or renamed: ``zh/00_the_loop.ipynb`` became
  ``zh/00_the_loop.zh.ipynb``) is removed with its base if the learner's copy is still the base; a copy the learner
  changed stays as it is, named on every update with its successor (a new file of the same stem in its folder,
  else the files new in that folder). A file that was never in the base (the learner's own) is never touched.

Nothing is written or removed before every lesson was read and merged; each file is replaced whole (a temporary
file renamed over it). ``python -m agentlab.exercises.workspace --help``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE = ".lessons-base"
UPDATE_TAG = "lesson-update"


@dataclass
class Merged:
    """What an update did to one lesson."""

    path: str
    kept: list[str] = field(default_factory=list)       # ids of the learner's cells kept
    updated: list[str] = field(default_factory=list)    # ids of the learner's cells the lesson changed too
    new: bool = False

    def line(self) -> str:
        if self.new:
            return f"{self.path}: new lesson, copied"
        said = f"{self.path}: {len(self.kept)} of your cells kept"
        if self.updated:
            said += (f"; the lesson changed {len(self.updated)} of them too: its new version follows yours, "
                     f"tagged {UPDATE_TAG} ({', '.join(self.updated)})")
        return said


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _read(path: Path) -> dict[str, Any]:
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"agentlab lessons: {path}: cannot read it as a notebook ({exc}); "
                         "nothing was changed") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list) or any(not isinstance(c, dict) or not c.get("id") for c in cells):
        raise SystemExit(f"agentlab lessons: {path}: a notebook whose cells all have ids (nbformat 4.5) is "
                         "expected; nothing was changed")
    return notebook


def merge_cells(base: list[dict[str, Any]], theirs: list[dict[str, Any]], mine: list[dict[str, Any]],
                merged: Merged) -> list[dict[str, Any]]:
    """The new lesson's cells (``theirs``) with the learner's changes (``mine`` against ``base``) kept."""
    base_source = {c["id"]: _source(c) for c in base}
    changed = {c["id"] for c in mine if _source(c) != base_source.get(c["id"])}
    mine_by_id = {c["id"]: c for c in mine}
    out: list[dict[str, Any]] = []
    for cell in theirs:
        ours = mine_by_id.get(cell["id"])
        if ours is None or cell["id"] not in changed:
            out.append(cell)
            continue
        out.append(ours)
        merged.kept.append(cell["id"])
        if cell["id"] in base_source and _source(cell) != base_source[cell["id"]]:
            out.append(_lesson_update(cell))
            merged.updated.append(cell["id"])
    placed = {c["id"] for c in out}
    for i, cell in enumerate(mine):   # the learner's cells the new lesson does not have
        if cell["id"] in placed or cell["id"] not in changed:
            continue
        anchor = next((mine[j]["id"] for j in range(i - 1, -1, -1) if mine[j]["id"] in placed), None)
        at = 0 if anchor is None else next(k for k, c in enumerate(out) if c["id"] == anchor) + 1
        out.insert(at, cell)
        placed.add(cell["id"])
        merged.kept.append(cell["id"])
    return out


def _lesson_update(cell: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(cell)
    new["id"] = f"{cell['id']}-update"[:64]
    tags = new.setdefault("metadata", {}).setdefault("tags", [])
    if UPDATE_TAG not in tags:
        tags.append(UPDATE_TAG)
    note = ("# The lesson's new version of the cell above (yours is kept above it).\n" if cell["cell_type"] == "code"
            else "*The lesson's new version of the cell above (yours is kept above it).*\n\n")
    new["source"] = note + _source(cell)
    return new


@dataclass
class Plan:
    """What an update will do: nothing is written or removed while it is made."""

    writes: dict[Path, bytes] = field(default_factory=dict)   # path: its new bytes
    removes: list[Path] = field(default_factory=list)
    report: list[Merged] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _lessons(source: Path) -> list[Path]:
    """Every file of the lessons, relative to ``source``."""
    return sorted(p.relative_to(source) for p in source.rglob("*")
                  if p.is_file() and ".ipynb_checkpoints" not in p.parts)


def plan(source: Path, work: Path) -> Plan:
    """Every file to write and to remove, what each lesson merge did, and notes; nothing is written here."""
    lessons = _lessons(source)
    removes, departed = _departed(source, work, set(lessons))
    made = Plan(removes=removes)
    writes, report, notes = made.writes, made.report, made.notes
    for rel in lessons:
        new_path = source / rel
        mine_path, base_path = work / rel, work / BASE / rel
        new_bytes = new_path.read_bytes()
        writes[base_path] = new_bytes
        if not mine_path.exists():
            writes[mine_path] = new_bytes
            if new_path.suffix == ".ipynb":
                report.append(Merged(str(rel), new=True))
            continue
        if new_path.suffix != ".ipynb":
            if base_path.exists() and mine_path.read_bytes() != base_path.read_bytes():
                writes[mine_path.with_name(mine_path.name + ".new")] = new_bytes
                notes.append(f"{rel}: you changed it; the lessons' new version is beside it as {rel}.new")
            else:
                writes[mine_path] = new_bytes
            continue
        theirs, mine = _read(new_path), _read(mine_path)
        # without a base (removed), a cell that differs from the new lesson counts as the learner's: none is lost
        base = _read(base_path) if base_path.exists() else copy.deepcopy(theirs)
        merged = Merged(str(rel))
        result = dict(theirs, cells=merge_cells(base["cells"], theirs["cells"], mine["cells"], merged))
        writes[mine_path] = (json.dumps(result, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
        report.append(merged)
    notes.extend(departed)
    return made


def _departed(source: Path, work: Path, lessons: set[Path]) -> tuple[list[Path], list[str]]:
    """The files to remove, and a line for each file that has left the lessons (in the base, not in ``source``).

    The learner's copy goes with its base while it is the base byte for byte; a copy they changed stays, and so
    does its base, so the next update names it again. A file that was never in the base is not looked at.
    """
    base_root = work / BASE
    removes: list[Path] = []
    notes: list[str] = []
    gone = sorted(rel for rel in _lessons(base_root) if rel not in lessons) if base_root.is_dir() else []
    for rel in gone:
        mine_path, base_path = work / rel, base_root / rel
        if not mine_path.is_file():   # the learner removed their copy: only the base is left to remove
            removes.append(base_path)
            continue
        said = f"{mine_path}: no longer one of the lessons{_successors(source, work, rel)}"
        if mine_path.read_bytes() == base_path.read_bytes():
            removes += [mine_path, base_path]
            notes.append(f"{said}; you had not changed it: removed")
        else:
            notes.append(f"{said}; you changed it: kept as you left it (remove it yourself when done with it)")
    return removes, notes


def _successors(source: Path, work: Path, rel: Path) -> str:
    """Where the lesson that left is now: the new files of the same stem in its folder, else those new there."""
    folder = source / rel.parent
    if not folder.is_dir():
        return ""
    siblings = sorted(p.relative_to(source) for p in folder.iterdir() if p.is_file())
    stem = rel.name.split(".")[0]
    named = [s for s in siblings if s.name.split(".")[0] == stem]
    if named:
        return "; its successor: " + ", ".join(str(work / s) for s in named)
    new = [s for s in siblings if not (work / BASE / s).exists()]
    return "; new beside it: " + ", ".join(str(work / s) for s in new) if new else ""


def write_all(writes: dict[Path, bytes]) -> None:
    for path, data in writes.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.read_bytes() == data:
            continue
        scratch = path.with_name(f".{path.name}.tmp")
        scratch.write_bytes(data)
        os.replace(scratch, path)


def remove_all(paths: list[Path], work: Path) -> None:
    """Remove ``paths``, then each folder of ``work`` they leave empty (never ``work`` itself)."""
    for path in paths:
        path.unlink(missing_ok=True)
        folder = path.parent
        while folder != work and work in folder.parents and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent


def update(source: Path, work: Path) -> list[str]:
    """Make or bring up to date the learner's copy ``work`` of the lessons in ``source``; the lines to print."""
    made = plan(source, work)
    write_all(made.writes)
    remove_all(made.removes, work)
    lines = [m.line() for m in made.report if m.new or m.kept]
    return lines + made.notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentlab.exercises.workspace",
                                     description="Copy the lessons into a folder of your own, or take new lessons "
                                                 "into it keeping every cell you changed.")
    parser.add_argument("--source", default="notebooks", type=Path, help="the lessons (default: notebooks)")
    parser.add_argument("--work", default="my-lessons", type=Path, help="your copy (default: my-lessons)")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        print(f"agentlab lessons: --source {args.source}: no such folder", file=sys.stderr)
        return 2
    for line in update(args.source, args.work):
        print(f"agentlab lessons: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
