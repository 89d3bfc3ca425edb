"""The package layout as the package docstring states it: layers by role, imports pointing down only, no
import cycles, no private name used across modules, and the core free of the notebook stack.

The layers and the forbidden imports are import-linter contracts in pyproject.toml (checked here with
import-linter's own checker); the cycles and private names are read from the import graph and the code.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "agentlab"


def test_import_linter_contracts_hold():
    """Layers (core < backend < lab < observatory < ui < exercises < cli) and a core without the notebook UI."""
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_no_import_cycles():
    graph = grimp.build_graph("agentlab", include_external_packages=False, cache_dir=None)
    modules = sorted(m for m in graph.modules if m != "agentlab")
    edges = {m: {t for t in graph.find_modules_directly_imported_by(m) if t != "agentlab"} for m in modules}
    # a package's __init__ importing its own modules is not a cycle between modules
    for m in modules:
        edges[m] = {t for t in edges[m] if not t.startswith(m + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in modules:
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _private_uses(path: Path) -> list[str]:
    """``from agentlab.x import _name`` and ``module._name`` on an imported agentlab module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found: list[str] = []
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("agentlab"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{here}: from {base} import {alias.name}")
                else:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("agentlab"):
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{here}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_private_names_cross_modules():
    found = [use for path in sorted(PACKAGE.rglob("*.py")) for use in _private_uses(path)]
    assert not found, "private names used outside their module:\n" + "\n".join(found)


@pytest.mark.parametrize("subpackage", ["core", "backend", "observatory", "ui"])
def test_every_module_is_in_its_package_map(subpackage):
    """The docstring of each subpackage names each of its modules (the module map a newcomer reads)."""
    package = PACKAGE / subpackage
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    listed = {line.split()[0] for line in doc.splitlines() if line.strip() and line[0].isalpha()}
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    assert modules <= listed, f"agentlab.{subpackage} docstring does not list {sorted(modules - listed)}"


def test_the_package_docstring_maps_every_subpackage():
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text())) or ""
    for name in ("core/", "backend/", "lab", "observatory/", "ui/", "exercises/", "cli"):
        assert any(line.startswith(name) for line in doc.splitlines()), name


def _readme_layout() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1]
    return section.split("```", 2)[1]


def test_the_readme_layout_matches_the_tree():
    """The README's layout names every subpackage and top-level module of agentlab, and each module it names
    exists; each subpackage's own docstring is its map, naming every module in it (so the README stays short)."""
    import ast
    import re

    layout = _readme_layout()
    named_dirs = set(re.findall(r"^  (\w+)/", layout, flags=re.M))
    package_lines = layout.split("\nagentlab/\n", 1)[1]
    package_lines = package_lines[:re.search(r"^\S", package_lines, flags=re.M).start()]   # agentlab/'s lines
    named_modules = set(re.findall(r"\b(\w+)\.py\b", package_lines))
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert named_dirs == subpackages, f"README layout names {sorted(named_dirs)}, the tree has {sorted(subpackages)}"
    top = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert top <= named_modules, f"README layout does not name {sorted(top - named_modules)}"
    every = top | {p.stem for sub in subpackages for p in (PACKAGE / sub).glob("*.py")}
    assert named_modules <= every, f"README layout names modules that do not exist: {sorted(named_modules - every)}"
    for sub in sorted(subpackages - {"exercises"}):   # exercises/: lessonNN.py, one per lesson, and its helpers
        doc = ast.get_docstring(ast.parse((PACKAGE / sub / "__init__.py").read_text(encoding="utf-8"))) or ""
        listed = set(re.findall(r"^([a-z_]+)\s", doc, flags=re.M))   # a map's line: a module, then what it holds
        modules = {p.stem for p in (PACKAGE / sub).glob("*.py") if p.stem != "__init__"}
        assert modules <= listed, f"agentlab/{sub}/__init__.py's docstring does not list {sorted(modules - listed)}"
        assert listed <= modules, f"agentlab/{sub}/__init__.py lists {sorted(listed - modules)}, not in the folder"
    for folder in re.findall(r"^([\w.]+/(?:[\w.]+/?)?)", layout, flags=re.M):
        assert (REPO / folder).exists(), f"README layout names {folder}, which does not exist"
    for top_file in re.findall(r"^([\w-]+\.\w+)\s", layout, flags=re.M):
        assert (REPO / top_file).is_file(), f"README layout names {top_file}, which does not exist"
