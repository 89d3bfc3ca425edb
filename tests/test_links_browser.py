"""Every link of every lesson, clicked in JupyterLab in a real browser: it must open a real page or file.

JupyterLab's root is notebooks/ (``make lab``), so a link that climbs out of it (``../docs/…``) or names a file
that is not there opens nothing. The test serves a copy of notebooks/ (the English lessons, the Chinese ones in
zh/, the glossaries beside them) from a JupyterLab with no kernel to start (no notebook needs to run for its
links to be followed), opens each document in one page, and clicks each link in turn. The English documents are
clicked here, the Chinese ones by tests/test_links_browser_zh.py in a lab of its own (the two files run on two
workers, each half taking about as long as the other):

- a link to a lesson or the glossary must make a tab of that name the current one and draw it (cells, or the
  rendered markdown), and a link's ``#fragment`` must name a heading in it, as JupyterLab names headings;
- a link to the web must open a new browser page at exactly that address (the machine is offline, so the
  address is answered by the test rather than fetched; what is checked is the address a learner reaches).

The links are counted from the documents' markdown as well (markdown-it, the parser MyST uses), so a link
that JupyterLab does not draw as one is noticed rather than skipped. The site's links: tests/test_site.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from test_browser import CHROMIUM, CHROMIUM_ARGS, _free_port, _require_browser

pytestmark = pytest.mark.browser

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# Answers a kernel-choice dialog with its default, "No Kernel" (the server offers no kernel), whenever one opens.
NO_KERNEL = """() => new MutationObserver(() => {
  for (const dialog of document.querySelectorAll('.jp-Dialog')) {
    if (dialog.textContent.includes('Select kernel for')) dialog.querySelector('.jp-mod-accept')?.click();
  }
}).observe(document.body, {childList: true, subtree: true})"""
LINKS = ".jp-MainAreaWidget:not(.lm-mod-hidden) .jp-RenderedMarkdown a[href]:not(.jp-InternalAnchorLink)"
CURRENT = ".jp-MainAreaWidget:not(.lm-mod-hidden)"


def documents(root: Path) -> list[str]:
    """The lessons (English, then zh/) and the markdown pages beside them, relative to the lab's root."""
    found = (sorted(root.glob("*.ipynb")) + sorted(root.glob("*.md")) + sorted(root.glob("*/*.ipynb"))
             + sorted(root.glob("*/*.md")))
    return [p.relative_to(root).as_posix() for p in found if ".ipynb_checkpoints" not in p.parts]


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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab on 127.0.0.1 over a copy of notebooks/, with private dirs and no kernel offered."""
    jupyter_lab = Path(sys.executable).with_name("jupyter-lab")
    if not jupyter_lab.exists():
        pytest.fail(f"jupyter-lab is not installed next to {sys.executable}: pip install -e '.[test]'")
    base = tmp_path_factory.mktemp("links")
    root = base / "root"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
                 "JUPYTERLAB_WORKSPACES_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
        (base / name.lower()).mkdir()
        env[name] = str(base / name.lower())
    settings = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab"
    for plugin, values in {"apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
                           # every cell in the page, so every markdown cell is drawn and its links can be found
                           "notebook-extension/tracker": {"windowingMode": "none"}}.items():
        (settings / plugin).parent.mkdir(parents=True, exist_ok=True)
        (settings / f"{plugin}.jupyterlab-settings").write_text(json.dumps(values))
    port, token = _free_port(), "agentlab-links-test"
    log = (base / "jupyter.log").open("w")
    server = subprocess.Popen(
        [str(jupyter_lab), "--no-browser", "--allow-root", f"--port={port}", "--ServerApp.port_retries=0",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=None", "--LabApp.extension_manager=readonly", "--LabApp.expose_app_in_browser=True",
         "--KernelSpecManager.ensure_native_kernel=False", "--KernelSpecManager.allowed_kernelspecs=none"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(server, f"{url}/api/status?token={token}", base / "jupyter.log")
        yield {"url": url, "token": token, "root": root}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _wait_for(server: subprocess.Popen, status_url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter-lab exited with {server.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(status_url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    pytest.fail("jupyter-lab did not answer /api/status within 60 s")


def local_target(href: str, base_url: str) -> tuple[str, str] | None:
    """(path under the root, fragment) of a link JupyterLab drew for a file of the lab; None for the web.
    JupyterLab draws a link to a file as its download address, ``/files/PATH``, and opens the file in the lab
    when it is clicked."""
    parts = urllib.parse.urlsplit(href)
    if f"{parts.scheme}://{parts.netloc}" != base_url:
        return None
    path = urllib.parse.unquote(parts.path)
    for prefix in ("/files/", "/lab/tree/"):        # a file; the same page (a .md file's own #heading)
        if path.startswith(prefix):
            return path.removeprefix(prefix), urllib.parse.unquote(parts.fragment)
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
            drawn(page, path)
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
    check_links(lab, capsys, [d for d in documents(lab["root"]) if "/" not in d])


def check_links(lab, capsys, docs: list[str]) -> None:
    """Open each of ``docs`` in the lab, click each of its links and say which do not lead where they say."""
    sync_playwright = _require_browser()
    started = time.monotonic()
    problems: list[str] = []
    clicked = web = 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("https://**/*", lambda route: route.fulfill(status=200, body="the web, offline"))
            context.add_init_script(f"window.addEventListener('DOMContentLoaded', {NO_KERNEL})")
            page = context.new_page()
            page.goto(f"{lab['url']}/lab?reset&token={lab['token']}")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started", timeout=60_000)
            for doc in docs:
                open_document(page, doc)
                expected = markdown_links(lab["root"] / doc)
                all_drawn(page, len(expected))
                hrefs = page.locator(LINKS).evaluate_all("links => links.map(a => a.href)")
                if len(hrefs) != len(expected):
                    problems.append(f"{doc}: its markdown has {len(expected)} links, JupyterLab drew {len(hrefs)}")
                for index, (href, written) in enumerate(zip(hrefs, expected, strict=False)):
                    back_at(page, doc, index, href)
                    local = local_target(href, lab["url"])
                    if local is None:
                        problem = follow_web(page, index, href)
                        web += 1
                    else:
                        problem = follow_local(page, lab, doc, index, *local)
                    clicked += 1
                    if problem:
                        problems.append(f"{doc}: link {index + 1} ({written}) {problem}")
        finally:
            browser.close()
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\n  {clicked} links clicked in {len(docs)} documents ({web} to the web) "
              f"in {elapsed:.1f} s")
    assert clicked > 0
    assert not problems, "links that do not work in JupyterLab:\n" + "\n".join(problems)
