"""Every markdown cell of every lesson, English and Chinese, and both glossaries render as CommonMark says.

JupyterLab and the site render markdown by CommonMark's rules (with tables). A delimiter that CommonMark does
not take as emphasis shows as a literal ``**`` or ``*`` and can turn the rest of a paragraph italic: Chinese
text is where this happens, since a ``**`` between a CJK character and punctuation (``一个**[轮次](…)**``) is
not left-flanking. A link whose brackets do not pair shows its ``](`` in the text. The test renders each cell
with markdown-it-py (the CommonMark reference implementation in Python, which JupyterLab's MyST stack uses)
and reads the text the reader would see, outside code spans and blocks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
DOCUMENTS = sorted([*NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"), *(NOTEBOOKS / "zh").glob("[0-9][0-9]_*.ipynb"),
                    NOTEBOOKS / "glossary.md", NOTEBOOKS / "zh" / "glossary.zh.md"])
MARKDOWN = MarkdownIt("commonmark").enable("table")
# A run of * or _ that is not a word's inner underscore and not an operator between spaces ("17 * 23").
STRAY = re.compile(r"\*+|(?<!\w)_+|_+(?!\w)")


def shown_text(markdown: str) -> list[str]:
    """The text nodes a reader sees, outside code spans, code blocks and HTML."""
    out = []
    for token in MARKDOWN.parse(markdown):
        if token.type == "inline":
            out += [child.content for child in token.children or [] if child.type == "text"]
    return out


def render_problems(markdown: str) -> list[str]:
    problems = []
    for text in shown_text(markdown):
        for match in STRAY.finditer(text):
            start, end = match.span()
            if text[start - 1:start].isspace() and text[end:end + 1].isspace():
                continue
            problems.append(f"literal {match.group()!r} near {text[max(0, start - 30):end + 30]!r}")
        if "](" in text:
            problems.append(f"a link not rendered near {text[:80]!r}")
    return problems


def _cells(path: Path) -> list[tuple[str, str]]:
    if path.suffix == ".md":
        return [("the file", path.read_text(encoding="utf-8"))]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(f"cell {i} ({c.get('id')})", "".join(c["source"])) for i, c in enumerate(cells)
            if c["cell_type"] == "markdown"]


def test_render_problems_finds_what_commonmark_leaves_literal():
    assert render_problems("一个**[轮次](glossary.md#Turn)**（turn）是") != []          # not left-flanking
    assert render_problems("一个[**轮次**](glossary.md#Turn)（turn）是") == []
    assert render_problems("**bold** and *it* and `a_b * c` and 17 * 23 and stop_reason") == []
    assert render_problems("a [link]](x.md) here") != []
    assert render_problems("```\n**not markdown**\n```") == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(NOTEBOOKS)))
def test_every_markdown_cell_renders_without_literal_marks(path):
    found = [f"{where}: {problem}" for where, text in _cells(path) for problem in render_problems(text)]
    assert found == [], f"{path.relative_to(NOTEBOOKS)} renders markdown marks as text: {found}"
