"""`agentlab observe` and the comparison table: request diffs, behaviour records, drift against the
committed records, and the table built from them."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from agentlab.backend.scenario import list_scenarios, load_scenario, scenario_names
from agentlab.cli import main as cli_main
from agentlab.core.errors import ConfigError
from agentlab.core.loop import AgentLoop
from agentlab.observatory.compare import (
    claim_for,
    clients_table,
    explained_differences,
    comparison_html,
    comparison_table,
    describe,
    load_claims,
    signature,
)
from agentlab.observatory.observe import (
    CLIENTS_PINS,
    OBSERVED_DIR,
    classify,
    claude_bin,
    client_version,
    comparable,
    diff_requests,
    drift,
    load_records,
    observe,
    reply_summary,
)

USER = {"role": "user", "content": "Hello"}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "calc", "input": {}}]}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]}


def body(*messages, **fields):
    return {"model": "m", "max_tokens": 100, "messages": list(messages), **fields}


# -- diff_requests and classify -----------------------------------------------------------------------------

def test_first_request_appends_everything() -> None:
    diff = diff_requests(None, body(USER))
    assert diff["kept"] == 0 and diff["dropped"] == 0 and not diff["same_messages"]
    assert diff["injected_user_texts"] == ["Hello"] and diff["changed"] == {}
    assert classify(diff, None) == "first"


def test_tool_results_after_the_assistant_turn() -> None:
    diff = diff_requests(body(USER), body(USER, CALL, RESULT))
    assert diff["kept"] == 1 and diff["assistant_blocks"] == ["tool_use"]
    assert diff["tool_results"] == [{"tool_use_id": "t1", "is_error": False, "content": "42"}]
    assert classify(diff, {"status": 200, "stop_reason": "tool_use", "blocks": ["tool_use"]}) == "tool_results"


def test_cache_control_and_string_content_do_not_count_as_changes() -> None:
    marked = {"role": "user", "content": [{"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral"}}]}
    diff = diff_requests(body(USER), body(marked, max_tokens=4096))
    assert diff["same_messages"] and diff["changed"] == {"max_tokens": [100, 4096]}
    assert classify(diff, {"status": 200, "stop_reason": "max_tokens", "blocks": ["text"]}) == "escalate"
    assert classify(diff_requests(body(USER), body(USER)), {"status": 529, "error": "overloaded_error"}) == "retry"
    switched = diff_requests(body(USER), body(USER, model="haiku"))
    assert classify(switched, {"status": 529}) == "fallback_model"


def test_another_model_after_an_error_is_a_fallback_though_the_messages_are_laid_out_anew() -> None:
    # Claude Code falling back from claude-opus-5-5 to claude-haiku-4-5 merges the text of its role: system item
    # into the user message: the same conversation for another model, not a user message added
    reminder = {"role": "system", "content": "Available agent types"}
    merged = {"role": "user", "content": [{"type": "text", "text": "<system-reminder> Available agent types"},
                                          {"type": "text", "text": "Hello"}]}
    diff = diff_requests(body(USER, reminder), body(merged, model="haiku"))
    assert diff["injected_user_texts"] and not diff["same_messages"] and diff["dropped"] == 0
    assert classify(diff, {"status": 529, "error": "overloaded_error"}) == "fallback_model"
    # the same model with a user message added after an error, or another model after an answer, is no fallback
    again = diff_requests(body(USER), body(USER, {"role": "user", "content": "try again"}))
    assert classify(again, {"status": 529, "error": "overloaded_error"}) == "reprompt"
    answered = diff_requests(body(USER, reminder), body(merged, model="haiku"))
    assert classify(answered, {"status": 200, "stop_reason": "end_turn", "blocks": ["text"]}) == "reprompt"


def test_continuation_nudge_and_reprompt_depend_on_the_previous_reply() -> None:
    partial = {"role": "assistant", "content": [{"type": "text", "text": "3.14"}]}
    more = {"role": "user", "content": "Output token limit hit, continue"}
    diff = diff_requests(body(USER), body(USER, partial, more))
    assert diff["injected_user_texts"] == ["Output token limit hit, continue"]
    assert classify(diff, {"status": 200, "stop_reason": "max_tokens", "blocks": ["text"]}) == "continuation"
    assert classify(diff, {"status": 200, "stop_reason": "end_turn", "blocks": ["text"]}) == "reprompt"
    nudge = diff_requests(body(USER, CALL, RESULT), body(USER, CALL, RESULT, {"role": "user", "content": "go on"}))
    assert classify(nudge, {"status": 200, "stop_reason": "end_turn", "blocks": []}) == "nudge"


def test_a_paused_turn_sent_back_as_is_or_merged_is_a_resume() -> None:
    paused = {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s1", "name": "web_search",
                                                "input": {}}]}
    diff = diff_requests(body(USER), body(USER, paused))
    assert diff["ends_with"] == "assistant"
    assert classify(diff, {"status": 200, "stop_reason": "pause_turn", "blocks": ["server_tool_use"]}) == "resume"
    merged = {"role": "assistant", "content": [*paused["content"], {"type": "text", "text": "found it"}]}
    diff = diff_requests(body(USER, paused), body(USER, merged))
    assert diff["extended_last"] and diff["dropped"] == 0
    assert diff["appended"][0]["extends_previous"] and diff["appended"][0]["texts"] == ["found it"]
    assert classify(diff, {"status": 200, "stop_reason": "pause_turn", "blocks": ["text"]}) == "resume"


def test_text_added_to_the_last_user_message_is_injected_text_not_a_resume() -> None:
    longer = {"role": "user", "content": [*RESULT["content"], {"type": "text", "text": "[Please continue]"}]}
    diff = diff_requests(body(USER, CALL, RESULT), body(USER, CALL, longer))
    assert diff["extended_last"] and diff["injected_user_texts"] == ["[Please continue]"]
    assert classify(diff, {"status": 200, "stop_reason": "end_turn", "blocks": []}) == "nudge"


def test_compaction_and_summary_requests_are_recognised() -> None:
    summary_ask = {"role": "user", "content": "Please write a detailed summary of the conversation so far."}
    diff = diff_requests(body(USER, CALL, RESULT), body(USER, CALL, RESULT, summary_ask))
    assert diff["summary_request"] and classify(diff, {"status": 400}) == "summary"
    short = {"role": "user", "content": "Earlier on, the calculator said 42."}
    diff = diff_requests(body(USER, CALL, RESULT), body(short))
    assert diff["dropped"] == 3 and classify(diff, {"status": 400}) == "compacted"


def test_role_system_items_and_top_level_changes_are_reported() -> None:
    reminder = {"role": "system", "content": "stop hook said: run the tests"}
    diff = diff_requests(body(USER, system="a"), body(USER, reminder, system="b", tools=[{"name": "x"}]))
    assert diff["injected_system_texts"] == ["stop hook said: run the tests"]
    assert diff["changed"] == {"system": True, "tools": True}


def test_long_texts_are_cut_short() -> None:
    diff = diff_requests(None, body({"role": "user", "content": "word " * 100}))
    assert len(diff["injected_user_texts"][0]) == 160 and diff["injected_user_texts"][0].endswith("…")


def test_reply_summary_reads_json_sse_and_errors() -> None:
    message = {"type": "message", "stop_reason": "end_turn", "content": [{"type": "text", "text": "hi"}]}
    assert reply_summary(200, {"content-type": "application/json"}, json.dumps(message).encode()) == \
        {"status": 200, "stop_reason": "end_turn", "blocks": ["text"]}
    sse = (b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
           b'"content_block": {"type": "tool_use"}}\n\nevent: message_delta\ndata: {"type": "message_delta", '
           b'"delta": {"stop_reason": "tool_use"}}\n\n')
    assert reply_summary(200, {"content-type": "text/event-stream"}, sse) == \
        {"status": 200, "stop_reason": "tool_use", "blocks": ["tool_use"]}
    error = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "x"}}).encode()
    assert reply_summary(529, {}, error) == {"status": 529, "error": "overloaded_error"}


# -- re-recording: drift against the committed records ------------------------------------------------------

DRIFT_CLIENTS = ("agentlab", "tool-runner")


@pytest.fixture(scope="module")
def rerecorded(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """Every scenario observed again for agentlab (its CLI in this process) and the tool runner, both at
    once. Backoff waits are switched off: the SDK's retries and the loop's (which the CLI does not let a
    caller inject) would only add wall time, which records keep apart and comparisons ignore."""
    out = tmp_path_factory.mktemp("observed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "sleep", lambda seconds: None)
        patch.setitem(AgentLoop.__init__.__kwdefaults__, "sleep", lambda seconds: None)
        patch.delenv("ANTHROPIC_API_KEY", raising=False)
        with ThreadPoolExecutor(max_workers=2) as pool:
            runs = {client: pool.submit(observe, client, out=out, in_process=True) for client in DRIFT_CLIENTS}
            return {client: {r["scenario"]: r for r in future.result()} for client, future in runs.items()}


def committed(client: str) -> dict[str, dict]:
    version = client_version(client)
    found = load_records().get((client, version))
    if not found:
        pytest.skip(f"no committed {client} {version} records in {OBSERVED_DIR}; "
                    f"record them with `agentlab observe {client}`")
    return found


@pytest.mark.parametrize("client", DRIFT_CLIENTS)
def test_rerecorded_observations_match_the_committed_ones(client: str, rerecorded) -> None:
    fresh = rerecorded[client]
    saved = committed(client)
    assert sorted(fresh) == sorted(scenario_names())
    missing = sorted(set(fresh) - set(saved))
    assert not missing, f"no committed {client} record for {missing}: run `agentlab observe {client} ...`"
    drifted = [name for name in sorted(fresh) if comparable(fresh[name]) != comparable(saved[name])]
    detail = {name: {"now": describe(fresh[name]), "committed": describe(saved[name])} for name in drifted}
    assert not drifted, (f"{client} behaves differently from its committed records (re-record with "
                         f"`agentlab observe {client} {' '.join(drifted)}` if intended): "
                         + json.dumps(detail, indent=1, ensure_ascii=False))


def test_the_pinned_framework_versions_are_the_recorded_ones() -> None:
    """`make record` installs the frameworks at the versions in the pins file; each pin must be a version with
    committed records, or a new release would be compared with nothing and the check would fail in CI."""
    pins = dict(line.split("==") for line in CLIENTS_PINS.read_text(encoding="utf-8").splitlines()
                if line and not line.startswith("#"))
    recorded = {client: sorted(v for c, v in load_records() if c == client)
                for client in ("tool-runner", "pydantic-ai", "langchain")}
    # the tool runner was recorded at the pin once; `make record` now runs it at the newest SDK release the project
    # admits (test_make_record_runs_the_tool_runner_at_the_newest_sdk_release_the_project_admits)
    assert pins["anthropic"] in recorded["tool-runner"]
    assert [pins["pydantic-ai-slim"]] == recorded["pydantic-ai"]
    assert [pins["langchain"]] == recorded["langchain"]
    langchain = load_records()[("langchain", pins["langchain"])]
    assert {r["settings"]["langchain-anthropic"] for r in langchain.values()} == {pins["langchain-anthropic"]}


def test_a_version_without_records_is_one_line_that_says_how_to_observe_it() -> None:
    saved = next(iter(load_records()[("pydantic-ai", "2.68.0")].values()))
    fresh = [{**saved, "version": "9.9.9", "scenario": name} for name in ("end_turn", "tool_use", "refusal")]
    [line] = drift(fresh)
    assert line.startswith("pydantic-ai 9.9.9 has no committed records (committed: 2.68.0)")
    assert "clients-constraints.txt" in line and "make record UPDATE=1" in line
    # the tool runner follows the newest SDK release: no pin to edit, only records to write
    runner = next(iter(load_records()[("tool-runner", "2.17.0")].values()))
    [line] = drift([{**runner, "version": "2.100.0", "scenario": "end_turn"}])
    assert line == ("tool-runner 2.100.0 has no committed records (committed: 2.14.0, 2.15.0, 2.17.0); `make record` "
                    "runs tool-runner at the newest anthropic release pyproject.toml admits; to record 2.100.0, run "
                    "`make record UPDATE=1`")


def test_make_record_runs_the_tool_runner_at_the_newest_sdk_release_the_project_admits() -> None:
    """`make record` upgrades the tool runner's own venv to the newest release of the range pyproject.toml gives the
    SDK (the clients' venv pins the SDK for the frameworks), and observes the tool runner with that venv."""
    import subprocess
    import tomllib

    root = Path(__file__).resolve().parent.parent
    spec = next(d for d in tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "dependencies"] if d.startswith("anthropic"))
    dry = subprocess.run(["make", "-n", "-B", "tool-runner-venv"], cwd=root, capture_output=True, text=True,
                         check=True).stdout
    assert f".venv-tool-runner/bin/python -m pip install --quiet --upgrade '{spec}'" in dry
    record = (root / "Makefile").read_text(encoding="utf-8").split("\nrecord:", 1)[1]
    assert ("[ $$client = tool-runner ] && [ -f $(RUNNER_VENV)/.installed ]; then run=$(RUNNER_VENV)/bin/python"
            in record)


def test_the_agentlab_client_runs_as_a_subprocess_with_the_same_record(tmp_path: Path) -> None:
    saved = committed("agentlab").get("tool_use")
    [record] = observe("agentlab", ["tool_use"], out=tmp_path)
    assert record["result"]["exit_code"] == 0 and record["timing"]["wall_s"] > 0
    assert saved is not None and comparable(record) == comparable(saved)


def test_agentlab_meets_every_scenario_expectation_when_observed(rerecorded) -> None:
    assert set(rerecorded["agentlab"]) == set(scenario_names())
    for name, record in rerecorded["agentlab"].items():
        sc = load_scenario(name)
        assert record["summary"]["expect_unmet"] == 0, (name, [r.get("expect_unmet") for r in record["requests"]])
        assert record["summary"]["beyond_script"] == 0, name
        assert record["result"]["subtype"] == sc.expect.subtype, name
        assert record["result"]["exit_code"] == (0 if sc.expect.subtype == "success" else 1), name


def test_records_keep_wall_time_apart(rerecorded) -> None:
    record = rerecorded["tool-runner"]["tool_use"]
    assert set(record["timing"]) == {"wall_s", "request_s"}
    arrivals = record["timing"]["request_s"]  # when each request arrived, seconds after the first
    assert len(arrivals) == len(record["requests"]) and arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert "timing" not in comparable(record) and "wall" not in json.dumps(comparable(record))
    assert record["requests"][1]["thread"] == "continue" and record["requests"][1]["sent_messages"] == 1
    assert [r["action"] for r in record["requests"]] == ["first", "tool_results"]


CLAUDE_SAMPLE = ("max_tokens_give_up", "pause_turn", "stop_hook")  # AGENTLAB_OBSERVE_ALL=1: every scenario


@pytest.mark.skipif(claude_bin() is None, reason="the Claude Code CLI is not installed (`make claude-code` "
                    "installs it into tool/claude-code); its committed records are still used by the table")
def test_claude_code_observation_matches_the_committed_one(tmp_path: Path) -> None:
    version = client_version("claude-code")
    saved = load_records().get(("claude-code", version))
    if not saved:
        pytest.skip(f"Claude Code {version} is installed but has no committed records: "
                    "record them with `agentlab observe claude-code`")
    names = scenario_names() if os.environ.get("AGENTLAB_OBSERVE_ALL") else list(CLAUDE_SAMPLE)
    fresh = observe("claude-code", names, out=tmp_path, timeout=120)
    assert [record["scenario"] for record in fresh] == names
    for record in fresh:
        old = saved.get(record["scenario"])
        assert old is not None, f"no committed claude-code record for {record['scenario']}"
        assert signature(record) == signature(old), (record["scenario"], describe(record), describe(old))
        assert record["summary"]["max_tokens"] == old["summary"]["max_tokens"]


def test_stop_hook_cap_feeds_back_as_many_blocks_as_claude_code() -> None:
    claude = load_records().get(("claude-code", "2.1.197"), {}).get("stop_hook_cap")
    if claude is None:
        pytest.skip("no committed claude-code 2.1.197 record of stop_hook_cap")
    ours = committed("agentlab")["stop_hook_cap"]
    assert ours["summary"]["actions"].count("reprompt") == claude["summary"]["actions"].count("reprompt")


# -- the CLI ------------------------------------------------------------------------------------------------

def test_cli_observe_writes_one_record_per_scenario(tmp_path: Path, capsys) -> None:
    assert cli_main(["observe", "tool-runner", "end_turn", "pause_turn", "--out", str(tmp_path)]) == 0
    version = client_version("tool-runner")
    files = sorted(p.name for p in (tmp_path / "tool-runner" / version).iterdir())
    assert files == ["end_turn.json", "pause_turn.json"]
    printed = capsys.readouterr().out
    assert "pause_turn" in printed and "resume" in printed
    record = json.loads((tmp_path / "tool-runner" / version / "pause_turn.json").read_text())
    assert record["client"] == "tool-runner" and record["version"] == version and record["row"] == "6"


def test_cli_observe_rejects_an_unknown_client_or_scenario(capsys) -> None:
    assert cli_main(["observe", "curl"]) == 2
    assert "unknown client 'curl'" in capsys.readouterr().err
    assert cli_main(["observe", "tool-runner", "no_such_scenario"]) == 2
    assert "no scenario 'no_such_scenario'" in capsys.readouterr().err


# -- the scenarios the records are of ------------------------------------------------------------------------

def _replies(sc):
    for step in sc.steps:
        yield step
        yield from step.cases or []


def _block_type(block) -> str | None:
    return block.get("type") if isinstance(block, dict) else getattr(block, "type", None)


def test_a_scenario_whose_model_uses_a_server_tool_declares_it() -> None:
    """The live API answers with server_tool_use blocks only for a server tool the request offers; a client that
    needs it in ``tools`` (pydantic-ai drops the blocks otherwise) is only given it when the scenario declares it."""
    using = {sc.name: sc for sc in list_scenarios()
             if any(_block_type(b) == "server_tool_use" for r in _replies(sc) for b in r.content or [])}
    assert {"pause_turn", "redacted_thinking", "tour"} <= set(using)
    undeclared = {}
    for name, sc in using.items():
        used = {b.get("name") if isinstance(b, dict) else getattr(b, "name", None)
                for r in _replies(sc) for b in r.content or [] if _block_type(b) == "server_tool_use"}
        declared = {t.get("name") for t in sc.server_tools}
        if used - declared:
            undeclared[name] = sorted(map(str, used - declared))
    assert not undeclared, f"scenarios whose model uses a server tool they do not declare in server_tools: {undeclared}"


def test_every_scripted_error_says_which_headers_the_real_api_sends() -> None:
    errors = [(sc.name, k, r.error) for sc in list_scenarios() for k, r in enumerate(_replies(sc))
              if r.error is not None]
    assert len(errors) >= 5
    missing = [(name, k) for name, k, error in errors if error.api_headers is None]
    assert not missing, f"error replies without api_headers (scenario, reply index): {missing}"


def test_the_tool_runner_offers_the_scenarios_server_tools(tmp_path: Path) -> None:
    [record] = observe("tool-runner", ["pause_turn"], out=tmp_path)
    assert record["settings"]["server_tools"] == ["web_search"]
    assert not any("never offered" in n for n in record["notes"]), record["notes"]
    assert record["summary"]["expect_unmet"] == 0


# -- the comparison table -----------------------------------------------------------------------------------

def test_claims_cover_every_row_for_both_sources() -> None:
    claims = load_claims()
    rows = {str(sc.row) for sc in list_scenarios() if sc.row}
    assert rows <= set(claims["rows"]), rows - set(claims["rows"])
    for name in claims["scenarios"]:
        load_scenario(name)  # every scenario entry names a real scenario
    branches = [sc for sc in list_scenarios() if sc.row]
    assert len(branches) >= len(rows)
    checked = [(sc.name, source, claim_for(claims, source, sc)) for sc in branches for source in ("article", "docs")]
    assert len(checked) == 2 * len(branches)
    missing = [(name, source) for name, source, claim in checked if not (claim and claim["text"])]
    assert not missing, missing
    outcomes = {claim.get("outcome", "ok") for _, _, claim in checked}
    assert outcomes <= {"ok", "error"}, outcomes


def test_comparison_table_has_a_row_per_branch_and_marks_differences() -> None:
    table = comparison_table()
    branch_scenarios = sorted(sc.name for sc in list_scenarios() if sc.row)
    assert sorted(table["scenario"]) == branch_scenarios
    columns = list(table.columns)
    assert columns[:4] == ["row", "scenario", "article (Claude Code v2.1.220)", "API docs"]
    assert columns[-2:] == ["differs", "differing"]
    observed = [c for c in columns[4:-2]]
    assert observed[-1].startswith("agentlab ") and any(c.startswith("tool-runner ") for c in observed)
    # article, API docs, the clients people use (Claude Code oldest first, the frameworks), agentlab last
    families = [c.split(" ")[0] for c in observed]
    assert families == sorted(families, key=["claude-code", "pydantic-ai", "langchain", "openai-agents", "strands",
                                             "vercel-ai", "anthropic-ts", "tool-runner", "agentlab"].index)
    assert {"claude-code 2.1.197", "claude-code 2.1.332"} <= set(observed)
    assert observed.index("claude-code 2.1.197") < observed.index("claude-code 2.1.332")
    rows = table.set_index("scenario")
    agentlab = observed[-1]
    assert rows.loc["max_tokens_give_up", agentlab].startswith("5 requests: escalate, continuation ×3")
    # the article says v2.1.220 has no pause_turn branch; agentlab resumes, as the API docs advise
    assert rows.loc["pause_turn", "differs"]
    assert "article (Claude Code v2.1.220)" in rows.loc["pause_turn", "differing"]
    assert "API docs" not in rows.loc["pause_turn", "differing"]
    assert not rows.loc["end_turn", "differs"]


def test_comparison_table_falls_back_to_expectations_without_records(tmp_path: Path) -> None:
    table = comparison_table(observed=tmp_path)
    assert list(table.columns)[-3:] == ["agentlab", "differs", "differing"]
    assert table.set_index("scenario").loc["refusal", "agentlab"] == "expected: error_refusal"
    assert table["differs"].isna().all()


def test_comparison_html_is_deterministic_and_marks_cells() -> None:
    first, second = comparison_html(), comparison_html()
    assert first == second
    assert '<table class="agentlab-compare">' in first and '<td class="differs">' in first
    assert ' id="T_' not in first  # no Styler-generated ids


def test_describe_reads_like_the_table(tmp_path: Path) -> None:
    record = {"row": "3", "summary": {"requests": 4, "actions": ["continuation"] * 3, "max_tokens": [32000],
                                      "max_tokens_raised": False, "models": ["m"], "beyond_script": 0},
              "result": {"exit_code": 1, "subtype": "success", "is_error": True}}
    assert describe(record) == ("4 requests: continuation ×3; no max_tokens raise; "
                                "ended in error: is_error true, though its subtype says success (exit 1)")
    assert signature(record) == (("continuation",) * 3, "error")


def test_claims_file_is_plain_yaml_with_labels() -> None:
    data = yaml.safe_load((OBSERVED_DIR / "claims.yaml").read_text())
    assert data["sources"]["article"]["label"] == "article (Claude Code v2.1.220)"
    assert data["sources"]["docs"]["label"] == "API docs"


# -- clients: any runner, versioned Claude Code, the frameworks ----------------------------------------------

def test_any_agent_is_observed_through_one_runner_function(tmp_path: Path) -> None:
    import anthropic

    from agentlab.observatory.observe import ClientOutcome

    def naive(scenario, base_url, workdir, timeout):
        """The loop of lesson 00: stop when stop_reason is not tool_use (here: one call, no tools)."""
        client = anthropic.Anthropic(base_url=base_url, api_key="k", max_retries=0)
        reply = client.messages.create(model=scenario.model, max_tokens=scenario.max_tokens,
                                       messages=[{"role": "user", "content": scenario.prompt}])
        return ClientOutcome({"exit_code": 0, "stop_reason": reply.stop_reason, "is_error": False})

    records = observe("naive-loop", ["pause_turn", "end_turn"], out=tmp_path, runner=naive, version="0.0.1")
    assert [r["scenario"] for r in records] == ["pause_turn", "end_turn"]
    paused = json.loads((tmp_path / "naive-loop" / "0.0.1" / "pause_turn.json").read_text())
    assert paused["client"] == "naive-loop" and paused["summary"]["requests"] == 1
    # it never offered the web_search server tool the scripted model uses: the live API would not pause a search
    # it was never offered, so the reply ends the turn, and the record says why the branch was not reached
    assert paused["result"]["stop_reason"] == "end_turn"
    assert any("never offered the server tool(s) web_search" in n for n in paused["notes"])
    assert paused["requests"][0]["not_reached"] == [
        "the scripted model uses the server tool web_search, which the request does not offer"]
    assert paused["requests"][0]["expect_unmet"] == ["a tool named 'web_search' in tools, got none"]
    with pytest.raises(ConfigError, match="give its version"):
        observe("naive-loop", ["end_turn"], out=tmp_path, runner=naive)


def test_a_record_is_the_same_on_another_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that writes its working folder and the OS release into its system prompt (as Claude Code
    does) gives the same record, request sizes included, on two machines with different OS releases; the
    server answers it with the same sizes too (usage, count_tokens), so a client's decisions on them and the
    numbers in its error texts do not depend on the machine either."""
    import platform

    import anthropic

    from agentlab.observatory.observe import ClientOutcome, comparable, observe_scenario

    told: list[tuple[int, int]] = []  # (count_tokens, usage.input_tokens) as the server answered, per run

    def environment_aware(scenario, base_url, workdir, timeout):
        client = anthropic.Anthropic(base_url=base_url, api_key="k", max_retries=0)
        system = f"Primary working directory: {workdir}/work\nOS Version: Linux {platform.release()}"
        messages = [{"role": "user", "content": scenario.prompt}]
        counted = client.messages.count_tokens(model=scenario.model, system=system, messages=messages)
        reply = client.messages.create(model=scenario.model, max_tokens=scenario.max_tokens, system=system,
                                       messages=messages)
        told.append((counted.input_tokens, reply.usage.input_tokens))
        return ClientOutcome({"exit_code": 0})

    records = []
    for release in ("6.1.0-18-amd64", "6.18.44-fc-v1045-longer-build-name"):
        monkeypatch.setattr(platform, "release", lambda release=release: release)
        records.append(observe_scenario("env-aware", "end_turn", runner=environment_aware, version="1"))
    first, second = records
    assert first["requests"][0]["tokens"] == second["requests"][0]["tokens"]
    assert comparable(first) == comparable(second)
    assert len(told) == 2 and told[0] == told[1]
    assert told[0][1] == first["requests"][0]["tokens"]


def test_clients_resolve_by_name_and_claude_code_by_version() -> None:
    from agentlab.observatory.observe import CLIENTS, resolve_client

    assert list(CLIENTS) == ["agentlab", "tool-runner", "claude-code", "pydantic-ai", "langchain", "vercel-ai",
                             "anthropic-ts", "openai-agents", "strands"]
    assert resolve_client("tool-runner").version() == client_version("tool-runner")
    with pytest.raises(ConfigError, match="is not installed"):
        resolve_client("claude-code@0.0.1")
    with pytest.raises(ConfigError, match="only claude-code takes @VERSION"):
        resolve_client("langchain@1.0")
    with pytest.raises(ConfigError, match="unknown client 'curl'"):
        resolve_client("curl")


def test_a_missing_framework_names_the_extra_that_installs_it(monkeypatch) -> None:
    import builtins

    from agentlab.observatory.observe import run_langchain, run_pydantic_ai

    real_import = builtins.__import__

    def no_frameworks(name, *args, **kwargs):
        if name.split(".")[0] in ("pydantic_ai", "langchain", "langchain_anthropic"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_frameworks)
    for runner in (run_pydantic_ai, run_langchain):
        with pytest.raises(ConfigError, match=r"clients` extra.*make record"):
            runner(load_scenario("end_turn"), "http://127.0.0.1:1", Path("."), 5)


def test_observe_skip_missing_explains_and_exits_0(capsys) -> None:
    assert cli_main(["observe", "claude-code@0.0.1", "end_turn", "--skip-missing"]) == 0
    assert "skipping claude-code@0.0.1: Claude Code 0.0.1 is not installed" in capsys.readouterr().out
    assert cli_main(["observe", "claude-code@0.0.1", "end_turn"]) == 2


def test_observe_check_compares_with_the_committed_records(tmp_path: Path, capsys) -> None:
    assert cli_main(["observe", "tool-runner", "end_turn", "--out", str(tmp_path)]) == 0
    assert cli_main(["observe", "tool-runner", "end_turn", "--out", str(tmp_path), "--check"]) == 0
    assert "1 of 1 record(s) reproduce the committed ones" in capsys.readouterr().out
    path = tmp_path / "tool-runner" / client_version("tool-runner") / "end_turn.json"
    changed = json.loads(path.read_text())
    changed["summary"]["actions"] = ["retry"]
    path.write_text(json.dumps(changed))
    assert cli_main(["observe", "tool-runner", "end_turn", "--out", str(tmp_path), "--check"]) == 1
    assert "DRIFT end_turn" in capsys.readouterr().out


def test_a_reprompt_merged_into_the_user_message_is_not_a_compaction() -> None:
    prompt = {"role": "user", "content": [{"type": "text", "text": "Run the tests."}]}
    merged = {"role": "user", "content": [{"type": "text", "text": "Run the tests.\n\nThe previous response "
                                                                  "failed to produce a valid tool call."}]}
    diff = diff_requests(body(prompt), body(merged))
    assert diff["merged_last"] and diff["dropped"] == 0
    assert diff["injected_user_texts"] == ["The previous response failed to produce a valid tool call."]
    assert classify(diff, {"status": 200, "stop_reason": "tool_use", "blocks": ["text"]}) == "reprompt"
    rewritten = {"role": "user", "content": "Earlier: the tests were run."}
    diff = diff_requests(body(prompt), body(rewritten))
    assert not diff["merged_last"] and classify(diff, {"status": 200}) == "compacted"


def test_a_run_whose_first_request_overflows_is_described_and_not_compared() -> None:
    record = {"row": "0b", "requests": [{"kind": "prompt_too_long", "tokens": 29311,
                                         "error": "prompt is too long: 29311 tokens > 2600 maximum"}],
              "summary": {"requests": 1, "actions": [], "max_tokens": [32000], "max_tokens_raised": False,
                          "models": ["m"], "beyond_script": 0},
              "result": {"exit_code": 1, "subtype": "success", "is_error": True}}
    assert describe(record) == ("not comparable: its first request (~29,311 tokens of its own system prompt and "
                                "tools) is already over the 2,600-token window")
    assert signature(record) is None


def test_overflowing_cells_say_so_instead_of_an_outcome() -> None:
    rows = comparison_table().set_index("scenario")
    for name in ("door_code", "compaction_give_up", "proactive_compaction"):
        cell = rows.loc[name, "claude-code 2.1.197"]
        assert cell.startswith("not comparable: its first request (~") and "is_error" not in cell, (name, cell)
        assert "claude-code" not in rows.loc[name, "differing"]


def test_the_clients_table_says_how_to_reproduce_each_record() -> None:
    clients = clients_table()
    commands = list(clients["reproduce"])
    for command in ("agentlab observe claude-code@2.1.197", "agentlab observe claude-code@2.1.332",
                    "agentlab observe pydantic-ai", "agentlab observe langchain", "agentlab observe agentlab"):
        assert command in commands
    note = clients.set_index("reproduce").loc["agentlab observe claude-code@2.1.332", "note"]
    assert "Claude Agent SDK" in note
    # every client's newest version holds a record of every scenario; an older one (the tool runner at 2.14.0 and
    # 2.15.0, which `make record` no longer runs) keeps the records it was made with, of scenarios that still exist
    newest = clients.groupby("reproduce").tail(1)
    assert (newest["records"] == len(scenario_names())).all(), newest[["reproduce", "version", "records"]]
    for (client, version), records in load_records().items():
        assert set(records) <= set(scenario_names()), (client, version, set(records) - set(scenario_names()))


def test_explained_differences_name_real_rows_that_differ() -> None:
    explained = explained_differences()
    assert {"refusal", "mislabel_tool_use", "pause_turn"} <= set(explained["scenario"])
    assert all(explained["why"].str.len() > 40)
    rows = explained.set_index("scenario")
    for name in ("refusal", "mislabel_tool_use", "pause_turn", "unsupported_field"):
        assert rows.loc[name, "differing"], name  # these explain cells that differ from agentlab's


def test_a_thinking_expectation_holds_for_adaptive_thinking_as_the_server_serves_it() -> None:
    # the default claude-opus-5-5 takes thinking {type: adaptive} (LiteLLM and Claude Code send it): the server
    # serves thinking blocks to it (backend.offered.thinking_enabled), so a step expecting thinking is met
    from agentlab.backend.scenario import Predicate

    base = {"model": "claude-opus-5-5", "max_tokens": 2048, "messages": [{"role": "user", "content": "hi"}]}
    wants = Predicate(thinking=True)
    assert wants.failures({**base, "thinking": {"type": "adaptive"}}, stream=False) == []
    assert wants.failures({**base, "thinking": {"type": "enabled", "budget_tokens": 1024}}, stream=False) == []
    assert wants.failures(base, stream=False) == ["a request with thinking enabled"]
    assert Predicate(thinking=False).failures({**base, "thinking": {"type": "adaptive"}}, stream=False) == [
        "a request without thinking enabled"]
    disabled = {**base, "thinking": {"type": "disabled"}}
    assert wants.failures(disabled, stream=False) == ["a request with thinking enabled"]
