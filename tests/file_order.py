"""The order make test hands files to its workers: the longest first (hooks registered by tests/conftest.py).

``make test`` runs on three workers with ``--dist loadfile --no-loadscope-reorder``: a file's tests stay on
one worker, and files are handed out in the order they are collected. Collected in the default order, a long file
that comes last (the browser test takes 20 s) runs while the other workers have nothing left to do. So the files
are put in order of how long they took, longest first, and the short ones fill the gaps at the end.

How long a file took is read from the last run (pytest's cache, ``agentlab/file_seconds``) and, for a file the
cache does not know (a fresh clone), from ``tests/file_seconds.json``, which ``make test-times`` rewrites from
the cache. A file known to neither counts as one second. The order changes only when the tests run, never what
they check.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

CACHE_KEY = "agentlab/file_seconds"
COMMITTED = Path(__file__).parent / "file_seconds.json"
UNKNOWN_SECONDS = 1.0


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _committed_seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(COMMITTED.read_text(encoding="utf-8")).items()}
    except FileNotFoundError:
        return {}


def known_seconds(config: pytest.Config) -> dict[str, float]:
    seconds = _committed_seconds()
    cache = getattr(config, "cache", None)
    if cache is not None:
        seconds.update(cache.get(CACHE_KEY, {}))
    return seconds


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = known_seconds(config)
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_file_of(item.nodeid), i)
    # stable: a file's own tests keep their order; files of equal time keep the collection's order
    items.sort(key=lambda item: (-seconds.get(_file_of(item.nodeid), UNKNOWN_SECONDS),
                                 first_seen[_file_of(item.nodeid)]))


class FileTimes:
    """Adds up, on the process that reports (the controller under xdist), each file's setup, call and teardown."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(session.config, "cache", None)
        if cache is None or not self.seconds:
            return
        merged = dict(cache.get(CACHE_KEY, {}))
        merged.update({path: round(s, 2) for path, s in self.seconds.items()})
        cache.set(CACHE_KEY, merged)


def write_committed_times(root: Path = Path(__file__).parent.parent) -> None:
    """``make test-times``: the cache's file times, longest first, into tests/file_seconds.json."""
    cached = json.loads((root / ".pytest_cache" / "v" / CACHE_KEY).read_text(encoding="utf-8"))
    ordered = dict(sorted(cached.items(), key=lambda kv: -kv[1]))
    COMMITTED.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):   # the controller, or a run without xdist
        config.pluginmanager.register(FileTimes(), "agentlab-file-times")


if __name__ == "__main__":
    write_committed_times()
