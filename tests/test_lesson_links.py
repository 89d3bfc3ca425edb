"""Every link of every lesson leads somewhere, checked from the documents themselves, without a browser.

JupyterLab's root is notebooks/ (``make lab``). A link in a lesson's markdown (the English lessons, the Chinese
ones in zh/, the glossaries beside them) is either an address on the web, or a file of that root, resolved as
JupyterLab resolves it: relative to the document's folder, ``#fragment`` alone meaning the document itself. A
file link must name a file that is there, inside the root (``../docs/...`` climbs out of it and opens nothing),
and its ``#fragment`` a heading of that document as JupyterLab names headings: the heading's text, each space
turned into ``-`` (``createHeaderId`` in @jupyterlab/rendermime).

What only a browser shows is left to tests/test_links_browser.py (and _zh): that JupyterLab draws the same links
and names the headings the same way as read here (in every document), and that a click on a link opens the
document at the heading (one link of each kind, see :func:`link_kind`).
"""

from __future__ import annotations

import json
import posixpath
import re
import urllib.parse
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser_lab import NOTEBOOKS, STEPPER_DIR
from markdown_it import MarkdownIt

WEB_SCHEMES = ("https", "http")


def documents(root: Path) -> list[str]:
    """The lessons (English, then zh/) and the markdown pages beside them, relative to the lab's root (the
    stepper test's notebook left out)."""
    found = (sorted(root.glob("*.ipynb")) + sorted(root.glob("*.md")) + sorted(root.glob("*/*.ipynb"))
             + sorted(root.glob("*/*.md")))
    return [p.relative_to(root).as_posix() for p in found if not {".ipynb_checkpoints", STEPPER_DIR} & set(p.parts)]


def markdown_texts(path: Path) -> list[str]:
    """A notebook's markdown cells, or a .md file's text."""
    if path.suffix != ".ipynb":
        return [path.read_text(encoding="utf-8")]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def markdown_links(path: Path) -> list[str]:
    """Every link target in a document's markdown (a notebook's markdown cells, or a .md file), in order."""
    parser, targets = _parser(), []
    for text in markdown_texts(path):
        for token in parser.parse(text):
            targets += [child.attrs["href"] for child in token.children or [] if child.type == "link_open"]
    return targets


class _TextContent(HTMLParser):
    """The DOM's ``textContent`` of an HTML fragment: its text, tags left out, character references decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text = ""

    def handle_data(self, data: str) -> None:
        self.text += data


def heading_ids(path: Path) -> list[str]:
    """The id JupyterLab gives each heading of a document's markdown, in order: its text content with each space
    turned into ``-`` (JupyterLab draws it as the heading's ``data-jupyter-id``)."""
    parser, ids = _parser(), []
    for text in markdown_texts(path):
        tokens = parser.parse(text)
        for opening, inline in zip(tokens, tokens[1:], strict=False):
            if opening.type == "heading_open":
                content = _TextContent()
                content.feed(parser.renderer.renderInline(inline.children or [], parser.options, {}))
                ids.append(content.text.strip().replace(" ", "-"))
    return ids


@dataclass(frozen=True)
class Target:
    """Where a link leads: ``web`` (an address, in ``path``), or a file of the root (``path``) at ``fragment``."""

    web: bool
    path: str
    fragment: str = ""


def resolve(doc: str, href: str) -> Target:
    """The target of the link ``href`` written in ``doc`` (a path relative to the root), as JupyterLab resolves
    it: a path relative to the document's folder (from the root when it starts with ``/``), percent-escapes
    decoded; a fragment alone is the document itself."""
    parts = urllib.parse.urlsplit(href)
    if parts.scheme or parts.netloc:
        return Target(True, href)
    path, fragment = urllib.parse.unquote(parts.path), urllib.parse.unquote(parts.fragment)
    if not path:
        return Target(False, doc, fragment)
    return Target(False, posixpath.normpath(posixpath.join(posixpath.dirname(doc), path)).lstrip("/"), fragment)


def link_problem(root: Path, doc: str, href: str) -> str | None:
    """What is wrong with the link ``href`` of ``doc`` (None: it leads to a real place)."""
    target = resolve(doc, href)
    if target.web:
        parts = urllib.parse.urlsplit(href)
        return None if parts.scheme in WEB_SCHEMES and parts.netloc else "is not a web address (http or https)"
    if target.path == ".." or target.path.startswith("../"):
        return f"climbs out of the lab's root, notebooks/ (to {target.path}), where JupyterLab opens nothing"
    file = root / target.path
    if not file.is_file():
        return f"names {target.path}, which is not a file of notebooks/"
    if target.fragment and (file.suffix not in (".ipynb", ".md") or target.fragment not in heading_ids(file)):
        return f"names a heading #{target.fragment} that {target.path} does not have (JupyterLab names a heading " \
               "by its text, each space turned into '-')"
    return None


def link_kind(doc: str, href: str) -> tuple[str, ...]:
    """The kind of a link, by what JupyterLab does with it when it is clicked; the browser test clicks one link of
    each kind (a link of a kind already clicked is drawn by the same renderer and followed by the same handler).

    - where it is drawn: in a notebook's markdown cell, or in a page (.md, opened as "Markdown Preview"), each
      with its own renderer and its own resolver of relative paths;
    - what it opens: a web address (a new browser page), the document itself (a ``#heading`` of it, scrolled to
      in place), a notebook or a page (each opened with its own kind of document, which finds the heading);
    - the fragment: none, letters, digits and ``-`` only, other punctuation (``_``, escaped for the CSS
      selector the heading is found with), or non-ASCII (percent-escaped in the drawn address);
    - the folder: the document's own, or another one (``../`` from zh/)."""
    target = resolve(doc, href)
    drawn_in = "notebook" if doc.endswith(".ipynb") else "page"
    if target.web:
        return drawn_in, "web"
    opens = ("this document" if not urllib.parse.urlsplit(href).path else
             {".ipynb": "notebook", ".md": "page"}.get(posixpath.splitext(target.path)[1], "other file"))
    fragment = ("no fragment" if not target.fragment else "non-ASCII fragment" if not target.fragment.isascii()
                else "punctuation in the fragment" if re.search(r"[^A-Za-z0-9-]", target.fragment)
                else "plain fragment")
    folder = "same folder" if posixpath.dirname(target.path) == posixpath.dirname(doc) else "other folder"
    return drawn_in, opens, fragment, folder


# -- the checks on the lessons --------------------------------------------------------------------------------------

def test_every_link_of_every_lesson_leads_to_a_file_and_heading_or_the_web():
    docs = documents(NOTEBOOKS)
    assert "glossary.md" in docs and "zh/glossary.zh.md" in docs and len(docs) == 32, docs
    problems, links = [], 0
    for doc in docs:
        for index, href in enumerate(markdown_links(NOTEBOOKS / doc), start=1):
            links += 1
            problem = link_problem(NOTEBOOKS, doc, href)
            if problem:
                problems.append(f"{doc}: link {index} ({href}) {problem}")
    assert links > 200, links
    assert not problems, "links that lead nowhere:\n" + "\n".join(problems)


# -- the reading itself ---------------------------------------------------------------------------------------------

@pytest.fixture
def root(tmp_path) -> Path:
    """A small lab root: a lesson, a page with headings, a folder with a translation (named as notebooks/zh/ names
    its documents)."""
    (tmp_path / "zh").mkdir()
    (tmp_path / "glossary.md").write_text("# Glossary\n\n## Tool\n\n## `tool_use` and **tool_result**\n\n"
                                          "## Stop hook &amp; more\n", encoding="utf-8")
    cell = {"cell_type": "markdown", "metadata": {}, "source": ["# Lesson 1\n", "[a](glossary.md#Tool)"]}
    (tmp_path / "01_x.ipynb").write_text(json.dumps({"cells": [cell]}), encoding="utf-8")
    (tmp_path / "zh" / "glossary.zh.md").write_text("# 术语表\n\n## 工具 调用\n", encoding="utf-8")
    return tmp_path


def test_markdown_links_are_read_as_the_lab_draws_them(tmp_path):
    """The links of a document: inline links, in tables too; code spans are not links."""
    sample = tmp_path / "sample.md"
    sample.write_text("# T\n\n[a](glossary.md#Token) and `[not](x.md)`\n\n| x |\n|---|\n| [b](01_x.ipynb) |\n\n"
                      "<https://example.com/c>\n", encoding="utf-8")
    assert markdown_links(sample) == ["glossary.md#Token", "01_x.ipynb", "https://example.com/c"]


def test_headings_are_named_by_their_text_with_spaces_as_hyphens(root):
    assert heading_ids(root / "glossary.md") == ["Glossary", "Tool", "tool_use-and-tool_result", "Stop-hook-&-more"]
    assert heading_ids(root / "01_x.ipynb") == ["Lesson-1"]
    assert heading_ids(root / "zh" / "glossary.zh.md") == ["术语表", "工具-调用"]


@pytest.mark.parametrize(("doc", "href", "problem"), [
    ("01_x.ipynb", "glossary.md#Tool", None),
    ("01_x.ipynb", "glossary.md#tool_use-and-tool_result", None),
    ("zh/glossary.zh.md", "#%E5%B7%A5%E5%85%B7-%E8%B0%83%E7%94%A8", None),
    ("zh/glossary.zh.md", "../01_x.ipynb", None),
    ("zh/glossary.zh.md", "/glossary.md#Tool", None),
    ("01_x.ipynb", "https://platform.claude.com/docs/en/api/messages", None),
    ("01_x.ipynb", "glossary.md#Token", "names a heading #Token that glossary.md does not have"),
    ("01_x.ipynb", "glossary.md#tool", "names a heading #tool that glossary.md does not have"),
    ("01_x.ipynb", "02_y.ipynb", "names 02_y.ipynb, which is not a file of notebooks/"),
    ("zh/glossary.zh.md", "01_x.ipynb", "names zh/01_x.ipynb, which is not a file of notebooks/"),
    ("01_x.ipynb", "../docs/ci.md", "climbs out of the lab's root, notebooks/ (to ../docs/ci.md)"),
    ("01_x.ipynb", "01_x.ipynb#Lesson-2", "names a heading #Lesson-2 that 01_x.ipynb does not have"),
    ("01_x.ipynb", "mailto:someone@example.com", "is not a web address (http or https)"),
])
def test_a_link_is_followed_as_jupyterlab_follows_it(root, doc, href, problem):
    found = link_problem(root, doc, href)
    assert found == problem if problem is None else found.startswith(problem), found


def test_the_kinds_of_link_the_browser_test_clicks_one_of():
    assert link_kind("01_x.ipynb", "https://example.com") == ("notebook", "web")
    assert link_kind("glossary.md", "https://example.com") == ("page", "web")
    assert link_kind("glossary.md", "#Tool") == ("page", "this document", "plain fragment", "same folder")
    assert link_kind("01_x.ipynb", "glossary.md#tool_use") == ("notebook", "page", "punctuation in the fragment",
                                                              "same folder")
    assert link_kind("zh/01_x.zh.ipynb", "../01_x.ipynb") == ("notebook", "notebook", "no fragment", "other folder")
    assert link_kind("zh/01_x.zh.ipynb", "glossary.zh.md#%E5%B7%A5%E5%85%B7") == (
        "notebook", "page", "non-ASCII fragment", "same folder")
