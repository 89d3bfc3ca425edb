"""The API's own recoveries, on the wire: what the loop sends after each kind of reply.

A refusal retried on a fallback model echoes the refusal's credit token (docs: "Refusals and fallback",
"Fallback credit"); a run may ask for server-side ``fallbacks`` and keep a reply's ``fallback`` block as it came;
server-side compaction and context editing go as ``context_management`` edits, and a ``compaction`` reply is
sent back unchanged ("Compaction", "Context editing"). Each test answers with a small hand-written server
(an ``httpx2.MockTransport``) and reads the requests the real SDK client sent.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import pytest

from agentlab.core.config import RunConfig, ServerCompaction
from agentlab.core.errors import ConfigError
from agentlab.core.loop import AgentLoop
from agentlab.core.tools import ToolRegistry

TOKEN = "fct_test_0001"
REFUSED = "claude-opus-5-5"
FALLBACK = "claude-opus-4-8"


def reply(content: list[dict[str, Any]], stop_reason: str, model: str, **extra: Any) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5},
            **extra}


def refusal(*, token: str | None = TOKEN, claim: bool | None = False, partial: str = "") -> dict[str, Any]:
    details = {"type": "refusal", "category": "cyber", "explanation": "Blocked under the usage policy.",
               "fallback_credit_token": token, "fallback_has_prefill_claim": claim if token else None,
               "recommended_model": None}
    content = [{"type": "text", "text": partial}] if partial else []
    return reply(content, "refusal", REFUSED, stop_details=details)


class Server:
    """Answers each request with the next reply; keeps each request's URL, anthropic-beta header and body."""

    def __init__(self, *replies: dict[str, Any]) -> None:
        self.replies = list(replies)
        self.seen: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append((str(request.url), request.headers.get("anthropic-beta", ""), json.loads(request.content)))
        answer = self.replies.pop(0)
        return httpx2.Response(answer.get("_status", 200), json={k: v for k, v in answer.items() if k != "_status"})

    def client(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(api_key="agentlab-placeholder-key", max_retries=0,
                                   http_client=httpx2.Client(transport=httpx2.MockTransport(self)))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [body for _, _, body in self.seen]


def run(server: Server, **settings: Any) -> AgentLoop:
    loop = AgentLoop(server.client(), RunConfig.of(prompt="Check my router.", model=REFUSED, cache=False, **settings))
    loop.run()
    return loop


def test_a_refusal_is_retried_once_on_the_fallback_with_its_credit_token_and_the_same_body() -> None:
    server = Server(refusal(), reply([{"type": "text", "text": "Here is how."}], "end_turn", FALLBACK))
    loop = run(server, refusal_fallback_model=FALLBACK)
    first, second = server.bodies
    assert loop.result is not None and loop.result.subtype == "success" and loop.result.fallbacks == 1
    # the first request already carries the credit beta, so that a refusal comes with its token
    assert [beta for _, beta, _ in server.seen] == ["fallback-credit-2026-07-01"] * 2
    assert "fallback_credit_token" not in first
    assert second["fallback_credit_token"] == {"token": TOKEN, "mode": "best_effort"}
    assert second["model"] == FALLBACK and first["model"] == REFUSED
    assert {k: v for k, v in second.items() if k not in ("model", "fallback_credit_token")} == \
        {k: v for k, v in first.items() if k != "model"}


def test_a_prefill_claim_appends_the_partial_as_one_assistant_turn_that_the_answer_continues() -> None:
    server = Server(refusal(claim=True, partial="Routers keep their firmware in   \n"),
                    reply([{"type": "text", "text": " flash memory."}], "end_turn", FALLBACK))
    loop = run(server, refusal_fallback_model=FALLBACK)
    first, second = server.bodies
    assert second["messages"] == [*first["messages"], {"role": "assistant", "content": [
        {"type": "text", "text": "Routers keep their firmware in"}]}]
    assert second["fallback_credit_token"]["token"] == TOKEN
    assert loop.messages[-1] == {"role": "assistant", "content": [
        {"type": "text", "text": "Routers keep their firmware in"}, {"type": "text", "text": " flash memory."}]}


def test_a_refusal_without_a_token_is_retried_without_one_and_never_resent_to_the_model_that_refused() -> None:
    server = Server(refusal(token=None), refusal(token=None))
    loop = run(server, refusal_fallback_model=FALLBACK)
    assert [b["model"] for b in server.bodies] == [REFUSED, FALLBACK]
    assert all("fallback_credit_token" not in b for b in server.bodies)
    assert loop.result is not None and loop.result.subtype == "error_refusal"


def test_without_a_fallback_a_refusal_ends_the_run_with_an_explanation_and_sends_no_beta() -> None:
    server = Server(refusal())
    loop = run(server)
    assert len(server.seen) == 1 and server.seen[0][1] == "" and "betas" not in server.bodies[0]
    assert loop.result is not None and loop.result.subtype == "error_refusal"
    assert "category cyber" in loop.result.result and "Blocked under the usage policy." in loop.result.result


def test_server_side_fallbacks_are_asked_for_and_a_fallback_block_stays_in_the_history_as_it_came() -> None:
    fallback_block = {"type": "fallback", "from": {"model": REFUSED}, "to": {"model": FALLBACK},
                      "trigger": {"type": "refusal", "category": "cyber"}}
    tools = ToolRegistry()

    @tools.tool
    def lookup(topic: str) -> str:
        """Look a topic up."""
        return "firmware: flash"

    served = reply([fallback_block, {"type": "tool_use", "id": "toolu_1", "name": "lookup",
                                     "input": {"topic": "router"}}], "tool_use", FALLBACK)
    server = Server(served, reply([{"type": "text", "text": "Flash."}], "end_turn", FALLBACK))
    run(server, fallbacks=[FALLBACK], tools=tools)
    first, second = server.bodies
    assert first["fallbacks"] == [{"model": FALLBACK}] and second["fallbacks"] == [{"model": FALLBACK}]
    assert all(beta == "server-side-fallback-2026-07-01" for _, beta, _ in server.seen)
    assert second["messages"][1] == {"role": "assistant", "content": served["content"]}


def test_fallbacks_default_is_sent_as_the_string() -> None:
    server = Server(reply([{"type": "text", "text": "Fine."}], "end_turn", REFUSED))
    run(server, fallbacks="default")
    assert server.bodies[0]["fallbacks"] == "default"


def test_server_compaction_sends_its_edits_and_sends_the_compaction_block_back_unchanged() -> None:
    block = {"type": "compaction", "content": "The user asked about routers.", "encrypted_content": "enc",
             "signature": "sig", "tool_changes": []}
    server = Server(reply([block], "compaction", REFUSED),
                    reply([{"type": "text", "text": "Done."}], "end_turn", REFUSED))
    loop = run(server, server_compaction=ServerCompaction(edits=("compact", "clear_tool_uses"),
                                                          trigger_tokens=50_000))
    first, second = server.bodies
    assert first["context_management"] == {"edits": [
        {"type": "compact_20260112", "pause_after_compaction": True,
         "trigger": {"type": "input_tokens", "value": 50_000}},
        {"type": "clear_tool_uses_20250919"}]}
    assert server.seen[0][1] == "context-management-2025-06-27,compact-2026-01-12"
    assert second["messages"][-1] == {"role": "assistant", "content": [block]}
    assert loop.result is not None and loop.result.subtype == "success" and loop.result.pause_continuations == 1


@pytest.mark.parametrize(("settings", "named"), [
    ({"fallbacks": []}, "RunConfig(fallbacks="),
    ({"fallbacks": [""]}, "RunConfig(fallbacks="),
    ({"server_compaction": {"edits": ["compact"]}}, "RunConfig(server_compaction="),
])
def test_a_bad_recovery_setting_is_refused_naming_it(settings, named) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        RunConfig.of(prompt="hi", **settings)


def test_server_compaction_refuses_on_demand_with_edits_and_an_unknown_edit() -> None:
    with pytest.raises(ConfigError, match="cannot be combined with context_management"):
        ServerCompaction(on_demand=True)
    with pytest.raises(ConfigError, match="ServerCompaction\\(edits=...\\)"):
        ServerCompaction(edits=("compact_everything",))


def test_server_compaction_on_demand_makes_the_loop_s_compaction_one_summarize_request() -> None:
    """Where the loop would compact, its next request asks the server to (``compaction={"type": "summarize"}``,
    no context_management beside it); the block that comes back goes back unchanged, and the turn goes on."""
    block = {"type": "compaction", "content": "Asked about routers.", "encrypted_content": "enc", "signature": "sig",
             "tool_changes": []}
    server = Server(reply([block], "compaction", REFUSED),
                    reply([{"type": "text", "text": "Done."}], "end_turn", REFUSED))
    history = [{"role": "user", "content": "Check my router."}, {"role": "assistant", "content": "Which one?"},
               {"role": "user", "content": "The one in the hall."}]
    config = RunConfig.of(messages=history, model=REFUSED, cache=False, context_window=1000, compact_threshold=0.01,
                          server_compaction=ServerCompaction(edits=(), on_demand=True))
    loop = AgentLoop(server.client(), config)
    loop.run()
    first, second = server.bodies
    assert first["compaction"] == {"type": "summarize"} and "context_management" not in first
    assert server.seen[0][1] == "compact-2026-01-12"
    assert "compaction" not in second and second["messages"][-1] == {"role": "assistant", "content": [block]}
    assert loop.result is not None and loop.result.subtype == "success" and loop.result.compactions == 1


@pytest.mark.parametrize(("flags", "sent"), [
    (["refusal_credit_retry", "--refusal-fallback-model", "claude-opus-4-8"],
     lambda bodies: "fallback_credit_token" not in bodies[0] and bodies[1]["fallback_credit_token"]["mode"] ==
     "best_effort" and bodies[1]["model"] == "claude-opus-4-8"),
    (["refusal_server_fallback", "--fallbacks", "default"], lambda bodies: bodies[0]["fallbacks"] == "default"),
    (["server_compaction", "--server-compaction", "compact", "--compaction-trigger", "2000"],
     lambda bodies: bodies[0]["context_management"]["edits"][0]["trigger"]["value"] == 2000),
])
def test_the_flags_reach_the_wire_and_the_scripted_server_serves_them(flags, sent) -> None:
    """``agentlab run`` flags → RunSetup → the requests the scripted server saw; each run succeeds there."""
    from agentlab.cli import build_parser
    from agentlab.lab import RunSetup

    loop = RunSetup.from_flags(build_parser().parse_args(["run", *flags])).loop()
    result = loop.run()
    assert loop.engine is not None
    bodies = [r.body for r in loop.engine.message_requests if r.body is not None]
    assert result.subtype == "success" and loop.engine.failures == [] and sent(bodies)


def test_a_compaction_trigger_without_the_compact_edit_is_refused() -> None:
    from agentlab.cli import build_parser
    from agentlab.lab import RunSetup

    with pytest.raises(ConfigError, match="--compaction-trigger: .* needs --server-compaction compact"):
        RunSetup.from_flags(build_parser().parse_args(["run", "end_turn", "--compaction-trigger", "2000"]))


# --- refusal_fallback_model="recommended": the refusal's stop_details.recommended_model ------------------------

def _overloaded_hop_scenario() -> Any:
    """claude-opus-5-5 declines; its server-side fallback claude-opus-4-8 could not run (a 529), so the refusal
    names it in ``recommended_model`` (BetaRefusalStopDetails); a request straight to claude-opus-4-8 answers."""
    from agentlab.backend.scenario import parse_scenario

    return parse_scenario({
        "description": "a fallback hop that could not run", "row": "5", "model": REFUSED,
        "prompt": "Summarise the history of port scanning tools.",
        "steps": [
            {"content": [], "stop_reason": "refusal",
             "stop_details": {"type": "refusal", "category": "cyber", "explanation": "Could enable cyber harm."},
             "fallback_replies": {FALLBACK: {"error": {"status": 529, "type": "overloaded_error",
                                                       "message": "Overloaded"}}}},
            {"content": [{"type": "text", "text": "nmap (1997) made SYN scans common."}], "stop_reason": "end_turn"},
        ]}, "test")


def test_recommended_retries_on_the_scripted_servers_recommended_model_with_its_credit_token() -> None:
    from agentlab.lab import scenario_loop

    loop = scenario_loop(_overloaded_hop_scenario(), fallbacks="default", refusal_fallback_model="recommended")
    result = loop.run()
    assert loop.engine is not None and loop.engine.failures == []
    first, second = [r.body for r in loop.engine.message_requests if r.body is not None]
    assert result.subtype == "success" and result.fallbacks == 1
    assert first["model"] == REFUSED and first["fallbacks"] == "default"
    # the retry goes to the model the refusal recommended, with its token and without fallbacks beside it
    assert second["model"] == FALLBACK and "fallbacks" not in second
    assert second["fallback_credit_token"]["token"].startswith("fct_agentlab_")


@pytest.mark.parametrize("scenario", ["refusal_credit_retry", "refusal_model_fallback"])
def test_recommended_without_a_recommended_model_ends_with_error_refusal_saying_so(scenario) -> None:
    """A refusal straight from the model (no server-side hop failed) recommends nothing: one request, and the
    run ends explaining why there was no retry."""
    from agentlab.cli import build_parser
    from agentlab.lab import RunSetup

    loop = RunSetup.from_flags(build_parser().parse_args(
        ["run", scenario, "--refusal-fallback-model", "recommended"])).loop()
    result = loop.run()
    assert loop.engine is not None
    bodies = [r.body for r in loop.engine.message_requests if r.body is not None]
    assert [b["model"] for b in bodies] == [REFUSED] and result.subtype == "error_refusal"
    assert result.result is not None and "name no recommended_model." in result.result


def test_recommended_naming_the_model_that_refused_is_not_resent() -> None:
    details = {**refusal()["stop_details"], "recommended_model": REFUSED}
    server = Server({**refusal(), "stop_details": details})
    loop = run(server, refusal_fallback_model="recommended")
    assert len(server.bodies) == 1 and loop.result is not None and loop.result.subtype == "error_refusal"
    assert "other than the model that refused" in (loop.result.result or "")


# --- a credited retry the API rejects: its one other form, then the failure as any other ---------------------

def bad_request(message: str) -> dict[str, Any]:
    return {"_status": 400, "type": "error", "error": {"type": "invalid_request_error", "message": message}}


ANSWER = reply([{"type": "text", "text": "Here is how."}], "end_turn", FALLBACK)
MUST_CONTINUE = "fallback_credit_token: this token must be redeemed by continuing the partial response"


def _without(body: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in keys}


def test_a_rejected_prefill_retry_is_resent_once_as_the_original_body_with_the_token() -> None:
    """BetaRefusalStopDetails.fallback_has_prefill_claim: "if an appended-assistant retry is rejected with a 400
    despite true, fall back to resending the original request body with the token"."""
    server = Server(refusal(claim=True, partial="Port scans began "), bad_request("prefill is not supported"), ANSWER)
    loop = run(server, refusal_fallback_model=FALLBACK)
    first, prefilled, plain = server.bodies
    assert prefilled["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "Port scans began"}]}
    assert plain["fallback_credit_token"] == {"token": TOKEN, "mode": "best_effort"} and plain["model"] == FALLBACK
    assert _without(plain, "model", "fallback_credit_token") == _without(first, "model")
    assert loop.result is not None and loop.result.subtype == "success" and loop.result.requests == 3
    assert [m["role"] for m in loop.messages] == ["user", "assistant"]


def test_a_same_body_retry_that_must_continue_the_partial_drops_the_token_when_there_was_no_prefill_claim() -> None:
    """BetaRefusalStopDetails.fallback_has_prefill_claim: "false: ... the appended-assistant form is not available
    for this refusal"; when "the exact-body retry is then rejected with a 400 saying the token must be redeemed by
    continuing the partial response, discard the token and retry without it". A partial there may be, it is not
    appended: on a model that refuses prefill, nothing but a claim authorises that turn."""
    server = Server(refusal(claim=False, partial="Port scans began "), bad_request(MUST_CONTINUE), ANSWER)
    loop = run(server, refusal_fallback_model=FALLBACK)
    first, same, plain = server.bodies
    assert _without(same, "model", "fallback_credit_token") == _without(first, "model")
    assert same["fallback_credit_token"]["token"] == TOKEN
    assert "fallback_credit_token" not in plain and plain["messages"] == first["messages"]
    assert loop.result is not None and loop.result.subtype == "success" and loop.result.requests == 3


def test_a_token_that_must_continue_a_partial_there_is_not_is_discarded_and_the_plain_body_sent_once() -> None:
    """BetaRefusalStopDetails.fallback_has_prefill_claim: with nothing to continue, "discard the token and retry
    without it"; a malformed token or one refused beside fallbacks the same (it only credits the cache)."""
    for problem in (MUST_CONTINUE, "fallback_credit_token: malformed token"):
        server = Server(refusal(), bad_request(problem), ANSWER)
        loop = run(server, refusal_fallback_model=FALLBACK)
        first, _, plain = server.bodies
        assert "fallback_credit_token" not in plain and "fallbacks" not in plain
        assert _without(plain, "model") == _without(first, "model") and plain["model"] == FALLBACK
        assert loop.result is not None and loop.result.subtype == "success"


@pytest.mark.parametrize("refused", [refusal(claim=True, partial="Port scans"), refusal()])
def test_a_credited_retry_is_reformed_only_once_and_never_loops(refused) -> None:
    server = Server(refused, bad_request(MUST_CONTINUE), bad_request(MUST_CONTINUE), ANSWER)
    loop = run(server, refusal_fallback_model=FALLBACK)
    assert len(server.bodies) == 3 and len(server.replies) == 1
    assert loop.result is not None and loop.result.subtype == "error_api"
    assert "continuing the partial" in (loop.result.result or "")


def test_a_400_not_about_the_token_is_not_retried() -> None:
    server = Server(refusal(), bad_request("messages: at least one message is required"), ANSWER)
    loop = run(server, refusal_fallback_model=FALLBACK)
    assert len(server.bodies) == 2 and loop.result is not None and loop.result.subtype == "error_api"


def test_an_expired_tokens_prefill_is_refused_by_the_scripted_server_and_the_original_body_redeems() -> None:
    """refusal_credit_retry with the server's clock 301 s on after the refusal: the token has expired ("Expires 5
    minutes after the refusal"), so best_effort does not authorise the appended partial on claude-opus-4-8, which
    refuses prefill (a 400); the original body with the token is then served, its credit not applied."""
    from agentlab.backend.scenario import load_scenario
    from agentlab.backend.scripted import ScenarioEngine
    from agentlab.lab import scenario_loop

    now = [0.0]

    def clock() -> float:
        now[0] += 301.0 if now[0] else 1.0  # the token is minted at 1.0; every later reading is past its life
        return now[0]

    engine = ScenarioEngine(load_scenario("refusal_credit_retry"), clock=clock)
    loop = scenario_loop("refusal_credit_retry", engine=engine)
    result = loop.run()
    bodies = [r.body for r in engine.message_requests if r.body is not None]
    assert [b["model"] for b in bodies] == [REFUSED, FALLBACK, FALLBACK]
    assert bodies[1]["messages"][-1]["role"] == "assistant" and bodies[2]["messages"] == bodies[0]["messages"]
    assert bodies[2]["fallback_credit_token"] == bodies[1]["fallback_credit_token"]
    assert result.subtype == "success" and result.requests == 3
