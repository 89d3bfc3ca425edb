"""`make site`: the lesson website builds, and its pages read well in Chromium.

Building the site takes a while, so these tests carry the ``site`` mark: ``make test`` leaves them out and
``make site-test`` runs them (``.ci/run`` calls both). Chromium is driven by Playwright as in the browser
test; when either is missing the test fails saying what to install.
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser_lab import CHROMIUM, CHROMIUM_ARGS
from browser_lab import require_browser as _require_browser

pytestmark = pytest.mark.site

REPO = Path(__file__).resolve().parent.parent
LESSONS = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
CLIENTS = sorted(f"{c.name}-{v.name}" for c in (REPO / "data" / "observed").iterdir() if c.is_dir()
                 for v in c.iterdir() if v.is_dir())


# Share of an image's pixels in colour (not white, grey or black). A plot of no model call has none: its axes,
# labels and grid are grey; a plot of a run draws its dots, lines or bars in colour.
BLANK = 0.0005


def coloured_share(png: bytes) -> float:
    import matplotlib.image as mpimg

    rgb = mpimg.imread(io.BytesIO(png), format="png")[..., :3]
    return float(((rgb.max(axis=2) - rgb.min(axis=2)) > 0.25).mean())


def repo_build_files() -> set[Path]:
    return set((REPO / "build").rglob("*")) if (REPO / "build").exists() else set()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "html"
    before = repo_build_files()
    done = subprocess.run([sys.executable, str(REPO / "website" / "build.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    # with --out elsewhere, nothing of the build is left in the repository
    assert repo_build_files() <= before, sorted(map(str, repo_build_files() - before))[:5]
    return out


def stepper_picture(site: Path, lesson: str) -> str:
    page = (site / "notebooks" / f"{lesson}.html").read_text(encoding="utf-8")
    figure = re.search(r'<figure class="agentlab-snapshot".*?</figure>', page, re.DOTALL)
    assert figure, f"{lesson}: no static picture of its widget"
    return figure.group(0)


def figures_in(lesson: str) -> int:
    """Pictures a lesson shows: its PNG outputs and one per widget output (drawn as a static picture)."""
    notebook = json.loads((REPO / "notebooks" / f"{lesson}.ipynb").read_text(encoding="utf-8"))
    outputs = [o for c in notebook["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    return sum(1 for o in outputs if {"image/png", "application/vnd.jupyter.widget-view+json"} & set(o.get("data", {})))


def test_the_site_has_every_page(site):
    assert (site / "index.html").exists()
    for lesson in LESSONS:
        assert (site / "notebooks" / f"{lesson}.html").exists(), lesson
    for doc in (REPO / "docs").glob("*.md"):
        assert (site / "docs" / f"{doc.stem}.html").exists(), doc.name
    for client in CLIENTS:
        assert (site / "observed" / f"{client}.html").exists(), client


def test_no_widget_is_left_to_a_kernel(site):
    """Widget outputs are shown as a static picture, never as a widget that needs a kernel."""
    for lesson in LESSONS:
        page = (site / "notebooks" / f"{lesson}.html").read_text(encoding="utf-8")
        assert "application/vnd.jupyter.widget-view+json" not in page, lesson
        assert "agentlab-snapshot" in page, f"{lesson}: no static picture of its widget"


def test_the_blank_check_sees_a_stepper_before_its_first_step():
    from agentlab.ui.widgets import Stepper

    for plot in ("overview", "dashboard"):
        assert coloured_share(Stepper("tour", plot=plot).plot_image.value) <= BLANK, plot


def test_every_stepper_picture_shows_a_run_under_way(site):
    """Each lesson's picture of its stepper is taken after the Steps its text asks for (or Run to end): the
    transcript has model calls and the plot draws them."""
    for lesson in LESSONS:
        picture = stepper_picture(site, lesson)
        assert picture.count('class="agentlab-call') >= 1, f"{lesson}: the stepper picture has an empty transcript"
        assert "Nothing yet" not in picture, lesson
        assert re.search(r"after (<b>Run to end</b>|\d+ press(es)? of <b>Step</b>)", picture), lesson
        png = re.search(r'<img [^>]*src="data:image/png;base64,([^"]+)"', picture)
        assert png, f"{lesson}: the stepper picture has no plot"
        share = coloured_share(base64.b64decode(png.group(1)))
        assert share > BLANK, f"{lesson}: the stepper's plot is blank ({share:.4%} of its pixels in colour)"


def test_every_local_link_of_the_front_page_resolves(site):
    page = (site / "index.html").read_text(encoding="utf-8")
    links = [h.split("#")[0].split("?")[0] for h in re.findall(r'href="([^"]+)"', page)
             if "://" not in h and not h.startswith(("#", "mailto:"))]
    assert any(link.endswith("prices.yaml") for link in links), "the README's link to data/prices.yaml is gone"
    missing = [link for link in links if link and not (site / link).exists()]
    assert not missing, f"links of the front page to nothing: {missing[:5]}"


def test_the_front_page_is_the_readme(site):
    page = (site / "index.html").read_text(encoding="utf-8")
    title = re.search(r"^# (.+)$", (REPO / "README.md").read_text(encoding="utf-8"), re.MULTILINE).group(1)
    assert title.split()[0] in page
    for lesson in LESSONS:
        assert f"notebooks/{lesson}.html" in page, f"the front page has no link to {lesson}"


def test_pages_in_chromium(site):
    """Every page has text; on a lesson page every figure loads, the stepper's picture included."""
    sync_playwright = _require_browser()
    pages = [site / "index.html", *sorted((site / "notebooks").glob("*.html")),
             *sorted((site / "docs").glob("*.html")), *sorted((site / "observed").glob("*.html"))]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            failed: list[str] = []
            page.on("requestfailed", lambda r: failed.append(r.url))
            for path in pages:
                page.goto(path.as_uri())
                text = page.locator("article").inner_text()
                assert len(text.strip()) > 200, f"{path.relative_to(site)} is (nearly) empty: {text[:80]!r}"
            page.goto((site / "notebooks" / "02_max_tokens.html").as_uri())
            page.wait_for_load_state("load")
            images = page.locator("article img")
            assert images.count() >= figures_in("02_max_tokens") >= 2, images.count()
            sizes = page.evaluate("() => [...document.querySelectorAll('article img')]"
                                  ".map(i => [i.getAttribute('src').slice(0, 40), i.complete, i.naturalWidth])")
            broken = [s for s in sizes if not s[1] or s[2] == 0]
            assert not broken, f"figures that did not load: {broken}"
            snapshot = page.locator("figure.agentlab-snapshot")
            assert snapshot.count() == 1
            assert snapshot.locator("img.agentlab-plot").evaluate("i => i.naturalWidth") > 100
            assert "Step" in snapshot.inner_text()
            assert snapshot.locator(".agentlab-call").count() >= 1, "the stepper picture has an empty transcript"
            page.screenshot(path=str(site.parent / "lesson02.png"), full_page=False)
            assert not failed, f"requests that failed: {failed[:5]}"
        finally:
            browser.close()



def _page_links(page: Path) -> list[str]:
    from html.parser import HTMLParser

    class Links(HTMLParser):
        def __init__(self):
            super().__init__()
            self.found: list[str] = []

        def handle_starttag(self, tag, attrs):
            href = dict(attrs).get("href")
            if tag == "a" and href:
                self.found.append(href)

    parser = Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.found


def test_every_link_of_every_page_resolves(site):
    """Every page's links within the site lead to a file, and a #fragment to an element of that id on it (the
    lessons' links to the glossary's headings included); a link out of the site is https."""
    from urllib.parse import unquote, urlsplit

    ids: dict[Path, set[str]] = {}
    broken, checked = [], 0
    for page in sorted(site.rglob("*.html")):
        for href in _page_links(page):
            parts = urlsplit(href)
            if parts.scheme or href.startswith("mailto:"):
                if parts.scheme != "https":
                    broken.append(f"{page.relative_to(site)}: {href} (not https)")
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {href} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = set(re.findall(r'\bid="([^"]+)"', target.read_text(encoding="utf-8")))
                if unquote(parts.fragment) not in ids[target]:
                    broken.append(f"{page.relative_to(site)}: {href} (no #{parts.fragment} on that page)")
    glossary_links = sum(h.startswith("glossary.html#") for h in _page_links(site / "notebooks" / "00_the_loop.html"))
    assert glossary_links >= 10, f"lesson 00 links the glossary's headings {glossary_links} times"
    assert checked > 1000, checked
    assert not broken, f"{len(broken)} links that lead nowhere:\n" + "\n".join(broken[:20])


# --- the site in two languages ------------------------------------------------------------------------------

def _zh_lessons():
    import importlib.util

    spec = importlib.util.spec_from_file_location("zh_lessons", REPO / "translations" / "zh_lessons.py")
    module = sys.modules.setdefault("zh_lessons", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


def _html_lang(page: Path) -> str:
    return re.search(r'<html[^>]*\blang="([^"]+)"', page.read_text(encoding="utf-8")).group(1)


def _switch(page: Path) -> Path:
    """Where the page's language switch leads: exactly one switch, to a file that exists."""
    targets = re.findall(r'class="agentlab-language-link" href="([^"]+)"', page.read_text(encoding="utf-8"))
    assert len(targets) == 1, f"{page}: {len(targets)} language switches"
    target = (page.parent / targets[0]).resolve()
    assert target.is_file(), f"{page}: its language switch leads to {targets[0]}, which is not a page"
    return target


def test_the_site_is_built_in_english_and_in_chinese(site):
    """zh/ is the Chinese site: every lesson in Chinese (its title, its widget picture's caption), lang zh-CN,
    and a front page listing every lesson; the English pages say lang en. The Chinese pages have the English pages'
    names (zh/notebooks/00_the_loop.html), not those of the files in notebooks/zh/ (00_the_loop.zh.ipynb): their
    addresses stay as they were before those files were renamed."""
    zh = _zh_lessons()
    assert sorted(p.name for p in (site / "zh" / "notebooks").glob("*.html")) == sorted(
        p.name for p in (site / "notebooks").glob("*.html") if p.stem in {*LESSONS, "glossary"})
    front = (site / "zh" / "index.html").read_text(encoding="utf-8")
    assert _html_lang(site / "zh" / "index.html") == "zh-CN" and _html_lang(site / "index.html") == "en"
    for lesson in LESSONS:
        page = site / "zh" / "notebooks" / f"{lesson}.html"
        assert _html_lang(page) == "zh-CN", lesson
        assert _html_lang(site / "notebooks" / f"{lesson}.html") == "en", lesson
        title = zh.title(zh.read_notebook(REPO / "notebooks" / "zh" / f"{lesson}.zh.ipynb"))
        assert re.search(r"[\u4e00-\u9fff]", title), f"{lesson}: the Chinese lesson's title {title!r} has no Chinese"
        text = re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))
        assert html_unescape(re.sub(r"[`*]", "", title)) in html_unescape(text), f"{lesson}: {title!r} not on its page"
        caption = re.search(r"<figcaption[^>]*>(.*?)</figcaption>", stepper_picture(site / "zh", lesson), re.DOTALL)
        assert caption and "绘制时没有 kernel" in caption.group(1), f"{lesson}: {caption and caption.group(1)!r}"
        assert f'href="notebooks/{lesson}.html"' in front, f"the Chinese front page has no link to {lesson}"


def html_unescape(text: str) -> str:
    import html

    return " ".join(html.unescape(text).split())


def test_every_page_links_the_same_page_in_the_other_language(site):
    """Each page of either build has one language switch: to the same page in the other language, whose switch
    leads back, or, where the other language has no such page (docs, observed clients), to its front page."""
    english = [site / "index.html", *(site / folder / f"{p.stem}.html" for folder in ("notebooks", "docs", "observed")
                                      for p in sorted((site / folder).glob("*.html")))]
    chinese = [site / "zh" / "index.html", *sorted((site / "zh" / "notebooks").glob("*.html"))]
    assert len(chinese) == len(LESSONS) + 2, [p.name for p in chinese]     # the lessons, the glossary, the front page
    for page in english + chinese:
        ours, theirs = (site, site / "zh") if page in english else (site / "zh", site)
        counterpart = theirs / page.relative_to(ours)
        target = _switch(page)
        if counterpart.exists():
            assert target == counterpart, f"{page.relative_to(site)} switches to {target}"
            assert _switch(target) == page, f"{target.relative_to(site)} does not switch back to {page.name}"
        else:
            assert target == theirs / "index.html", f"{page.relative_to(site)} switches to {target}"


def test_the_language_switch_in_chromium(site):
    """Clicking the switch on an English lesson opens the Chinese one, drawn, and its switch brings the reader
    back."""
    sync_playwright = _require_browser()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            english = (site / "notebooks" / "02_max_tokens.html").as_uri()
            page.goto(english)
            page.locator("a.agentlab-language-link").click()
            page.wait_for_load_state("load")
            assert page.url == (site / "zh" / "notebooks" / "02_max_tokens.html").as_uri(), page.url
            assert page.locator("html").get_attribute("lang") == "zh-CN"
            assert "放弃之前先恢复" in page.locator("article h1").inner_text()
            assert page.locator("article img").count() >= figures_in("02_max_tokens")
            page.locator("a.agentlab-language-link").click()
            page.wait_for_load_state("load")
            assert page.url == english, page.url
        finally:
            browser.close()
