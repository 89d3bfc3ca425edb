"""Facts the lessons state about other software, checked against the installed SDK and the committed records."""

from __future__ import annotations

import json
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
    records = load_records()
    for version in ("2.1.197", "2.1.332"):
        assert records[("claude-code", version)]["pause_turn"]["result"]["subtype"] == "error_during_execution"
    assert "the recorded 2.1.197 and 2.1.332 both end with `error_during_execution`" in _markdown("06_pause_turn")
