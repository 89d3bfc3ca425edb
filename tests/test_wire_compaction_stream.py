"""A streamed ``compaction`` block goes back exactly as the server sent it.

The API streams a compaction block as a ``content_block_start`` (the signature, content and encrypted_content
null) and one ``compaction_delta`` (content and encrypted_content) ("Compaction",
platform.claude.com/docs/en/build-with-claude/compaction; the SDK's BetaCompactionContentBlockDelta). The
SDK's beta stream (``client.beta.messages.stream``, lib/streaming/_beta_messages.py) applies that delta; its
plain stream (``client.messages.stream``, lib/streaming/_messages.py) has no branch for it and drops it.
agentlab's wire sends every request that names betas through ``client.beta.messages``, so its loop, streaming,
keeps the block whole. The scripted server checks the signature of a block sent back (a 400 when it does not
match) and takes a block with null content as a no-op, so a dropped delta would compact again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentlab.backend.context_edits import compaction_signature
from agentlab.backend.scenario import load_scenario
from agentlab.backend.scripted import ScenarioEngine
from agentlab.core.config import ServerCompaction
from agentlab.lab import scenario_loop, scripted_client

SCENARIO = "server_compaction"
SETTINGS = {  # the compact edit at a trigger the scenario's third tool result passes; the loop's own compaction
    "compact edit": dict(server_compaction=ServerCompaction(edits=("compact",), trigger_tokens=1500)),
    "on demand": dict(server_compaction=ServerCompaction(edits=(), on_demand=True), context_window=3000,
                      compact_threshold=0.5),
}


def sent_back(engine: ScenarioEngine) -> list[dict[str, Any]]:
    return [block for request in engine.message_requests for message in request.body["messages"]
            if isinstance(message["content"], list) for block in message["content"] if block["type"] == "compaction"]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("settings", list(SETTINGS))
def test_the_streaming_loop_sends_the_compaction_block_back_whole(settings: str, asynchronous: bool) -> None:
    engine = ScenarioEngine(load_scenario(SCENARIO))
    loop = scenario_loop(SCENARIO, stream=True, engine=engine, asynchronous=asynchronous, **SETTINGS[settings])
    result = asyncio.run(loop.arun()) if asynchronous else loop.run()
    served = [(r.kind, r.stream) for r in engine.message_requests]
    assert ("server_compaction", True) in served and all(stream for _, stream in served)
    [block] = sent_back(engine)   # compacted once: the block sent back was read, not taken for a no-op
    assert block["content"] == load_scenario(SCENARIO).summary and block["encrypted_content"]
    assert block["signature"] == compaction_signature(block["content"], block["encrypted_content"])
    assert result.subtype == "success" and result.requests == 5
    assert result.result == "The door code is 4711. I no longer know which room your desk is in."


def test_the_sdk_plain_stream_drops_the_compaction_delta_and_the_beta_stream_applies_it() -> None:
    """Why the wire uses the beta stream: if a release of the SDK applies compaction_delta in its plain
    stream too, this fails and docs/conformance.md's advice can be relaxed."""
    scenario = load_scenario(SCENARIO)
    client = scripted_client(ScenarioEngine(scenario))
    messages = [{"role": "user", "content": scenario.prompt}]
    with client.messages.stream(model=scenario.model, max_tokens=1024, messages=messages,
                                extra_body={"compaction": {"type": "summarize"}},
                                extra_headers={"anthropic-beta": "compact-2026-01-12"}) as stream:
        deltas = [event.delta.type for event in stream if event.type == "content_block_delta"]
        plain = stream.get_final_message().content[0].to_dict()
    with client.beta.messages.stream(model=scenario.model, max_tokens=1024, messages=messages,
                                     compaction={"type": "summarize"}, betas=["compact-2026-01-12"]) as stream:
        beta = stream.get_final_message().content[0].to_dict()
    assert deltas == ["compaction_delta"]
    assert plain["type"] == beta["type"] == "compaction" and plain["signature"] == beta["signature"]
    assert (plain["content"], plain["encrypted_content"]) == (None, None)
    assert beta["content"] == scenario.summary and beta["encrypted_content"]
