"""Facts the lessons state (about other software, checked against the installed SDK and the committed records;
about agentlab, checked against a run), the words they use, and how they import it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anthropic
import pytest

from agentlab.observatory.observe import load_records

ROOT = Path(__file__).resolve().parent.parent


def _markdown(notebook: str) -> str:
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    return " ".join(" ".join("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")


def test_the_sdk_refuses_a_long_non_streaming_request_from_21334_tokens_on():
    """Lesson 02: a non-streaming create() with max_tokens >= 21,334 and the default timeout raises ValueError."""
    client = anthropic.Anthropic(api_key="not-used", base_url="http://127.0.0.1:9")
    client._calculate_nonstreaming_timeout(21_333, None)
    for max_tokens in (21_334, 64_000):
        with pytest.raises(ValueError, match="Streaming is required for operations that may take longer than 10"):
            client._calculate_nonstreaming_timeout(max_tokens, None)
    text = _markdown("02_max_tokens")
    assert "from `max_tokens` = 21,334 on" in text and "Streaming is required for operations that" in text


def test_lesson06_reports_the_recorded_claude_code_endings():
    """The recorded CLI never offers the API's web_search, so the live API could not pause its turn: not reached."""
    records = load_records()
    for version in ("2.1.197", "2.1.332"):
        record = records[("claude-code", version)]["pause_turn"]
        assert (record["result"]["subtype"], record["summary"]["requests"]) == ("success", 1)
        assert record["requests"][0]["reply"]["stop_reason"] == "end_turn"
        assert "web_search, which the request does not offer" in record["requests"][0]["not_reached"][0]
    text = _markdown("06_pause_turn")
    assert "error_during_execution`, `stop_reason: pause_turn`" not in text
    assert "never offer the API's `web_search` tool, so the live API cannot pause their turn" in text


def test_lesson08_says_what_max_turns_bounds_as_the_tour_cut_shows():
    """Lesson 08: max_turns bounds the calls that came back with a message; a retried HTTP failure comes on top."""
    from agentlab.lab import scenario_loop

    cut = scenario_loop("tour", max_turns=4).run()
    assert (cut.subtype, cut.num_turns, cut.requests) == ("error_max_turns", 4, 5)
    text = _markdown("08_max_turns")
    assert "never makes more than `max_turns` model calls" not in text
    assert "never gets more than `max_turns` answers from the model" in text
    assert f"the `tour` cut at `max_turns=4` sends {cut.requests} requests" in text
    assert "five requests, four turns" in text


@pytest.mark.parametrize("notebook, api_sense", [
    ("01_content_not_label", "endings of a turn"),
    ("01_content_not_label", "end its turns empty"),
    ("06_pause_turn", "resume paused turns"),
    ("10_the_whole_decision", "end-of-turn decision"),
])
def test_the_lessons_say_the_models_answer_where_the_api_says_turn(notebook, api_sense):
    """Lesson 00 defines a turn as a model call that came back with a message; the API's "turn" (end_turn,
    pause_turn) is what the lessons call the model's answer."""
    nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    text = " ".join(" ".join("".join(c["source"]).split()) for c in nb["cells"])
    assert api_sense not in text
    assert "the lessons call that *the model's answer*" in _markdown("00_the_loop")


def _lesson_imports() -> list[tuple[str, str, str]]:
    """(notebook, module, name) for every `from agentlab... import name` in the lessons' code cells."""
    import ast

    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "agentlab":
                    found += [(path.stem, node.module, alias.name) for alias in node.names]
    return found


def test_the_lessons_import_each_name_one_way():
    """A name the package exports at its top level is imported from `agentlab` in every lesson; any other
    name from one module, the same in every lesson (the lessons' own helpers aside)."""
    import agentlab

    imports = _lesson_imports()
    assert any(name == "Limits" for _, _, name in imports)   # the case that had two spellings
    wrong = [(nb, f"from {module} import {name}") for nb, module, name in imports
             if name in agentlab.__all__ and module != "agentlab"]
    assert wrong == [], f"import these from agentlab: {wrong}"
    where: dict[str, set[str]] = {}
    for _, module, name in imports:
        if not module.startswith("agentlab.exercises."):   # each lesson's own helpers (show_result, observed)
            where.setdefault(name, set()).add(module)
    assert {name: modules for name, modules in where.items() if len(modules) > 1} == {}


def test_lesson07_s_sdk_row_matches_the_installed_sdk():
    """The SDK's retry defaults the lesson's comparison table quotes are the installed SDK's own constants."""
    from anthropic import _constants

    assert (_constants.DEFAULT_MAX_RETRIES, _constants.INITIAL_RETRY_DELAY, _constants.MAX_RETRY_DELAY) == (2, 0.5, 8.0)
    assert "2 retries by default; 0.5 s doubling to 8 s" in _markdown("07_api_errors")


def test_the_lessons_name_the_article_and_link_the_docs_page():
    """Where a lesson's comparison quotes the article it names it by its title; the docs page is linked."""
    title = "Claude Code Agent Loop Deep Dive (4): From a Finished Answer to the Seven Meanings of stop_reason"
    link = "https://platform.claude.com/docs/en/build-with-claude/handling-stop-reasons"
    for notebook in ("00_the_loop", "01_content_not_label", "02_max_tokens", "03_context_window", "04_refusal",
                     "05_stop_sequence", "06_pause_turn", "07_api_errors", "08_max_turns", "09_hooks",
                     "10_the_whole_decision", "11_real_claude_code"):
        text = _markdown(notebook)
        assert title in text and link in text, notebook


CARDINALS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())}
ORDINALS = {w: n for n, w in enumerate("zeroth first second third fourth fifth sixth seventh eighth ninth".split())}
COUNTED = re.compile(r"\b(?P<n>[a-z]+|\d+)\s+(?:values|stop reasons|`stop_reason` values)\b"
                     r"|\b(?P<nth>[a-z]+th)\b(?=\s*(?:value|,\s*`compaction`|in the beta))", re.IGNORECASE)


def _sections() -> list[tuple[str, str]]:
    """(where, text) of every lesson's markdown cell and every section of the README and the glossary."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        found += [(f"{path.name} cell {c.get('id')}", "".join(c["source"]))
                  for c in cells if c["cell_type"] == "markdown"]
    for path in (ROOT / "README.md", ROOT / "notebooks" / "glossary.md"):
        found += [(path.name, part) for part in path.read_text(encoding="utf-8").split("\n## ")]
    return found


def stop_reason_counts(text: str) -> list[tuple[str, int]]:
    """The counts of stop reasons a text states: ("values", N) for "seven values"/"7 stop reasons", ("beta", N)
    for "an eighth" (the beta's extra value), in a text that speaks of stop reasons; the article's title (its
    "Seven Meanings of stop_reason") is a quotation, not a count."""
    text = text.replace("Seven Meanings of stop_reason", "")
    if not re.search(r"stop_reason|stop reason", text):
        return []
    counts = []
    for match in COUNTED.finditer(text):
        if match["nth"]:
            if match["nth"].lower() in ORDINALS:
                counts.append(("beta", ORDINALS[match["nth"].lower()]))
        elif match["n"].isdigit() and "stop reasons" in " ".join(match[0].split()):
            counts.append(("values", int(match["n"])))
        elif match["n"].lower() in CARDINALS:
            counts.append(("values", CARDINALS[match["n"].lower()]))
    return counts


def test_stop_reason_counts_are_read_from_the_text():
    assert stop_reason_counts("the seven values of `stop_reason`; the beta adds an eighth, `compaction`") == \
        [("values", 7), ("beta", 8)]
    assert stop_reason_counts("seven stop reasons. A fourth source is what clients did.") == [("values", 7)]
    assert stop_reason_counts("8 stop reasons") == [("values", 8)]
    assert stop_reason_counts("seven values of nothing in particular") == []       # not about stop reasons
    assert stop_reason_counts("the article *... the Seven Meanings of stop_reason*") == []


def test_every_count_of_stop_reasons_is_the_installed_sdk_s():
    """A count of stop reasons in the lessons, the README or the glossary is the number of values of the SDK's
    `StopReason` literal (the Messages API), and "an eighth" the beta's `BetaStopReason`, which adds
    `compaction`; lesson 00 prints both from the SDK."""
    import typing

    from anthropic.types import StopReason
    from anthropic.types.beta import BetaStopReason

    values, beta = typing.get_args(StopReason), typing.get_args(BetaStopReason)
    assert set(beta) - set(values) == {"compaction"}
    expected = {"values": len(values), "beta": len(beta)}
    stated = [(where, kind, n) for where, text in _sections() for kind, n in stop_reason_counts(text)]
    assert {("00_the_loop.ipynb", "values"), ("00_the_loop.ipynb", "beta"), ("glossary.md", "values"),
            ("glossary.md", "beta")} <= {(where.split(" cell")[0], kind) for where, kind, _ in stated}
    wrong = [(where, kind, n) for where, kind, n in stated if n != expected[kind]]
    assert wrong == [], f"the SDK lists {expected}; these say otherwise: {wrong}"
    (shown,) = [c for c in json.loads((ROOT / "notebooks" / "00_the_loop.ipynb").read_text(encoding="utf-8"))["cells"]
                if c.get("id") == "l00-sdk-stop-reasons"]
    printed = "".join(shown["outputs"][0]["text"])
    assert f"{len(values)} stop reasons: {', '.join(values)}" in printed
    assert f"the beta API: {len(beta)}, adding compaction" in printed
