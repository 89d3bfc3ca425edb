"""The lessons in Chinese: notebooks/zh/NN_name.zh.ipynb and the glossary, notebooks/zh/glossary.zh.md, generated
from the English ones and a catalog.

    .venv/bin/python translations/zh_lessons.py                       write notebooks/zh/ (every lesson)
    .venv/bin/python translations/zh_lessons.py --check               exit 1 if a translation is stale, a file in
                                                                 notebooks/zh/ is not what it would write, or is
                                                                 one it does not write (an older name)
    .venv/bin/python translations/zh_lessons.py --todo [LESSON ...]   the cells to (re)translate, with what changed
    .venv/bin/python translations/zh_lessons.py --stamp LESSON [ID ...]
                 record that the Chinese of these cells (default: every cell not yet stamped) translates the
                 English cell as it is now

The catalog is one file per lesson, translations/zh/NN_name.yaml: for each markdown cell of the English
notebook, the cell's ``id``, the ``sha`` of the English source it translates, that English source (``en``,
so a change can be shown line by line) and the Chinese markdown (``zh``). A Chinese notebook is the English
one with each markdown cell's source replaced by its ``zh``, matched by cell id; every other cell (code, its
stored outputs, ids, metadata) is copied unchanged, so nbval would judge it exactly as the English one.

A Chinese document is named as the English one with ``.zh`` before its extension (:func:`zh_file`): JupyterLab
titles a tab with the file name alone, so a Chinese lesson open beside its English original would otherwise show
the same title; ``.ipynb`` and ``.md`` stay last, so JupyterLab opens each as the English one opens.

Links in ``zh`` are written as in the English lesson, relative to notebooks/; the generator rewrites them for
notebooks/zh/, one folder deeper: a link to another lesson (or the glossary) goes to its Chinese version beside it,
by its Chinese name, any other relative link gets one ``../`` more. The first cell gets a link to the English
lesson, by its English name.

The glossary (notebooks/glossary.md) is translated the same way, section by section: its catalog,
translations/zh/glossary.yaml, has an entry per ``## `` section, its id the heading (kept in English, so that
every ``glossary.md#Anchor`` link of a lesson finds it in both languages), and ``intro`` for the text above the
first one. A Chinese lesson's glossary links go to the Chinese glossary beside it.

The Chinese site (:func:`site_sources`) names its pages as the English site does (``zh/notebooks/00_the_loop.html``):
its addresses did not change when the files in notebooks/zh/ were renamed, and the language switch finds the same
page name in both builds.

This script imports nothing of agentlab (only nbformat-free JSON and PyYAML), so it runs before the package is
installed; website/build.py imports it to build the Chinese site.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import posixpath
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
OUT = NOTEBOOKS / "zh"
CATALOG = Path(__file__).resolve().parent / "zh"
LESSON_NAME = re.compile(r"^\d\d_[A-Za-z0-9_]+\.ipynb$")
GLOSSARY = "glossary"                                  # notebooks/glossary.md, translated section by section
ENGLISH_LINK = "\n\n*英文原版：[{name}]({target})*"
CATALOG_HEADER = ("# Chinese markdown of notebooks/{source}, one entry per {unit} "
                  "(translations/zh_lessons.py).\n"
                  "# sha and en: the English source the zh translates; --stamp writes them, "
                  "--todo shows what changed.\n")


CONFLICT = re.compile(r"^(?:<{7}|>{7})(?: .*)?$|^={7}$", re.MULTILINE)  # git's merge-conflict markers


class CatalogError(Exception):
    """A file the generator cannot use (a catalog, an English lesson), named with what to do, or a lesson name
    that names no lesson."""


@dataclass
class Entry:
    id: str
    zh: str
    en: str | None = None
    sha: str | None = None


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def source_of(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def lessons() -> list[str]:
    return sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb") if LESSON_NAME.match(p.name))


def read_text(path: Path, what: str) -> str:
    """A UTF-8 file the generator reads (``what`` it is); a CatalogError naming the file and what to do when it
    cannot be read, is not UTF-8, or holds merge-conflict markers."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise CatalogError(f"{path}: the {what} is not UTF-8 (byte {raw[exc.start]:#04x} on line {line}); save it "
                           "as UTF-8") from None
    conflict = CONFLICT.search(text)
    if conflict:
        line = text.count("\n", 0, conflict.start()) + 1
        raise CatalogError(f"{path}: the {what} holds merge-conflict markers (line {line}: "
                           f"{conflict.group().strip()[:40]!r}); resolve the conflict, then run this again")
    return text


def read_notebook(path: Path) -> dict:
    text = read_text(path, "notebook")
    try:
        notebook = json.loads(text)
    except ValueError as exc:
        raise CatalogError(f"{path}: not a notebook (not JSON: {exc}); open it in JupyterLab, or restore it with "
                           "git") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise CatalogError(f"{path}: not a notebook (no list of 'cells'); restore it with git")
    return notebook


def documents() -> list[str]:
    """What is translated: every lesson, then the glossary."""
    return [*lessons(), GLOSSARY]


def glossary_cells(markdown: str) -> dict:
    """The glossary as a notebook of markdown cells: ``intro`` (the text above the first ``## `` heading), then
    one cell per ``## `` section, its id the heading's text. ``"\n\n".join`` of the sources gives the page back."""
    parts = [part.strip("\n") for part in re.split(r"(?m)^(?=## )", markdown)]
    cells = []
    for part in parts:
        cell_id = part.splitlines()[0][3:].strip() if part.startswith("## ") else "intro"
        if any(c["id"] == cell_id for c in cells):
            raise CatalogError(f"notebooks/{GLOSSARY}.md: two sections are headed {cell_id!r}")
        cells.append({"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": part})
    return {"cells": cells}


def english_file(name: str) -> str:
    """The English document's file name in notebooks/."""
    return f"{name}.md" if name == GLOSSARY else f"{name}.ipynb"


def zh_file(name: str) -> str:
    """The Chinese document's file name in notebooks/zh/: the English one with ``.zh`` before its extension
    (``00_the_loop.zh.ipynb``, ``glossary.zh.md``), a tab title that differs from the English one's."""
    stem, ext = english_file(name).rsplit(".", 1)
    return f"{stem}.zh.{ext}"


def english_of(name: str) -> dict:
    """A lesson's notebook, or the glossary as :func:`glossary_cells`."""
    if name == GLOSSARY:
        return glossary_cells(read_text(NOTEBOOKS / f"{GLOSSARY}.md", "glossary"))
    return read_notebook(NOTEBOOKS / f"{name}.ipynb")


def known(name: str, option: str) -> str:
    """A document name given to ``option`` (``--todo``, ``--stamp``): a lesson or the glossary, else a
    CatalogError naming the file it looked for and the names there are."""
    if name in documents():
        return name
    close = difflib.get_close_matches(name, documents(), n=1)
    hint = f" Did you mean {close[0]}?" if close else ""
    raise CatalogError(f"{option} {name}: no such lesson, there is no notebooks/{english_file(name)}.{hint} Give a "
                       f"lesson's file name without .ipynb ({documents()[0]}, …) or {GLOSSARY}.")


def catalog_path(lesson: str) -> Path:
    return CATALOG / f"{lesson}.yaml"


# --- the catalog -------------------------------------------------------------------------------------------

def load_catalog(path: Path) -> dict[str, Entry]:
    """The entries of one catalog file by cell id; an empty dict when the file does not exist."""
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(read_text(path, "catalog"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML: {exc}") from exc
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        raise CatalogError(f"{path}: expected a mapping with a list 'cells', got {type(data).__name__}")
    entries: dict[str, Entry] = {}
    for number, item in enumerate(cells, 1):
        entry = _entry(item, f"{path}, entry {number}")
        if entry.id in entries:
            raise CatalogError(f"{path}, entry {number}: cell id {entry.id!r} appears twice")
        entries[entry.id] = entry
    return entries


def _entry(item: object, where: str) -> Entry:
    if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not isinstance(item.get("zh"), str):
        raise CatalogError(f"{where}: an entry needs a string 'id' and a string 'zh', got {item!r:.120}")
    unknown = set(item) - {"id", "zh", "en", "sha"}
    if unknown:
        raise CatalogError(f"{where} ({item['id']}): unknown keys {sorted(unknown)}")
    entry = Entry(item["id"], item["zh"], item.get("en"), item.get("sha"))
    if (entry.en is None) != (entry.sha is None):
        raise CatalogError(f"{where} ({entry.id}): 'en' and 'sha' go together (--stamp writes both)")
    if entry.en is not None and digest(entry.en) != entry.sha:
        raise CatalogError(f"{where} ({entry.id}): sha {entry.sha} is not the sha of its en ({digest(entry.en)}); "
                           "en was edited by hand")
    return entry


def _block(key: str, text: str) -> str:
    """``key: |-`` and the text as a literal block, or a quoted scalar where a block would not read back the same."""
    indicator = "2" if text[:1] in (" ", "\n") else ""
    chomp, body = ("+", text[:-1]) if text.endswith("\n") else ("-", text)
    block = f"  {key}: |{indicator}{chomp}\n" + "".join(f"    {line}\n" if line else "\n" for line in body.split("\n"))
    if text and "\r" not in text and yaml.safe_load("- id: x\n" + block) == [{"id": "x", key: text}]:
        return block
    return f"  {key}: {json.dumps(text, ensure_ascii=False)}\n"


def dump_catalog(lesson: str, entries: list[Entry]) -> str:
    unit = "section" if lesson == GLOSSARY else "markdown cell"
    parts = [CATALOG_HEADER.format(source=english_file(lesson), unit=unit), f"lesson: {lesson}\ncells:\n"]
    for entry in entries:
        parts.append(f"- id: {json.dumps(entry.id)}\n")
        if entry.sha is not None and entry.en is not None:
            parts.append(f"  sha: {entry.sha}\n" + _block("en", entry.en))
        parts.append(_block("zh", entry.zh))
    return "".join(parts)


# --- what is stale -----------------------------------------------------------------------------------------

def first_change(old: str, new: str) -> str:
    """The first line where ``new`` differs from ``old``, as 'line N: was ..., now ...'."""
    old_lines, new_lines = old.split("\n"), new.split("\n")
    for number, (before, after) in enumerate(zip(old_lines, new_lines, strict=False), 1):
        if before != after:
            return f"line {number}: was {before!r}, now {after!r}"
    number = min(len(old_lines), len(new_lines)) + 1
    if len(new_lines) > len(old_lines):
        return f"line {number}: added {new_lines[number - 1]!r}"
    return f"line {number}: removed {old_lines[number - 1]!r}"


def problems(lesson: str, english: dict, entries: dict[str, Entry]) -> list[str]:
    """Each English markdown cell without a current translation, and each entry for a cell that is gone."""
    found = []
    markdown = {c.get("id"): source_of(c) for c in english["cells"] if c["cell_type"] == "markdown"}
    for cell_id, text in markdown.items():
        entry = entries.get(cell_id)
        if entry is None:
            found.append(f"{lesson}, cell {cell_id}: no translation")
        elif entry.sha is None or entry.en is None:
            found.append(f"{lesson}, cell {cell_id}: translated but not stamped (--stamp {lesson} {cell_id})")
        elif entry.sha != digest(text):
            found.append(f"{lesson}, cell {cell_id}: stale, the English changed since it was translated, "
                         f"{first_change(entry.en, text)}")
    found += [f"{lesson}, cell {cell_id}: translation of a markdown cell the English lesson no longer has"
              for cell_id in entries if cell_id not in markdown]
    return found


def differences(lesson: str, english: dict, chinese: dict) -> list[str]:
    """Where the Chinese notebook is not the English one outside markdown sources: the cells (count, order, ids,
    types), every non-markdown cell whole (source, outputs, execution count, metadata), a markdown cell's fields
    other than its source, and the notebook's own metadata."""
    found = []
    ids = [c.get("id") for c in english["cells"]], [c.get("id") for c in chinese["cells"]]
    if ids[0] != ids[1]:
        return [f"{lesson}: the cells are not the English ones (ids {ids[1]} where the English has {ids[0]})"]
    if {k: v for k, v in chinese.items() if k != "cells"} != {k: v for k, v in english.items() if k != "cells"}:
        found.append(f"{lesson}: the notebook's metadata or format differs from the English")
    for ours, theirs in zip(chinese["cells"], english["cells"], strict=True):
        where = f"{lesson}, cell {theirs.get('id')}"
        if theirs["cell_type"] != "markdown":
            if json.dumps(ours, sort_keys=True) != json.dumps(theirs, sort_keys=True):
                changed = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
                found.append(f"{where}: the {theirs['cell_type']} cell differs from the English in {changed}")
        elif {k: v for k, v in ours.items() if k != "source"} != {k: v for k, v in theirs.items() if k != "source"}:
            found.append(f"{where}: the markdown cell differs from the English outside its source")
    return found


# --- the Chinese notebook ----------------------------------------------------------------------------------

LINK = re.compile(r"(?P<head>\]\(<?|\b(?:href|src)=[\"'])(?P<target>[^)\s>\"']+)")


def rewrite_links(markdown: str, target_for: Callable[[str], str]) -> str:
    """Every relative link target (markdown links, href= and src=) replaced by ``target_for(target)``."""
    def one(match: re.Match) -> str:
        target = match["target"]
        if "://" in target or target.startswith(("#", "/", "mailto:", "data:")):
            return match[0]
        return match["head"] + target_for(target)
    return LINK.sub(one, markdown)


def split_fragment(target: str) -> tuple[str, str]:
    path, hash_, fragment = target.partition("#")
    return path, hash_ + fragment


def lab_target(target: str) -> str:
    """A link of an English lesson (relative to notebooks/) as seen from notebooks/zh/."""
    path, fragment = split_fragment(target)
    if LESSON_NAME.match(path) or path == english_file(GLOSSARY):
        return zh_file(posixpath.splitext(path)[0]) + fragment   # the Chinese lesson, or glossary, beside this one
    return posixpath.relpath(posixpath.normpath(posixpath.join("notebooks", path)), "notebooks/zh") + fragment


def zh_notebook(lesson: str, english: dict, entries: dict[str, Entry], *,
                target_for: Callable[[str], str] = lab_target, english_link: bool = True) -> dict:
    """The Chinese notebook: markdown from the catalog by cell id (the English where there is none), every
    other cell as the English has it."""
    cells = []
    for index, cell in enumerate(english["cells"]):
        if cell["cell_type"] == "markdown":
            entry = entries.get(cell.get("id"))
            text = rewrite_links(entry.zh if entry else source_of(cell), target_for)
            if index == 0 and english_link:
                text += ENGLISH_LINK.format(name=f"{lesson}.ipynb", target=f"../{lesson}.ipynb")
            cell = {**cell, "source": text.splitlines(keepends=True)}
        cells.append(cell)
    return {**english, "cells": cells}


def render(notebook: dict) -> str:
    """The notebook as Jupyter writes it (the English lessons are in this form)."""
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def generated(lesson: str) -> str:
    english, entries = english_of(lesson), load_catalog(catalog_path(lesson))
    if lesson == GLOSSARY:
        return zh_glossary(english, entries)
    return render(zh_notebook(lesson, english, entries))


def zh_glossary(english: dict, entries: dict[str, Entry], *, target_for: Callable[[str], str] = lab_target,
                english_link: bool = True) -> str:
    """The Chinese glossary page: each section from the catalog (the English where there is none)."""
    notebook = zh_notebook(GLOSSARY, english, entries, target_for=target_for, english_link=False)
    sections = [source_of(cell) for cell in notebook["cells"]]
    if english_link:
        sections[0] += ENGLISH_LINK.format(name=f"{GLOSSARY}.md", target=f"../{GLOSSARY}.md")
    return "\n\n".join(sections) + "\n"


def out_path(name: str) -> Path:
    return OUT / zh_file(name)


def strays() -> list[Path]:
    """The notebooks and pages in notebooks/zh/ the generator does not write (a lesson no longer there, a file of an
    older name)."""
    written = {out_path(name) for name in documents()}
    return sorted(p for pattern in ("*.ipynb", "*.md") for p in OUT.glob(pattern) if p not in written)


# --- the Chinese site --------------------------------------------------------------------------------------

SITE_INDEX = ("# agentlab（中文）\n\n"
              "agentlab 是一个 Jupyter 工作台，专讲 agent 循环中最难的部分：每次模型调用之后，决定是运行工具、"
              "恢复、压缩、继续、停止，还是让 hook 否决这次停止。\n\n"
              "这里是全部 {count} 课的中文版。课程中的代码单元格及其输出与英文版一字不差，只有说明文字译成了中文；"
              "API 名称、`stop_reason` 的取值和代码标识符保留英文。[术语表](notebooks/glossary.md)也有中文版，"
              "其余文档为英文。"
              "在自己的机器上运行：`make lab`，然后在 JupyterLab 中打开 `zh/` 文件夹，中文课程的文件名带 `.zh`"
              "（如 `00_the_loop.zh.ipynb`）。\n\n"
              "## 课程\n\n{lessons}\n")
SITE_TITLE = "agentlab：agent 的一轮何时结束"
SITE_TOCTREE = "\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{entries}\n```\n"
SNAPSHOT_CAPTION = re.compile(r'(<figcaption[^>]*>)A picture of the widget (?P<point>.*?), drawn without a kernel\. '
                              r"Open the notebook in JupyterLab \(<code>make lab</code>\) to click through it "
                              r"yourself\.(</figcaption>)")
SNAPSHOT_POINT = {r"after <b>Run to end</b>": "按下 <b>Run to end</b> 之后",
                  r"after (\d+) press(?:es)? of <b>Step</b>": r"按 \1 次 <b>Step</b> 之后",
                  r"as the cell shows it": "单元格所显示的样子"}
SNAPSHOT_ZH = ("小部件{point}的静态图，绘制时没有 kernel。在 JupyterLab 中打开这个 notebook（<code>make lab</code>），"
               "就能亲手点击它。")


def title(notebook: dict) -> str:
    """The first heading of a notebook's first markdown cell."""
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            for line in source_of(cell).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise CatalogError("the notebook has no '# ' heading in its markdown")


def zh_snapshot_caption(text: str, where: str) -> str:
    """A site picture's caption (website/build.py's SNAPSHOT_NOTE) in Chinese."""
    def one(match: re.Match) -> str:
        for pattern, point in SNAPSHOT_POINT.items():
            if re.fullmatch(pattern, match["point"]):
                return match[1] + SNAPSHOT_ZH.format(point=re.sub(pattern, point, match["point"])) + match[3]
        raise CatalogError(f"{where}: no Chinese for the widget picture's point {match['point']!r}")
    translated = SNAPSHOT_CAPTION.sub(one, text)
    if "agentlab-snapshot" in translated and "绘制时没有 kernel" not in translated:
        raise CatalogError(f"{where}: a widget picture whose caption is not website/build.py's SNAPSHOT_NOTE")
    return translated


def site_notebook(lesson: str, english: dict, links: Callable[[str], str]) -> dict:
    """The Chinese lesson for the site, from the English one as the site shows it (widgets already drawn as
    pictures): links as the English has them (the Chinese site has the English layout), ``links`` applied to
    each markdown cell, the pictures' captions in Chinese; the language switch stands for the link to the
    English lesson."""
    notebook = zh_notebook(lesson, english, load_catalog(catalog_path(lesson)), target_for=lambda t: t,
                           english_link=False)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = links(source_of(cell))
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "agentlab-snapshot" in source_of({"source": data.get("text/html", "")}):
                data["text/html"] = zh_snapshot_caption(source_of({"source": data["text/html"]}), lesson)
    return notebook


def site_sources(english_src: Path, zh_src: Path, links: Callable[[str], str]) -> list[str]:
    """Lay out the Chinese site's sources in ``zh_src`` from the English site's in ``english_src``: each
    lesson in Chinese, the glossary in Chinese, and a front page in Chinese listing the lessons. Returns the page
    names, as Sphinx names them."""
    (zh_src / "notebooks").mkdir(parents=True)
    names, lines = [], []
    for lesson in lessons():
        english = read_notebook(english_src / "notebooks" / f"{lesson}.ipynb")
        notebook = site_notebook(lesson, english, links)
        (zh_src / "notebooks" / f"{lesson}.ipynb").write_text(render(notebook), encoding="utf-8")
        names.append(f"notebooks/{lesson}")
        lines.append(f"- [{title(notebook)}](notebooks/{lesson}.ipynb)")
    glossary = [f"notebooks/{p.stem}" for p in sorted((english_src / "notebooks").glob("*.md"))]
    for page in glossary:
        if page == f"notebooks/{GLOSSARY}":
            text = links(zh_glossary(english_of(GLOSSARY), load_catalog(catalog_path(GLOSSARY)),
                                     target_for=lambda t: t, english_link=False))
            (zh_src / f"{page}.md").write_text(text, encoding="utf-8")
        else:
            shutil.copy(english_src / f"{page}.md", zh_src / f"{page}.md")
    front = SITE_INDEX.format(count=len(names), lessons="\n".join(lines))
    front += SITE_TOCTREE.format(caption="课程", entries="\n".join(names))
    front += SITE_TOCTREE.format(caption="参考", entries="\n".join(glossary))
    (zh_src / "index.md").write_text(front, encoding="utf-8")
    return ["index", *names, *glossary]


# --- the command -------------------------------------------------------------------------------------------

def shown(path: Path) -> str:
    """A path as the command prints it: relative to the repository when it is in it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def write_all() -> list[str]:
    OUT.mkdir(exist_ok=True)
    written = []
    for lesson in documents():
        path = out_path(lesson)
        text = generated(lesson)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(shown(path))
    for extra in strays():
        extra.unlink()
        written.append(f"{shown(extra)} (removed: not a Chinese lesson of this name, {STRAY_HINT})")
    return written


STRAY_HINT = "each is named NN_name.zh.ipynb after an English lesson, the glossary glossary.zh.md"


def check() -> list[str]:
    found = []
    for lesson in documents():
        english = english_of(lesson)
        found += problems(lesson, english, load_catalog(catalog_path(lesson)))
        path = out_path(lesson)
        if path.exists() and lesson != GLOSSARY:
            found += differences(lesson, english, read_notebook(path))
        if not path.exists() or path.read_text(encoding="utf-8") != generated(lesson):
            found.append(f"{lesson}: notebooks/zh/{path.name} is not what the catalog and the English give "
                         "(run translations/zh_lessons.py)")
    found += [f"{shown(p)}: not a Chinese lesson of this name ({STRAY_HINT}); "
              "translations/zh_lessons.py removes it" for p in strays()]
    return found


def todo(names: list[str]) -> str:
    """For each cell to (re)translate: its id, how the English changed (a diff) or all of it, and the current zh."""
    out = []
    for lesson in [known(name, "--todo") for name in names] or documents():
        english = english_of(lesson)
        entries = load_catalog(catalog_path(lesson))
        for cell in english["cells"]:
            entry = entries.get(cell.get("id"))
            text = source_of(cell)
            if cell["cell_type"] != "markdown" or (entry and entry.sha == digest(text)):
                continue
            out.append(f"=== {lesson} {cell.get('id')}")
            if entry and entry.en is not None:
                out += difflib.unified_diff(entry.en.split("\n"), text.split("\n"), "en (translated)", "en (now)",
                                            lineterm="")
                out += ["--- zh (now)", entry.zh]
            else:
                out.append(text)
    return "\n".join(out)


def stamp(lesson: str, ids: list[str]) -> list[str]:
    """Record the current English source (and its sha) in the entries named, or in every unstamped one."""
    lesson = known(lesson, "--stamp")
    english = {c.get("id"): source_of(c) for c in english_of(lesson)["cells"] if c["cell_type"] == "markdown"}
    entries = load_catalog(catalog_path(lesson))
    unknown = [i for i in ids if i not in entries or i not in english]
    if unknown:
        raise CatalogError(f"{catalog_path(lesson)}: no entry, or no English markdown cell, with id {unknown}")
    chosen = ids or [i for i, e in entries.items() if e.sha is None and i in english]
    for cell_id in chosen:
        entries[cell_id].en, entries[cell_id].sha = english[cell_id], digest(english[cell_id])
    order = {cell_id: n for n, cell_id in enumerate(english)}
    ordered = sorted(entries.values(), key=lambda e: order.get(e.id, len(order)))
    catalog_path(lesson).write_text(dump_catalog(lesson, ordered), encoding="utf-8")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="report stale translations and out-of-date notebooks")
    group.add_argument("--todo", nargs="*", metavar="LESSON", help="the cells to (re)translate")
    group.add_argument("--stamp", nargs="+", metavar=("LESSON", "ID"), help="record what the zh translates")
    args = parser.parse_args(argv)
    try:
        if args.check:
            found = check()
            print("\n".join(found) or f"{len(lessons())} Chinese lessons and the glossary up to date")
            return 1 if found else 0
        if args.todo is not None:
            print(todo(args.todo) or "nothing to translate")
        elif args.stamp:
            print(f"stamped {stamp(args.stamp[0], args.stamp[1:])}")
        else:
            print("\n".join(write_all()) or "notebooks/zh/ already up to date")
    except CatalogError as exc:
        print(f"zh_lessons: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
