"""Live runs against the Messages API: skipped unless ANTHROPIC_API_KEY is set. Small max_tokens, two prompts."""

from __future__ import annotations

import os

import pytest

from agentlab import AgentLoop, Trace
from agentlab.core.config import RunConfig
from agentlab.core.loop import SUBTYPES
from agentlab.lab import build_tools

KEY = os.environ.get("ANTHROPIC_API_KEY")
MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-haiku-4-5")

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not KEY, reason="live test: set ANTHROPIC_API_KEY to run it against the Messages API"),
]


def live_loop(tmp_path, **kwargs) -> AgentLoop:
    import anthropic

    trace = Trace(tmp_path / "live.jsonl", secrets=(KEY or "",))
    return AgentLoop(anthropic.Anthropic(max_retries=2), RunConfig.of(model=MODEL, **kwargs), trace=trace)


def assert_no_key(tmp_path) -> None:
    assert KEY and KEY not in (tmp_path / "live.jsonl").read_text(encoding="utf-8")


def test_live_end_turn(tmp_path):
    loop = live_loop(tmp_path, prompt="Reply with the single word: ready", max_tokens=32)
    result = loop.run()
    loop.trace.close()
    assert result.subtype == "success", result.result
    assert result.stop_reason in ("end_turn", "max_tokens", "stop_sequence")
    assert result.num_turns >= 1 and result.usage["output_tokens"] > 0
    assert_no_key(tmp_path)


def test_live_calculator_tool(tmp_path):
    loop = live_loop(tmp_path, prompt="Use the calculator tool to compute 1234 * 5678, then answer with the number.",
                     tools=build_tools("demo"), max_tokens=256)
    result = loop.run()
    loop.trace.close()
    assert result.subtype in SUBTYPES
    assert result.subtype == "success", result.result
    tools = [e.data for e in loop.trace.of_kind("tool")]
    assert any(t["name"] == "calculator" for t in tools), tools
    assert "7006652" in result.result.replace(",", "").replace(" ", "")
    assert_no_key(tmp_path)
