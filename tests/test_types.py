"""Type checking as part of the test run: mypy, strict on agentlab.core and clean on the rest (settings in
pyproject.toml). A transition kind that the loop's ``match`` does not handle fails here (``assert_never``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=900)


def test_mypy_is_clean():
    proc = mypy()  # the [tool.mypy] settings: the whole package, strict on the core
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


def test_a_transition_kind_the_loop_does_not_handle_fails_type_checking(tmp_path):
    """Add a kind to the Transition union in a copy of the package: the loop's ``assert_never`` is a mypy error."""
    shutil.copytree(REPO / "agentlab", tmp_path / "agentlab", ignore=shutil.ignore_patterns("__pycache__"))
    transitions = tmp_path / "agentlab" / "core" / "transitions.py"
    source = transitions.read_text()
    assert "Transition: TypeAlias = (RunTools |" in source
    teleport = textwrap.dedent("""
        @dataclass(frozen=True)
        class Teleport(_Base):
            branch: Literal["complete"] = "complete"
            reason: str = ""


    """)
    union = "Transition: TypeAlias = ("
    source = source.replace(union + "RunTools |", teleport + union + "Teleport | RunTools |")
    transitions.write_text(source)
    (tmp_path / "mypy.ini").write_text("[mypy]\nignore_missing_imports = true\n")
    # mypy's cache outlives the temporary copy, so a second run re-checks only what changed since the first
    cache = REPO / ".mypy_cache" / "unhandled-transition"
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--config-file", str(tmp_path / "mypy.ini"),
                           "--cache-dir", str(cache), "-p", "agentlab.core"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout
    assert 'agentlab/core/loop.py' in proc.stdout and '"assert_never" has incompatible type "Teleport"' in proc.stdout


def test_a_misspelt_stop_reason_or_branch_fails_type_checking(tmp_path):
    """Stop reasons and branches are Literal types: a typo in the decision, in a plot's counters or in the
    replay's map of branches is a mypy error, not a branch that silently never fires."""
    shutil.copytree(REPO / "agentlab", tmp_path / "agentlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    typos = {
        "core/transitions.py": ('    "refusal": "refusal",', '    "refusall": "refusal",'),
        "ui/plots.py": ('("escalations", ("max_tokens_escalate",', '("escalations", ("max_token_escalate",'),
        "observatory/replay.py": ('"api_retry": "Retry",', '"api_retyr": "Retry",'),
    }
    for name, (right, wrong) in typos.items():
        path = tmp_path / "agentlab" / name
        source = path.read_text()
        assert source.count(right) == 1, (name, right)
        path.write_text(source.replace(right, wrong))
    cache = REPO / ".mypy_cache" / "misspelt-literals"
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert any(line.startswith("agentlab/core/transitions.py") and "refusall" in line for line in errors), errors
    assert any(line.startswith("agentlab/ui/plots.py") for line in errors), errors
    assert any(line.startswith("agentlab/observatory/replay.py") and "api_retyr" in line for line in errors), errors
    assert len(errors) == 3, errors
