"""Build the lesson website: the executed lessons, the README as the front page, docs/, observed clients.

    .venv/bin/python website/build.py [--out build/site]      (``make site``)

Sources are laid out in ``build/site-src`` with the repository's own folder names, so the README's links
to ``notebooks/…`` and ``docs/…`` work unchanged, then Sphinx (MyST-NB, furo theme) writes static HTML.
The lessons are shown with their committed outputs (nothing is executed, except as said next). A widget
output needs a kernel, so each one is replaced by a static picture of the widget at that point: the cell's
code is run again on its own (the widget cells construct their widget and show it) and the widget's panes,
controls and plot are written out as HTML (``agentlab.widgets.static_html``). Each recorded client in
``data/observed`` gets a page saying what it did on every scenario.
"""

from __future__ import annotations

import argparse
import ast
import html
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from agentlab.compare import describe
from agentlab.observe import load_records
from agentlab.paths import observed_dir
from agentlab.replay import client_label, ending
from agentlab.widgets import static_html

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
SNAPSHOT_NOTE = ("A picture of the widget at this point of the lesson, drawn without a kernel. Open the "
                 "notebook in JupyterLab (<code>make lab</code>) to click through it.")


class SiteError(Exception):
    pass


def widget_from_cell(source: str, where: str):
    """Run a cell's code on its own and return the value of its last expression (the widget it shows)."""
    tree = ast.parse(source)
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        raise SiteError(f"{where}: the cell that shows a widget does not end with an expression")
    namespace: dict = {}
    exec(compile(ast.Module(tree.body[:-1], type_ignores=[]), where, "exec"), namespace)  # noqa: S102
    return eval(compile(ast.Expression(tree.body[-1].value), where, "eval"), namespace)  # noqa: S307


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
            shown = widget_from_cell(cell.source, where)
            view = getattr(shown, "view", shown)
            picture = static_html(view)
            if not picture:
                raise SiteError(f"{where}: the widget drew nothing")
            data.pop(WIDGET_MIME)
            data["text/html"] = (f'<figure class="agentlab-snapshot" style="margin:0">{picture}'
                                 f'<figcaption style="font-size:12px;color:#666">{SNAPSHOT_NOTE}</figcaption>'
                                 "</figure>")
            count += 1
    notebook.metadata.pop("widgets", None)
    return count


def lessons(src: Path) -> list[str]:
    (src / "notebooks").mkdir(parents=True)
    names = []
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        snapshot_widgets(notebook, path.name)
        nbformat.write(notebook, src / "notebooks" / path.name)
        names.append(f"notebooks/{path.stem}")
    return names


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


def toctree(caption: str, entries: list[str]) -> str:
    return "\n```{toctree}\n:hidden:\n:caption: " + caption + "\n\n" + "\n".join(entries) + "\n```\n"


def build(out: Path) -> Path:
    src = REPO / "build" / "site-src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    shutil.copy(HERE / "conf.py", src / "conf.py")
    entries = {"Lessons": lessons(src), "Docs": docs(src), "Observed clients": observed_pages(src)}
    front = (REPO / "README.md").read_text(encoding="utf-8")
    (src / "index.md").write_text(front + "\n" + "".join(toctree(k, v) for k, v in entries.items()),
                                  encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "auto", str(src), str(out)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SiteError(f"sphinx-build failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    if done.stderr.strip():
        print(done.stderr.strip(), file=sys.stderr)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "build" / "site"), help="output folder (default build/site)")
    args = parser.parse_args()
    try:
        out = build(Path(args.out))
    except SiteError as exc:
        print(f"make site: {exc}", file=sys.stderr)
        return 1
    print(f"site written to {out}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
