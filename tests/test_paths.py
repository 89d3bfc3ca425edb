"""agentlab's own data folder, found once; one that the user running agentlab may not read is one line, not a traceback.

A checkout cloned as root under /root, or into a mode-700 temporary folder, is private to its owner: another user
(the tests become user 65534 when they run as root) meets EACCES on the first ``stat`` of ``data/``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from agentlab.core import paths
from agentlab.core.errors import ConfigError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def as_another_user(body) -> tuple[int, str]:
    """``body()`` in a forked child that is no longer the owner of the private folders (user 65534 when the tests
    run as root; otherwise the folders themselves are made unreadable). Its exit status and what it wrote on stderr."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            os.close(read_end)
            os.dup2(write_end, 2)
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            code = body()
        except BaseException:  # noqa: BLE001 - the child must never return into pytest
            import traceback

            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        err = pipe.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), err


@pytest.fixture
def private_install():
    """A package folder with its data, inside a folder only its owner may enter (mode 700)."""
    base = Path(tempfile.mkdtemp(prefix="agentlab-private-"))
    package = base / "agentlab"
    (package / "data" / "sandbox").mkdir(parents=True)
    (package / "data" / "sandbox" / "notes.txt").write_text("x")
    base.chmod(0o700 if os.geteuid() == 0 else 0o000)
    try:
        yield package
    finally:
        base.chmod(0o700)
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def _with_package(package: Path, call):
    """Run ``call`` with agentlab's package folder at ``package`` (the caches of what was found emptied)."""
    def body() -> int:
        paths._package_dir = lambda: package  # type: ignore[assignment]  # a forked child: nothing to restore
        paths.project_dir.cache_clear()
        paths.sandbox_files.cache_clear()
        return call()
    return body


def test_a_data_folder_this_user_may_not_read_is_a_config_error_naming_it(private_install) -> None:
    def find() -> int:
        try:
            paths.data_dir()
        except ConfigError as exc:
            print(f"ConfigError: {exc}", file=sys.stderr)
            return 3
        return 0

    code, err = as_another_user(_with_package(private_install, find))
    if "Operation not permitted" in err:
        pytest.skip("cannot become another user here")
    assert code == 3, err
    assert "Traceback" not in err
    assert f"agentlab's data folder {private_install / 'data'} cannot be read by this user" in err, err


@pytest.fixture
def open_folder():
    """A folder every user may enter (pytest's tmp_path lies below a mode-700 folder of the user running pytest)."""
    folder = Path(tempfile.mkdtemp(prefix="agentlab-open-"))
    folder.chmod(0o755)
    yield folder
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def test_agentlab_run_says_so_in_one_line(private_install, open_folder) -> None:
    from agentlab.cli import main

    scenario = open_folder / "end_turn.yaml"
    scenario.write_bytes((paths.scenarios_dir() / "end_turn.yaml").read_bytes())
    scenario.chmod(0o644)
    from agentlab.backend.scenario import load_scenario

    load_scenario(str(scenario))  # what the run imports is loaded while it can be read (Python's own files too)
    code, err = as_another_user(_with_package(private_install, lambda: main(["run", str(scenario)])))
    if "Operation not permitted" in err:
        pytest.skip("cannot become another user here")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentlab: agentlab's data folder "), err
    assert "cannot be read by this user" in lines[0]


def test_the_data_folder_is_found_once_per_process(monkeypatch) -> None:
    found = paths.project_dir()
    calls: list[int] = []
    real = paths._package_dir
    monkeypatch.setattr(paths, "_package_dir", lambda: calls.append(1) or real())
    assert paths.project_dir() == found and calls == []
    assert (found / "data" / "scenarios").is_dir()
