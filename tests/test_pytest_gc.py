"""tests/pytest_gc.py, the start-up plugin of ``make test``: with it loaded, jsonschema goes without the optional
``rfc3987_syntax`` grammars, and nothing the suite validates needed them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CHECK = """
import json, sys
sys.path.insert(0, sys.argv[1])
import tests.pytest_gc
import jsonschema, nbformat
from pathlib import Path
lessons = sorted(Path(sys.argv[1], "notebooks").rglob("*.ipynb"))
for path in lessons:
    nbformat.validate(nbformat.read(path, as_version=4))
print(json.dumps({"loaded": sys.modules.get("rfc3987_syntax") is not None, "lessons": len(lessons),
                  "iri": "iri" in jsonschema.FormatChecker.checkers,
                  "uri": "uri" in jsonschema.FormatChecker.checkers}))
"""


def test_the_plugin_keeps_the_iri_grammars_out_and_every_lesson_still_validates():
    done = subprocess.run([sys.executable, "-c", CHECK, str(REPO)], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["loaded"] is False and seen["iri"] is False   # the grammars were not built
    assert seen["lessons"] >= 30                               # English and Chinese, all valid notebooks
    assert seen["uri"] is True                                  # the other format checkers are still there


def test_a_worker_of_make_test_has_not_built_them():
    if "tests.pytest_gc" not in sys.modules:
        pytest.skip("run without -p tests.pytest_gc (make test loads it)")
    assert "nbval.plugin" in sys.modules and sys.modules.get("rfc3987_syntax") is None
