"""Packaging: one list of packages in two files, the Makefile's one-command targets, CI, the console script."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parent.parent


def normalise(requirement: str) -> str:
    """The distribution name of a requirement or conda spec, normalised as in PEP 503."""
    name = re.split(r"[\s<>=!~;\[@]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def pyproject_requirements() -> dict[str, SpecifierSet]:
    """Runtime and every optional group of pyproject.toml: name -> version bounds."""
    project = pyproject()["project"]
    requirements = list(project["dependencies"])
    for group in project.get("optional-dependencies", {}).values():
        requirements += list(group)
    return bounds(requirements, "pyproject.toml")


def editable_requirement(line: str) -> str:
    """``-e ./agentlab-grade[heatmap]``: the workspace member it installs, as ``name==its version`` (what
    pyproject's lab
    extra asks for), read from that folder's pyproject.toml."""
    path = line.removeprefix("-e").strip().split("[", 1)[0]
    project = tomllib.loads((REPO / path / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return f"{project['name']}=={project['version']}"


def environment_requirements() -> dict[str, SpecifierSet]:
    """environment.yml's conda and pip entries (``-e .`` and python/pip themselves left out)."""
    env = yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))
    specs: list[str] = []
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            specs += [r if not r.startswith("-") else editable_requirement(r) for r in entry.get("pip", [])
                      if r.strip() != "-e ."]
        else:
            specs.append(entry)
    found = bounds(specs, "environment.yml")
    found.pop("python", None)
    found.pop("pip", None)
    return found


def bounds(specs: list[str], where: str) -> dict[str, SpecifierSet]:
    found: dict[str, SpecifierSet] = {}
    for spec in specs:
        try:
            requirement = Requirement(spec)
        except InvalidRequirement as exc:
            raise AssertionError(f"{where}: cannot read {spec!r}: {exc}") from None
        name = normalise(requirement.name)
        if name in found and found[name] != requirement.specifier:
            raise AssertionError(f"{where}: {name} listed twice with different bounds")
        found[name] = requirement.specifier
    return found


def test_environment_and_pyproject_name_the_same_packages():
    in_pyproject, in_environment = set(pyproject_requirements()), set(environment_requirements())
    assert in_pyproject == in_environment, (
        f"only in pyproject.toml: {sorted(in_pyproject - in_environment)}; "
        f"only in environment.yml: {sorted(in_environment - in_pyproject)}")


def test_environment_and_pyproject_give_the_same_bounds():
    in_pyproject, in_environment = pyproject_requirements(), environment_requirements()
    differ = {name: (str(in_pyproject[name]), str(in_environment[name]))
              for name in in_pyproject.keys() & in_environment.keys() if in_pyproject[name] != in_environment[name]}
    assert not differ, f"bounds differ (pyproject.toml, environment.yml): {differ}"
    unbounded = sorted(name for name, spec in in_pyproject.items() if not spec)
    assert not unbounded, f"no version range given for {unbounded}"


def test_the_comparison_sees_a_changed_bound(tmp_path, monkeypatch):
    """The comparison reads bounds, not only names: a widened bound in one file is reported."""
    text = (REPO / "environment.yml").read_text(encoding="utf-8").replace("pandas>=2.2,<4", "pandas>=2.2,<5")
    (tmp_path / "environment.yml").write_text(text, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (tmp_path / "agentlab-grade").mkdir()
    member = REPO / "agentlab-grade" / "pyproject.toml"
    (tmp_path / "agentlab-grade" / "pyproject.toml").write_text(member.read_text(encoding="utf-8"))
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    with pytest.raises(AssertionError, match="pandas"):
        test_environment_and_pyproject_give_the_same_bounds()


def test_required_packages_are_declared():
    project = pyproject()["project"]
    runtime = {normalise(r) for r in project["dependencies"]}
    lab = {normalise(r) for r in project["optional-dependencies"]["lab"]}
    test = {normalise(r) for r in project["optional-dependencies"]["test"]}
    assert {"anthropic", "httpx2", "pydantic", "pyyaml", "tornado", "psutil"} <= runtime
    assert {"pandas", "matplotlib", "ipywidgets", "jupyterlab"} <= lab and not lab & runtime
    assert {"pytest", "nbval", "hypothesis", "jsonschema"} <= test


def test_normalise():
    assert normalise("PyYAML>=6.0,<7") == "pyyaml"
    assert normalise("ruamel.yaml") == "ruamel-yaml"
    assert normalise("foo_bar[extra]>=1") == "foo-bar"
    assert normalise("python>=3.11") == "python"


def test_console_script_is_declared_and_installed():
    assert pyproject()["project"]["scripts"]["agentlab"] == "agentlab.cli:main"
    installed = entry_points(group="console_scripts", name="agentlab")
    assert installed, "the agentlab console script is not installed (pip install -e .)"
    from agentlab.cli import main

    assert next(iter(installed)).load() is main


@pytest.fixture
def fresh_checkout(tmp_path) -> Path:
    """The Makefile and the two pyproject.toml (the workbench's, agentlab-grade's) in a folder without a .venv, as
    on a fresh clone."""
    (tmp_path / "agentlab-grade").mkdir()
    for name in ("Makefile", "pyproject.toml", "agentlab-grade/pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    return tmp_path


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", ["lab", "test", "demo"])
def test_make_target_creates_the_venv_when_missing(fresh_checkout, target):
    dry = subprocess.run(["make", "-n", "-C", str(fresh_checkout), target], capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0, dry.stderr
    commands = dry.stdout.splitlines()
    venv = next((i for i, c in enumerate(commands) if re.search(r"-m venv \.venv\b", c)), None)
    install = next((i for i, c in enumerate(commands) if "pip install" in c and "-e" in c), None)
    assert venv is not None, f"make {target} does not create .venv on a fresh checkout:\n{dry.stdout}"
    assert install is not None and venv < install, dry.stdout
    # ... and then does the thing
    action = {"lab": "jupyter lab", "test": "pytest", "demo": "agentlab run"}[target]
    assert any(action in c for c in commands[install + 1:]), dry.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_runs_the_tour(fresh_checkout):
    dry = subprocess.run(["make", "-n", "-C", str(fresh_checkout), "demo"], capture_output=True, text=True,
                         timeout=60)
    assert re.search(r"agentlab run tour\b", dry.stdout), dry.stdout


def test_make_test_runs_the_tests_folder():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^test:.*\n((?:\t.*\n?)+)", makefile, re.MULTILINE)
    assert recipe, "no test target"
    assert re.search(r"pytest\b.*\btests\b", recipe.group(1))


def test_ci_calls_make_test():
    script = REPO / ".ci" / "run"
    assert script.exists()
    assert script.stat().st_mode & 0o111, ".ci/run is not executable"
    lines = [line.strip() for line in script.read_text(encoding="utf-8").splitlines()]
    commands = [line for line in lines if line and not line.startswith("#")]
    assert any(re.fullmatch(r"(exec\s+)?make test", line) for line in commands), commands


def test_ci_builds_and_checks_the_site():
    commands = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert "make site-test" in commands, commands
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^site-test:.*\n((?:\t.*\n?)+)", makefile, re.MULTILINE)
    assert recipe and re.search(r"pytest\b.*-m site\b", recipe.group(1)), "site-test does not run the site tests"


def test_agentlab_grade_is_a_workspace_member_installed_with_the_workbench():
    """agentlab-grade/ is a member of the uv workspace and takes the workbench from it; environment.yml and the Makefile
    install both editable; its heatmap extra's matplotlib is the lab extra's."""
    assert pyproject()["tool"]["uv"]["workspace"]["members"] == ["agentlab-grade"]
    grade = tomllib.loads((REPO / "agentlab-grade" / "pyproject.toml").read_text(encoding="utf-8"))
    assert grade["tool"]["uv"]["sources"] == {"agentlab-workbench": {"workspace": True}}
    assert grade["project"]["dependencies"] == [f"agentlab-workbench=={pyproject()['project']['version']}"]
    assert grade["project"]["version"] == pyproject()["project"]["version"]
    heatmap = bounds(grade["project"]["optional-dependencies"]["heatmap"], "agentlab-grade/pyproject.toml")
    assert heatmap == {"matplotlib": pyproject_requirements()["matplotlib"]}
    env = yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))
    pip = next(e["pip"] for e in env["dependencies"] if isinstance(e, dict))
    assert pip[:2] == ["-e .", "-e ./agentlab-grade[heatmap]"], pip
    assert "-e '.[lab,test,site]' -e './agentlab-grade[heatmap]'" in (REPO / "Makefile").read_text(encoding="utf-8")
