"""What the lessons say about recorded clients is drawn from the records or checked against them.

Every client version a lesson's text names has a record in ``data/observed`` (the article's v2.1.220 aside,
named as the article's), and every sentence or table row of a lesson that names a recorded version holds a
claim of ``data/observed/lesson_claims.yaml``, whose checks hold in the records. Tables of what clients did
are printed from the records (``agentlab.observatory.compare.print_recorded``), so they need no claim.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentlab.observatory.compare import lesson_claim_failures, load_lesson_claims
from agentlab.observatory.observe import load_records

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
VERSION = re.compile(r"(?<![\w.])v?(\d+\.\d+\.\d+)(?![\w.]*\d)")
ARTICLE_VERSION = "2.1.220"


def _markdown(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def units(text: str) -> list[str]:
    """The sentences and table rows of a markdown text, each on one line."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.split("\n")
        if lines and lines[0].lstrip().startswith("|"):
            out += [" ".join(line.split()) for line in lines]
            continue
        flat = " ".join(block.split())
        out += [u for u in re.split(r"(?<=[.!?;])\s+(?=[A-Z`*(\"“])", flat) if u]
    return out


def recorded_versions() -> set[str]:
    return {version for _, version in load_records()}


def test_units_splits_sentences_and_table_rows():
    assert units("One 2.1.197 here. Two\nthere.\n\n| a | b |\n|---|---|") == [
        "One 2.1.197 here.", "Two there.", "| a | b |", "|---|---|"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_version_a_lesson_names_has_a_record(path):
    """A version a lesson names is a recorded one, or the article's (then named with the article)."""
    known = recorded_versions()
    wrong = []
    for unit in units(_markdown(path)):
        for version in VERSION.findall(unit):
            if version in known:
                continue
            if version == ARTICLE_VERSION and "article" in unit.lower():
                continue
            wrong.append(f"{version}: {unit[:120]}")
    assert wrong == [], f"{path.stem} names versions without a record: {wrong}"


def _claims_by_notebook() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for claim in load_lesson_claims():
        found.setdefault(claim["notebook"], []).append(" ".join(claim["text"].split()))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_sentence_naming_a_recorded_version_is_a_checked_claim(path):
    """A sentence or table row naming a recorded client version says only what a claim checks."""
    recorded = recorded_versions() - {ARTICLE_VERSION}
    claims = _claims_by_notebook().get(path.stem, [])
    untied = [unit for unit in units(_markdown(path))
              if any(v in recorded for v in VERSION.findall(unit))
              and not any(text in unit for text in claims)]
    assert untied == [], (f"{path.stem}: these name a recorded version but hold no claim of "
                          f"data/observed/lesson_claims.yaml (add one, or print the fact from the records): {untied}")


RECORDED = re.compile(r"recorded (Claude Code|CLI)|Claude Code \(recorded|recorded versions?\b")
# sentences that mention the recorded clients without saying what one did
NOT_A_CLAIM = ("a text a client injected is quoted as what one recorded version sent",
               "What the recorded versions did is the table above, printed from the records",
               "every request it sends is kept in a **behaviour record**",
               "(printed below, per recorded version)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_sentence_about_the_recorded_claude_code_is_a_checked_claim(path):
    """A sentence saying what "the recorded" Claude Code did, even without a version, says what a claim checks
    (a sentence that introduces printed output, ending in a colon, needs none)."""
    claims = _claims_by_notebook().get(path.stem, [])
    untied = [unit for unit in units(_markdown(path))
              if RECORDED.search(unit) and not unit.rstrip().endswith(":")
              and not any(text in unit for text in claims) and not any(text in unit for text in NOT_A_CLAIM)]
    assert untied == [], f"{path.stem}: tie these to a claim of data/observed/lesson_claims.yaml: {untied}"


def test_each_lesson_claim_is_in_its_lesson_and_holds_in_the_records():
    claims = load_lesson_claims()
    assert claims
    for claim in claims:
        path = ROOT / "notebooks" / f"{claim['notebook']}.ipynb"
        text = " ".join(claim["text"].split())
        assert text in " ".join(_markdown(path).split()), f"{claim['notebook']}: no longer says {text!r}"
        assert claim.get("holds"), f"{claim['notebook']}: {text!r} has no check"
    assert lesson_claim_failures(claims) == []


def test_a_claim_the_records_contradict_fails(tmp_path):
    """The contradictions the lessons once had: each one is caught."""
    wrong = [
        {"notebook": "x", "text": "2.1.332 ends pause_turn with error_during_execution",
         "holds": [{"client": "claude-code", "version": "2.1.332", "scenario": "pause_turn",
                    "path": "result.subtype", "equals": "error_during_execution"}]},
        {"notebook": "x", "text": "2.1.197 retried a 401",
         "holds": [{"client": "claude-code", "version": "2.1.197", "scenario": "api_error_fatal",
                    "path": "summary.requests", "equals": 2}]},
        {"notebook": "x", "text": "no compaction on a full window",
         "holds": [{"client": "claude-code", "version": "2.1.332", "scenario": "context_window_full",
                    "path": "summary.actions", "lacks": "compacted"}]},
        {"notebook": "x", "text": "2.1.197 writes a second call after a refusal (its transcript)",
         "holds": [{"source": "transcript", "client": "claude-code", "version": "2.1.197", "scenario": "refusal",
                    "path": "calls.1.stop_reason", "equals": "refusal"}]},
        {"notebook": "x", "text": "a version never recorded",
         "holds": [{"client": "claude-code", "version": "9.9.9", "scenario": "end_turn",
                    "path": "result.subtype", "equals": "success"}]},
    ]
    failures = lesson_claim_failures(wrong)
    assert len(failures) == 5, failures
    assert "calls.1.stop_reason is None, not 'refusal'" in failures[3]
    assert "no such record" in failures[-1]


def test_a_version_without_a_record_or_an_untied_sentence_is_caught():
    known = recorded_versions()
    assert "2.1.999" not in known and "2.1.197" in known
    text = "Claude Code 2.1.999 retried a 401. Claude Code 2.1.197 retried a 401."
    named = [v for unit in units(text) for v in VERSION.findall(unit)]
    assert named == ["2.1.999", "2.1.197"]
    claims = [" ".join(c["text"].split()) for c in load_lesson_claims()]
    assert not any(c in "Claude Code 2.1.197 retried a 401." for c in claims)
