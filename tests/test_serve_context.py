"""Server-side compaction and context editing as the scripted server serves them, through the real `anthropic`
client (in-process transport) and over HTTP (`agentlab serve`)."""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import httpx2
import pytest

from agentlab.backend.context_edits import CLEARED, compaction_signature
from agentlab.backend.scenario import load_scenario
from agentlab.backend.scripted import ScenarioEngine, scripted_client
from agentlab.backend.serve import ScenarioServer
from agentlab.core.paths import data_dir

SANDBOX = data_dir() / "sandbox"
READ_FILE = {"name": "read_file", "description": "Read a file.",
             "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
BETAS = ["compact-2026-01-12", "context-management-2025-06-27"]
BOTH = "The door code is 4711, and your desk is in room B-204."
NO_ROOM = "The door code is 4711. I no longer know which room your desk is in."
NO_CODE = "Your desk is in room B-204. I no longer know the door code."


def run(name: str, **params: Any) -> tuple[list[Any], ScenarioEngine, list[dict[str, Any]]]:
    """The scenario's conversation driven by hand through the SDK's beta endpoint with ``params``: tools run on
    the sandbox, a reply is appended as it came, a compaction pause is resumed. The replies, the engine, and
    the messages of the last request."""
    engine = ScenarioEngine.from_name(name)
    client = scripted_client(engine)
    messages: list[dict[str, Any]] = [{"role": "user", "content": load_scenario(name).prompt}]
    replies = []
    for _ in range(8):
        reply = client.beta.messages.create(model="claude-opus-5-5", max_tokens=1024, tools=[READ_FILE],
                                            messages=copy.deepcopy(messages), betas=BETAS, **params)
        replies.append(reply)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True, by_alias=True)
                                                          for b in reply.content]})
        if reply.stop_reason == "compaction":
            continue
        if reply.stop_reason != "tool_use":
            return replies, engine, messages
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": (SANDBOX / b.input["path"]).read_text()}
            for b in reply.content if b.type == "tool_use"]})
    raise AssertionError("the conversation did not end")


def compact(trigger: int, pause: bool = False) -> dict[str, Any]:
    return {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": trigger},
                       "pause_after_compaction": pause}]}


def clear_tools(trigger: int, keep: int) -> dict[str, Any]:
    return {"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": trigger},
                       "keep": {"type": "tool_uses", "value": keep}}]}


def test_without_server_context_management_both_facts_survive() -> None:
    replies, _, _ = run("server_compaction")
    assert replies[-1].content[-1].text == BOTH
    assert all(r.context_management is None and r.usage.iterations is None for r in replies)


def test_the_compact_edit_replaces_the_history_with_its_summary_and_answers_after_the_block() -> None:
    replies, engine, _ = run("server_compaction", context_management=compact(1000))
    compacted = next(r for r in replies if r.content[0].type == "compaction")
    block = compacted.content[0]
    assert "4711" in block.content and "B-204" not in block.content
    assert block.signature == compaction_signature(block.content, block.encrypted_content)
    assert block.tool_changes == [] and compacted.stop_reason == "tool_use"
    assert [i.type for i in compacted.usage.iterations] == ["compaction", "message"]
    assert compacted.usage.input_tokens == compacted.usage.iterations[1].input_tokens  # the trimmed prompt
    assert compacted.usage.iterations[0].input_tokens >= 1000  # the prompt that reached the trigger
    assert compacted.usage.iterations[0].input_tokens > compacted.usage.input_tokens
    assert replies[-1].content[-1].text == NO_ROOM  # the summary kept the code, not the room
    assert engine.next_step == 4 and len(replies) == 4


def test_pause_after_compaction_returns_the_block_alone_and_resumes_when_it_comes_back() -> None:
    replies, engine, messages = run("server_compaction", context_management=compact(1000, pause=True))
    paused = [r for r in replies if r.stop_reason == "compaction"]
    assert len(paused) == 1 and [b.type for b in paused[0].content] == ["compaction"]
    assert paused[0].usage.input_tokens == 0 and [i.type for i in paused[0].usage.iterations] == ["compaction"]
    assert engine.requests[replies.index(paused[0])].kind == "server_compaction"
    assert replies[-1].content[-1].text == NO_ROOM and engine.next_step == 4 and len(replies) == 5
    # the last request still carries the block: the prompt it is billed for starts there
    last = engine.requests[-1]
    assert any(b.get("type") == "compaction" for m in last.body["messages"] for b in m["content"]
               if isinstance(m["content"], list))


def test_a_compaction_request_gets_the_signed_block_and_nothing_else() -> None:
    engine = ScenarioEngine.from_name("server_compaction")
    client = scripted_client(engine)
    reply = client.beta.messages.create(model="claude-opus-5-5", max_tokens=1024, betas=["compact-2026-09-04"],
                                        messages=[{"role": "user", "content": "Read my notes."}],
                                        compaction={"type": "summarize"})
    assert reply.stop_reason == "compaction" and [b.type for b in reply.content] == ["compaction"]
    assert engine.next_step == 0  # no step used
    with client.beta.messages.stream(model="claude-opus-5-5", max_tokens=1024, compaction={"type": "summarize"},
                                     messages=[{"role": "user", "content": "Read my notes."}]) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].content == reply.content[0].content
    assert streamed.content[0].signature == reply.content[0].signature


def test_a_compaction_block_sent_back_changed_is_a_400_and_a_null_one_is_a_no_op() -> None:
    engine = ScenarioEngine.from_name("server_compaction")
    client = scripted_client(engine)
    block = client.beta.messages.create(model="claude-opus-5-5", max_tokens=1024, compaction={"type": "summarize"},
                                        messages=[{"role": "user", "content": "hi"}]).content[0]
    sent = block.model_dump(exclude_none=True)
    forged = {**sent, "content": sent["content"] + " The door code is 0000."}
    ask = [{"role": "user", "content": "What is my room?"}]
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature` in `compaction` block"):
        client.beta.messages.create(model="claude-opus-5-5", max_tokens=1024,
                                    messages=[{"role": "assistant", "content": [forged]}, *ask])
    with pytest.raises(anthropic.BadRequestError, match="empty string"):
        client.beta.messages.create(model="claude-opus-5-5", max_tokens=1024,
                                    messages=[{"role": "assistant", "content": [{**sent, "content": ""}]}, *ask])
    failed = {"type": "compaction", "content": None}
    history = [{"role": "user", "content": "My desk is in room B-204."}, {"role": "assistant", "content": "Noted."},
               {"role": "assistant", "content": [failed]}, *ask]
    client.beta.messages.create(model="claude-opus-5-5", max_tokens=1024, messages=history)
    assert engine.requests[-1].status == 200


@pytest.mark.parametrize(("config", "said"), [
    ({"compaction": {"type": "summarize"}, "context_management": {"edits": []}}, "cannot be combined"),
    ({"compaction": {"type": "truncate"}}, "summarize"),
    ({"context_management": {"edits": [{"type": "clear_everything"}]}}, "clear_tool_uses_20250919"),
])
def test_compaction_settings_the_api_refuses_are_400s(config, said) -> None:
    engine = ScenarioEngine.from_name("server_compaction")
    with pytest.raises(anthropic.BadRequestError, match=said):
        scripted_client(engine).beta.messages.create(model="claude-opus-5-5", max_tokens=1024,
                                                     messages=[{"role": "user", "content": "hi"}],
                                                     extra_body=config)
    assert engine.next_step == 0


def test_clearing_old_tool_results_forgets_the_fact_only_a_tool_result_held() -> None:
    replies, engine, _ = run("context_editing", context_management=clear_tools(1200, keep=2))
    assert replies[-1].content[-1].text == NO_CODE
    [applied] = replies[-1].context_management.applied_edits
    assert applied.type == "clear_tool_uses_20250919" and applied.cleared_tool_uses == 1
    assert applied.cleared_input_tokens > 0
    full = engine.request_tokens(engine.requests[-1].body)
    assert replies[-1].usage.input_tokens + replies[-1].usage.cache_read_input_tokens \
        + replies[-1].usage.cache_creation_input_tokens == full - applied.cleared_input_tokens
    assert all(r.context_management is None for r in replies[:2])  # under the trigger: nothing cleared


def test_a_clear_thinking_edit_that_keeps_all_clears_nothing_and_reports_nothing() -> None:
    edit = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    replies, _, _ = run("context_editing", context_management=edit)
    assert replies[-1].content[-1].text == BOTH
    assert all(r.context_management is None for r in replies)


def test_count_tokens_counts_the_edited_prompt_and_reports_the_original() -> None:
    _, engine, messages = run("context_editing")
    client = scripted_client(engine)
    counted = client.beta.messages.count_tokens(model="claude-opus-5-5", messages=messages[:-1], tools=[READ_FILE],
                                                betas=BETAS, context_management=clear_tools(1200, keep=1))
    assert counted.context_management.original_input_tokens > counted.input_tokens


def test_agentlab_serve_applies_the_edits_to_a_raw_request() -> None:
    history = [{"role": "user", "content": "Read notes.txt."},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file",
                                                  "input": {"path": "notes.txt"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                             "content": "The door code is 4711. " * 200}]}]
    body = {"model": "claude-opus-5-5", "max_tokens": 100, "tools": [READ_FILE], "messages": history,
            "context_management": clear_tools(100, keep=0)}
    with ScenarioServer("context_editing") as server:
        reply = httpx2.post(f"{server.base_url}/v1/messages", json=body,
                            headers={"anthropic-beta": BETAS[1]}).json()
    assert reply["context_management"]["applied_edits"][0]["cleared_tool_uses"] == 1
    assert reply["usage"]["input_tokens"] < 300
    assert CLEARED not in str(body)  # the client's history is its own: the server edits what the model reads
