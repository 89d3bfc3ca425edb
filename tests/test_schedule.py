"""The order make test hands files to its workers (tests/file_order.py): longest first, by the last run's times."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("agentlab_test_schedule", REPO / "tests" / "file_order.py")
schedule = importlib.util.module_from_spec(spec)
spec.loader.exec_module(schedule)


class Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


class Cache:
    def __init__(self, data: dict) -> None:
        self.data = data

    def get(self, key: str, default):
        return self.data.get(key, default)

    def set(self, key: str, value) -> None:
        self.data[key] = value


class Config:
    def __init__(self, cache: Cache | None) -> None:
        self.cache = cache


def order(nodeids: list[str], cached: dict[str, float] | None) -> list[str]:
    items = [Item(n) for n in nodeids]
    cache = Cache({schedule.CACHE_KEY: cached}) if cached is not None else None
    schedule.pytest_collection_modifyitems(None, Config(cache), items)
    return [i.nodeid for i in items]


def test_files_go_longest_first_and_keep_their_own_order():
    ids = ["tests/a.py::one", "tests/a.py::two", "tests/b.py::one", "notebooks/c.ipynb::Cell 0",
           "notebooks/c.ipynb::Cell 1", "tests/b.py::two"]
    got = order(ids, {"tests/a.py": 2.0, "tests/b.py": 9.0, "notebooks/c.ipynb": 5.0})
    assert got == ["tests/b.py::one", "tests/b.py::two", "notebooks/c.ipynb::Cell 0", "notebooks/c.ipynb::Cell 1",
                   "tests/a.py::one", "tests/a.py::two"]


def test_a_file_no_run_has_timed_yet_counts_as_one_second_and_the_committed_times_fill_in():
    committed = json.loads(schedule.COMMITTED.read_text(encoding="utf-8"))
    slow = max(committed, key=committed.get)
    ids = ["tests/new_file.py::t", f"{slow}::t"]
    assert order(ids, {})[0] == f"{slow}::t"            # from tests/file_seconds.json
    assert order(ids, {"tests/new_file.py": committed[slow] + 1})[0] == "tests/new_file.py::t"   # the cache wins
    assert order(["tests/x.py::t", "tests/y.py::t"], {"tests/y.py": 0.5}) == ["tests/x.py::t", "tests/y.py::t"]


def test_the_times_of_a_run_are_added_up_per_file_and_merged_into_the_cache():
    class Report:
        def __init__(self, nodeid: str, duration: float) -> None:
            self.nodeid, self.duration = nodeid, duration

    class Session:
        def __init__(self, config) -> None:
            self.config = config

    times = schedule.FileTimes()
    for nodeid, seconds in (("tests/a.py::one", 1.0), ("tests/a.py::one", 0.25), ("tests/b.py::x[1]", 2.0)):
        times.pytest_runtest_logreport(Report(nodeid, seconds))
    cache = Cache({schedule.CACHE_KEY: {"tests/old.py": 3.0, "tests/b.py": 7.0}})
    times.pytest_sessionfinish(Session(Config(cache)))
    assert cache.data[schedule.CACHE_KEY] == {"tests/old.py": 3.0, "tests/a.py": 1.25, "tests/b.py": 2.0}


def test_the_committed_times_name_files_that_exist():
    committed = json.loads(schedule.COMMITTED.read_text(encoding="utf-8"))
    assert len(committed) >= 40
    missing = [f for f in committed if not (REPO / f).exists()]
    assert not missing, f"tests/file_seconds.json names files that are gone (make test-times): {missing}"
