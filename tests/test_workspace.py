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


# Files that leave the lessons (removed, or renamed as the Chinese lessons were: zh/00_the_loop.ipynb became
# zh/00_the_loop.zh.ipynb), on a small tree of lessons of its own


def lesson(path: Path, *sources: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                "cells": [{"id": f"c{i}", "cell_type": "markdown", "metadata": {}, "source": s}
                          for i, s in enumerate(sources)]}
    path.write_text(json.dumps(notebook, indent=1) + "\n", encoding="utf-8")


def small(tmp_path: Path) -> tuple[Path, Path]:
    """notebooks/{00_the_loop.ipynb, 01_gone.ipynb, glossary.md, zh/00_the_loop.ipynb, zh/glossary.md}, taken in."""
    source, work = tmp_path / "notebooks", tmp_path / "my-lessons"
    lesson(source / "00_the_loop.ipynb", "# The loop", "your answer here")
    lesson(source / "01_gone.ipynb", "# Gone", "your answer here")
    lesson(source / "zh" / "00_the_loop.ipynb", "# 循环", "your answer here")
    (source / "glossary.md").write_text("glossary", encoding="utf-8")
    (source / "zh" / "glossary.md").write_text("术语表", encoding="utf-8")
    update(source, work)
    return source, work


def rename(path: Path, name: str) -> Path:
    return path.rename(path.with_name(name))


def test_a_lesson_removed_that_the_learner_never_changed_goes_with_its_base(tmp_path):
    source, work = small(tmp_path)
    (source / "01_gone.ipynb").unlink()
    lines = update(source, work)
    assert not (work / "01_gone.ipynb").exists() and not (work / BASE / "01_gone.ipynb").exists()
    assert [line for line in lines if "01_gone" in line] == [
        f"{work / '01_gone.ipynb'}: no longer one of the lessons; you had not changed it: removed"]
    assert (work / "00_the_loop.ipynb").is_file() and update(source, work) == []   # and said once


def test_a_lesson_removed_that_the_learner_changed_stays_as_they_left_it_and_is_named(tmp_path):
    source, work = small(tmp_path)
    edit(work / "01_gone.ipynb", lambda cs: cs[1].update(source="my answer"))
    mine = (work / "01_gone.ipynb").read_bytes()
    (source / "01_gone.ipynb").unlink()
    for _ in range(2):   # named on every update while it is there
        lines = update(source, work)
        assert (work / "01_gone.ipynb").read_bytes() == mine
        assert [line for line in lines if "01_gone" in line] == [
            f"{work / '01_gone.ipynb'}: no longer one of the lessons; you changed it: kept as you left it "
            "(remove it yourself when done with it)"]


def test_the_learners_own_files_are_never_touched(tmp_path):
    source, work = small(tmp_path)
    lesson(work / "my_notes.ipynb", "mine")
    (work / "zh" / "scratch.md").write_text("mine", encoding="utf-8")
    (work / "own" / "deep").mkdir(parents=True)
    (work / "own" / "deep" / "x.txt").write_text("mine", encoding="utf-8")
    before = {p: p.read_bytes() for p in [work / "my_notes.ipynb", work / "zh" / "scratch.md",
                                          work / "own" / "deep" / "x.txt"]}
    (source / "01_gone.ipynb").unlink()
    rename(source / "zh" / "00_the_loop.ipynb", "00_the_loop.zh.ipynb")
    lines = update(source, work)
    assert {p: p.read_bytes() for p in before} == before
    assert not any("my_notes" in line or "scratch" in line or "x.txt" in line for line in lines), lines


def test_a_renamed_lesson_leaves_the_new_name_only_unless_the_learner_changed_the_old_one(tmp_path):
    source, work = small(tmp_path)
    edit(work / "zh" / "00_the_loop.ipynb", lambda cs: cs[1].update(source="我的答案"))
    answered = (work / "zh" / "00_the_loop.ipynb").read_bytes()
    rename(source / "zh" / "00_the_loop.ipynb", "00_the_loop.zh.ipynb")
    rename(source / "zh" / "glossary.md", "glossary.zh.md")
    lines = update(source, work)
    zh = work / "zh"
    assert sorted(p.name for p in zh.iterdir()) == ["00_the_loop.ipynb", "00_the_loop.zh.ipynb", "glossary.zh.md"]
    assert (zh / "00_the_loop.ipynb").read_bytes() == answered   # the answers are where the learner left them
    assert (zh / "00_the_loop.zh.ipynb").read_bytes() == (source / "zh" / "00_the_loop.zh.ipynb").read_bytes()
    assert sorted(p.name for p in (work / BASE / "zh").iterdir()) == [
        "00_the_loop.ipynb", "00_the_loop.zh.ipynb", "glossary.zh.md"]
    assert f"{zh / '00_the_loop.ipynb'}: no longer one of the lessons; its successor: {zh / '00_the_loop.zh.ipynb'}; " \
           "you changed it: kept as you left it (remove it yourself when done with it)" in lines
    assert f"{zh / 'glossary.md'}: no longer one of the lessons; its successor: {zh / 'glossary.zh.md'}; " \
           "you had not changed it: removed" in lines
    # once the learner deletes their old copy, its base goes too, without a word
    (zh / "00_the_loop.ipynb").unlink()
    assert update(source, work) == [] and not (work / BASE / "zh" / "00_the_loop.ipynb").exists()


def test_a_folder_of_lessons_that_left_goes_when_nothing_is_left_in_it(tmp_path):
    source, work = small(tmp_path)
    shutil.rmtree(source / "zh")
    lines = update(source, work)
    assert not (work / "zh").exists() and not (work / BASE / "zh").exists() and (work / "glossary.md").is_file()
    assert len([line for line in lines if "/zh/" in line]) == 2, lines


def test_a_removed_lesson_is_named_with_the_files_new_beside_it_when_none_has_its_stem(tmp_path):
    source, work = small(tmp_path)
    rename(source / "01_gone.ipynb", "01_content_not_label.ipynb")
    lines = update(source, work)
    assert f"{work / '01_gone.ipynb'}: no longer one of the lessons; new beside it: " \
           f"{work / '01_content_not_label.ipynb'}; you had not changed it: removed" in lines
