"""The learner's copy of the lessons: new lessons are taken in and no cell the learner wrote is lost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from agentlab.exercises.workspace import BASE, UPDATE_TAG, main, update

REPO = Path(__file__).resolve().parents[1]
LESSON = "02_max_tokens.ipynb"


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def edit(path: Path, change) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    change(notebook["cells"])
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def tagged(cell_list: list[dict], tag: str) -> dict:
    return next(c for c in cell_list if tag in c.get("metadata", {}).get("tags", []))


def setup(tmp_path: Path) -> tuple[Path, Path]:
    source, work = tmp_path / "notebooks", tmp_path / "my-lessons"
    shutil.copytree(REPO / "notebooks", source, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    assert main(["--source", str(source), "--work", str(work)]) == 0
    return source, work


def test_the_first_update_copies_every_lesson_and_keeps_its_base(tmp_path):
    source, work = setup(tmp_path)
    for lesson in source.rglob("*.ipynb"):
        rel = lesson.relative_to(source)
        assert (work / rel).read_bytes() == lesson.read_bytes() == (work / BASE / rel).read_bytes()
    assert (work / "glossary.md").is_file() and (work / "zh" / LESSON.replace(".ipynb", ".zh.ipynb")).is_file()


def answer(cell_list: list[dict]) -> None:
    tagged(cell_list, "exercise")["source"] = "def my_answer():\n    return 42\n"


def test_new_lessons_keep_the_learners_answer_and_bring_everything_else(tmp_path):
    source, work = setup(tmp_path)
    edit(work / LESSON, answer)
    edit(work / LESSON, lambda cs: cs.insert(3, {"id": "my-note", "cell_type": "markdown", "metadata": {},
                                                 "source": "my own note"}))
    # the lessons change (a git pull): a prose cell reworded, a cell added, another lesson changed
    edit(source / LESSON, lambda cs: cs[0].update(source="# Lesson 02, reworded\n"))
    edit(source / LESSON, lambda cs: cs.append({"id": "l02-new", "cell_type": "markdown", "metadata": {},
                                                "source": "a new paragraph"}))
    edit(source / "00_the_loop.ipynb", lambda cs: cs[0].update(source="# Lesson 00, reworded\n"))
    lines = update(source, work)
    mine = cells(work / LESSON)
    assert tagged(mine, "exercise")["source"] == "def my_answer():\n    return 42\n"
    assert mine[0]["source"] == "# Lesson 02, reworded\n" and mine[-1]["id"] == "l02-new"
    ids = [c["id"] for c in mine]
    assert ids.index("my-note") == 3 and ids.count("my-note") == 1   # after the cell it followed
    assert cells(work / "00_the_loop.ipynb")[0]["source"] == "# Lesson 00, reworded\n"
    assert any(line.startswith(f"{LESSON}: 2 of your cells kept") for line in lines), lines
    # and again, with nothing new: nothing changes
    before = (work / LESSON).read_bytes()
    update(source, work)
    assert (work / LESSON).read_bytes() == before


def test_a_cell_both_changed_keeps_the_learners_and_shows_the_lessons_new_version_after_it(tmp_path):
    source, work = setup(tmp_path)
    edit(work / LESSON, answer)
    edit(source / LESSON, lambda cs: tagged(cs, "exercise").update(source="def the_new_stub():\n    raise "
                                                                          "NotImplementedError\n"))
    lines = update(source, work)
    mine = cells(work / LESSON)
    at = next(i for i, c in enumerate(mine) if "exercise" in c["metadata"].get("tags", []) and
              UPDATE_TAG not in c["metadata"]["tags"])
    assert "".join(mine[at]["source"]) == "def my_answer():\n    return 42\n"
    assert UPDATE_TAG in mine[at + 1]["metadata"]["tags"] and "def the_new_stub()" in mine[at + 1]["source"]
    assert any(UPDATE_TAG in line for line in lines)


def test_a_changed_cell_the_new_lesson_dropped_is_kept_and_a_changed_glossary_is_not_overwritten(tmp_path):
    source, work = setup(tmp_path)
    edit(work / LESSON, answer)
    exercise_id = tagged(cells(work / LESSON), "exercise")["id"]
    edit(source / LESSON, lambda cs: cs.remove(tagged(cs, "exercise")))
    (work / "glossary.md").write_text("my glossary", encoding="utf-8")
    (source / "glossary.md").write_text("the new glossary", encoding="utf-8")
    update(source, work)
    assert exercise_id in [c["id"] for c in cells(work / LESSON)]
    assert (work / "glossary.md").read_text() == "my glossary"
    assert (work / "glossary.md.new").read_text() == "the new glossary"


def test_a_copy_that_is_not_a_notebook_with_ids_changes_nothing(tmp_path, capsys):
    source, work = setup(tmp_path)
    (work / LESSON).write_text("not json", encoding="utf-8")
    edit(source / "00_the_loop.ipynb", lambda cs: cs[0].update(source="# changed\n"))
    before = (work / "00_the_loop.ipynb").read_bytes()
    try:
        update(source, work)
    except SystemExit as exc:
        assert f"{LESSON}: cannot read it as a notebook" in str(exc)
    else:
        raise AssertionError("a broken copy was merged")
    assert (work / "00_the_loop.ipynb").read_bytes() == before   # nothing written before every lesson was read
