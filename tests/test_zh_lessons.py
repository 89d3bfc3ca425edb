"""The Chinese lessons (notebooks/zh/NN_name.zh.ipynb, glossary.zh.md): generated from the English ones and the
catalog in translations/zh/.

nbval does not run notebooks/zh (``make test`` ignores the folder): its code cells and their stored outputs are
the English ones, byte for byte, which is what these tests prove, so nbval would judge them exactly as it
judges the English lessons it runs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("zh_lessons", REPO / "translations" / "zh_lessons.py")
zh = sys.modules.setdefault("zh_lessons", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(zh)

LESSONS = zh.lessons()
DOCUMENTS = zh.documents()  # the lessons and the glossary
CJK = re.compile(r"[\u4e00-\u9fff]")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def english(lesson: str) -> dict:
    return zh.read_notebook(REPO / "notebooks" / f"{lesson}.ipynb")


def chinese(lesson: str) -> dict:
    return zh.read_notebook(REPO / "notebooks" / "zh" / f"{lesson}.zh.ipynb")


def links(markdown: str) -> set[str]:
    found = set()
    zh.rewrite_links(markdown, lambda target: found.add(target) or target)
    return found


def test_there_are_fifteen_lessons_and_a_chinese_one_each():
    assert len(LESSONS) == 15, LESSONS
    assert sorted(p.name for p in (REPO / "notebooks" / "zh").glob("*.ipynb")) == [f"{x}.zh.ipynb" for x in LESSONS]


def test_no_chinese_document_has_the_file_name_of_an_english_one():
    """JupyterLab titles a tab with the file name: a Chinese lesson and its English original, open side by side, show
    two titles, and each says its language (``00_the_loop.zh.ipynb``, ``glossary.zh.md``); the extension stays last,
    so each opens as its English original does."""
    names = {"en": {p.name for p in (REPO / "notebooks").iterdir() if p.is_file()},
             "zh": {p.name for p in (REPO / "notebooks" / "zh").iterdir() if p.is_file()}}
    assert names["en"].isdisjoint(names["zh"]), sorted(names["en"] & names["zh"])
    assert names["zh"] == {f"{x}.zh.ipynb" for x in LESSONS} | {"glossary.zh.md"}, sorted(names["zh"])
    assert {n.replace(".zh.", ".") for n in names["zh"]} <= names["en"]


@pytest.mark.parametrize(("target", "from_zh"), [
    ("04_refusal.ipynb", "04_refusal.zh.ipynb"),
    ("04_refusal.ipynb#Step-it", "04_refusal.zh.ipynb#Step-it"),
    ("glossary.md#tool_use-and-tool_result", "glossary.zh.md#tool_use-and-tool_result"),
    ("glossary.md", "glossary.zh.md"),
    ("../docs/ci.md#CI", "../../docs/ci.md#CI"),
    ("data.csv", "../data.csv"),
])
def test_a_link_to_a_lesson_or_the_glossary_goes_to_its_chinese_name_beside_it(target, from_zh):
    assert zh.lab_target(target) == from_zh


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_chinese_document_links_its_english_original_by_its_english_name(name):
    """The first paragraph's last line (a lesson's first cell) names the English original by its file name and links
    it one folder up, where JupyterLab opens it as the English file it is."""
    english_name = zh.english_file(name)
    text = (REPO / "notebooks" / "zh" / zh.zh_file(name)).read_text(encoding="utf-8")
    first = text if name == zh.GLOSSARY else zh.source_of(json.loads(text)["cells"][0])
    assert f"*英文原版：[{english_name}](../{english_name})*" in first
    assert (REPO / "notebooks" / english_name).is_file()


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_chinese_notebook_is_what_the_generator_writes(lesson):
    """Regenerating from the catalog and the English lesson gives the committed file, byte for byte."""
    committed = (REPO / "notebooks" / "zh" / f"{lesson}.zh.ipynb").read_text(encoding="utf-8")
    assert committed == zh.generated(lesson), (
        f"notebooks/zh/{lesson}.zh.ipynb is out of date: run .venv/bin/python translations/zh_lessons.py")


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_code_cell_is_the_english_one(lesson):
    """The committed Chinese notebook has the English cells in the same order with the same ids; every cell but
    markdown is the English cell whole (source, outputs, execution count, metadata); so is the notebook's
    metadata. nbval would judge it exactly as it judges the English lesson."""
    assert zh.differences(lesson, english(lesson), chinese(lesson)) == []


def test_every_english_markdown_cell_has_a_current_translation():
    """A translation records the sha of the English it translates; when the English changes the test names the
    lesson, the cell and the first changed line (``translations/zh_lessons.py --todo`` shows the whole change)."""
    found = [p for lesson in DOCUMENTS
             for p in zh.problems(lesson, zh.english_of(lesson), zh.load_catalog(zh.catalog_path(lesson)))]
    assert not found, "\n".join(found)


def _entries():
    for lesson in DOCUMENTS:
        sources = {c.get("id"): zh.source_of(c) for c in zh.english_of(lesson)["cells"]
                   if c["cell_type"] == "markdown"}
        for entry in zh.load_catalog(zh.catalog_path(lesson)).values():
            if entry.id in sources:
                yield lesson, entry, sources[entry.id]


def test_translations_are_chinese_with_the_english_links_and_code():
    """Each translation is in Chinese, links to what the English cell links to, and keeps its code blocks."""
    wrong = []
    for lesson, entry, source in _entries():
        where = f"{lesson}, cell {entry.id}"
        if not CJK.search(entry.zh):
            wrong.append(f"{where}: no Chinese in the translation")
        if links(entry.zh) != links(source):
            wrong.append(f"{where}: links {sorted(links(entry.zh) ^ links(source))} differ from the English")
        if FENCE.findall(entry.zh) != FENCE.findall(source):
            wrong.append(f"{where}: its code blocks are not the English ones")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_relative_link_works_from_notebooks_zh(lesson):
    """In JupyterLab a link is resolved from the notebook's folder: each relative link names a file there."""
    folder = REPO / "notebooks" / "zh"
    for cell in chinese(lesson)["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for target in links(zh.source_of(cell)):
            if "://" in target or target.startswith(("#", "mailto:")):
                continue
            path = (folder / target.split("#")[0]).resolve()
            assert path.is_file(), f"{lesson}, cell {cell.get('id')}: {target} is not a file from notebooks/zh/"


# --- the glossary ------------------------------------------------------------------------------------------

GLOSSARY_ZH = REPO / "notebooks" / "zh" / "glossary.zh.md"


def test_the_chinese_glossary_is_what_the_generator_writes():
    assert GLOSSARY_ZH.read_text(encoding="utf-8") == zh.generated(zh.GLOSSARY), (
        "notebooks/zh/glossary.zh.md is out of date: run .venv/bin/python translations/zh_lessons.py")


def test_the_glossary_is_its_sections_and_the_chinese_keeps_every_heading():
    """Its sections give the page back whole, and the Chinese has the English ``## `` headings, in order: a lesson's
    ``glossary.md#Anchor`` finds its entry in either language."""
    english_text = (REPO / "notebooks" / "glossary.md").read_text(encoding="utf-8")
    cells = zh.english_of(zh.GLOSSARY)["cells"]
    assert "\n\n".join(zh.source_of(c) for c in cells) + "\n" == english_text
    headings = re.compile(r"(?m)^## .*$")
    assert headings.findall(GLOSSARY_ZH.read_text(encoding="utf-8")) == headings.findall(english_text)
    assert len(cells) == 1 + len(headings.findall(english_text))


def test_a_changed_glossary_entry_is_named_as_stale():
    entries = zh.load_catalog(zh.catalog_path(zh.GLOSSARY))
    glossary = zh.english_of(zh.GLOSSARY)
    token = next(c for c in glossary["cells"] if c["id"] == "Token")
    token["source"] = token["source"].replace("The unit a model reads", "The unit a model counts")
    assert zh.problems(zh.GLOSSARY, glossary, entries) == [
        "glossary, cell Token: stale, the English changed since it was translated, line 3: was 'The unit a model "
        "reads and writes: a word, part of a word or a punctuation mark. Requests and replies are', now 'The unit a "
        "model counts and writes: a word, part of a word or a punctuation mark. Requests and replies are'"]


def test_the_chinese_lessons_link_the_chinese_lessons_and_glossary_by_their_chinese_names():
    """A link between Chinese documents names the Chinese file beside it; the only links to an English document are
    to the English original, one folder up."""
    targets = {t.split("#")[0] for lesson in LESSONS for c in chinese(lesson)["cells"] if c["cell_type"] == "markdown"
               for t in links(zh.source_of(c))} | {t.split("#")[0] for t in links(GLOSSARY_ZH.read_text("utf-8"))}
    beside = {t for t in targets if t and "/" not in t and "://" not in t}
    assert "glossary.zh.md" in beside and "01_content_not_label.zh.ipynb" in beside, sorted(beside)
    assert all(t in {zh.zh_file(name) for name in DOCUMENTS} for t in beside), sorted(beside)
    english = {t for t in targets if t.startswith("../") and t.endswith((".ipynb", ".md"))}
    assert english == {f"../{zh.english_file(name)}" for name in DOCUMENTS}, sorted(english)


def test_the_chinese_lessons_link_the_chinese_glossary_and_its_links_work():
    linked = {t for lesson in LESSONS for c in chinese(lesson)["cells"] if c["cell_type"] == "markdown"
              for t in links(zh.source_of(c)) if "glossary" in t.split("#")[0]}
    assert linked and all(t.startswith("glossary.zh.md") for t in linked), sorted(linked)
    folder = GLOSSARY_ZH.parent
    for target in links(GLOSSARY_ZH.read_text(encoding="utf-8")):
        if "://" not in target and not target.startswith("#"):
            assert (folder / target.split("#")[0]).resolve().is_file(), target


# --- the generator on a notebook of its own ----------------------------------------------------------------

def _notebook(*markdown: str) -> dict:
    cells = [{"cell_type": "markdown", "id": f"m{i}", "metadata": {}, "source": text.splitlines(keepends=True)}
             for i, text in enumerate(markdown)]
    cells.insert(1, {"cell_type": "code", "id": "c", "execution_count": 1, "metadata": {},
                     "outputs": [{"name": "stdout", "output_type": "stream", "text": ["4\n"]}], "source": ["2 + 2"]})
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _stamped(cell_id: str, zh_text: str, en: str):
    return zh.Entry(cell_id, zh_text, en, zh.digest(en))


def test_a_stale_translation_names_the_lesson_the_cell_and_the_first_changed_line():
    notebook = _notebook("# Title\n\nSeven stop reasons.\nMore.", "See [the glossary](../docs/glossary.md).")
    entries = {"m0": _stamped("m0", "# 标题\n\n七种停止原因。", "# Title\n\nSix stop reasons.\nMore."),
               "m1": _stamped("m1", "见[术语表](../docs/glossary.md)。", "See [the glossary](../docs/glossary.md).")}
    assert zh.problems("99_demo", notebook, entries) == [
        "99_demo, cell m0: stale, the English changed since it was translated, "
        "line 3: was 'Six stop reasons.', now 'Seven stop reasons.'"]
    del entries["m1"]
    entries["gone"] = _stamped("gone", "旧", "old")
    assert zh.problems("99_demo", notebook, entries)[1:] == [
        "99_demo, cell m1: no translation",
        "99_demo, cell gone: translation of a markdown cell the English lesson no longer has"]


def test_first_change_of_lines_added_and_removed():
    assert zh.first_change("a\nb", "a\nb\nc") == "line 3: added 'c'"
    assert zh.first_change("a\nb\nc", "a\nb") == "line 3: removed 'c'"


def test_the_generated_notebook_copies_code_and_rewrites_links_one_folder_deeper():
    notebook = _notebook("# Title", "[glossary](../docs/glossary.md#token), [next](04_refusal.ipynb), "
                                    "[site](https://example.com/a.md), [here](#top)")
    entries = {"m0": _stamped("m0", "# 标题", "# Title"),
               "m1": _stamped("m1", "[术语表](../docs/glossary.md#token)、[下一课](04_refusal.ipynb)、"
                                    "[网站](https://example.com/a.md)、[这里](#top)", "unused")}
    out = zh.zh_notebook("03_demo", notebook, entries)
    assert out["cells"][1] == notebook["cells"][1]
    assert zh.source_of(out["cells"][0]) == "# 标题\n\n*英文原版：[03_demo.ipynb](../03_demo.ipynb)*"
    assert zh.source_of(out["cells"][2]) == ("[术语表](../../docs/glossary.md#token)、[下一课](04_refusal.zh.ipynb)、"
                                             "[网站](https://example.com/a.md)、[这里](#top)")
    untranslated = zh.zh_notebook("03_demo", notebook, {}, english_link=False)
    assert zh.source_of(untranslated["cells"][0]) == "# Title"
    assert zh.source_of(untranslated["cells"][2]).startswith("[glossary](../../docs/glossary.md#token), [next](04_")


def test_the_catalog_reads_back_what_it_wrote(tmp_path):
    texts = ["# 标题\n\n- a: b\n  continued", "  leading spaces", "ends with a newline\n", "",
             "tab\there #not a comment", "| a | b |\n|---|---|\n\n\nthree lines apart",
             '"quoted" and \'single\' and: colon']
    entries = [_stamped(f"c{i}", text, text[::-1]) for i, text in enumerate(texts)]
    path = tmp_path / "99_demo.yaml"
    path.write_text(zh.dump_catalog("99_demo", entries), encoding="utf-8")
    assert list(zh.load_catalog(path).values()) == entries


def test_a_catalog_whose_en_was_edited_by_hand_is_refused(tmp_path):
    entry = _stamped("c0", "中文", "English")
    entry.en = "English, edited"
    path = tmp_path / "99_demo.yaml"
    path.write_text(zh.dump_catalog("99_demo", [entry]), encoding="utf-8")
    with pytest.raises(zh.CatalogError, match=r"99_demo.yaml, entry 1 \(c0\): sha .* en was edited by hand"):
        zh.load_catalog(path)
    path.write_text("lesson: x\ncells:\n- id: a\n  zh: 一\n- id: a\n  zh: 二\n", encoding="utf-8")
    with pytest.raises(zh.CatalogError, match="entry 2: cell id 'a' appears twice"):
        zh.load_catalog(path)


def test_differences_names_each_way_a_chinese_notebook_can_leave_the_english():
    notebook = _notebook("# Title", "Text")
    assert zh.differences("99_demo", notebook, zh.zh_notebook("99_demo", notebook, {})) == []
    changed = json.loads(json.dumps(zh.zh_notebook("99_demo", notebook, {})))
    changed["cells"][1]["outputs"][0]["text"] = ["5\n"]
    changed["cells"][2]["metadata"] = {"tags": ["x"]}
    changed["metadata"] = {"language_info": {"name": "python"}}
    assert zh.differences("99_demo", notebook, changed) == [
        "99_demo: the notebook's metadata or format differs from the English",
        "99_demo, cell c: the code cell differs from the English in ['outputs']",
        "99_demo, cell m1: the markdown cell differs from the English outside its source"]
    changed["cells"].reverse()
    assert zh.differences("99_demo", notebook, changed) == [
        "99_demo: the cells are not the English ones (ids ['m1', 'c', 'm0'] where the English has ['m0', 'c', 'm1'])"]


def test_the_language_switch_leads_to_the_same_page_or_the_other_front_page():
    spec = importlib.util.spec_from_file_location("site_languages", REPO / "website" / "languages.py")
    languages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(languages)
    pages = {"index", "notebooks/03_context_window"}
    assert languages.other_page_uri("notebooks/03_context_window", "en", "zh", pages) == (
        "../zh/notebooks/03_context_window.html")
    assert languages.other_page_uri("notebooks/03_context_window", "zh", "en", pages) == (
        "../../notebooks/03_context_window.html")
    assert languages.other_page_uri("index", "en", "zh", pages) == "zh/index.html"
    assert languages.other_page_uri("index", "zh", "en", pages) == "../index.html"
    assert languages.other_page_uri("observed/claude-code-2.1.197", "en", "zh", pages) == "../zh/index.html"
    switch = languages.switch_html("docs/grade", {"language": "en", "other": "zh", "other_pages": [],
                                                  "switch_label": "Also in ", "other_front": "the Chinese lessons"})
    assert 'href="../zh/index.html" hreflang="zh-CN"' in switch and "中文 (the Chinese lessons)" in switch


# --- bad input: one line naming the file and what to do -----------------------------------------------------------

@pytest.fixture
def one_lesson(tmp_path, monkeypatch):
    """A copy of lesson 00 and its catalog in a folder of their own, which the generator reads and writes."""
    notebooks, catalog = tmp_path / "notebooks", tmp_path / "catalog"
    notebooks.mkdir()
    catalog.mkdir()
    (notebooks / "00_the_loop.ipynb").write_bytes((REPO / "notebooks" / "00_the_loop.ipynb").read_bytes())
    (notebooks / "glossary.md").write_bytes((REPO / "notebooks" / "glossary.md").read_bytes())
    (catalog / "00_the_loop.yaml").write_bytes(zh.catalog_path("00_the_loop").read_bytes())
    monkeypatch.setattr(zh, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(zh, "OUT", notebooks / "zh")
    monkeypatch.setattr(zh, "CATALOG", catalog)
    return notebooks, catalog


def said(capsys, *argv: str) -> str:
    """The one line of ``zh_lessons.py ARGV`` on stderr (exit 2, no traceback)."""
    assert zh.main(list(argv)) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zh_lessons: ") and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_a_catalog_saved_in_gb18030_is_named_with_what_to_do(one_lesson, capsys):
    _, catalog = one_lesson
    path = catalog / "00_the_loop.yaml"
    path.write_bytes(path.read_text(encoding="utf-8").encode("gb18030"))
    line = said(capsys, "--todo", "00_the_loop")
    assert f"{path}: the catalog is not UTF-8 (byte 0x" in line and line.endswith("save it as UTF-8")


def test_a_catalog_holding_one_latin_1_byte_names_its_line(one_lesson, capsys):
    _, catalog = one_lesson
    path = catalog / "00_the_loop.yaml"
    text = path.read_bytes()
    path.write_bytes(text.replace(b"lesson: 00_the_loop", b"lesson: 00_the_loop # caf\xe9", 1))
    line = said(capsys, "--stamp", "00_the_loop")
    assert line == f"zh_lessons: {path}: the catalog is not UTF-8 (byte 0xe9 on line 3); save it as UTF-8"


@pytest.mark.parametrize("option", ["--todo", "--stamp"])
def test_a_mistyped_lesson_name_is_named_with_the_one_it_looks_like(one_lesson, capsys, option):
    line = said(capsys, option, "00_the_lop")
    assert line.startswith(f"zh_lessons: {option} 00_the_lop: no such lesson, there is no notebooks/00_the_lop.ipynb."
                           " Did you mean 00_the_loop? Give a lesson's file name without .ipynb"), line


@pytest.mark.parametrize("argv", [(), ("--check",), ("--todo",)])
def test_an_english_notebook_left_with_merge_conflict_markers_is_named(one_lesson, capsys, argv):
    notebooks, _ = one_lesson
    path = notebooks / "00_the_loop.ipynb"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3:3] = ["<<<<<<< HEAD\n", lines[3], "=======\n", lines[3], ">>>>>>> theirs\n"]
    path.write_text("".join(lines), encoding="utf-8")
    line = said(capsys, *argv)
    assert line == (f"zh_lessons: {path}: the notebook holds merge-conflict markers (line 4: '<<<<<<< HEAD'); "
                    "resolve the conflict, then run this again")


def test_a_chinese_file_of_an_older_name_is_named_by_check_and_removed_by_the_generator(one_lesson, capsys):
    """notebooks/zh/00_the_loop.ipynb (the name before .zh) or a lesson that is gone: --check fails naming it, and
    the generator removes it beside writing the file of the right name."""
    notebooks, catalog = one_lesson
    (catalog / "glossary.yaml").write_bytes((REPO / "translations" / "zh" / "glossary.yaml").read_bytes())
    (notebooks / "zh").mkdir()
    old = [notebooks / "zh" / "00_the_loop.ipynb", notebooks / "zh" / "glossary.md"]
    for path in old:
        path.write_text("{}", encoding="utf-8")
    assert zh.main(["--check"]) == 1
    said_lines = capsys.readouterr().out.splitlines()
    for path in old:
        assert f"{path}: not a Chinese lesson of this name (each is named NN_name.zh.ipynb after an English lesson, " \
               "the glossary glossary.zh.md); translations/zh_lessons.py removes it" in said_lines, said_lines
    assert zh.main([]) == 0
    assert sorted(p.name for p in (notebooks / "zh").iterdir()) == ["00_the_loop.zh.ipynb", "glossary.zh.md"]
    assert f"{old[0]} (removed: not a Chinese lesson of this name," in capsys.readouterr().out
    assert zh.main(["--check"]) == 0
