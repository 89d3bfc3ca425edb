"""Build the lesson website: the executed lessons, the README as the front page, docs/, observed clients.

    .venv/bin/python website/build.py [--out build/site]      (``make site``)

Sources are laid out in a temporary folder with the repository's own folder names, so the README's links
to ``notebooks/…`` and ``docs/…`` work unchanged, then Sphinx (MyST-NB, furo theme) writes static HTML.
The lessons are shown with their committed outputs (nothing is executed, except as said next). A widget
output needs a kernel, so each one is replaced by a static picture of the widget at that point: the cell's
code is run again on its own (or after the cells before it, when it needs their names) and the widget's panes,
controls and plot are written out as HTML (``agentlab.ui.widgets.static_html``). Each recorded client in
``data/observed`` gets a page saying what it did on every scenario.

The site is built twice, in English at the root and in Chinese in ``zh/`` (the lessons from translations/zh_lessons.py,
the widgets' pictures taken once, for both), and every page links its counterpart in the other language
(website/languages.py).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
from myst_parser.slugs import github_slugify

from agentlab.core.paths import observed_dir
from agentlab.observatory.compare import describe
from agentlab.observatory.observe import load_records
from agentlab.observatory.replay import client_label, ending
from agentlab.ui.widgets import static_html

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "translations"))
import languages  # noqa: E402 - website/, beside this file
import zh_lessons  # noqa: E402 - translations/, which writes notebooks/zh

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
SNAPSHOT_NOTE = ("A picture of the widget {point}, drawn without a kernel. Open the notebook in JupyterLab "
                 "(<code>make lab</code>) to click through it yourself.")
# Where each lesson's picture of its stepper is taken, as the lesson's "Step it" text suggests: after that
# many presses of Step, or, for a lesson not named here, after Run to end (the whole run, every pane filled).
STEPS_BEFORE_PICTURE = {"01_content_not_label.ipynb": 1}   # "after the first Step, the highlighted row is 2"


class SiteError(Exception):
    pass


def _run_cell(source: str, where: str, namespace: dict, *, value: bool = False):
    """Run one cell's code in ``namespace``; with ``value``, return its last expression's value."""
    tree = ast.parse(source)
    last = tree.body[-1] if value and tree.body and isinstance(tree.body[-1], ast.Expr) else None
    body = tree.body[:-1] if last is not None else tree.body
    exec(compile(ast.Module(body, type_ignores=[]), where, "exec"), namespace)  # noqa: S102
    if value:
        if last is None:
            raise SiteError(f"{where}: the cell that shows a widget does not end with an expression")
        return eval(compile(ast.Expression(last.value), where, "eval"), namespace)  # noqa: S307
    return None


def widget_from_cell(cells: list, index: int, where: str):
    """The widget a cell shows, as it was then: the cell's code run on its own, or, when it needs names
    from earlier cells, the notebook's code cells up to it run in order in one namespace."""
    try:
        return _run_cell(cells[index].source, where, {}, value=True)
    except NameError:
        pass
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):   # what those cells print is already in the page
        return _run_cells(cells, index, where, namespace)


def _run_cells(cells: list, index: int, where: str, namespace: dict):
    for earlier, cell in enumerate(cells[:index]):
        if cell.cell_type == "code" and cell.source.strip():
            try:
                _run_cell(cell.source, f"{where} (running cell {earlier} first)", namespace)
            except Exception as exc:  # noqa: BLE001 - named and raised as a build error
                raise SiteError(f"{where}: cell {earlier} failed while re-running the notebook up to the "
                                f"widget: {type(exc).__name__}: {exc}") from exc
    return _run_cell(cells[index].source, where, namespace, value=True)


def snapshot_widgets(notebook: nbformat.NotebookNode, name: str) -> int:
    """Replace every widget output by a static HTML picture of the widget; return how many."""
    count = 0
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_MIME not in data:
                continue
            where = f"{name}, cell {index}"
            shown = widget_from_cell(notebook.cells, index, where)
            point = advance(shown, name, where)
            view = getattr(shown, "view", shown)
            picture = static_html(view)
            if not picture:
                raise SiteError(f"{where}: the widget drew nothing")
            data.pop(WIDGET_MIME)
            note = SNAPSHOT_NOTE.format(point=point)
            data["text/html"] = (f'<figure class="agentlab-snapshot" style="margin:0">{picture}'
                                 f'<figcaption style="font-size:12px;color:#666">{note}</figcaption>'
                                 "</figure>")
            count += 1
    notebook.metadata.pop("widgets", None)
    return count


def advance(widget, name: str, where: str) -> str:
    """Press the stepper's buttons up to the point its picture is taken (``STEPS_BEFORE_PICTURE``); say
    which point that is. A widget without Step and Run buttons is drawn as it is."""
    if not hasattr(widget, "step_button") or not hasattr(widget, "run_button"):
        return "as the cell shows it"
    steps = STEPS_BEFORE_PICTURE.get(name)
    if steps is None:
        widget.run_button.click()
        point = "after <b>Run to end</b>"
    else:
        for _ in range(steps):
            widget.step_button.click()
        point = f"after {steps} press{'es' if steps > 1 else ''} of <b>Step</b>"
    if getattr(widget, "call_count", 1) == 0:
        raise SiteError(f"{where}: the stepper shows no model call {point.replace('<b>', '').replace('</b>', '')}")
    return point


# A markdown link's target: the part in ``](...)``.
LINK_TARGET = re.compile(r"(?<=\]\()(?P<target>[^)\s]+)(?=\))")


def site_target(target: str) -> str:
    """A lesson's link as the site needs it. JupyterLab names a heading by its text with spaces turned into
    ``-`` (``#Context-window``), and the lessons link headings that way, so the links work in the lab;
    MyST names the same heading by its GitHub slug (``#context-window``). A fragment of a link within the
    site (to a page beside it, or to the same page) is turned into the slug; any other target is kept."""
    path, hash_, fragment = target.partition("#")
    if not hash_ or "://" in path or not (path == "" or path.endswith((".md", ".ipynb"))):
        return target
    return f"{path}#{github_slugify(fragment)}"


def site_links(markdown: str) -> str:
    return LINK_TARGET.sub(lambda m: site_target(m["target"]), markdown)


def lessons(src: Path) -> list[str]:
    (src / "notebooks").mkdir(parents=True)
    names = []
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        snapshot_widgets(notebook, path.name)
        for cell in notebook.cells:
            if cell.cell_type == "markdown":
                cell.source = site_links(cell.source)
        nbformat.write(notebook, src / "notebooks" / path.name)
        names.append(f"notebooks/{path.stem}")
    return names


def lesson_docs(src: Path) -> list[str]:
    """The pages beside the lessons in notebooks/ (the glossary), where JupyterLab finds them too."""
    pages = []
    for path in sorted((REPO / "notebooks").glob("*.md")):
        (src / "notebooks" / path.name).write_text(site_links(path.read_text(encoding="utf-8")), encoding="utf-8")
        pages.append(f"notebooks/{path.stem}")
    return pages


def docs(src: Path) -> list[str]:
    shutil.copytree(REPO / "docs", src / "docs", ignore=shutil.ignore_patterns("_build"))
    return [f"docs/{p.stem}" for p in sorted((REPO / "docs").glob("*.md"))]


def observed_pages(src: Path) -> list[str]:
    """One page per recorded client and version: what it did on each scenario."""
    folder = src / "observed"
    folder.mkdir()
    pages = []
    for (client, version), by_scenario in sorted(load_records(observed_dir()).items()):
        records = list(by_scenario.values())
        if not records:
            continue
        label = client_label(records[0])
        rows = "".join(
            f"<tr><td><code>{html.escape(r['scenario'])}</code></td>"
            f"<td>{html.escape(first_sentence(r.get('description') or ''))}</td>"
            f"<td>{len(r.get('requests') or [])}</td>"
            f"<td>{html.escape(describe(r))}</td><td>{html.escape(ending(r))}</td></tr>"
            for r in sorted(records, key=lambda r: r["scenario"]))
        notes = "".join(f"- {note}\n" for note in records[0].get("notes") or [])
        stem = f"{client}-{version}"
        (folder / f"{stem}.md").write_text(
            f"# Observed: {label}\n\n"
            f"What {label} did when `agentlab serve` served it each scenario, read from the records in "
            f"`data/observed/{client}/{version}/` ({len(records)} scenarios). "
            "Lesson 11 replays them step by step.\n\n" + (f"{notes}\n" if notes else "") +
            '<table class="agentlab-observed"><thead><tr><th>scenario</th><th>what it serves</th>'
            "<th>requests</th><th>what the client did</th><th>how it ended</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>\n", encoding="utf-8")
        pages.append(f"observed/{stem}")
    return pages


def first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + dot.strip()


def linked_files(markdown: str, src: Path) -> None:
    """Copy the repository's files that a page links to and that are not pages themselves (``data/prices.yaml``)
    into the sources at the same path, so the link is a download from the site rather than a broken one."""
    for target in re.findall(r"\]\(([^)#\s]+)\)", markdown):
        if "://" in target or target.endswith((".md", ".ipynb")):
            continue
        path = REPO / target
        if not path.is_file():
            raise SiteError(f"README.md links to {target}, which is not a file in the repository")
        (src / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, src / target)


def toctree(caption: str, entries: list[str]) -> str:
    return "\n```{toctree}\n:hidden:\n:caption: " + caption + "\n\n" + "\n".join(entries) + "\n```\n"


def build(out: Path) -> Path:
    """The English site in ``out``, the Chinese one in ``out/zh``, each page linking the other language's."""
    out = out.resolve()
    with tempfile.TemporaryDirectory(prefix="agentlab-site-src-") as folder:
        src, zh_src = Path(folder) / "en", Path(folder) / "zh"
        src.mkdir()
        english = _sources(src)
        chinese = zh_lessons.site_sources(src, zh_src, site_links)
        shutil.rmtree(out, ignore_errors=True)
        _sphinx(src, out, "en", "zh", chinese)
        _sphinx(zh_src, out / "zh", "zh", "en", english)
        return out


SWITCH = {"en": ("Also in ", "the Chinese lessons"), "zh": ("本页也有：", "英文网站首页")}


def _sphinx(src: Path, out: Path, language: str, other: str, other_pages: list[str]) -> None:
    for name in ("conf.py", "languages.py"):
        shutil.copy(HERE / name, src / name)
    label, front = SWITCH[language]
    (src / languages.SETTINGS).write_text(json.dumps({
        "language": language, "other": other, "other_pages": other_pages, "switch_label": label,
        "other_front": front}, ensure_ascii=False), encoding="utf-8")
    options = {"en": ["-D", "language=en"], "zh": ["-D", "language=zh_CN", "-D", f"html_title={zh_lessons.SITE_TITLE}"]}
    done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-j", "auto",
                           *options[language], str(src), str(out)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SiteError(f"sphinx-build ({language}) failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    if done.stderr.strip():
        print(done.stderr.strip(), file=sys.stderr)


def _sources(src: Path) -> list[str]:
    """The English site's sources in ``src``; returns its page names."""
    entries = {"Lessons": lessons(src), "Docs": lesson_docs(src) + docs(src), "Observed clients": observed_pages(src)}
    front = (REPO / "README.md").read_text(encoding="utf-8")
    linked_files(front, src)
    (src / "index.md").write_text(front + "\n" + "".join(toctree(k, v) for k, v in entries.items()),
                                  encoding="utf-8")
    return ["index", *(page for pages in entries.values() for page in pages)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "build" / "site"), help="output folder (default build/site)")
    args = parser.parse_args()
    try:
        out = build(Path(args.out))
    except (SiteError, zh_lessons.CatalogError) as exc:
        print(f"make site: {exc}", file=sys.stderr)
        return 1
    print(f"site written to {out}/index.html (in Chinese: {out}/zh/index.html)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
