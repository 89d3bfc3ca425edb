"""The plain install (no ``lab`` extra): ``import agentlab`` and every CLI command work without pandas,
matplotlib or ipywidgets, and never import them; what needs them says which extra to install.

The notebook stack is installed in the test venv, so its absence is made here: a subprocess puts a finder first
on ``sys.meta_path`` that refuses those packages (as ``ModuleNotFoundError``, what a missing package raises),
then imports agentlab and runs each command's ``main``, and reports the exit codes, what the features of the
notebook stack said, and which of those packages got into ``sys.modules`` (none may). tests/test_wheel.py
installs the wheel without the extra into a fresh venv and grades there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCKED = ("pandas", "matplotlib", "ipywidgets", "IPython", "numpy", "jupyterlab")

SCRIPT = """
import importlib.abc, json, sys

BLOCKED = {blocked!r}


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Block())
tmp = {tmp!r}
py = sys.executable
out = {{"codes": {{}}, "said": {{}}}}
import agentlab
from agentlab.backend.serve import ScenarioServer
from agentlab.cli import main


def interrupted(self):
    raise KeyboardInterrupt  # serve: started, then stopped as by Ctrl-C


ScenarioServer.wait = interrupted
commands = {{
    "scenarios": ["scenarios"],
    "run": ["run", "tour"],
    "run --json": ["run", "tour", "--json"],
    "serve": ["serve", "end_turn"],
    "serve --mode grade": ["serve", "end_turn", "--mode", "grade"],
    "observe --list": ["observe", "--list"],
    "observe": ["observe", "agentlab", "end_turn", "--out", tmp + "/observed"],
    "grade": ["grade", "--command", py + " -m agentlab run --tools demo --prompt", "end_turn", "--json",
              "--junit", tmp + "/j.xml", "--save", tmp + "/s.json", "--keep", tmp + "/kept",
              "--write-baseline", tmp + "/b.json"],
    "grade --baseline": ["grade", "--command", py + " -m agentlab run --tools demo --prompt", "end_turn",
                         "--baseline", tmp + "/b.json"],
    "grade --observed": ["grade", "--observed", "agentlab"],
    "grade --load": ["grade", "--load", tmp + "/s.json"],
    "grade --heatmap": ["grade", "--load", tmp + "/s.json", "--heatmap", tmp + "/h.png"],
    "replay --plot": ["replay", tmp + "/s.jsonl", "--plot", tmp + "/p.png"],
}}
for name, args in commands.items():
    out["codes"][name] = main(args)
for what, call in {{
    "to_frame": lambda: agentlab.Trace().to_frame(),
    "plots": lambda: __import__("agentlab.ui.plots"),
    "widgets": lambda: __import__("agentlab.ui.widgets"),
    "table": lambda: __import__("agentlab.grading.command", fromlist=["x"]).observed_reports(
        clients=["agentlab"])[0].table(),
    "comparison": lambda: __import__("agentlab.observatory.compare", fromlist=["x"]).comparison_table(),
}}.items():
    try:
        call()
        out["said"][what] = "nothing"
    except ImportError as exc:
        out["said"][what] = f"{{type(exc).__name__}}: {{exc}}"
out["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
open(tmp + "/out.json", "w").write(json.dumps(out))
"""


def test_no_command_imports_the_notebook_stack_and_features_name_the_extra(tmp_path):
    script = SCRIPT.format(blocked=BLOCKED, tmp=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["loaded"] == [], out["loaded"]
    assert out["codes"] == {"scenarios": 0, "run": 0, "run --json": 0, "serve": 0, "serve --mode grade": 0,
                            "observe --list": 0, "observe": 0, "grade": 0, "grade --baseline": 0,
                            "grade --observed": 0, "grade --load": 0, "grade --heatmap": 2,
                            "replay --plot": 2}, done.stderr[-3000:]
    assert ("agentlab: --heatmap: the grade heatmap (agentlab_grade.heatmap) needs matplotlib, which comes with the "
            "'heatmap' extra: pip install 'agentlab-grade[heatmap]'") in done.stderr
    assert "agentlab: --plot: agentlab.ui.plots (the plots) needs matplotlib" in done.stderr
    said = out["said"]
    assert said["to_frame"] == ("MissingExtra: Trace.to_frame() needs pandas, which comes with the 'lab' extra: "
                                "pip install 'agentlab-workbench[lab]' (in the checkout: make lab)")
    assert said["plots"].startswith("MissingExtra: agentlab.ui.plots (the plots) needs matplotlib")
    assert said["widgets"].startswith("MissingExtra: agentlab.ui.") and "'lab' extra" in said["widgets"]
    assert said["table"].startswith("MissingExtra: Report.table() needs pandas")
    assert said["comparison"].startswith("MissingExtra: comparison_table() needs pandas")
    assert (tmp_path / "j.xml").exists() and (tmp_path / "kept" / "end_turn" / "exchanges.jsonl").exists()


def test_a_missing_module_that_is_not_the_extras_is_not_blamed_on_it():
    from agentlab.core.extras import missing_extra

    other = ModuleNotFoundError("No module named 'yaml'", name="yaml")
    assert missing_extra(other, "x") is other
    lab = missing_extra(ModuleNotFoundError("No module named 'pandas.core'", name="pandas.core"), "Report.table()")
    assert str(lab).startswith("Report.table() needs pandas") and isinstance(lab, ImportError)


def test_the_plain_install_leaves_the_notebook_stack_to_the_lab_extra():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {r.split(">")[0].split("<")[0].split("=")[0].strip().lower() for r in project["dependencies"]}
    lab = {r.split(">")[0].split("<")[0].strip().lower() for r in project["optional-dependencies"]["lab"]}
    assert not names & {"pandas", "matplotlib", "ipywidgets", "jupyterlab"}, names
    assert {"pandas", "matplotlib", "ipywidgets", "jupyterlab"} <= lab
    assert project["name"] == "agentlab-workbench"
    # the pytest plugin is agentlab-grade's (agentlab-grade/pyproject.toml): installing the workbench loads nothing
    # in pytest
    assert "pytest11" not in project.get("entry-points", {}), project.get("entry-points")
    grade = tomllib.loads((REPO / "agentlab-grade" / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert grade["entry-points"]["pytest11"] == {"agentlab": "agentlab_grade.pytest_plugin"}
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "pip install --quiet -e '.[lab,test,site]' -e './agentlab-grade[heatmap]'" in makefile


def top_imports(path: Path) -> list[str]:
    """The import lines of a module at its top level, read as text: importing it here would not tell (agentlab is
    loaded in this process already)."""
    source = path.read_text(encoding="utf-8")
    return [line for line in source.splitlines() if line.startswith(("import ", "from "))]


def test_the_plugin_module_imports_no_agentlab_at_the_top():
    package = REPO / "agentlab-grade" / "agentlab_grade"
    top = top_imports(package / "pytest_plugin.py")
    assert top == ["from __future__ import annotations", "from typing import Any", "import pytest"], top
    # importing the plugin imports its package first: the re-exports there are loaded on first use
    top = top_imports(package / "__init__.py")
    assert top == ["from __future__ import annotations", "import importlib",
                   "from typing import TYPE_CHECKING, Any"], top
