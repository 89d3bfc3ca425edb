"""The built wheel, installed in a fresh venv outside the checkout, has its data and runs.

Building and installing: the wheel is built from this checkout without build isolation (hatchling is in the test
extra; its PEP 517 hook is called as pip would call it), then installed with ``--no-deps --no-index`` into a new
venv in a temporary folder. That venv reuses the dependencies already installed in the venv running the tests,
through a ``.pth`` file naming its site-packages: downloading pandas, matplotlib, JupyterLab and the rest again
would take minutes and need the network, and would test pip rather than this wheel. Only the path line is shared:
the editable install's own ``.pth`` there is not read, so ``import agentlab`` finds the installed wheel, which the
tests check. ``pip check`` then confirms that the wheel's declared requirements are met by what the venv sees.

The plain install is checked apart, in a second venv (``slim``): the wheel and its declared requirements only
(no ``lab`` extra), installed by pip from the package index (pip's cache makes it some ten seconds), with the
agentlab-grade wheel (agentlab-grade/, released together: the pytest plugin, the agentlab-grade command) and pytest, to
run the plugin there as a framework's CI would. Both wheels go into both venvs (the lessons draw the grade heatmap).
"""

from __future__ import annotations

import json
import os
import tomllib
import re
import shlex
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from forked_agent import command, preloaded
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"


def data_files() -> set[str]:
    """Every file under data/ as a path relative to it (caches left out)."""
    return {p.relative_to(DATA).as_posix() for p in DATA.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


# The PEP 517 hook that pip calls to build a wheel without build isolation, called directly: the build backend
# named in the project's pyproject.toml, imported from the venv running the tests (hatchling is in the test extra),
# in a process of its own started in the project's folder. pip would only add its own start (some 1.5 s of CPU).
BUILD_WHEEL = ("import importlib, sys, tomllib\n"
               "backend = tomllib.load(open('pyproject.toml', 'rb'))['build-system']['build-backend']\n"
               "print(importlib.import_module(backend).build_wheel(sys.argv[1]))")


def built_wheel(project: Path, out: Path, name: str) -> Path:
    run([sys.executable, "-c", BUILD_WHEEL, str(out)], cwd=project, env=os.environ.copy())
    wheels = list(out.glob(f"{name}-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return built_wheel(REPO, tmp_path_factory.mktemp("dist"), "agentlab_workbench")


@pytest.fixture(scope="module")
def grade_wheel(tmp_path_factory) -> Path:
    """agentlab-grade's wheel, built from agentlab-grade/ as the workbench's is."""
    return built_wheel(REPO / "agentlab-grade", tmp_path_factory.mktemp("dist-grade"), "agentlab_grade")


def wheel_metadata(path: Path) -> tuple[set[str], str, str]:
    """A wheel's file names, its METADATA and its entry_points.txt ("" when it has none)."""
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
        points = f"{info}/entry_points.txt"
        return names, z.read(f"{info}/METADATA").decode(), z.read(points).decode() if points in names else ""


def metadata_field(metadata: str, field: str) -> list[str]:
    return [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith(f"{field}: ")]


def test_the_workbench_wheel_registers_no_pytest_plugin(wheel):
    names, _, points = wheel_metadata(wheel)
    assert "[pytest11]" not in points and "[console_scripts]\nagentlab = agentlab.cli:main" in points, points
    assert not [n for n in names if "pytest_agentlab" in n or n.startswith("agentlab_grade/")]


def test_the_grade_wheel_has_the_plugin_the_command_and_the_heatmap(grade_wheel):
    names, metadata, points = wheel_metadata(grade_wheel)
    assert "[pytest11]\nagentlab = agentlab_grade.pytest_plugin" in points, points
    assert "agentlab-grade = agentlab_grade.cli:main" in points, points
    assert {"agentlab_grade/__init__.py", "agentlab_grade/pytest_plugin.py", "agentlab_grade/heatmap.py",
            "agentlab_grade/cli.py", "agentlab_grade/py.typed"} <= names, sorted(names)
    assert not [n for n in names if n.startswith("agentlab/")]
    assert "heatmap" in metadata_field(metadata, "Provides-Extra")


def test_the_two_distributions_are_released_together(wheel, grade_wheel):
    """The same version, and agentlab-grade requires exactly that version of the workbench (the heatmap extra's
    matplotlib range is the lab extra's)."""
    (workbench_version,) = metadata_field(wheel_metadata(wheel)[1], "Version")
    grade_metadata = wheel_metadata(grade_wheel)[1]
    assert metadata_field(grade_metadata, "Version") == [workbench_version]
    requires = [Requirement(r) for r in metadata_field(grade_metadata, "Requires-Dist")]
    assert [str(r) for r in requires if r.marker is None] == [f"agentlab-workbench=={workbench_version}"]
    lab = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    (matplotlib,) = [r for r in requires if r.name == "matplotlib"]
    assert str(matplotlib.marker) == 'extra == "heatmap"' and Requirement(
        next(r for r in lab["lab"] if r.startswith("matplotlib"))).specifier == matplotlib.specifier


CHECKOUT_VENV = Path(sysconfig.get_paths()["purelib"]).parents[2]  # the venv the tests run in


def outside_the_checkout(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without what points a process of another venv into the checkout: PYTHONPATH, VIRTUAL_ENV,
    PYTHONPYCACHEPREFIX (``make test`` sets it to .pytest_cache/pycache in the checkout, where every interpreter
    then writes and reads the .pyc files it compiles, the standard library's too), and any variable naming a file or
    folder of the checkout outside its venv; PATH keeps its other entries."""
    def inside(part: str) -> bool:
        if not os.path.isabs(part):
            return False
        path = Path(os.path.realpath(part))
        return path.is_relative_to(REPO) and not path.is_relative_to(CHECKOUT_VENV)

    env = {}
    for name, value in environ.items():
        if name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONPYCACHEPREFIX"):
            continue
        parts = value.split(os.pathsep)
        if name == "PATH":
            env[name] = os.pathsep.join(p for p in parts if not inside(p))
        elif not any(inside(p) for p in parts):
            env[name] = value
    return env


@pytest.fixture(scope="module")
def fresh(tmp_path_factory, wheel, grade_wheel) -> dict:
    """A venv in a temporary folder with the wheel installed; returns its bin folder, a cwd and an env."""
    root = tmp_path_factory.mktemp("fresh")
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root, env=os.environ.copy())
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    cwd=root, env=os.environ.copy()).stdout.strip())
    (site / "_reuse_installed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = outside_the_checkout(os.environ)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
         "--ignore-installed", str(wheel), str(grade_wheel)], cwd=root, env=env)
    work = root / "elsewhere"
    work.mkdir()
    return {"bin": venv / "bin", "site": site, "cwd": work, "env": env}


def test_the_wheel_carries_every_data_file(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    packaged = {n.removeprefix("agentlab/data/") for n in names if n.startswith("agentlab/data/")}
    assert packaged == data_files(), (f"missing from the wheel: {sorted(data_files() - packaged)[:5]}; "
                                      f"extra: {sorted(packaged - data_files())[:5]}")
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def package_files(folder: Path) -> set[str]:
    """Every file of the package ``folder`` as a wheel names it (``agentlab/core/paths.py``), caches left out."""
    return {p.relative_to(folder.parent).as_posix() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_wheels_carry_every_file_of_their_packages(wheel, grade_wheel):
    """Every module and resource of agentlab/ and agentlab-grade/agentlab_grade/ as the checkout has them: what the
    lessons import, and what agentlab reads from its own folder, is in the install as in the checkout."""
    for built, folder in ((wheel, REPO / "agentlab"), (grade_wheel, REPO / "agentlab-grade" / "agentlab_grade")):
        names = {n for n in wheel_metadata(built)[0]
                 if n.startswith(f"{folder.name}/") and not n.startswith("agentlab/data/")}
        expected = package_files(folder)
        assert names == expected, (f"missing from {built.name}: {sorted(expected - names)[:5]}; "
                                   f"extra: {sorted(names - expected)[:5]}")


def test_the_installed_wheel_meets_its_requirements(fresh):
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(fresh["bin"] / "python"), "check"],
                           cwd=fresh["cwd"], env=fresh["env"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


def test_installed_agentlab_lists_every_scenario(fresh):
    out = run([str(fresh["bin"] / "agentlab"), "scenarios"], cwd=fresh["cwd"], env=fresh["env"]).stdout
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    expected = {p.stem for p in (DATA / "scenarios").iterdir() if p.suffix in (".yaml", ".yml", ".json")}
    assert listed == expected, f"not listed: {sorted(expected - listed)}; unexpected: {sorted(listed - expected)}"


def test_installed_agentlab_runs_the_tour(fresh):
    done = run([str(fresh["bin"] / "agentlab"), "run", "tour"], cwd=fresh["cwd"], env=fresh["env"])
    assert re.search(r"^success: \d+ turn", done.stdout, re.MULTILINE), done.stdout


def lesson_imports(notebooks: list[Path] | None = None) -> list[str]:
    """Every `import` / `from ... import` line of the lessons' code cells (of ``notebooks``, all by default) that
    names agentlab."""
    lines: list[str] = []
    for notebook in notebooks or sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            for match in re.finditer(r"^(?:from agentlab[\w.]* import \((?s:.*?)\)|from agentlab[\w.]* import .*|"
                                     r"import agentlab.*)$", source, re.MULTILINE):
                lines.append(match.group(0))
    return sorted(set(lines))


def test_lesson_imports_are_found():
    assert len(lesson_imports()) >= 12


@pytest.fixture(scope="module")
def served(fresh) -> dict:
    """Every agentlab import of the lessons, run in one process of the fresh venv, and what it then serves: how
    every scenario ends, the claims, a record, a hook's answer, and which imported names are paths (PurePath)."""
    imports = lesson_imports()
    script = "\n".join(imports) + "\n" + textwrap.dedent(f"""
        import agentlab, json
        from pathlib import Path, PurePath
        from agentlab.core import paths
        from agentlab.lab import run_scenario
        from agentlab.backend.scenario import scenario_names
        from agentlab.observatory.compare import load_claims
        from agentlab.observatory.replay import load_record
        from agentlab.core.hooks import Hooks
        from agentlab.exercises.lesson09 import REPO
        site = Path({str(fresh["site"])!r}).resolve()
        assert Path(agentlab.__file__).resolve().is_relative_to(site), agentlab.__file__
        assert paths.data_dir().resolve().is_relative_to(site), paths.data_dir()
        ends = {{name: run_scenario(name).subtype for name in scenario_names()}}
        hooks = Hooks(REPO / "data/hooks/settings.example.json", cwd=str(REPO))
        denied = hooks.run("PreToolUse", {{"tool_name": "get_weather", "tool_input": {{"city": "Oslo"}}}})
        imported = {sorted(imported_names(imports))!r}
        print(json.dumps({{"ends": ends, "claims": sorted(load_claims()["sources"]),
                          "record": load_record("tour")["scenario"],
                          "hook": [denied.permission, denied.errors],
                          "paths": sorted(n for n in imported if isinstance(globals().get(n), PurePath))}}))
    """)
    out = run([str(fresh["bin"] / "python"), "-c", script], cwd=fresh["cwd"], env=fresh["env"]).stdout
    return json.loads(out.strip().splitlines()[-1])


def imported_names(lines: list[str]) -> set[str]:
    """The names ``from agentlab... import a, b`` lines bring in (``import agentlab...`` lines bring none)."""
    names = set()
    for line in lines:
        if line.startswith("from "):
            names |= {n.split(" as ")[-1].strip() for n in line.split(" import ", 1)[1].strip("()\n ").split(",")}
    return names - {""}


def test_imported_names_are_read_from_the_import_lines():
    assert imported_names(["from agentlab.x import (\n    a,\n    b as c,\n)", "from agentlab import d",
                           "import agentlab.y"]) == {"a", "c", "d"}


def test_installed_agentlab_serves_the_lessons(served):
    """The lessons' imports work, every scenario runs, and the data the lessons read comes from the wheel."""
    scenarios = {p.stem for p in (DATA / "scenarios").glob("*.yaml")}
    assert set(served["ends"]) == scenarios
    assert served["ends"]["tour"] == "success"
    assert served["claims"] and served["record"] == "tour"
    assert served["hook"] == ["deny", []], served["hook"]


def test_the_lab_extra_brings_the_grade_heatmap(wheel):
    """Lesson 12 draws the grade heatmap (agentlab_grade): the lab extra installs agentlab-grade with its heatmap."""
    _, metadata, _ = wheel_metadata(wheel)
    lab = [r for r in map(Requirement, metadata_field(metadata, "Requires-Dist"))
           if r.marker is not None and r.marker.evaluate({"extra": "lab"})]
    grade = [r for r in lab if r.name == "agentlab-grade"]
    assert grade and "heatmap" in grade[0].extras, lab


# Run first in each lesson's kernel: every file the kernel opens or lists from then on is noted; and last: they are
# printed, as real paths.
AUDIT = """import os as _os, sys as _sys
_opened = set()
def _note(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
        _opened.add((_os.getcwd(), _os.fsdecode(args[0])))
_sys.addaudithook(_note)"""
OPENED = "print('OPENED', __import__('json').dumps(sorted({_os.path.realpath(_os.path.join(*p)) for p in _opened})))"

LESSON_RUNNER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import nbformat
    from nbclient import NotebookClient
    audit, opened = json.loads(sys.argv[1])
    for name in sys.argv[3:]:
        path = Path(sys.argv[2]) / name
        notebook = nbformat.read(path, as_version=4)
        notebook.cells = [nbformat.v4.new_code_cell(audit), *notebook.cells, nbformat.v4.new_code_cell(opened)]
        start = time.monotonic()
        try:
            NotebookClient(notebook, timeout=300, kernel_name="python3",
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        except Exception as exc:  # a cell that raised: the lesson does not run from this install
            print(f"FAILED {path.name}: {type(exc).__name__}: {str(exc)[-600:]}")
            continue
        print(f"RAN {path.name} {time.monotonic() - start:.1f} s", notebook.cells[-1].outputs[0]["text"].strip())
""")


def lessons_importing(names: set[str]) -> list[str]:
    """The lessons whose code imports one of ``names`` from agentlab."""
    return sorted(notebook.name for notebook in (REPO / "notebooks").glob("*.ipynb")
                  if names & imported_names(lesson_imports([notebook])))


def test_the_lessons_that_name_agentlabs_files_run_from_the_installed_wheels_outside_the_checkout(fresh, served,
                                                                                                  tmp_path):
    """What running the lessons from the installed wheels proves beyond nbval's run of them in the checkout: that
    what they import and open is found in the install, not in the checkout. Every import of theirs runs from the
    install above (``served``, where agentlab's data folder is checked to be the installed one), and the wheels
    carry every file of the two packages (test_the_wheels_carry_every_file_of_their_packages), which is where
    agentlab's functions read what they read. A lesson's own code reaches a file only through a path agentlab hands
    it (``served["paths"]``: REPO, the data's folder, in lesson 09, which runs the example hooks from it;
    SESSIONS_DIR in lesson 14). The lessons that import one run here top to bottom (a copy, in a folder of its own
    with the glossary), each in a kernel of the fresh venv, offline, and every file the kernel opens or lists is
    noted: none is in the checkout, but for its venv, whose packages the fresh venv reuses. The other lessons run
    in the checkout only (nbval)."""
    chosen = lessons_importing(set(served["paths"]))
    assert "09_hooks.ipynb" in chosen and len(chosen) < 5, (served["paths"], chosen)
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    for name in [*chosen, "glossary.md"]:
        (lessons / name).write_bytes((REPO / "notebooks" / name).read_bytes())
    env = {k: v for k, v in fresh["env"].items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    done = subprocess.run([str(fresh["bin"] / "python"), "-c", LESSON_RUNNER, json.dumps([AUDIT, OPENED]),
                           str(lessons), *chosen], cwd=fresh["cwd"], env=env, capture_output=True, text=True,
                          timeout=900)
    ran = [line for line in done.stdout.splitlines() if line.startswith("RAN ")]
    assert done.returncode == 0 and len(ran) == len(chosen), done.stdout[-4000:] + done.stderr[-2000:]
    for line in ran:
        opened = [Path(p) for p in json.loads(line.split(" OPENED ", 1)[1])]
        assert opened, line
        checkout = [p for p in opened if p.is_relative_to(REPO) and not p.is_relative_to(CHECKOUT_VENV)]
        assert not checkout, f"{line.split()[1]} opened files of the checkout: {checkout[:10]}"


# -- the plain install, alone in a venv -------------------------------------------------------------------------------

NOTEBOOK_STACK = ("pandas", "matplotlib", "ipywidgets", "jupyterlab", "IPython")
# the scenarios the plain install's plugin grades: the two the naive loop fails and one it passes (each scenario is
# an agent process that imports the SDK; agentlab's loop is re-recorded on every scenario by tests/test_observe.py and
# its records graded by tests/test_grade_rules.py)
CONTRAST = ["pause_turn", "max_tokens_give_up", "end_turn"]
NAIVE_LOOP = REPO / "examples" / "naive_loop.py"


@pytest.fixture(scope="module")
def slim(tmp_path_factory, wheel, grade_wheel) -> dict:
    """A venv with the two wheels installed with their requirements and no extra, and pytest: nothing else."""
    root = tmp_path_factory.mktemp("slim")
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root, env=os.environ.copy())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "250"  # pytest's short summary lines are not cut
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", str(wheel),
         str(grade_wheel), "pytest>=8,<10"], cwd=root, env=env, timeout=600)
    work = root / "elsewhere"
    work.mkdir()
    return {"bin": venv / "bin", "cwd": work, "env": env}


def test_the_plain_install_has_no_notebook_stack(slim):
    script = f"import importlib.util; print([m for m in {NOTEBOOK_STACK!r} if importlib.util.find_spec(m)])"
    out = run([str(slim["bin"] / "python"), "-c", script], cwd=slim["cwd"], env=slim["env"]).stdout
    assert out.strip() == "[]", out


def test_the_plain_install_says_which_extra_the_heatmap_needs(slim):
    done = subprocess.run([str(slim["bin"] / "agentlab"), "grade", "--observed", "agentlab", "--heatmap", "h.png"],
                          cwd=slim["cwd"], env=slim["env"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("needs matplotlib, which comes with the 'heatmap' extra: pip install 'agentlab-grade[heatmap]'"
            in done.stderr)
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("grade", [["agentlab", "grade"], ["agentlab-grade"]])
def test_the_plain_install_grades_from_the_command_line(slim, grade):
    done = subprocess.run([str(slim["bin"] / grade[0]), *grade[1:], "--command", "agentlab run --tools demo --prompt",
                           "end_turn", "--json", "--junit", "grade.xml"], cwd=slim["cwd"], env=slim["env"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass" and report["agentlab_version"] == "0.1.0"
    assert (slim["cwd"] / "grade.xml").read_text().startswith('<?xml version="1.0" encoding="utf-8"?>')


@pytest.fixture(scope="module")
def slim_agents(slim) -> dict:
    """The plain install's agents for the plugin's grades (the naive loop, its own ``agentlab run``): forks of a server
    run by the plain install's Python with the SDK and agentlab's loop imported once (tests/forked_agent.py), some 3 s
    of CPU saved per graded scenario. Its command-line grades above run ``agentlab run`` started afresh."""
    python = str(slim["bin"] / "python")
    with preloaded(("anthropic", "agentlab.lab", "agentlab.backend.scenario"), python=python, env=slim["env"]) as at:
        yield {"naive": shlex.join(command(at, NAIVE_LOOP, python=python)),
               "agentlab": shlex.join(command(at, slim["bin"] / "agentlab", "run", "--tools", "demo", "--web-search",
                                              "--prompt", python=python))}


def _plugin(slim: dict, command: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(slim["bin"] / "python"), "-m", "pytest", "-p", "no:cacheprovider", "--agentlab-grade",
                           command, "--agentlab-scenarios", ",".join(CONTRAST), "--junitxml", "grade.xml"],
                          cwd=slim["cwd"], env=slim["env"], capture_output=True, text=True, timeout=600)


def test_the_plugin_of_the_plain_install_fails_the_naive_loop_with_the_rules_named(slim, slim_agents):
    done = _plugin(slim, slim_agents["naive"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED agentlab-grade::pause_turn - pause_turn: pause_turn_resume failed" in done.stdout
    assert "FAILED agentlab-grade::max_tokens_give_up - max_tokens_give_up: bounded_max_tokens_recovery failed" \
        in done.stdout
    assert "agentlab-grade::end_turn" not in done.stdout.split("short test summary info")[1]  # it passes


def test_the_plugin_of_the_plain_install_passes_agentlabs_own_cli(slim, slim_agents):
    # the same scenarios: where the naive loop fails two, agentlab's own loop passes all three
    done = _plugin(slim, slim_agents["agentlab"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(CONTRAST)} passed" in done.stdout
