"""The links of every Chinese lesson and of the Chinese glossary (notebooks/zh/) in JupyterLab in a real browser,
drawn as written and one of each kind clicked, as tests/test_links_browser.py checks the English ones; a file of its
own so that it runs on another worker, in the same JupyterLab (tests/browser_lab.py). And the tabs a learner sees
when a Chinese document opens its English original: JupyterLab titles a tab with the file name, and the two titles
differ."""

from __future__ import annotations

from browser_lab import CHROMIUM, CHROMIUM_ARGS, page_url, require_browser
from test_links_browser import (  # noqa: F401  (lab: the fixture, the run's one lab)
    CURRENT,
    NO_KERNEL,
    check_links,
    documents,
    drawn,
    lab,
)

TABS = ".lm-DockPanel-tabBar .lm-TabBar-tab"


def test_every_link_of_every_chinese_lesson_opens_in_jupyterlab(lab, capsys):  # noqa: F811
    docs = [d for d in documents(lab["root"]) if d.startswith("zh/")]
    assert "zh/glossary.zh.md" in docs and len(docs) == 16, docs
    check_links(lab, capsys, docs, workspace="links-zh")


def tab_titles(page) -> list[str]:
    """The titles of the main area's tabs, as the tab bar draws them."""
    return page.locator(f"{TABS} .lm-TabBar-tabLabel").all_inner_texts()


def click_link(page, text: str, opens: str) -> None:
    """Click the link named ``text`` in the current document; wait until ``opens`` is the current tab, drawn."""
    page.locator(f"{CURRENT} .jp-RenderedMarkdown").get_by_role("link", name=text, exact=True).first.click()
    drawn(page, opens, timeout=30_000)


def test_a_chinese_document_and_its_english_original_open_in_tabs_of_different_titles(lab):  # noqa: F811
    """A learner opens a Chinese lesson (from its address, as JupyterLab opens a file of its type: a notebook), follows
    its link to the English original, then its link to the Chinese glossary and the glossary's link to the English
    one: four tabs, four titles, each the file's name."""
    sync_playwright = require_browser()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_init_script(f"window.addEventListener('DOMContentLoaded', {NO_KERNEL})")
            page = context.new_page()
            page.goto(page_url(lab, "tabs-zh", "zh/00_the_loop.zh.ipynb"))
            drawn(page, "zh/00_the_loop.zh.ipynb", timeout=60_000)
            assert page.locator(f"{CURRENT}.jp-NotebookPanel .jp-Notebook .jp-Cell").count() > 10
            click_link(page, "00_the_loop.ipynb", "00_the_loop.ipynb")
            assert sorted(tab_titles(page)) == ["00_the_loop.ipynb", "00_the_loop.zh.ipynb"], tab_titles(page)
            assert page.locator(f"{TABS}.jp-mod-current .lm-TabBar-tabLabel").inner_text() == "00_the_loop.ipynb"
            page.locator(TABS, has_text="00_the_loop.zh.ipynb").click()
            drawn(page, "zh/00_the_loop.zh.ipynb")
            click_link(page, "术语表", "zh/glossary.zh.md")
            click_link(page, "glossary.md", "glossary.md")
            titles = tab_titles(page)
        finally:
            browser.close()
    assert sorted(titles) == ["00_the_loop.ipynb", "00_the_loop.zh.ipynb", "glossary.md", "glossary.zh.md"], titles
