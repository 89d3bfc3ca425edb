"""Every link of every lesson, clicked in JupyterLab in a real browser: it must open a real page or file.

JupyterLab's root is notebooks/ (``make lab``), so a link that climbs out of it (``../docs/…``) or names a file
that is not there opens nothing. The test serves a copy of notebooks/ (the English lessons, the Chinese ones in
zh/, the glossaries beside them) from the run's one JupyterLab (tests/browser_lab.py), in which a lesson opens
with no kernel (no notebook needs to run for its links to be followed), opens each document in one page, and
clicks each link in turn. The English documents are clicked here, the Chinese ones by
tests/test_links_browser_zh.py (the two files run on two workers, each half taking about as long as the other,
in the same lab):

- a link to a lesson or the glossary must make a tab of that name the current one and draw it (cells, or the
  rendered markdown), and a link's ``#fragment`` must name a heading in it, as JupyterLab names headings;
- a link to the web must open a new browser page at exactly that address (the machine is offline, so the
  address is answered by the test rather than fetched; what is checked is the address a learner reaches).

The links are counted from the documents' markdown as well (markdown-it, the parser MyST uses), so a link
that JupyterLab does not draw as one is noticed rather than skipped. The site's links: tests/test_site.py.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from pathlib import Path

import pytest
from browser_lab import CHROMIUM, CHROMIUM_ARGS, STEPPER_DIR, page_url, require_browser
from markdown_it import MarkdownIt

pytestmark = pytest.mark.browser

# Answers a kernel-choice dialog with "No Kernel" whenever one opens (the lab offers a lesson no kernel it would take
# for the lesson's own; its one kernel is the stepper test's).
NO_KERNEL = """() => new MutationObserver(() => {
  for (const dialog of document.querySelectorAll('.jp-Dialog')) {
    const select = dialog.querySelector('select');
    if (!dialog.textContent.includes('Select kernel for') || !select) continue;
    select.value = 'null';
    select.dispatchEvent(new Event('change'));
    dialog.querySelector('.jp-mod-accept')?.click();
  }
}).observe(document.body, {childList: true, subtree: true})"""
LINKS = ".jp-MainAreaWidget:not(.lm-mod-hidden) .jp-RenderedMarkdown a[href]:not(.jp-InternalAnchorLink)"
CURRENT = ".jp-MainAreaWidget:not(.lm-mod-hidden)"


def documents(root: Path) -> list[str]:
    """The lessons (English, then zh/) and the markdown pages beside them, relative to the lab's root (the
    stepper test's notebook left out)."""
    found = (sorted(root.glob("*.ipynb")) + sorted(root.glob("*.md")) + sorted(root.glob("*/*.ipynb"))
             + sorted(root.glob("*/*.md")))
    return [p.relative_to(root).as_posix() for p in found if not {".ipynb_checkpoints", STEPPER_DIR} & set(p.parts)]


def markdown_links(path: Path) -> list[str]:
    """Every link target in a document's markdown (a notebook's markdown cells, or a .md file), in order."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        texts = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    else:
        texts = [path.read_text(encoding="utf-8")]
    parser = MarkdownIt("commonmark").enable("table")
    targets = []
    for text in texts:
        for token in parser.parse(text):
            targets += [child.attrs["href"] for child in token.children or [] if child.type == "link_open"]
    return targets


def test_markdown_links_are_read_as_the_lab_draws_them(tmp_path):
    """The count the browser test compares with: inline links, in tables too; code spans are not links."""
    sample = tmp_path / "sample.md"
    sample.write_text("# T\n\n[a](glossary.md#Token) and `[not](x.md)`\n\n| x |\n|---|\n| [b](01_x.ipynb) |\n\n"
                      "<https://example.com/c>\n", encoding="utf-8")
    assert markdown_links(sample) == ["glossary.md#Token", "01_x.ipynb", "https://example.com/c"]


def test_a_drawn_link_is_read_as_the_file_it_opens():
    """A file's download address, and a .md file's own #heading with or without the page's workspace."""
    base = "http://127.0.0.1:8888"
    assert local_target(f"{base}/files/zh/glossary.md#Stop%20hook", base) == ("zh/glossary.md", "Stop hook")
    assert local_target(f"{base}/lab/workspaces/links/tree/glossary.md#Tool", base) == ("glossary.md", "Tool")
    assert local_target(f"{base}/lab/tree/glossary.md", base) == ("glossary.md", "")
    assert local_target("https://docs.anthropic.com/x", base) is None
    with pytest.raises(AssertionError, match="not a file of it"):
        local_target(f"{base}/api/contents/x", base)


@pytest.fixture
def lab(jupyterlab):
    """The run's JupyterLab (tests/browser_lab.py) over a copy of notebooks/, offering no kernel to a lesson."""
    return {**jupyterlab, "root": Path(jupyterlab["root"])}


def local_target(href: str, base_url: str) -> tuple[str, str] | None:
    """(path under the root, fragment) of a link JupyterLab drew for a file of the lab; None for the web.
    JupyterLab draws a link to a file as its download address, ``/files/PATH``, and opens the file in the lab
    when it is clicked."""
    parts = urllib.parse.urlsplit(href)
    if f"{parts.scheme}://{parts.netloc}" != base_url:
        return None
    # a file; the same page (a .md file's own #heading), in the page's workspace or none
    found = re.fullmatch(r"/files/(.+)|/lab/(?:workspaces/[^/]+/)?tree/(.+)", urllib.parse.unquote(parts.path))
    if found:
        return found[1] or found[2], urllib.parse.unquote(parts.fragment)
    raise AssertionError(f"a link into the lab that is not a file of it: {href}")


# Close documents without the "Save your work?" dialog: JupyterLab may mark a notebook changed on opening it
# (its format brought up to date, its widget state), and nothing here is to be saved.
DISCARD = """widget => { const model = widget && widget.context && widget.context.model;
  if (model) { model.dirty = false; } }"""


def close_current(page) -> None:
    """Close the current tab, discarding any change JupyterLab made to it."""
    page.evaluate(f"""async () => {{ const app = window.jupyterapp; ({DISCARD})(app.shell.currentWidget);
      await app.commands.execute('application:close'); }}""")


def open_document(page, path: str) -> None:
    """Open ``path`` in the page's lab as a learner sees it (a .md file rendered, as a link to it opens it)."""
    page.evaluate(f"""async path => {{
      const app = window.jupyterapp;
      for (const widget of Array.from(app.shell.widgets('main'))) {{ ({DISCARD})(widget); }}
      await app.commands.execute('application:close-all');
      await app.commands.execute('docmanager:open',
        {{path, factory: path.endsWith('.md') ? 'Markdown Preview' : 'Notebook'}});
    }}""", path)
    drawn(page, path, timeout=30_000)


def drawn(page, path: str, timeout: float = 5_000) -> None:
    """Wait until the current tab is ``path`` and its content is drawn (a notebook's cells, a page's markdown)."""
    name = path.rsplit("/", 1)[-1]
    page.wait_for_selector(f".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current[title*='{name}']", timeout=timeout)
    inner = ".jp-Notebook .jp-Cell" if name.endswith(".ipynb") else ".jp-RenderedMarkdown"
    page.wait_for_selector(f"{CURRENT} {inner}", timeout=timeout)


def follow_local(page, lab, origin: str, index: int, path: str, fragment: str) -> str | None:
    """Click link ``index`` of ``origin``; None when it opened ``path`` (at ``fragment``), else what went wrong."""
    page.locator(LINKS).nth(index).click()
    if path != origin:
        try:
            drawn(page, path, timeout=30_000)       # on a busy machine a lesson takes seconds to draw
        except Exception:  # noqa: BLE001 - reported as the link's failure below
            current = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current").all_inner_texts()
            return f"did not open {path} (the current tab is {current})"
    problem = None
    if fragment and not page.locator(f"{CURRENT} [data-jupyter-id={json.dumps(fragment)}]").count():
        problem = f"opened {path}, which has no heading #{fragment} (JupyterLab names headings by their text, " \
                  "spaces turned into '-')"
    if path != origin:
        close_current(page)                               # close the opened tab: back to the document
        drawn(page, origin)
    return problem


def all_drawn(page, expected: int, timeout: float = 30_000) -> None:
    """Wait until the current document shows ``expected`` links: a notebook's cells appear before its markdown is
    rendered, and on a busy machine the rendering lags. A document that never shows them all is reported by the
    count compared next, not here."""
    try:
        page.wait_for_function("([selector, n]) => document.querySelectorAll(selector).length >= n",
                               arg=[LINKS, expected], timeout=timeout)
    except Exception:  # noqa: BLE001 - the caller compares the counts and reports the difference
        pass


def back_at(page, doc: str, index: int, href: str) -> None:
    """Make sure link ``index`` of ``doc`` is on the page before it is clicked: on a busy machine JupyterLab may
    bring another tab forward or draw the document again after a tab is closed; then ``doc`` is opened again
    (the link itself is still checked, and fails the test if it is gone)."""
    link = page.locator(LINKS).nth(index)
    try:
        link.wait_for(state="attached", timeout=5_000)
        if link.get_attribute("href") == href or link.evaluate("a => a.href") == href:
            return
    except Exception:  # noqa: BLE001 - the document is opened again below
        pass
    open_document(page, doc)
    link.wait_for(state="attached", timeout=30_000)


def follow_web(page, index: int, href: str) -> str | None:
    with page.context.expect_page(timeout=10_000) as opened:
        page.locator(LINKS).nth(index).click()
    new = opened.value
    new.wait_for_load_state()
    reached = new.url
    new.close()
    return None if reached == href else f"opened {reached}"


def test_every_link_of_every_lesson_opens_in_jupyterlab(lab, capsys):
    """The English lessons and the pages beside them (tests/test_links_browser_zh.py: notebooks/zh/, in a lab of its
    own, so that the two halves run on two workers)."""
    check_links(lab, capsys, [d for d in documents(lab["root"]) if "/" not in d], workspace="links")


def check_links(lab, capsys, docs: list[str], workspace: str) -> None:
    """Open each of ``docs`` in the lab, click each of its links and say which do not lead where they say."""
    sync_playwright = require_browser()
    started = time.monotonic()
    problems: list[str] = []
    results: dict[tuple[str, str], str | None] = {}
    links = 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("https://**/*", lambda route: route.fulfill(status=200, body="the web, offline"))
            context.add_init_script(f"window.addEventListener('DOMContentLoaded', {NO_KERNEL})")
            page = context.new_page()
            page.goto(page_url(lab, workspace))
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started", timeout=60_000)
            for doc in docs:
                open_document(page, doc)
                expected = markdown_links(lab["root"] / doc)
                all_drawn(page, len(expected))
                hrefs = page.locator(LINKS).evaluate_all("links => links.map(a => a.href)")
                if len(hrefs) != len(expected):
                    problems.append(f"{doc}: its markdown has {len(expected)} links, JupyterLab drew {len(hrefs)}")
                problems += click_links(page, lab, doc, list(zip(hrefs, expected, strict=False)), results)
                links += len(hrefs)
        finally:
            browser.close()
    elapsed = time.monotonic() - started
    web = sum(local_target(href, lab["url"]) is None for _, href in results)
    with capsys.disabled():
        print(f"\n  {links} links in {len(docs)} documents, {len(results)} addresses clicked ({web} to the web; "
              f"the {links - len(results)} others the same address from the same kind of document) in {elapsed:.1f} s")
    assert results
    assert not problems, "links that do not work in JupyterLab:\n" + "\n".join(problems)


def click_links(page, lab, doc: str, links: list[tuple[str, str]], results: dict) -> list[str]:
    """Click each of ``doc``'s links ((address drawn, target written)) and say which do not lead where they say.
    A link whose address was clicked before from a document of the same kind (a notebook, a page) is not clicked
    again: it is the same address, drawn by the same renderer and opened by the same handler, so it shares that
    click's result (``results``: (kind, address) -> the problem, or None)."""
    problems = []
    for index, (href, written) in enumerate(links):
        key = (Path(doc).suffix, href)
        if key not in results:
            back_at(page, doc, index, href)
            local = local_target(href, lab["url"])
            results[key] = (follow_web(page, index, href) if local is None
                            else follow_local(page, lab, doc, index, *local))
        if results[key]:
            problems.append(f"{doc}: link {index + 1} ({written}) {results[key]}")
    return problems
