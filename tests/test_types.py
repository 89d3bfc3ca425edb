"""Type checking as part of the test run: mypy, strict on agentlab.core and clean on the rest (settings in
pyproject.toml). A transition kind that the loop's ``match`` does not handle fails here (``assert_never``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def mypy(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def seeded_cache(name: str) -> Path:
    """A mypy cache folder of its own for a copy of the package, seeded, the first time, from the cache of
    ``test_mypy_is_clean`` (run first): the copy is checked with the same settings, so mypy reuses what it found
    in the SDK, pydantic and the rest, and checks again only the copy's own modules (on a fresh clone, some 26 s
    of CPU a run less)."""
    cache, main = REPO / ".mypy_cache" / name, REPO / ".mypy_cache" / f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not cache.exists() and main.is_dir():
        shutil.copytree(main, cache / main.name)
    return cache


def copy_of_the_package(tmp_path: Path) -> Path:
    """agentlab/ and the settings (pyproject.toml) copied into ``tmp_path``."""
    shutil.copytree(REPO / "agentlab", tmp_path / "agentlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path / "agentlab"


def test_mypy_is_clean():
    proc = mypy()  # the [tool.mypy] settings: the whole package, strict on the core
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


def test_a_transition_kind_the_loop_does_not_handle_fails_type_checking(tmp_path):
    """Add a kind to the Transition union in a copy of the package: the loop's ``assert_never`` is a mypy error."""
    transitions = copy_of_the_package(tmp_path) / "core" / "transitions.py"
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
    proc = mypy("--cache-dir", str(seeded_cache("unhandled-transition")), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert errors and all('"assert_never" has incompatible type "Teleport"' in line for line in errors), errors
    assert any(line.startswith("agentlab/core/loop.py") for line in errors), errors


def test_a_misspelt_stop_reason_or_branch_fails_type_checking(tmp_path):
    """Stop reasons and branches are Literal types: a typo in the decision, in a plot's counters or in the
    replay's map of branches is a mypy error, not a branch that silently never fires."""
    copy_of_the_package(tmp_path)
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
    proc = mypy("--cache-dir", str(seeded_cache("misspelt-literals")), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert any(line.startswith("agentlab/core/transitions.py") and "refusall" in line for line in errors), errors
    assert any(line.startswith("agentlab/ui/plots.py") for line in errors), errors
    assert any(line.startswith("agentlab/observatory/replay.py") and "api_retyr" in line for line in errors), errors
    assert len(errors) == 3, errors
