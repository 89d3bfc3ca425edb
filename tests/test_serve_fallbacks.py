"""Refusal fallbacks as the scripted server serves them: server-side `fallbacks` and fallback credit tokens,
through the real `anthropic` client (in-process transport) and over HTTP (`agentlab serve`)."""

from __future__ import annotations

import anthropic
import httpx2
import pytest
from anthropic.lib.middleware import BetaRefusalFallbackMiddleware

from agentlab.backend.fallback import TOKEN_LIFETIME_S
from agentlab.backend.scenario import ScenarioError, parse_scenario
from agentlab.backend.scripted import ScenarioEngine, mock_transport, scripted_client
from agentlab.backend.serve import ScenarioServer
from agentlab.backend.validate import NO_PREFILL

SERVER = ["server-side-fallback-2026-07-01"]
CREDIT = ["fallback-credit-2026-07-01"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def engine(name: str, clock: Clock | None = None) -> ScenarioEngine:
    out = ScenarioEngine.from_name(name)
    if clock is not None:
        out.clock = clock
        out.credits.clock = clock
    return out


def ask(client: anthropic.Anthropic, prompt: str, **kwargs):
    params = {"model": "claude-opus-5-5", "max_tokens": 1024, "messages": [{"role": "user", "content": prompt}]}
    return client.beta.messages.create(**{**params, **kwargs})


PORTS = "Explain how port scanners work."
HISTORY = "Summarise the history of port scanning tools."
EXPLOIT = "Write a working exploit for this router's firmware."


# -- server-side fallbacks ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fallbacks", ["default", [{"model": "claude-opus-4-8"}]])
def test_a_declined_request_is_served_by_the_fallback_in_one_reply(fallbacks) -> None:
    eng = engine("refusal_server_fallback")
    reply = ask(scripted_client(eng), PORTS, fallbacks=fallbacks, betas=SERVER)
    fallback, answer = reply.content
    assert fallback.type == "fallback" and fallback.from_.model == "claude-opus-5-5"
    assert fallback.to.model == "claude-opus-4-8" and fallback.trigger.category == "cyber"
    assert answer.type == "text" and "port scanner" in answer.text
    assert (reply.stop_reason, reply.model) == ("end_turn", "claude-opus-4-8")
    assert [(i.type, i.model) for i in reply.usage.iterations] == [("message", "claude-opus-5-5"),
                                                                   ("fallback_message", "claude-opus-4-8")]
    assert reply.usage.output_tokens == sum(i.output_tokens for i in reply.usage.iterations)
    assert len(eng.requests) == 1 and eng.next_step == 1


def test_the_fallback_reply_streams_with_its_block_and_iterations() -> None:
    client = scripted_client(engine("refusal_server_fallback"))
    with client.beta.messages.stream(model="claude-opus-5-5", max_tokens=1024, fallbacks="default", betas=SERVER,
                                     messages=[{"role": "user", "content": PORTS}]) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["fallback", "text"]
    assert final.stop_reason == "end_turn"
    assert [i.type for i in final.usage.iterations] == ["message", "fallback_message"]


def test_a_chain_that_declines_whole_ends_with_a_final_refusal_without_credit() -> None:
    reply = ask(scripted_client(engine("refusal_fallback_exhausted")), EXPLOIT, fallbacks="default", betas=SERVER)
    assert reply.stop_reason == "refusal" and [b.type for b in reply.content] == ["fallback"]
    assert reply.stop_details.category == "cyber"
    assert reply.stop_details.fallback_credit_token is None and reply.stop_details.recommended_model is None
    assert [(i.type, i.model) for i in reply.usage.iterations] == [("message", "claude-opus-5-5"),
                                                                   ("message", "claude-opus-4-8")]


@pytest.mark.parametrize(("model", "fallbacks", "extra", "said"), [
    ("claude-sonnet-4-6", [{"model": "claude-opus-4-8"}], {}, "does not support fallbacks"),
    ("claude-haiku-5-5", [{"model": "claude-opus-4-8"}], {}, "does not support fallbacks"),
    ("claude-opus-5-5", [{"model": "claude-haiku-4-5"}], {}, "not an allowed fallback model"),
    ("claude-opus-5-5", [{"model": "claude-opus-4-8", "temperature": 1}], {}, "Extra inputs are not permitted"),
    ("claude-opus-5-5", [], {}, "non-empty list"),
    ("claude-opus-5-5", [{"model": "claude-opus-4-8", "max_tokens": 200_000}], {}, "fallbacks.0.max_tokens"),
    ("claude-opus-5-5", "default", {"fallback_credit_token": "fct_x"}, "cannot be combined"),
])
def test_fallbacks_the_api_refuses_are_400s_and_use_no_step(model, fallbacks, extra, said) -> None:
    eng = engine("refusal_server_fallback")
    with pytest.raises(anthropic.BadRequestError, match=said):
        ask(scripted_client(eng), PORTS, model=model, fallbacks=fallbacks, betas=SERVER, extra_body=extra)
    assert eng.next_step == 0 and eng.requests[-1].kind == "invalid_request"


def test_fallbacks_need_their_beta_header() -> None:
    with pytest.raises(anthropic.BadRequestError, match="server-side-fallback-2026-07-01"):
        ask(scripted_client(engine("refusal_server_fallback")), PORTS, fallbacks="default")


def test_default_on_a_model_without_server_fallbacks_runs_it_alone() -> None:
    reply = ask(scripted_client(engine("refusal_server_fallback")), PORTS, model="claude-haiku-5-5",
                fallbacks="default", betas=SERVER)
    assert reply.stop_reason == "refusal" and reply.content == [] and reply.usage.iterations is None
    assert reply.stop_details.fallback_credit_token  # Haiku 5.5 has classifiers: its refusal carries credit


def test_a_fallback_that_could_not_run_is_named_in_recommended_model(tmp_path) -> None:
    sc = parse_scenario({"description": "d", "model": "claude-opus-5-5", "steps": [{
        "content": [], "stop_reason": "refusal", "stop_details": {"type": "refusal", "category": "bio"},
        "fallback_replies": {"claude-opus-4-8": {"error": {"status": 529, "type": "overloaded_error"}}}}]},
        str(tmp_path / "overloaded.yaml"))
    reply = ask(scripted_client(ScenarioEngine(sc)), "q", fallbacks="default", betas=SERVER)
    assert reply.stop_reason == "refusal" and reply.stop_details.recommended_model == "claude-opus-4-8"
    assert reply.stop_details.fallback_credit_token  # the client can retry the recommended model directly


# -- fallback credit --------------------------------------------------------------------------------------------

def refused(client: anthropic.Anthropic, **kwargs):
    return ask(client, HISTORY, betas=CREDIT, **kwargs)


def test_a_refusal_carries_a_credit_token_only_with_the_beta_and_a_model_that_has_fallbacks() -> None:
    with_beta = refused(scripted_client(engine("refusal_credit_retry"))).stop_details
    assert with_beta.fallback_credit_token.startswith("fct_") and with_beta.fallback_has_prefill_claim is True
    assert with_beta.category == "cyber" and with_beta.recommended_model is None
    without = ask(scripted_client(engine("refusal_credit_retry")), HISTORY).stop_details
    assert without.fallback_credit_token is None and without.fallback_has_prefill_claim is None
    old = ask(scripted_client(engine("refusal")), EXPLOIT, model="claude-sonnet-4-6", betas=CREDIT).stop_details
    assert old.fallback_credit_token is None  # claude-sonnet-4-6 has no classifiers: stop_details as scripted


@pytest.mark.parametrize("form", ["bare", "object"])
def test_the_same_body_on_the_fallback_model_redeems_the_token(form) -> None:
    client = scripted_client(eng := engine("refusal_credit_retry"))
    token = refused(client).stop_details.fallback_credit_token
    sent = token if form == "bare" else {"token": token, "mode": "strict"}
    retry = ask(client, HISTORY, model="claude-opus-4-8", betas=CREDIT, fallback_credit_token=sent)
    assert retry.stop_reason == "end_turn" and "nmap" in retry.content[0].text
    assert retry.usage.fallback_credit.status.type == "redeemed"
    assert eng.requests[-1].kind == "fallback_retry" and eng.next_step == 1


def test_the_partial_answer_appended_is_a_prefill_only_the_token_authorises() -> None:
    client = scripted_client(engine("refusal_credit_retry"))
    first = refused(client)
    partial = first.content[0].text.rstrip()
    messages = [{"role": "user", "content": HISTORY}, {"role": "assistant", "content": partial}]
    with pytest.raises(anthropic.BadRequestError, match=NO_PREFILL[:40]):  # claude-opus-4-8 refuses prefill
        client.beta.messages.create(model="claude-opus-4-8", max_tokens=1024, messages=messages, betas=CREDIT)
    retry = client.beta.messages.create(model="claude-opus-4-8", max_tokens=1024, messages=messages, betas=CREDIT,
                                        fallback_credit_token=first.stop_details.fallback_credit_token)
    assert retry.usage.fallback_credit.status.type == "redeemed"


@pytest.mark.parametrize(("change", "reason"), [
    ({"model": "claude-opus-5-5"}, "invalid_target_model"),
    ({"model": "claude-sonnet-4-6"}, "invalid_target_model"),
    ({"messages": [{"role": "user", "content": "Something else."}]}, "body_mismatch"),
    ({"system": "A new system prompt."}, "body_mismatch"),
])
def test_a_token_that_does_not_fit_the_retry_is_a_400_or_reported(change, reason) -> None:
    client = scripted_client(engine("refusal_credit_retry"))
    token = refused(client).stop_details.fallback_credit_token
    retry = {"model": "claude-opus-4-8", "betas": CREDIT, **change}
    with pytest.raises(anthropic.BadRequestError, match=reason):
        ask(client, HISTORY, fallback_credit_token=token, **retry)
    served = ask(client, HISTORY, fallback_credit_token={"token": token, "mode": "best_effort"}, **retry)
    assert served.usage.fallback_credit.status.type == "not_applied"
    assert served.usage.fallback_credit.status.reason == reason


def test_a_token_expires_five_minutes_after_the_refusal() -> None:
    clock = Clock()
    client = scripted_client(engine("refusal_credit_retry", clock))
    token = refused(client).stop_details.fallback_credit_token
    clock.now += TOKEN_LIFETIME_S + 1
    with pytest.raises(anthropic.BadRequestError, match="expired"):
        ask(client, HISTORY, model="claude-opus-4-8", betas=CREDIT, fallback_credit_token=token)
    clock.now -= 2  # still inside the five minutes
    ok = ask(client, HISTORY, model="claude-opus-4-8", betas=CREDIT, fallback_credit_token=token)
    assert ok.usage.fallback_credit.status.type == "redeemed"


def test_a_token_sent_again_is_redeemed_again_and_a_forged_one_is_always_a_400() -> None:
    client = scripted_client(engine("refusal_credit_retry"))
    token = refused(client).stop_details.fallback_credit_token
    for _ in range(2):  # "permitted but yields no additional credit"
        again = ask(client, HISTORY, model="claude-opus-4-8", betas=CREDIT, fallback_credit_token=token)
        assert again.usage.fallback_credit.status.type == "redeemed"
    with pytest.raises(anthropic.BadRequestError, match="malformed"):
        ask(client, HISTORY, model="claude-opus-4-8", betas=CREDIT,
            fallback_credit_token={"token": "fct_forged", "mode": "best_effort"})


def test_the_object_form_needs_the_2026_07_01_credit_beta() -> None:
    client = scripted_client(engine("refusal_credit_retry"))
    token = ask(client, HISTORY, betas=SERVER).stop_details.fallback_credit_token  # this header grants the fields
    assert token
    with pytest.raises(anthropic.BadRequestError, match="object form requires"):
        ask(client, HISTORY, model="claude-opus-4-8", betas=SERVER, fallback_credit_token={"token": token})
    assert ask(client, HISTORY, model="claude-opus-4-8", betas=SERVER, fallback_credit_token=token).stop_reason \
        == "end_turn"


def test_the_sdk_middleware_retries_a_refusal_on_its_chain_and_redeems_the_credit() -> None:
    eng = engine("refusal_credit_retry")
    client = anthropic.Anthropic(api_key="x", base_url="http://scripted.agentlab", max_retries=0,
                                 http_client=httpx2.Client(transport=mock_transport(eng)),
                                 middleware=[BetaRefusalFallbackMiddleware([{"model": "claude-opus-4-8"}])])
    reply = ask(client, HISTORY)
    assert reply.stop_reason == "end_turn" and "nmap" in reply.content[-1].text
    assert [r.body["model"] for r in eng.requests] == ["claude-opus-5-5", "claude-opus-4-8"]
    assert eng.requests[1].body["fallback_credit_token"]["mode"] == "best_effort"


# -- over HTTP, as any client sends it ------------------------------------------------------------------------

def test_agentlab_serve_reads_the_beta_header_of_a_raw_request() -> None:
    body = {"model": "claude-opus-5-5", "max_tokens": 100, "messages": [{"role": "user", "content": PORTS}],
            "fallbacks": [{"model": "claude-opus-4-8"}]}
    with ScenarioServer("refusal_server_fallback") as server:
        url = f"{server.base_url}/v1/messages"
        refused_400 = httpx2.post(url, json=body)
        served = httpx2.post(url, json=body, headers={"anthropic-beta": "context-1m-2025-08-07, " + SERVER[0]})
    assert refused_400.status_code == 400 and SERVER[0] in refused_400.json()["error"]["message"]
    assert served.status_code == 200
    assert [b["type"] for b in served.json()["content"]] == ["fallback", "text"]
    assert served.json()["content"][0]["from"] == {"model": "claude-opus-5-5"}


# -- the scenario format --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("step", "said"), [
    ({"content": [], "stop_reason": "end_turn", "fallback_replies": {"claude-opus-4-8": {}}},
     "belongs to a refusal"),
    ({"content": [], "stop_reason": "refusal", "stop_details": {"category": "weapons"}}, "is not one of"),
    ({"content": [], "stop_reason": "refusal", "stop_details": {"fallback_credit_token": "x"}},
     "server's to fill in"),
    ({"content": [], "stop_reason": "refusal", "fallback_replies": {}}, "cannot be empty"),
    ({"content": [], "stop_reason": "refusal", "fallback_replies": {"claude-opus-4-8": {
        "when": {"model": "x"}, "content": []}}}, "no 'when'"),
])
def test_a_bad_refusal_step_names_the_file_and_the_field(step, said) -> None:
    with pytest.raises(ScenarioError, match=said) as err:
        parse_scenario({"description": "d", "steps": [step]}, "bad.yaml")
    assert str(err.value).startswith("bad.yaml: steps[0]")


def test_a_fallback_answer_is_fitted_to_what_the_request_offers(tmp_path) -> None:
    call = {"type": "tool_use", "name": "calculator", "input": {"expression": "2+2"}}
    sc = parse_scenario({"description": "d", "model": "claude-opus-5-5", "steps": [{
        "content": [], "stop_reason": "refusal", "stop_details": {"type": "refusal", "category": "cyber"},
        "fallback_replies": {"claude-opus-4-8": {"content": [call], "stop_reason": "tool_use"}}}]},
        str(tmp_path / "tools.yaml"))
    reply = ask(scripted_client(ScenarioEngine(sc)), "q", fallbacks="default", betas=SERVER)  # offers no tools
    assert [b.type for b in reply.content] == ["fallback", "text"] and reply.stop_reason == "end_turn"
    assert "does not offer" in reply.content[1].text


def test_the_served_turn_goes_back_with_its_fallback_block_in_place() -> None:
    eng = engine("refusal_server_fallback")
    client = scripted_client(eng)
    reply = ask(client, PORTS, fallbacks="default", betas=SERVER)
    turn = [b.model_dump(exclude_none=True, by_alias=True) for b in reply.content]
    history = [{"role": "user", "content": PORTS}, {"role": "assistant", "content": turn},
               {"role": "user", "content": "Thanks."}]
    client.beta.messages.create(model="claude-opus-5-5", max_tokens=1024, messages=history, betas=SERVER,
                                fallbacks="default")
    assert eng.requests[-1].status == 200 and history[1]["content"][0]["type"] == "fallback"


def test_the_sdk_middleware_streams_the_refusal_and_continues_the_partial_answer_on_the_fallback() -> None:
    eng = engine("refusal_credit_retry")
    client = anthropic.Anthropic(api_key="x", base_url="http://scripted.agentlab", max_retries=0,
                                 http_client=httpx2.Client(transport=mock_transport(eng)),
                                 middleware=[BetaRefusalFallbackMiddleware([{"model": "claude-opus-4-8"}])])
    with client.beta.messages.stream(model="claude-opus-5-5", max_tokens=1024,
                                     messages=[{"role": "user", "content": HISTORY}]) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "fallback", "text"] and final.stop_reason == "end_turn"
    assert final.usage.fallback_credit.status.type == "redeemed"
    retry = eng.requests[1].body  # the partial answer appended: a prefill the token authorises
    assert (retry["model"], retry["messages"][-1]["role"], eng.requests[1].status) == ("claude-opus-4-8",
                                                                                     "assistant", 200)


def test_the_same_body_is_the_same_prompt_whatever_its_string_form_or_cache_markers() -> None:
    client = scripted_client(engine("refusal_credit_retry"))
    marked = [{"role": "user", "content": [{"type": "text", "text": HISTORY, "cache_control": {"type": "ephemeral"}}]}]
    first = client.beta.messages.create(model="claude-opus-5-5", max_tokens=1024, messages=marked, betas=CREDIT)
    partial = {"role": "assistant", "content": [{"type": "text", "text": first.content[0].text,
                                                 "cache_control": {"type": "ephemeral"}}]}
    retry = client.beta.messages.create(model="claude-opus-4-8", max_tokens=1024, betas=CREDIT,
                                        messages=[{"role": "user", "content": HISTORY}, partial],
                                        fallback_credit_token=first.stop_details.fallback_credit_token)
    assert retry.usage.fallback_credit.status.type == "redeemed"


# -- a token minted after server tools ran ---------------------------------------------------------------------

WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
SEARCHED = [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "nmap 1997"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
             "content": [{"type": "web_search_result", "title": "nmap", "url": "https://example.com/nmap",
                          "encrypted_content": "abc", "page_age": None}]},
            {"type": "text", "text": "nmap appeared in 1997. "}]


def _searched_then_refused(tmp_path) -> ScenarioEngine:
    """claude-opus-5-5 searches the web (a server tool), writes a sentence and declines; claude-opus-4-8 answers."""
    return ScenarioEngine(parse_scenario({
        "description": "a refusal after a server tool ran", "model": "claude-opus-5-5", "prompt": HISTORY,
        "server_tools": [WEB_SEARCH],
        "steps": [{"content": SEARCHED, "stop_reason": "refusal",
                   "stop_details": {"type": "refusal", "category": "cyber"}},
                  {"content": [{"type": "text", "text": "nmap (1997) made SYN scans common."}],
                   "stop_reason": "end_turn"}]}, str(tmp_path / "searched.yaml")))


def test_a_token_minted_after_server_tools_ran_redeems_only_by_continuing_the_partial(tmp_path) -> None:
    """BetaRefusalStopDetails.fallback_credit_token: "A token minted mid-server-tool-loop whose partial content was
    continuable may only be redeemed the second way — if a same-body retry is rejected with a 400 saying the token
    must be redeemed by continuing the partial response, retry the second way instead.\""""
    client = scripted_client(_searched_then_refused(tmp_path))
    first = refused(client, tools=[WEB_SEARCH])
    token = first.stop_details.fallback_credit_token
    assert token and first.stop_details.fallback_has_prefill_claim is True
    retry = {"model": "claude-opus-4-8", "betas": CREDIT, "tools": [WEB_SEARCH]}
    with pytest.raises(anthropic.BadRequestError, match="must be redeemed by continuing the partial response"):
        ask(client, HISTORY, fallback_credit_token=token, **retry)
    served = ask(client, HISTORY, fallback_credit_token={"token": token, "mode": "best_effort"}, **retry)
    assert served.usage.fallback_credit.status.reason == "continuation_only"
    partial = [*SEARCHED[:2], {"type": "text", "text": "nmap appeared in 1997."}]
    messages = [{"role": "user", "content": HISTORY}, {"role": "assistant", "content": partial}]
    continued = client.beta.messages.create(max_tokens=1024, messages=messages, fallback_credit_token=token, **retry)
    assert continued.usage.fallback_credit.status.type == "redeemed"


def test_with_a_forced_tool_choice_neither_form_redeems_after_server_tools_ran(tmp_path) -> None:
    """fallback_has_prefill_claim: "when the request used output_format or a forced tool_choice and the refusal
    arrived after server tools ... had already executed, the token may not be redeemable by either retry form"."""
    client = scripted_client(_searched_then_refused(tmp_path))
    forced = {"tools": [WEB_SEARCH], "tool_choice": {"type": "any"}}
    first = refused(client, **forced)
    token = first.stop_details.fallback_credit_token
    assert token and first.stop_details.fallback_has_prefill_claim is False
    with pytest.raises(anthropic.BadRequestError, match="continuing the partial"):
        ask(client, HISTORY, model="claude-opus-4-8", betas=CREDIT, fallback_credit_token=token, **forced)
    partial = [*SEARCHED[:2], {"type": "text", "text": "nmap appeared in 1997."}]
    messages = [{"role": "user", "content": HISTORY}, {"role": "assistant", "content": partial}]
    with pytest.raises(anthropic.BadRequestError, match="continuation_excluded"):
        client.beta.messages.create(model="claude-opus-4-8", max_tokens=1024, betas=CREDIT,
                                    fallback_credit_token=token, messages=messages, **forced)
    plain = ask(client, HISTORY, model="claude-opus-4-8", betas=CREDIT, **forced)  # the token discarded
    assert plain.stop_reason in ("end_turn", "tool_use")


def test_the_loop_continues_the_partial_after_server_tools_and_the_token_redeems(tmp_path) -> None:
    from agentlab.lab import scenario_loop

    eng = _searched_then_refused(tmp_path)
    loop = scenario_loop(eng.scenario, engine=eng, refusal_fallback_model="claude-opus-4-8")
    result = loop.run()
    assert eng.failures == [] and result.subtype == "success" and result.requests == 2
    retry = [r for r in eng.requests if r.body is not None][1]
    assert retry.status == 200 and retry.body["messages"][-1]["role"] == "assistant"
    assert [b["type"] for b in retry.body["messages"][-1]["content"]] == [
        "server_tool_use", "web_search_tool_result", "text"]
