"""The composite action (.github/actions/agentlab-grade/action.yml) and the workflow a maintainer copies
(docs/examples/agentlab-grade.yml), read and run: every flag they give ``agentlab grade`` is one of its parser's,
the workflow's inputs are the action's, and the action's grading step (its ``run`` script with the ``env`` it gets
from its inputs, in bash as a runner would) grades examples/naive_loop.py on two scenarios, with and without a
baseline. The install step is left out (it needs the network; tests/test_wheel.py installs both wheels): the
venv it would make is this one. Also agentlab_grade's re-exports, which are the workbench's own objects."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import yaml

import agentlab_grade
from agentlab.cli import build_parser
from forked_agent import command, preloaded

REPO = Path(__file__).resolve().parent.parent
ACTION = REPO / ".github" / "actions" / "agentlab-grade" / "action.yml"
EXAMPLE = REPO / "docs" / "examples" / "agentlab-grade.yml"
SCENARIOS = ["pause_turn", "max_tokens_give_up"]  # the naive loop fails both


@pytest.fixture(scope="module")
def naive() -> str:
    """examples/naive_loop.py with the prompt as its argument, its agent forked from a server that imported the SDK
    once (tests/forked_agent.py; tests/test_grade_ci.py grades it started afresh)."""
    with preloaded() as address:
        yield shlex.join(command(address, REPO / "examples" / "naive_loop.py")) + " {prompt}"


def action() -> dict:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


def step(name: str) -> dict:
    return next(s for s in action()["runs"]["steps"] if s.get("name") == name)


def grade_flags() -> set[str]:
    """Every option string of ``agentlab grade``'s parser."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices["grade"]._option_string_actions)


def unknown_flags(script: str) -> list[str]:
    """The ``--flags`` in the ``agentlab grade`` commands of a script that its parser does not have."""
    given = re.findall(r"(?<![\w-])--[a-z][a-z-]*", script)
    return sorted(set(given) - grade_flags())


def test_the_action_is_composite_with_the_documented_inputs():
    found = action()
    assert found["runs"]["using"] == "composite"
    assert set(found["inputs"]) == {"command", "scenarios", "baseline", "policy", "python-version", "junit", "report",
                                    "keep", "install"}
    assert [n for n, i in found["inputs"].items() if i.get("required")] == ["command"]
    assert all(s.get("shell") == "bash" for s in found["runs"]["steps"] if "run" in s)
    # the inputs reach the scripts through env only (never pasted into the script as text)
    assert not [s["name"] for s in found["runs"]["steps"] if "${{" in s.get("run", "")]


def test_every_flag_the_action_and_the_example_pass_is_grades():
    scripts = [step("Grade the agent loop")["run"]]
    assert '"$AGENTLAB_GRADE_BIN/agentlab" grade ' in scripts[0]
    comments = [line for line in EXAMPLE.read_text(encoding="utf-8").splitlines() if "agentlab grade" in line]
    assert scripts and comments
    for script in [*scripts, *comments]:
        assert unknown_flags(script) == [], script
    assert {"--command", "--junit", "--baseline", "--save", "--keep", "--policy"} <= set(
        re.findall(r"--[a-z-]+", scripts[0]))


def test_a_flag_grade_does_not_have_is_found():
    assert unknown_flags('agentlab grade --command "$A" --junit j.xml --baseline-file b.json') == ["--baseline-file"]


def test_the_example_workflow_uses_the_action_with_its_inputs():
    workflow = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    steps = workflow["jobs"]["grade"]["steps"]
    (uses,) = [s for s in steps if s.get("uses", "").split("@")[0].endswith("/.github/actions/agentlab-grade")]
    assert set(uses["with"]) <= set(action()["inputs"]) and "command" in uses["with"]
    assert "{prompt}" in uses["with"]["command"]


def resolve(env: dict, inputs: dict, temp: Path) -> dict[str, str]:
    """A step's env as the runner gives it: each ``${{ ... }}`` replaced by its value."""
    values = {f"inputs.{name}": str(inputs.get(name, spec.get("default", "")))
              for name, spec in action()["inputs"].items()}
    values |= {"runner.temp": str(temp), "github.action_path": str(ACTION.parent),
               "steps.python.outputs.python-path": ""}

    def value(match: re.Match) -> str:
        return values[match.group(1)]

    return {k: re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", value, str(v)) for k, v in env.items()}


def run_grade_step(work: Path, **inputs: str) -> subprocess.CompletedProcess:
    """The action's grading step in bash, agentlab from this venv where the install step puts its venv."""
    temp = work / "runner-temp"
    (temp / "agentlab-grade").mkdir(parents=True, exist_ok=True)
    link = temp / "agentlab-grade" / "bin"
    if not link.exists():
        link.symlink_to(Path(sys.executable).parent)
    grading = step("Grade the agent loop")
    env = {**os.environ, **resolve(grading["env"], inputs, temp), "COLUMNS": "250"}
    return subprocess.run(["bash", "-e", "-c", grading["run"]], cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def work(tmp_path_factory, naive) -> Path:
    """A folder with the baseline of the naive loop's failures, written as the example's comment says."""
    work = tmp_path_factory.mktemp("action")
    done = subprocess.run([str(Path(sys.executable).parent / "agentlab"), "grade", *SCENARIOS, "--command", naive,
                           "--write-baseline", "agentlab-baseline.json"], cwd=work, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    return work


def test_the_action_passes_on_the_baseline_with_every_report_written(work, naive):
    done = run_grade_step(work, command=naive, scenarios=" ".join(SCENARIOS), baseline="agentlab-baseline.json")
    assert done.returncode == 0, done.stdout + done.stderr
    cases = list(ET.parse(work / "agentlab-grade-junit.xml").getroot().iter("testcase"))
    assert cases and not [c for c in cases if c.find("failure") is not None]
    report = json.loads((work / "agentlab-grade-report.json").read_text())
    jsonschema.validate(report, json.loads(agentlab_grade.SCHEMA_PATH.read_text()))
    assert report["verdict"] == "pass" and len(report["baseline"]["accepted"]) == 2
    assert sorted(p.name for p in (work / "agentlab-grade-runs").iterdir()) == sorted(SCENARIOS)


def test_the_action_fails_the_naive_loop_without_a_baseline(work, naive):
    done = run_grade_step(work, command=naive, scenarios=" ".join(SCENARIOS), junit="no-baseline.xml",
                          report="no-baseline.json", keep="")
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [c.get("name") for c in ET.parse(work / "no-baseline.xml").getroot().iter("testcase")
              if c.find("failure") is not None]
    assert any("pause_turn_resume" in name for name in failed) and any(
        "bounded_max_tokens_recovery" in name for name in failed), failed


def test_agentlab_grade_re_exports_the_workbenchs_objects():
    from agentlab.grading import command as grade

    names = [n for n in agentlab_grade.__all__ if n not in ("__version__", "grade_heatmap")]
    assert names and all(getattr(agentlab_grade, n) is getattr(grade, n) for n in names)
    assert set(agentlab_grade.__all__) == {"__version__", *agentlab_grade._EXPORTS}
    with pytest.raises(AttributeError, match="no attribute 'grade_heatmapp'"):
        agentlab_grade.grade_heatmapp  # noqa: B018
