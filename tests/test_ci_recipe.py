"""docs/ci.md's recipe, run: the baseline command, then each workflow's grading step (its ``run`` script, with
the job's ``env``, in bash as a runner would), against examples/naive_loop.py instead of a framework's agent.
The steps that install are left out (they need the network; tests/test_wheel.py installs the wheel without
the extra). To keep it short, each grading command is given the two scenarios the naive loop fails (the recipe
grades all): the baseline accepts both, and a failure taken out of the baseline fails the step. The naive loop
runs in a fork of a server that imported the SDK once (tests/forked_agent.py; tests/test_grade_ci.py grades it
started afresh): what is run here is the recipe's commands."""

from __future__ import annotations

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

from agentlab.grading.command import SCHEMA_PATH
from forked_agent import command, preloaded

REPO = Path(__file__).resolve().parent.parent
CI = REPO / "docs" / "ci.md"
SCENARIOS = ["pause_turn", "max_tokens_give_up"]


@pytest.fixture(scope="module")
def naive() -> str:
    """$AGENT: examples/naive_loop.py with the prompt as its argument, its agent forked from a preloaded server."""
    with preloaded() as address:
        yield shlex.join(command(address, REPO / "examples" / "naive_loop.py")) + " {prompt}"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", CI.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


def workflows() -> list[dict]:
    return [yaml.safe_load(block) for block in blocks("yaml")]


def grading_steps(workflow: dict) -> tuple[dict, list[str]]:
    job = workflow["jobs"]["grade"]
    return job["env"], [s["run"] for s in job["steps"] if s.get("name", "").startswith("Grade")]


def fewer_scenarios(script: str) -> str:
    """The same commands on SCENARIOS only."""
    script = script.replace("agentlab grade ", f"agentlab grade {' '.join(SCENARIOS)} ")
    return script.replace("--agentlab-grade ", f"--agentlab-scenarios {','.join(SCENARIOS)} --agentlab-grade ")


def bash(script: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    # nbval and hypothesis, installed here for the lessons and agentlab's tests and not in a framework's CI, are not
    # loaded by the workflow's pytest
    full = {**os.environ, **env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "COLUMNS": "250", "PYTEST_ADDOPTS": "-p no:nbval -p no:hypothesispytest"}
    return subprocess.run(["bash", "-e", "-c", fewer_scenarios(script)], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=600)


def test_the_recipe_has_a_python_and_a_node_workflow_on_the_plain_install():
    found = workflows()
    assert len(found) == 2
    installs = [" ".join(s["run"] for s in w["jobs"]["grade"]["steps"] if "Install" in s.get("name", ""))
                for w in found]
    assert all('pip install "$AGENTLAB"' in i for i in installs), installs
    assert not any("[lab]" in i or "pandas" in i or "matplotlib" in i for i in installs)
    python, node = (grading_steps(w)[1] for w in found)
    assert any("--agentlab-grade" in s for s in python) and any("agentlab grade" in s for s in node)
    assert "setup-node" in json.dumps(found[1])


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, naive) -> Path:
    """docs/ci.md's baseline command, run where the workflows will run."""
    work = tmp_path_factory.mktemp("recipe")
    (line,) = [line for block in blocks("sh") for line in block.splitlines() if "--write-baseline" in line]
    done = bash(line.split("#")[0], work, {"AGENT": naive})
    assert done.returncode == 1, done.stdout + done.stderr  # the failures it records
    assert json.loads((work / "agentlab-baseline.json").read_text())["failures"].keys() == {
        "pause_turn", "max_tokens_give_up"}
    return work


@pytest.mark.parametrize("which", ["python", "node"])
def test_each_workflow_passes_on_its_baseline_and_fails_on_a_new_failure(baseline, naive, which, tmp_path):
    env, steps = grading_steps(workflows()[["python", "node"].index(which)])
    work = tmp_path / which
    work.mkdir()
    (work / "agentlab-baseline.json").write_text((baseline / "agentlab-baseline.json").read_text())
    env = {**{k: str(v) for k, v in env.items()}, "AGENT": naive}
    for script in steps:
        done = bash(script, work, env)
        assert done.returncode == 0, done.stdout + done.stderr
    cases = list(ET.parse(work / "grade-junit.xml").getroot().iter("testcase"))
    assert cases and not [c for c in cases if c.find("failure") is not None]
    assert (work / "grade-runs" / "pause_turn" / "exchanges.jsonl").exists()
    if which == "node":
        report = json.loads((work / "grade-report.json").read_text())
        jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
        assert report["verdict"] == "pass" and len(report["baseline"]["accepted"]) == 2
    # a failure that is not in the baseline fails the step
    known = json.loads((work / "agentlab-baseline.json").read_text())
    del known["failures"]["pause_turn"]
    (work / "agentlab-baseline.json").write_text(json.dumps(known))
    done = bash(steps[0], work, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pause_turn" in done.stdout + done.stderr
