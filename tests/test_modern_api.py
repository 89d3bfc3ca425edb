"""Extended thinking, prompt caching, cost and streaming of large requests, tested on the wire.

Every run goes through the real ``anthropic`` client on the scripted backend; the assertions read the
request bodies the backend received and the usage it answered with.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import sys
from pathlib import Path
from typing import Any

import anthropic
import pytest

from agentlab.backend.scenario import load_scenario, parse_scenario
from agentlab.backend.scripted import ScenarioEngine, scripted_client, signature_for
from agentlab.backend.serve import ScenarioServer
from agentlab.cli import main
from agentlab.core.caching import PromptCache, with_breakpoints
from agentlab.core.config import RunConfig
from agentlab.core.cost import PRICES_FILE, Price, call_cost, default_prices, format_cost, load_prices, usage_cost
from agentlab.core.errors import ConfigError
from agentlab.core.loop import AgentLoop, Result
from agentlab.core.wire import NONSTREAMING_MAX_TOKENS, needs_streaming
from agentlab.lab import scenario_loop
from agentlab.ui.plots import cost_overview, read_run
from agentlab.ui.widgets import render_block

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(params=[False, True], ids=["json", "stream"])
def stream(request) -> bool:
    return request.param


def run(name_or_scenario: Any, stream: bool = False, **overrides: Any) -> AgentLoop:
    loop = scenario_loop(name_or_scenario, stream=stream, **overrides)
    loop.run()
    assert loop.engine.failures == [], loop.engine.failures
    return loop


def bodies(loop: AgentLoop) -> list[dict[str, Any]]:
    return [r.body for r in loop.engine.requests if r.body is not None]


def sent_back(loop: AgentLoop, call: int) -> list[dict[str, Any]]:
    """The content blocks of response ``call`` (1-based) exactly as the backend sent them."""
    return [e.data["content"] for e in loop.trace.of_kind("response") if e.call == call][0]


def strip_marks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]


# --- extended thinking ----------------------------------------------------------------------------------

def test_thinking_is_sent_with_its_budget_below_max_tokens_in_every_request(stream):
    loop = run("thinking_max_tokens", stream)
    sent = bodies(loop)
    assert len(sent) == 3
    for body in sent:
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        assert body["thinking"]["budget_tokens"] < body["max_tokens"]
    assert [b["max_tokens"] for b in sent] == [4096, 64_000, 64_000]   # the escalation included


def test_thinking_block_goes_back_unchanged_before_the_tool_use_with_the_results(stream):
    loop = run("thinking_tool_use", stream)
    first_reply = sent_back(loop, 1)
    assert [b["type"] for b in first_reply] == ["thinking", "text", "tool_use"]
    assert first_reply[0]["signature"] == signature_for(first_reply[0]["thinking"])
    second = bodies(loop)[1]
    assistant, results = second["messages"][1], second["messages"][2]
    assert assistant == {"role": "assistant", "content": first_reply}   # signature and order unchanged
    assert [b["type"] for b in results["content"]] == ["tool_result"]
    assert loop.result.subtype == "success"


def test_after_max_tokens_with_thinking_the_loop_continues_with_a_user_message(stream):
    loop = run("thinking_max_tokens", stream)
    last = bodies(loop)[-1]["messages"]
    assert last[-1]["role"] == "user" and "Output token limit hit" in json.dumps(last[-1])
    assert last[-2] == {"role": "assistant", "content": sent_back(loop, 2)}
    assert last[-2]["content"][0]["type"] == "thinking"
    assert loop.result.escalations == 1 and loop.result.continuations == 1


def test_redacted_thinking_goes_back_byte_for_byte_with_tool_results_and_on_pause_turn(stream):
    loop = run("redacted_thinking", stream)
    first, second, third = bodies(loop)
    redacted = sent_back(loop, 1)[0]
    assert redacted["type"] == "redacted_thinking"
    assert second["messages"][1]["content"][0] == redacted
    assert third["messages"][1]["content"][0] == redacted
    # pause_turn: the paused turn is the last message, its thinking block first and unchanged
    paused = third["messages"][-1]
    assert paused["role"] == "assistant"
    assert strip_marks(paused["content"]) == sent_back(loop, 2)
    assert loop.result.pause_continuations == 1 and loop.result.subtype == "success"


def test_the_scripted_backend_rejects_what_the_api_rejects():
    """A changed signature, changed redacted data, a tool-use turn without its thinking block first, an
    assistant prefill with thinking on, and a budget not below max_tokens: each is a 400."""
    engine = ScenarioEngine(load_scenario("thinking_tool_use"))
    client = scripted_client(engine)
    thinking = {"type": "thinking", "thinking": "plan", "signature": signature_for("plan")}
    use = {"type": "tool_use", "id": "toolu_x", "name": "calculator", "input": {"expression": "1"}}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}]}
    on = {"type": "enabled", "budget_tokens": 2048}

    def send(messages, **extra):
        return client.messages.create(model="claude-sonnet-4-6", max_tokens=4096, messages=messages,
                                      **({"thinking": on} | extra))

    changed = dict(thinking, thinking="plan, edited")
    cases = {
        "Invalid `signature`": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [changed, use]},
                                result],
        "Invalid `data`": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [
            {"type": "redacted_thinking", "data": "not-what-was-sent"}, use]}, result],
        "Expected `thinking` or `redacted_thinking`": [
            {"role": "user", "content": "q"}, {"role": "assistant", "content": [use]}, result],
        "prefill": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [thinking]}],
    }
    for needle, messages in cases.items():
        with pytest.raises(anthropic.BadRequestError, match=needle):
            send(messages)
    with pytest.raises(anthropic.BadRequestError, match="must be greater than `thinking.budget_tokens`"):
        send([{"role": "user", "content": "q"}], thinking={"type": "enabled", "budget_tokens": 4096})
    assert engine.next_step == 0   # none of them used a scenario step


def test_a_loop_that_dropped_the_thinking_block_would_be_rejected(monkeypatch):
    """The wire check can fail: with the thinking blocks left out of the history the run errors."""
    import agentlab.core.loop as loop_mod

    original = loop_mod.AgentLoop._merge_or_append_assistant

    def drop_thinking(self, blocks):
        return original(self, [b for b in blocks if b.get("type") != "thinking"])

    monkeypatch.setattr(loop_mod.AgentLoop, "_merge_or_append_assistant", drop_thinking)
    loop = scenario_loop("thinking_tool_use")
    result = loop.run()
    assert result.subtype == "error_api"
    assert "Expected `thinking` or `redacted_thinking`" in result.result


def test_thinking_blocks_of_the_last_exchange_survive_a_compaction(stream):
    steps = []
    for i, name in enumerate(["building_manual.txt", "handbook.txt", "it_guide.txt", "building_manual.txt"]):
        steps.append({"content": [{"type": "thinking", "thinking": f"Step {i}: read {name} next."},
                                  {"type": "tool_use", "id": f"toolu_read_{i}", "name": "read_file",
                                   "input": {"path": name}}], "stop_reason": "tool_use"})
    steps.append({"content": [{"type": "thinking", "thinking": "Enough read."},
                              {"type": "text", "text": "Done."}], "stop_reason": "end_turn"})
    sc = parse_scenario({"name": "thinking_compaction", "description": "thinking across a compaction",
                         "tools": "demo", "max_tokens": 4096, "thinking": 2048, "context_window": 4000,
                         "compact_threshold": 0.7, "compaction": "clear_tool_results", "steps": steps},
                        "thinking_compaction.yaml")
    loop = run(sc, stream)
    assert loop.result.compactions >= 1 and loop.result.subtype == "success"
    compacted_before = {e.call + 1 for e in loop.trace.of_kind("compaction")}
    for call in compacted_before:
        body = bodies(loop)[call - 1]
        kept = body["messages"][-2]           # the last exchange: assistant turn, then its tool results
        assert kept == {"role": "assistant", "content": sent_back(loop, call - 1)}
        assert kept["content"][0]["type"] == "thinking"


def test_thinking_budget_must_be_a_valid_budget_below_max_tokens():
    client = scripted_client(ScenarioEngine(load_scenario("end_turn")))
    with pytest.raises(ConfigError, match="below max_tokens"):
        AgentLoop(client, RunConfig.of(prompt="hi", max_tokens=2048, thinking=2048))
    with pytest.raises(ConfigError, match="at least 1024"):
        AgentLoop(client, RunConfig.of(prompt="hi", max_tokens=4096, thinking=512))


def test_a_lower_max_tokens_ceiling_lowers_the_budget_with_it():
    loop = scenario_loop("end_turn", max_tokens=8192, thinking=4096)
    loop.state = type(loop.state)(model=loop.state.model, max_tokens=3000)
    params = loop._params()
    assert params["thinking"]["budget_tokens"] == 2999 < params["max_tokens"]


def test_thinking_over_http_streams_thinking_and_signature_deltas():
    sc = load_scenario("thinking_tool_use")
    with ScenarioServer(sc) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        with client.messages.stream(model="claude-sonnet-4-6", max_tokens=4096, messages=[
                {"role": "user", "content": sc.prompt}], thinking={"type": "enabled", "budget_tokens": 2048}) as s:
            kinds = [event.delta.type for event in s if event.type == "content_block_delta"]
            message = s.get_final_message()
        raw = server.exchanges[-1].reply.body.decode()
    assert "thinking_delta" in kinds and "signature_delta" in kinds
    block = message.content[0]
    assert block.type == "thinking" and block.signature == signature_for(block.thinking)
    assert '"type": "signature_delta"' in raw


def test_the_stepper_shows_thinking_collapsed():
    html = render_block({"type": "thinking", "thinking": "secret plan " * 10, "signature": "sig"})
    assert html.startswith("<details") and " open" not in html.split(">")[0]
    assert "thinking · 120 characters" in html
    redacted = render_block({"type": "redacted_thinking", "data": "abc"})
    assert redacted.startswith("<details") and "encrypted" in redacted


# --- prompt caching -------------------------------------------------------------------------------------

def test_breakpoints_on_the_last_tool_the_system_prompt_and_the_latest_message():
    loop = run("what_a_run_costs")
    for body in bodies(loop):
        marked = [m for m in json.dumps(body).split('"cache_control"')][1:]
        assert len(marked) == 3
        assert "cache_control" in body["tools"][-1]
        assert all("cache_control" not in t for t in body["tools"][:-1])
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert all("cache_control" not in json.dumps(m) for m in body["messages"][:-1])
    assert "cache_control" not in json.dumps(loop.messages)   # the history itself is not marked


def test_caching_can_be_switched_off():
    loop = run("what_a_run_costs", cache=False)
    assert all("cache_control" not in json.dumps(b) for b in bodies(loop))
    assert loop.result.usage["cache_read_input_tokens"] == 0
    assert loop.result.usage["cache_creation_input_tokens"] == 0


def test_cache_reads_follow_the_longest_prefix_written_before_and_a_compaction_breaks_it():
    loop = run("what_a_run_costs")
    calls = read_run(loop.trace).calls
    compacted_before = {e.call + 1 for e in loop.trace.of_kind("compaction")}
    assert compacted_before == {6}
    assert calls[0].cache_read == 0 and calls[0].cache_write > 1024     # the first call writes the prefix
    for prev, cur in zip(calls, calls[1:], strict=False):
        if cur.n in compacted_before:
            # the history changed after the first request: only tools + system + first prompt are read back
            assert cur.cache_read == calls[0].cache_write
            assert cur.cache_write > prev.cache_write
        else:
            # everything the previous call read or wrote is read back now
            assert cur.cache_read == prev.cache_read + prev.cache_write
    uncached = run("what_a_run_costs", cache=False)
    for a, b in zip(calls, read_run(uncached.trace).calls, strict=True):
        assert a.input_tokens + a.cache_read + a.cache_write == b.input_tokens   # same prompt, billed apart


def test_the_scripted_cache_is_deterministic_and_respects_the_minimum_length():
    first = [(c.cache_read, c.cache_write) for c in read_run(run("what_a_run_costs").trace).calls]
    again = [(c.cache_read, c.cache_write) for c in read_run(run("what_a_run_costs").trace).calls]
    assert first == again
    small = run("tool_use")   # every request is below 1024 tokens: nothing is cached
    small_calls = read_run(small.trace).calls
    assert len(small_calls) >= 2 and all(c.cache_tokens == 0 for c in small_calls)
    cache = PromptCache(min_tokens=0)
    request = with_breakpoints({"model": "m", "max_tokens": 10, "system": "s" * 400,
                                "messages": [{"role": "user", "content": "hello"}]})
    assert cache.use(request, 200).read == 0
    assert cache.use(request, 200).read > 0
    other_model = dict(request, model="n")
    assert cache.use(other_model, 200).read == 0   # the cache belongs to a model


# --- cost -----------------------------------------------------------------------------------------------

def test_the_price_table_is_dated_and_sourced_and_the_readme_says_so():
    table = load_prices()
    assert table.checked and table.source.startswith("https://")
    sonnet = table.price("claude-sonnet-4-6")
    assert (sonnet.input, sonnet.cache_write, sonnet.cache_read, sonnet.output) == (3.0, 3.75, 0.30, 15.0)
    assert table.price("claude-haiku-4-5-20251001") == table.price("claude-haiku-4-5")
    assert table.price("claude-scripted") is None
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert table.checked in readme and "data/prices.yaml" in readme


def readme_price_rows(readme: str) -> list[tuple[str, tuple[float, float, float, float]]]:
    """The README's price table as (model, (input, cache write, cache read, output)) rows, one per model: a
    row ``| `claude-sonnet-4-6`, `-4-5` | ...`` names claude-sonnet-4-6 and claude-sonnet-4-5."""
    header = "| model | input | 5-minute cache write | cache read | output |"
    assert header in readme, "the README's price table header"
    lines = readme.split(header, 1)[1].splitlines()[2:]
    rows = []
    for line in itertools.takewhile(lambda text: text.startswith("|"), lines):
        names, *prices = [cell.strip() for cell in line.strip("|").split("|")]
        values = tuple(float(p.removeprefix("$")) for p in prices)
        assert len(values) == 4, line
        first, *others = [n.strip().strip("`") for n in names.split(",")]
        family = re.sub(r"(-\d+)+$", "", first)
        rows.append((first, values))
        rows += [(family + other, values) for other in others]
    return rows


def test_every_price_the_readme_shows_is_the_one_in_the_price_file():
    table = load_prices()
    rows = readme_price_rows((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(rows) >= 5 and {"claude-sonnet-4-6", "claude-sonnet-4", "claude-opus-4-5"} <= {m for m, _ in rows}
    for model, shown in rows:
        price = table.price(model)
        assert price is not None and price.model == model, f"README price row {model!r} is not in data/prices.yaml"
        assert shown == (price.input, price.cache_write, price.cache_read, price.output), model


def test_a_readme_price_row_that_differs_from_the_file_is_caught():
    table = load_prices()
    readme = (REPO / "README.md").read_text(encoding="utf-8").replace("| $3 | $3.75 |", "| $3 | $3.70 |", 1)
    rows = dict(readme_price_rows(readme))
    sonnet = table.price("claude-sonnet-4-6")
    assert sonnet is not None and rows["claude-sonnet-4-6"][1] == 3.70 != sonnet.cache_write


def test_call_cost_bills_each_part_of_the_prompt_at_its_own_price():
    price = Price("m", input=3.0, output=15.0, cache_write=3.75, cache_write_1h=6.0, cache_read=0.30)
    usage = {"input_tokens": 1000, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 10_000,
             "output_tokens": 500}
    assert call_cost(usage, price) == pytest.approx((1000 * 3 + 2000 * 3.75 + 10_000 * 0.3 + 500 * 15) / 1e6)
    one_hour = dict(usage, cache_creation={"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 2000})
    assert call_cost(one_hour, price) == pytest.approx((1000 * 3 + 2000 * 6 + 10_000 * 0.3 + 500 * 15) / 1e6)
    assert call_cost(usage, None) is None


def test_every_run_reports_its_cost_in_the_result_and_the_trace():
    loop = run("what_a_run_costs")
    per_call = [e.data["cost_usd"] for e in loop.trace.of_kind("response")]
    assert all(c > 0 for c in per_call)
    assert loop.result.cost_usd == pytest.approx(sum(per_call))
    result_event = loop.trace.of_kind("result")[-1].data
    assert result_event["cost_usd"] == loop.result.cost_usd and result_event["unpriced_models"] == []
    assert Result.from_event(result_event).cost_usd == loop.result.cost_usd
    assert run("what_a_run_costs", cache=False).result.cost_usd > loop.result.cost_usd


def test_an_unknown_model_is_reported_as_unknown_not_as_zero(capsys):
    loop = run("end_turn", model="claude-scripted-unpriced")
    assert loop.result.cost_usd is None and loop.result.unpriced_models == ["claude-scripted-unpriced"]
    assert [e.data["cost_usd"] for e in loop.trace.of_kind("response")] == [None]
    assert format_cost(None, ["claude-scripted-unpriced"]) == "cost unknown (no price for claude-scripted-unpriced)"
    assert main(["run", "end_turn", "--model", "claude-scripted-unpriced", "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["cost_usd"] is None and data["unpriced_models"] == ["claude-scripted-unpriced"]


def test_cli_reports_cost_and_switches_thinking_and_caching(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    assert main(["run", "what_a_run_costs", "--json", "--trace", str(trace)]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["cost_usd"] > 0 and data["usage"]["cache_read_input_tokens"] > 0
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert events[-1]["data"]["cost_usd"] == data["cost_usd"]
    assert main(["run", "what_a_run_costs", "--json", "--no-cache"]) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plain["usage"]["cache_read_input_tokens"] == 0 and plain["cost_usd"] > data["cost_usd"]
    assert main(["run", "end_turn", "--thinking", "1024", "--max-tokens", "2048"]) == 0
    out = capsys.readouterr().out
    assert "$0.0" in out and "cache read/write" in out
    assert main(["run", "end_turn", "--thinking", "4096", "--max-tokens", "2048"]) == 2
    assert "below max_tokens" in capsys.readouterr().err


def test_a_malformed_price_table_is_named(tmp_path):
    bad = tmp_path / "prices.yaml"
    bad.write_text("checked: '2026-12-01'\nsource: https://x\nmodels:\n  m: {input: 1, output: -2, cache_write: 1,"
                   " cache_write_1h: 1, cache_read: 1}\n")
    with pytest.raises(ConfigError, match=r"models\.m\.output"):
        load_prices(bad)
    bad.write_text("models: {}\n")
    with pytest.raises(ConfigError, match="'checked' is missing"):
        load_prices(bad)
    assert usage_cost({"input_tokens": 1_000_000}, "claude-sonnet-4-6") == pytest.approx(3.0)
    assert PRICES_FILE.exists() and default_prices().prices


def test_cost_plot_reads_cache_and_cost_from_the_trace(tmp_path):
    loop = run("what_a_run_costs")
    path = tmp_path / "cost.png"
    fig = cost_overview(loop.trace, save=path)
    assert path.read_bytes().startswith(b"\x89PNG")
    bars = fig.axes[0].patches
    calls = read_run(loop.trace).calls
    heights = [round(p.get_height()) for p in bars[len(calls):2 * len(calls)]]  # the cache-write layer
    assert heights == [c.cache_write for c in calls]


# --- streaming where the SDK requires it ----------------------------------------------------------------

def test_the_sdk_refuses_a_large_non_streaming_request_and_the_loop_streams_it():
    engine = ScenarioEngine(load_scenario("end_turn"))
    client = scripted_client(engine)
    with pytest.raises(ValueError, match="Streaming is required"):
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64_000,
                               messages=[{"role": "user", "content": "hi"}])
    assert needs_streaming(client, {"model": "claude-sonnet-4-6", "max_tokens": 64_000})
    assert not needs_streaming(client, {"model": "claude-sonnet-4-6", "max_tokens": 21_333})
    loop = AgentLoop(client, RunConfig.of(prompt="hi", max_tokens=64_000))
    assert loop.run().subtype == "success" and engine.requests[-1].stream is True


def test_without_the_sdks_private_check_the_documented_threshold_decides(monkeypatch):
    """A newer or older SDK without ``_calculate_nonstreaming_timeout`` or ``anthropic._constants``: requests
    over NONSTREAMING_MAX_TOKENS (21,333) are streamed, the SDK's own rule; a client not the SDK's never is."""
    assert NONSTREAMING_MAX_TOKENS == 21_333
    client = scripted_client(ScenarioEngine(load_scenario("end_turn")))
    monkeypatch.setitem(sys.modules, "anthropic._constants", None)   # import fails: no per-model ceilings
    assert needs_streaming(client, {"model": "claude-sonnet-4-6", "max_tokens": 64_000})
    assert not needs_streaming(client, {"model": "claude-sonnet-4-6", "max_tokens": 21_333})
    owner = next(c for c in type(client).__mro__ if "_calculate_nonstreaming_timeout" in vars(c))
    monkeypatch.delattr(owner, "_calculate_nonstreaming_timeout")
    assert not hasattr(client, "_calculate_nonstreaming_timeout")
    assert needs_streaming(client, {"model": "claude-sonnet-4-6", "max_tokens": 21_334})
    assert not needs_streaming(client, {"model": "claude-sonnet-4-6", "max_tokens": 21_333})
    monkeypatch.setattr(anthropic.Anthropic, "_calculate_nonstreaming_timeout", lambda self, max_tokens: None,
                        raising=False)   # a check with other arguments
    assert needs_streaming(client, {"model": "claude-sonnet-4-6", "max_tokens": 64_000})
    assert not needs_streaming(object(), {"model": "claude-sonnet-4-6", "max_tokens": 64_000})
    monkeypatch.delattr(anthropic.Anthropic, "_calculate_nonstreaming_timeout")   # missing again
    engine = ScenarioEngine(load_scenario("end_turn"))
    loop = AgentLoop(scripted_client(engine), RunConfig.of(prompt="hi", max_tokens=64_000))
    assert loop.run().subtype == "success" and engine.requests[-1].stream is True


def test_escalation_to_64000_streams_and_gives_the_same_result_as_streaming_everything():
    plain = run("max_tokens_escalate", stream=False)
    streamed = run("max_tokens_escalate", stream=True)
    assert [r.stream for r in plain.engine.requests] == [False, True]
    assert [r.stream for r in streamed.engine.requests] == [True, True]
    assert plain.result.to_dict(with_messages=True) == streamed.result.to_dict(with_messages=True)

    def comparable(loop):
        out = []
        for e in loop.trace.events:
            data = {k: v for k, v in e.data.items() if k != "stream"}
            out.append((e.kind, e.call, data))
        return out

    assert comparable(plain) == comparable(streamed)


def test_a_request_timeout_does_not_stop_the_loop_streaming_a_large_request():
    """A timeout would let the SDK accept the request unstreamed; the loop streams it all the same."""
    loop = run("max_tokens_escalate", request_timeout=600.0)
    assert [r.stream for r in loop.engine.requests] == [False, True]
    assert loop.result.subtype == "success"


def test_cache_breakpoints_do_not_mutate_the_params():
    params = {"model": "m", "max_tokens": 5, "system": "s", "tools": [{"name": "t", "input_schema": {}}],
              "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}
    before = copy.deepcopy(params)
    marked = with_breakpoints(params)
    assert params == before and marked["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}


# --- the breakpoints a request event reports are the ones on the wire -----------------------------------


def _marks_on_the_wire(body: Any) -> int:
    if isinstance(body, dict):
        return ("cache_control" in body) + sum(_marks_on_the_wire(v) for v in body.values())
    if isinstance(body, list):
        return sum(_marks_on_the_wire(v) for v in body)
    return 0


def _reported_and_sent(loop: AgentLoop) -> list[tuple[int, int]]:
    reported = [e.data["cache_breakpoints"] for e in loop.trace.of_kind("request")]
    sent = [_marks_on_the_wire(r.body) for r in loop.engine.message_requests]
    return list(zip(reported, sent, strict=True))


@pytest.mark.parametrize("name,overrides", [
    ("tour", {}), ("tool_use", {"cache": False}), ("door_code", {"compaction": ["summarize"]}),
    ("proactive_compaction", {}), ("thinking_tool_use", {}), ("pause_turn", {}),
])
def test_the_request_event_reports_the_breakpoints_sent(name, overrides):
    loop = run(name, **overrides)
    pairs = _reported_and_sent(loop)
    assert pairs and all(reported == sent for reported, sent in pairs), pairs


def test_breakpoints_the_loop_did_not_place_are_counted_too():
    """Given messages may carry their own cache_control: the event counts it with the loop's own."""
    sc = load_scenario("end_turn")
    engine = ScenarioEngine(sc)
    marked_start = [{"role": "user", "content": [
        {"type": "text", "text": "Some earlier context.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": sc.prompt}]}]
    loop = AgentLoop(scripted_client(engine), RunConfig.of(messages=marked_start, model=sc.model, system="Be brief."))
    loop.engine = engine
    loop.run()
    assert engine.failures == []
    assert _reported_and_sent(loop) == [(3, 3)]   # the given mark, the system prompt's, the last block's


# --- the scripted server's sizes and cache, computed without copying the request ------------------------


def _all_scenario_bodies() -> list[dict[str, Any]]:
    from agentlab.backend.scenario import scenario_names

    out = []
    for name in scenario_names():
        loop = scenario_loop(name)
        try:
            loop.run()
        except Exception:  # noqa: BLE001 - a scenario built to fail still sent its requests
            pass
        out += [r.body for r in loop.engine.message_requests if r.body is not None]
    return out


def test_the_request_size_is_the_size_of_the_request_without_its_markers():
    from agentlab.backend.scenario import request_payload, request_tokens
    from agentlab.core.caching import chars_without_breakpoints, without_breakpoints
    from agentlab.core.compaction import estimate_tokens

    edge = [
        {"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
         "messages": [{"role": "user", "content": [{"cache_control": {"type": "ephemeral"}, "type": "text",
                                                    "text": 'quoted ,"cache_control": {"type":"x"} in text'}]}]},
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "text", "text": "nested", "cache_control": {"type": "ephemeral"}}]}]}],
         "tools": [{"cache_control": {"type": "ephemeral"}}]},
        {"messages": [{"role": "user", "content": "plain \ud83d\ude00 text, no markers"}]},
        {"messages": [{"role": "assistant", "content": [
            {"cache_control": {"type": "ephemeral"}, "type": "tool_use", "id": "t", "name": "n", "input": {}},
            {"type": "text", "text": "x"}]}]},
    ]
    bodies = _all_scenario_bodies() + edge
    assert len(bodies) > 100
    assert [request_tokens(b) for b in bodies] == [estimate_tokens(request_payload(b)) for b in bodies]
    compact = {"ensure_ascii": False, "separators": (",", ":")}
    assert [chars_without_breakpoints(b) for b in bodies] == [len(json.dumps(without_breakpoints(b), **compact))
                                                             for b in bodies]


def test_the_prompt_cache_reads_and_writes_the_same_prefixes():
    """The cache's answers on every scenario's requests, against a plain re-statement of its rule."""
    import hashlib
    import math

    from agentlab.core.caching import LOOKBACK_BLOCKS, _flatten

    class Plain(PromptCache):
        def use(self, request, total_tokens):
            blocks = _flatten(request)
            marks = [i for i, b in enumerate(blocks) if b[2]]
            if not marks:
                return type(super().use(request, total_tokens))()
            thinking = json.dumps(request.get("thinking"), sort_keys=True)
            digest, chars, hashes, tokens = hashlib.sha256(str(request.get("model")).encode()), 0, [], []
            for section, text, _ in blocks:
                digest.update((section + (thinking if section == "messages" else "") + "\x00" + text
                               + "\x00").encode())
                hashes.append(digest.copy().hexdigest())
                chars += len(text)
                tokens.append(min(total_tokens, math.ceil(chars / 4)))
            near = sorted({j for m in marks for j in range(max(0, m - LOOKBACK_BLOCKS + 1), m + 1)}, reverse=True)
            read = next((tokens[j] for j in near if hashes[j] in self.entries), 0)
            written = tokens[marks[-1]] - read if tokens[marks[-1]] >= self.min_tokens and tokens[marks[-1]] > read \
                else 0
            for m in marks:
                if tokens[m] >= self.min_tokens:
                    self.entries[hashes[m]] = tokens[m]
            return type(super().use({}, 0))(read=read, written=written)

    fast, plain = PromptCache(min_tokens=64), Plain(min_tokens=64)
    answers = [(fast.use(b, 10**6), plain.use(b, 10**6)) for b in _all_scenario_bodies()]
    assert all(a == b for a, b in answers)
    assert sum(a.read for a, _ in answers) > 0 and sum(a.written for a, _ in answers) > 0
