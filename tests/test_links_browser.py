"""The links of every lesson in JupyterLab, in a real browser: drawn as they are written, and followed when clicked.

JupyterLab's root is notebooks/ (``make lab``). That every link leads to a file and heading of that root, or to
the web, is read from the documents themselves by tests/test_lesson_links.py, which resolves each link and names
each heading as JupyterLab does. This test checks, in the run's one JupyterLab (tests/browser_lab.py, over a copy
of notebooks/, a lesson opened with no kernel: no notebook needs to run for its links to be followed), what only
the browser shows:

- in every document (each opened in turn), JupyterLab draws exactly the links the markdown holds (counted with
  markdown-it, the parser MyST uses, so that a link it does not draw as one is noticed rather than skipped), each
  at the address tests/test_lesson_links.py resolves it to, and names the headings as that test does;
- a click on a link opens what it names: a lesson or the glossary becomes the current tab and is drawn (cells,
  or the rendered markdown) with the ``#fragment``'s heading in it; a link to the web opens a new browser page
  at exactly that address (the machine is offline, so the address is answered by the test rather than fetched).
  One link of each kind is clicked (``link_kind`` in tests/test_lesson_links.py: where it is drawn, what it opens,
  its fragment, its folder): two links of a kind are drawn by the same renderer and followed by the same handler,
  and what differs between them, the file and heading named, is checked for every link by the two checks above.

The English documents are checked here, the Chinese ones by tests/test_links_browser_zh.py (the two files run on
two workers, in the same lab). The site's links: tests/test_site.py.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from pathlib import Path

import pytest
from browser_lab import CHROMIUM, CHROMIUM_ARGS, page_url, require_browser
from test_lesson_links import documents, heading_ids, link_kind, markdown_links, resolve

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
CURRENT = ".jp-MainAreaWidget:not(.lm-mod-hidden)"
LINKS = f"{CURRENT} .jp-RenderedMarkdown a[href]:not(.jp-InternalAnchorLink)"
# the headings of the markdown: a notebook's markdown cells, or the page (not a heading an output draws)
HEADINGS = {".ipynb": f"{CURRENT} .jp-MarkdownCell :is(h1, h2, h3, h4, h5, h6)[data-jupyter-id]",
            ".md": f"{CURRENT} .jp-RenderedMarkdown :is(h1, h2, h3, h4, h5, h6)[data-jupyter-id]"}


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


def follow_local(page, origin: str, index: int, path: str, fragment: str) -> str | None:
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


def all_drawn(page, selector: str, expected: int, timeout: float = 30_000) -> None:
    """Wait until the current document shows ``expected`` elements of ``selector`` (links, headings): a notebook's
    cells appear before its markdown is rendered, and on a busy machine the rendering lags. A document that never
    shows them all is reported by the count compared next, not here."""
    try:
        page.wait_for_function("([selector, n]) => document.querySelectorAll(selector).length >= n",
                               arg=[selector, expected], timeout=timeout)
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
    """The English lessons and the pages beside them (tests/test_links_browser_zh.py: notebooks/zh/, on another
    worker)."""
    check_links(lab, capsys, [d for d in documents(lab["root"]) if "/" not in d], workspace="links")


def check_links(lab, capsys, docs: list[str], workspace: str) -> None:
    """Open each of ``docs`` in the lab, compare what it draws with its markdown, click one link of each kind, and
    say which links are not drawn or followed as written."""
    sync_playwright = require_browser()
    started = time.monotonic()
    problems: list[str] = []
    clicked: dict[tuple[str, ...], str] = {}   # kind -> the link clicked for it
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
                problems += drawn_as_written(page, lab, doc)
                written = markdown_links(lab["root"] / doc)
                hrefs = page.locator(LINKS).evaluate_all("links => links.map(a => a.href)")
                problems += click_one_of_each_kind(page, lab, doc, list(zip(hrefs, written, strict=False)), clicked)
                links += len(hrefs)
        finally:
            browser.close()
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\n  {links} links in {len(docs)} documents drawn as written; {len(clicked)} clicked, one of each kind: "
              f"{sorted(clicked.values())} in {elapsed:.1f} s")
    assert clicked
    assert not problems, "links that JupyterLab does not draw or follow as written:\n" + "\n".join(problems)


def drawn_as_written(page, lab, doc: str) -> list[str]:
    """What the current document ``doc`` draws that differs from its markdown: its links (how many, and the
    address of each, as tests/test_lesson_links.py resolves it) and the names of its headings."""
    problems = []
    written, ids = markdown_links(lab["root"] / doc), heading_ids(lab["root"] / doc)
    headings = HEADINGS[Path(doc).suffix]
    all_drawn(page, LINKS, len(written))
    all_drawn(page, headings, len(ids))
    hrefs = page.locator(LINKS).evaluate_all("links => links.map(a => a.href)")
    if len(hrefs) != len(written):
        problems.append(f"{doc}: its markdown has {len(written)} links, JupyterLab drew {len(hrefs)}")
    for index, (href, target) in enumerate(zip(hrefs, written, strict=False), start=1):
        resolved = resolve(doc, target)
        as_drawn = local_target(href, lab["url"])
        expected = None if resolved.web else (resolved.path, resolved.fragment)
        if as_drawn != expected or (resolved.web and href != target):
            problems.append(f"{doc}: link {index} ({target}) is drawn as {href}, not as it resolves here "
                            f"({resolved})")
    named = page.locator(headings).evaluate_all("hs => hs.map(h => h.getAttribute('data-jupyter-id'))")
    if named != ids:
        problems.append(f"{doc}: JupyterLab names its headings {named}, tests/test_lesson_links.py reads {ids}")
    return problems


def click_one_of_each_kind(page, lab, doc: str, links: list[tuple[str, str]], clicked: dict) -> list[str]:
    """Click each of ``doc``'s links ((address drawn, target written)) of a kind no link has been clicked for yet
    (``clicked``: kind -> the link, ``link_kind``), and say which do not lead where they say."""
    problems = []
    for index, (href, written) in enumerate(links):
        kind = link_kind(doc, written)
        if kind in clicked:
            continue
        clicked[kind] = f"{doc}: {written}"
        back_at(page, doc, index, href)
        local = local_target(href, lab["url"])
        problem = follow_web(page, index, href) if local is None else follow_local(page, doc, index, *local)
        if problem:
            problems.append(f"{doc}: link {index + 1} ({written}, {', '.join(kind)}) {problem}")
    return problems
