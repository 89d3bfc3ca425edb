"""The scripted backend: a scenario answering Messages API requests, as JSON or as an SSE stream.

``ScenarioEngine.handle()`` knows nothing of sockets; two adapters put it on the wire:
``scripted_client()`` plugs it into the real ``anthropic`` client through ``httpx2.MockTransport`` (offline,
in-process), and ``agentlab serve`` puts it behind a real HTTP server. Either way the SDK's own parsing,
streaming and error classes run exactly as against the live API.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.caching import PromptCache
from ..core.compaction import estimate_tokens, text_blocks
from . import context_edits
from .fallback import CreditBook, Redemption, betas_of, fallback_block, fallback_chain, iteration
from .models import model_limits
from .offered import CANNOT_SEND, FORCED, SCENARIO_ONLY, fit_reply, fit_stop_sequence
from .validate import model_problem, request_problem  # noqa: F401  (request_problem: re-exported)
from .scenario import (
    ErrorSpec,
    Reply,
    Scenario,
    Step,
    ToolUseBlock,
    is_summary_request,
    load_scenario,
    StandIn,
    side_reply_text,
    side_request,
    request_tokens,
    sent_field,
)

# Hand-written usage must agree with the request and the reply, within this tolerance of the engine's own
# token estimate (the larger of the two): a scenario may round, not invent. ``staged`` lifts the rule.
USAGE_TOLERANCE_SHARE = 0.10
USAGE_TOLERANCE_TOKENS = 8
SCENARIO_ERROR = "scenario_error"  # the kind of a request answered with a 500 because the scenario is broken
SCRIPT_USED_UP = "is used up"  # what the reply to a request beyond the script says (and the CLI looks for)

ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
    529: "overloaded_error",
}


# said in the 404 to a client that posts to /messages: it appends /messages to a base URL it expects to end in /v1
MISSING_V1 = ("; the client left /v1 out of its path: it expects a base URL that ends in /v1 (give it the server's "
              "URL followed by /v1; `agentlab grade --base-url-suffix /v1` does so)")


@dataclass
class WireReply:
    status: int
    headers: dict[str, str]
    body: bytes
    kind: str  # "message", "stream", "error", "summary", "prompt_too_long", "unexpected", "expect_failed", ...


@dataclass
class RecordedRequest:
    index: int
    method: str
    path: str
    body: dict[str, Any] | None
    stream: bool
    step: int | None
    status: int
    kind: str
    stop_reason: str | None = None
    staged: str | None = None          # the reply's usage is staged on purpose, and why
    # why the scripted reply could not be sent as written to this request (a tool it does not offer, thinking
    # it does not enable; see ``offered.fit_reply``): the step's branch was not reached
    not_reached: list[str] | None = None
    # the tool the reply calls in place of a finished answer, under a forced tool_choice (offered.fit_reply)
    final_answer_call: str | None = None
    # the reply is the server's own text saying that nothing of the scripted reply could be sent: it is no
    # model's answer, so no rule reads the client's reaction to it
    placeholder: bool = False


def _usage_staged(reply: Reply) -> str | None:
    """``usage: {staged: true}`` (no reason given) marks the numbers as staged too, and so does a usage that
    fills the window (``fills_window``)."""
    if reply.usage is not None and reply.usage.staged:
        return "the scenario sets this usage on purpose"
    if reply.usage is not None and reply.usage.fills_window:
        return "the window is full, as the stop reason says; the history the scenario sends is much shorter"
    return None


def within_tolerance(reported: int, estimate: int) -> bool:
    """Whether a reported token count agrees with the engine's estimate (see USAGE_TOLERANCE_*)."""
    return abs(reported - estimate) <= max(USAGE_TOLERANCE_TOKENS, USAGE_TOLERANCE_SHARE * estimate)


def usage_problems(usage: dict[str, Any], request: dict[str, Any], content: list[dict[str, Any]],
                   stop_reason: str | None, size: int | None = None) -> list[str]:
    """How a reply's usage disagrees with its request and content, in words; empty when it agrees.

    A ``max_tokens`` stop used up the request's max_tokens; input_tokens are the request's size (``size``,
    the engine's estimate; by default of the request as written) and output_tokens the reply's, each within
    the tolerance of the estimate.
    """
    out = []
    size = request_tokens(request) if size is None else size
    reported_in = sum(int(usage.get(k) or 0)  # the whole prompt: uncached input, cache writes and cache reads
                      for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    if not within_tolerance(reported_in, size):
        out.append(f"input_tokens {reported_in}, but the request is about {size} tokens")
    reported_out = int(usage.get("output_tokens") or 0)
    if stop_reason == "max_tokens":
        if reported_out != request.get("max_tokens"):
            out.append(f"output_tokens {reported_out} on a max_tokens stop, but the request's max_tokens is "
                       f"{request.get('max_tokens')}")
    else:
        written = max(2, estimate_tokens(content)) if content else 2
        if not within_tolerance(reported_out, written):
            out.append(f"output_tokens {reported_out}, but the reply is about {written} tokens")
    return out


@dataclass
class ScenarioEngine:
    """Answers requests from a scenario's steps; records every request and every broken expectation."""

    scenario: Scenario
    text_chunk: int = 24
    requests: list[RecordedRequest] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    next_step: int = 0
    previous_tokens: int | None = None
    # A reply cut by max_tokens reports the whole max_tokens as output, though its scripted text is a short
    # stand-in. When that text comes back in a later request (kept by a continuation), it weighs what was
    # reported, so the request's size is what it would be with the real reply in it.
    stand_ins: dict[str, int] = field(default_factory=dict)
    last_stop_reason: str | None = None   # of the last message this engine answered with
    # a pause_turn or compaction reply was served in this run: its turn, sent back as the last message, is a
    # resumption and no prefill, also in a request resent after a later reply (a max_tokens retry, an error)
    paused: bool = False
    cache: PromptCache = field(default_factory=PromptCache)
    # Applied to a request before its size is estimated and its cache prefix read: an observation replaces
    # what differs from machine to machine (temporary folders, the OS release, the date a client writes into
    # its system prompt) by fixed placeholders, so the sizes the server answers with, and the decisions a
    # client takes on them, are the same wherever the record is made.
    sizing: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # True serves every reply as scripted, whatever the request offers (tests of how a loop handles a call
    # to a tool it never offered); by default a reply is fitted to the request (``fitted_reply``)
    as_scripted: bool = False
    main_model: str | None = None  # the model of the first request that used a step (side requests use others)
    # the clock fallback credit tokens expire by (5 minutes after the refusal; tests inject their own)
    clock: Callable[[], float] = time.monotonic
    # what each fallback model answers to the request the last refusal declined (its ``fallback_replies``): a
    # client's retry on one of them is answered from here, no step used
    pending_fallbacks: dict[str, Reply] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cache.min_tokens = self.scenario.cache_min_tokens
        self._signed = _scenario_signatures(self.scenario)
        self.credits = CreditBook(self.clock)
        self._betas: frozenset[str] | None = None     # the request being answered: its anthropic-beta values
        self._redemption = Redemption()                # its fallback_credit_token, as checked
        self._edits: context_edits.Edited | None = None  # its context management, as applied

    @classmethod
    def from_name(cls, name_or_path: str) -> ScenarioEngine:
        return cls(load_scenario(name_or_path))

    def reset(self) -> None:
        self.requests.clear()
        self.failures.clear()
        self.next_step = 0
        self.previous_tokens = None
        self.last_stop_reason = None
        self.paused = False
        self.cache.clear()
        self.stand_ins.clear()
        self.main_model = None
        self.pending_fallbacks.clear()
        self.credits.minted.clear()

    def request_tokens(self, request: dict[str, Any]) -> int:
        """The engine's estimate of a request's size: what fills the context window, stand-ins at their weight."""
        if self.sizing is not None:
            request = self.sizing(request)
        tokens = request_tokens(request)
        if self.stand_ins:
            for message in request.get("messages") or []:
                content = message.get("content") if isinstance(message, dict) else None
                if message.get("role") != "assistant" or not isinstance(content, list):
                    continue
                for block in content:
                    text = block.get("text") if isinstance(block, dict) and block.get("type") == "text" else None
                    if text in self.stand_ins:
                        tokens += self.stand_ins[text] - estimate_tokens(text)
        return tokens

    def _note_stand_in(self, message: dict[str, Any]) -> None:
        texts = [b["text"] for b in message["content"] if b.get("type") == "text" and b.get("text")]
        if message["stop_reason"] == "max_tokens" and texts:
            rest = sum(estimate_tokens(t) for t in texts[:-1])
            self.stand_ins[texts[-1]] = max(estimate_tokens(texts[-1]), message["usage"]["output_tokens"] - rest)

    # -- HTTP entry point --------------------------------------------------------------------------------
    def handle(self, method: str, path: str, body: bytes | None, headers: dict[str, str] | None = None) -> WireReply:
        """Answer one HTTP request. ``headers`` are the request's (its ``anthropic-beta`` values decide the beta
        fields the reply may carry); left out, the request is answered as if it sent every beta it needs."""
        self._betas, self._redemption, self._edits = betas_of(headers), Redemption(), None
        route = path.split("?", 1)[0].rstrip("/") or "/"
        if method == "HEAD" or (method == "GET" and route in ("/", "/api/hello")):
            return self._record(method, path, None, False, None, WireReply(200, {}, b"", "probe"))
        served = route in ("/v1/messages", "/v1/messages/count_tokens")
        if method != "POST" and (served or method not in ("GET", "HEAD")):
            return self._record(method, path, None, False, None, _error(
                405, "invalid_request_error", f"method {method} is not served; agentlab serves POST /v1/messages",
                {"allow": "POST"}), kind="method_not_allowed")
        if not served:
            return self._record(method, path, None, False, None, _error(
                404, "not_found_error", f"agentlab serves POST /v1/messages, not {method} {route}"
                + (MISSING_V1 if route.endswith(("/messages", "/messages/count_tokens")) else "")))
        problem: str | None
        try:
            request = json.loads(body or b"{}")
        except ValueError as exc:
            request, problem = None, f"request body is not JSON: {exc}"
        else:
            problem = None if isinstance(request, dict) else "request body is not a JSON object"
        if problem is not None or not isinstance(request, dict):
            return self._record(method, path, None, False, None, _error(400, "invalid_request_error", str(problem)))
        invalid = request_problem(request, count_tokens=route.endswith("count_tokens"))
        if invalid is None and not route.endswith("count_tokens"):  # what the requested model refuses
            invalid = context_edits.config_problem(request) or context_edits.returned_block_problem(request) \
                or self._fallback_problem(normalise_request(request)) or model_problem(
                    normalise_request(request), resuming=self.paused or self._redemption.prefill)
        if invalid is not None:  # answered as the API does, and no scenario step is used up
            return self._record(method, path, request, bool(request.get("stream") is True), None,
                                _error(400, "invalid_request_error", invalid), kind="invalid_request")
        if route.endswith("count_tokens"):
            reply = WireReply(200, {"content-type": "application/json"},
                              json.dumps(self._count(normalise_request(request))).encode(), "count_tokens")
            return self._record(method, path, request, False, None, reply)
        return self._answer(method, path, request)

    def _count(self, request: dict[str, Any]) -> dict[str, Any]:
        """A count_tokens answer: the prompt as the model would read it, the clearing edits applied (with the
        size before them in ``context_management.original_input_tokens``); ``compaction`` is ignored."""
        tokens = self.request_tokens(request)
        if request.get("context_management") is None and not context_edits.involved(request):
            return {"input_tokens": tokens}
        edited = context_edits.apply(request, tokens, self.scenario.summary, compact=False)
        counted: dict[str, Any] = {"input_tokens": self.request_tokens(edited.request)}
        if request.get("context_management") is not None:
            counted["context_management"] = {"original_input_tokens": tokens}
        return counted

    def _fallback_problem(self, request: dict[str, Any]) -> str | None:
        """The 400 a request's ``fallbacks`` or ``fallback_credit_token`` gets (backend/fallback.py); the
        token's redemption is kept for the reply (``usage.fallback_credit``, the prefill it authorises)."""
        _, problem = fallback_chain(request, self._betas)
        if problem is not None:
            return problem
        self._redemption = self.credits.redeem(request, self._betas)
        return self._redemption.problem

    # -- the scenario ------------------------------------------------------------------------------------
    def _answer(self, method: str, path: str, request: dict[str, Any]) -> WireReply:
        stream = bool(request.get("stream"))
        normalised = normalise_request(request)
        scenario = self.scenario
        tokens = self.request_tokens(normalised)  # once per request: it is the hot path (cache markers excluded)
        side = side_request(normalised, self.main_model)
        if side is not None:  # beside the loop: answered, no step used up, listed apart in a record
            return self._plain(method, path, request, tokens, side_reply_text(side, normalised),
                               f"side{len(self.requests):03d}", f"side:{side}")
        summary = is_summary_request(normalised)
        invalid = self._invalid_thinking(normalised)
        if invalid is not None:
            return self._record(method, path, request, stream, None, _error(400, "invalid_request_error", invalid),
                                kind="invalid_thinking")
        if context_edits.involved(normalised):  # the server's own compaction and context edits (context_edits.py)
            self._edits = context_edits.apply(normalised, tokens, scenario.summary)
            if normalised.get("compaction") is not None or self._edits.pause:
                return self._compaction_reply(method, path, request, normalised, tokens)
            normalised, tokens = self._edits.request, self.request_tokens(self._edits.request)
            summary = is_summary_request(normalised)
        # the scenario's own small window (a client setting), else the requested model's
        window = scenario.context_window or model_limits(normalised.get("model")).context_window
        if tokens > window:
            if not summary:  # "smaller than previous" compares with this one
                self.previous_tokens = tokens
            return self._record(method, path, request, stream, None, _error(
                400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {window} maximum"),
                kind="prompt_too_long")
        if summary:
            return self._plain(method, path, request, tokens, summary_reply_text(scenario.summary),
                               f"summary{len(self.requests):03d}", "summary", stop_reason=None)
        pending = self.pending_fallbacks.get(str(normalised.get("model")))
        if pending is not None:  # a retry of the last refusal on one of its fallback models
            self.pending_fallbacks.clear()
            return self._answer_fallback_retry(method, path, request, normalised, tokens, pending)
        if self.next_step >= len(scenario.steps):
            # Not an HTTP error: a client could take a 4xx/5xx for a request problem and retry it. A plain
            # end_turn reply that says what happened ends every loop at once.
            number = self.model_requests + 1
            message = (f"[agentlab] The script of scenario {scenario.name!r} {SCRIPT_USED_UP}: it has "
                       f"{len(scenario.steps)} step(s), and model request {number} was not expected.")
            self.failures.append(message)
            return self._plain(method, path, request, tokens, message, f"unexpected{number:03d}", "unexpected")
        return self._answer_step(method, path, request, normalised, tokens)

    def _plain(self, method: str, path: str, request: dict[str, Any], tokens: int, text: str, tag: str, kind: str,
               *, stop_reason: str | None = "end_turn") -> WireReply:
        """A text reply that uses no step (a summary, a side request, a request beyond the script)."""
        normalised, stream = normalise_request(request), bool(request.get("stream"))
        reply = Reply.model_validate({"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"})
        return self._record(method, path, request, stream, None, self._message(reply, normalised, stream, tag, tokens),
                            kind=kind, stop_reason=stop_reason)

    def _answer_step(self, method: str, path: str, request: dict[str, Any], normalised: dict[str, Any],
                     tokens: int) -> WireReply:
        """The scenario's next step answers the request: checked against its ``expect``, fitted to the request."""
        scenario, stream = self.scenario, bool(request.get("stream"))
        index = self.next_step
        self.next_step += 1
        self.pending_fallbacks = {}  # a refusal's fallbacks answer a retry only until the next step is used
        self.main_model = self.main_model or normalised.get("model")
        step: Step = scenario.steps[index]
        previous, self.previous_tokens = self.previous_tokens, tokens
        if step.expect is not None:
            broken = step.expect.failures(normalised, stream, previous)
            if broken:
                message = (f"scenario {scenario.name!r} step {index}: the request did not match: expected "
                           + "; ".join(broken))
                self.failures.append(message)
                return self._record(method, path, request, stream, index,
                                    _error(400, "invalid_request_error", message), kind="expect_failed")
        reply = choose_reply(step, normalised, stream)
        staged = reply.staged or step.staged or _usage_staged(reply) or _usage_staged(step)
        if reply.error is not None:
            return self._record(method, path, request, stream, index, _error_from_spec(reply.error, normalised),
                                staged=staged)
        reply, not_reached, forced = (reply, [], None) if self.as_scripted else fitted_reply_and_call(
            reply, normalised, scenario.stand_ins)
        if reply.not_reached:  # the case that answers a request the branch cannot reach says so
            not_reached = [reply.not_reached, *not_reached]
        built = self._build(reply, normalised, f"{index:03d}", tokens)
        if staged is None and reply.usage is not None:
            broken = usage_problems(built["usage"], normalised, built["content"], reply.stop_reason, tokens)
            if broken:
                text = (f"scenario {scenario.name!r} step {index}: its usage does not agree with the request and "
                        f"the reply: " + "; ".join(broken) + " (fix the numbers, or say why they are staged with "
                        "'staged')")
                return self._scenario_error(method, path, request, stream, index, text)
        self._note_stand_in(built)
        if reply.stop_reason == "refusal":
            refusal = self._refused(built, reply, normalised, f"{index:03d}")
            if refusal is None:
                text = (f"scenario {scenario.name!r} step {index}: the request's fallbacks reach a model its "
                        f"fallback_replies do not script ({', '.join(fallback_chain(normalised, None)[0])}; scripted: "
                        f"{', '.join(reply.fallback_replies or {}) or 'none'})")
                return self._scenario_error(method, path, request, stream, index, text)
            built = refusal
        wire = self._wire(built, reply, stream)
        placeholder = bool(not_reached) and any(str(b.get("text", "")).startswith(CANNOT_SEND)
                                                for b in built["content"])
        return self._record(method, path, request, stream, index, wire, stop_reason=reply.stop_reason,
                            staged=staged, not_reached=not_reached, final_answer_call=forced,
                            placeholder=placeholder)

    def _compaction_reply(self, method: str, path: str, request: dict[str, Any], normalised: dict[str, Any],
                          tokens: int) -> WireReply:
        """The reply of a compaction request (``compaction: {type: summarize}``), or of a ``compact_20260112``
        edit that paused after compacting: the signed compaction block alone, ``stop_reason: "compaction"``; the
        summarising request is the one ``usage.iterations`` entry, and nothing was sampled after it (the
        top-level usage counts nothing). No step is used up."""
        assert self._edits is not None
        edits, self._edits = self._edits, None
        block = edits.block or context_edits.compaction_block(self.scenario.summary, tokens)
        compacted = edits.compacted_tokens or tokens
        reply = Reply.model_validate({"content": [], "stop_reason": "compaction"})
        msg_id = f"msg_{reply_slug(self.scenario.name)}_compaction{len(self.requests):03d}"
        message = build_message(reply, normalised, msg_id=msg_id, input_tokens=0)
        summarising = {"input_tokens": compacted, "output_tokens": max(2, estimate_tokens(str(block["content"])))}
        message["content"] = [block]
        message["usage"] = {**message["usage"], "input_tokens": 0, "output_tokens": 0,
                            "iterations": [context_edits.iteration("compaction", summarising)]}
        if edits.applied:
            message["context_management"] = {"applied_edits": edits.applied}
        return self._record(method, path, request, bool(request.get("stream")), None,
                            self._wire(message, reply, bool(request.get("stream"))), kind="server_compaction",
                            stop_reason="compaction")

    def _edited(self, message: dict[str, Any]) -> dict[str, Any]:
        """A reply to a request the server's context management changed: ``context_management.applied_edits``,
        and, after a compaction the request triggered, the block first and the two iterations."""
        edits = self._edits
        assert edits is not None
        out = dict(message)
        if edits.applied:
            out["context_management"] = {"applied_edits": edits.applied}
        if edits.block is not None:
            summarising = {"input_tokens": edits.compacted_tokens,
                           "output_tokens": max(2, estimate_tokens(str(edits.block["content"])))}
            out["content"] = [edits.block, *message["content"]]
            out["usage"] = {**message["usage"], "iterations": [context_edits.iteration("compaction", summarising),
                                                                context_edits.iteration("message", message["usage"])]}
        return out

    def _answer_fallback_retry(self, method: str, path: str, request: dict[str, Any], normalised: dict[str, Any],
                               tokens: int, reply: Reply) -> WireReply:
        """The fallback model's scripted answer to a client's retry of a refusal (no step used up)."""
        stream = bool(request.get("stream"))
        if reply.error is not None:
            return self._record(method, path, request, stream, None, _error_from_spec(reply.error, normalised),
                                kind="fallback_retry")
        tag = f"fallback{len(self.requests):03d}"
        reply = self._fitted(reply, normalised)
        built = self._build(reply, normalised, tag, tokens)
        if reply.stop_reason == "refusal":
            built = self._refused(built, reply, {**normalised, "fallbacks": None}, tag) or built
        return self._record(method, path, request, stream, None, self._wire(built, reply, stream),
                            kind="fallback_retry", stop_reason=reply.stop_reason)

    def _refused(self, built: dict[str, Any], reply: Reply, request: dict[str, Any], tag: str
                 ) -> dict[str, Any] | None:
        """A refusal as the API sends it: down the request's server-side ``fallbacks`` chain, else with the
        credit fields of its ``stop_details`` (backend/fallback.py). None: the chain reaches a model the
        scenario's ``fallback_replies`` do not script."""
        chain, _ = fallback_chain(request, None)
        scripted = reply.fallback_replies or {}
        if chain:
            if any(m not in scripted for m in chain):
                return None
            return self._down_the_chain(built, reply, request, chain, tag)
        self.pending_fallbacks = dict(scripted)
        return {**built, "stop_details": self._refusal_details(reply.stop_details, request, built["content"])}

    def _refusal_details(self, scripted: dict[str, Any] | None, request: dict[str, Any],
                         content: list[dict[str, Any]], recommended: str | None = None) -> dict[str, Any] | None:
        """``stop_details`` of a refusal to ``request``: as scripted for a model without classifiers (no credit,
        data/models.yaml), else with the credit token fields and ``recommended_model`` filled in."""
        limits = model_limits(request.get("model"))
        if not limits.classifiers:
            return scripted
        details = {"type": "refusal", "category": None, "explanation": None, **(scripted or {})}
        return {**details, **self.credits.mint(request, limits, content, self._betas),
                "recommended_model": recommended}

    def _down_the_chain(self, built: dict[str, Any], reply: Reply, request: dict[str, Any], chain: list[str],
                        tag: str) -> dict[str, Any]:
        """The requested model declined: each model of the chain answers in turn ("Refusals and fallback",
        server-side fallback): a ``fallback`` block at each hop, a ``usage.iterations`` entry per model that ran
        (``fallback_message`` for the one that served), the reply's ``model`` the serving model's. When the
        whole chain declines the last refusal is final (no credit token); a hop that could not run (a scripted
        ``error``) ends it with a refusal naming that model in ``recommended_model``."""
        scripted = reply.fallback_replies or {}
        content, model, last = list(built["content"]), str(request.get("model")), reply
        iterations = [iteration("message", model, built["usage"])]
        for k, hop in enumerate(chain):
            answer = scripted[hop] if scripted[hop].error is not None else self._fitted(scripted[hop], request)
            if answer.error is not None:
                details = self._refusal_details(last.stop_details, {**request, "model": model}, content, hop)
                return self._chained(built, content, model, last, details, iterations)
            category = (last.stop_details or {}).get("category")
            content.append(fallback_block(model, hop, category))
            message = build_message(answer, {**request, "model": hop}, msg_id=f"{built['id']}_{k}",
                                    input_tokens=built["usage"]["input_tokens"])
            content.extend(message["content"])
            model, last = hop, answer
            if answer.stop_reason != "refusal":
                iterations.append(iteration("fallback_message", hop, message["usage"]))
                return self._chained(built, content, hop, answer, answer.stop_details, iterations)
            iterations.append(iteration("message", hop, message["usage"]))
        details = {"type": "refusal", "category": None, "explanation": None, **(last.stop_details or {}),
                   "fallback_credit_token": None, "fallback_has_prefill_claim": None, "recommended_model": None}
        return self._chained(built, content, model, last, details, iterations)

    def _fitted(self, reply: Reply, request: dict[str, Any]) -> Reply:
        """A fallback model's scripted answer as the live API could send it to ``request`` (offered.py)."""
        return reply if self.as_scripted else fitted_reply(reply, request, self.scenario.stand_ins)[0]

    @staticmethod
    def _chained(built: dict[str, Any], content: list[dict[str, Any]], model: str, last: Reply,
                 details: dict[str, Any] | None, iterations: list[dict[str, Any]]) -> dict[str, Any]:
        usage = {**built["usage"], "input_tokens": sum(i["input_tokens"] for i in iterations),
                 "output_tokens": sum(i["output_tokens"] for i in iterations), "iterations": iterations}
        return {**built, "model": model, "content": content, "stop_reason": last.stop_reason,
                "stop_sequence": last.stop_sequence, "stop_details": details, "usage": usage}

    def _scenario_error(self, method: str, path: str, request: dict[str, Any], stream: bool, index: int,
                        text: str) -> WireReply:
        """The scenario itself is at fault (its numbers disagree with the request): the API's 500 with
        ``x-should-retry: false``, never a 4xx a client would take for its own mistake; the step is not used up
        (a resend gets the same answer), and ``failures`` and the request's kind (``scenario_error``) say so."""
        self.failures.append(text)
        self.next_step = index
        return self._record(method, path, request, stream, index,
                            _error(500, "api_error", "agentlab serve: the scenario is broken: " + text,
                                   {"x-should-retry": "false"}), kind=SCENARIO_ERROR)

    def usage(self, reply: Reply, request: dict[str, Any], tokens: int,
              content: list[dict[str, Any]]) -> dict[str, Any]:
        """The reply's usage, computed in this one place: the scenario's numbers where it gives them, else
        the prompt split into uncached input, cache writes and cache reads (from the prompt cache), and an
        estimate of the output. The cache is read and written even when the scenario fixes the numbers."""
        given = _scripted_usage(reply, request)
        cached = self.cache.use(self.sizing(request) if self.sizing is not None else request, tokens)
        computed = {
            "input_tokens": tokens - cached.read - cached.written,
            "cache_creation_input_tokens": cached.written,
            "cache_read_input_tokens": cached.read,
            "output_tokens": _output_tokens(reply, request, content),
        }
        numbers = {k: given.get(k, v) for k, v in computed.items()}
        return {  # every field, in the API's order: the cache breakdown sits before output_tokens
            "input_tokens": numbers["input_tokens"],
            "cache_creation_input_tokens": numbers["cache_creation_input_tokens"],
            "cache_read_input_tokens": numbers["cache_read_input_tokens"],
            "cache_creation": {"ephemeral_5m_input_tokens": numbers["cache_creation_input_tokens"],
                               "ephemeral_1h_input_tokens": 0},
            "output_tokens": numbers["output_tokens"],
            "service_tier": "standard",
        }

    def _invalid_thinking(self, request: dict[str, Any]) -> str | None:
        """The 400 message the API gives for a request that breaks the extended-thinking rules; None if valid.

        Checked: the budget (at least 1024, below max_tokens); every thinking block sent back carries the
        signature it was given for exactly that text, every redacted_thinking block its data unchanged; with
        thinking on, an assistant turn with tool_use starts with its thinking block, and the request does
        not end with an assistant prefill (only a paused turn may be sent back as the last message).
        """
        thinking = request.get("thinking")
        enabled = isinstance(thinking, dict) and thinking.get("type") == "enabled"
        if enabled:
            budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
            if not isinstance(budget, int) or budget < 1024:
                return f"thinking.enabled.budget_tokens: Input should be greater than or equal to 1024, got {budget!r}"
            if budget >= int(request.get("max_tokens") or 0):
                return (f"`max_tokens` must be greater than `thinking.budget_tokens` "
                        f"(max_tokens {request.get('max_tokens')}, budget_tokens {budget})")
        messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        for n, message in enumerate(messages):
            if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
                continue
            for k, block in enumerate(message["content"]):
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "thinking":
                    text, signature = str(block.get("thinking", "")), str(block.get("signature", ""))
                    if signature != signature_for(text) and ("thinking:" + text, signature) not in self._signed:
                        return f"messages.{n}.content.{k}: Invalid `signature` in `thinking` block"
                elif kind == "redacted_thinking" and ("redacted", str(block.get("data", ""))) not in self._signed:
                    return f"messages.{n}.content.{k}: Invalid `data` in `redacted_thinking` block"
        if not enabled or not messages:
            return None
        last_assistant = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
        blocks = last_assistant.get("content") if last_assistant is not None else None
        if last_assistant is not None and isinstance(blocks, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks):
            first = blocks[0].get("type") if isinstance(blocks[0], dict) else None
            if first not in ("thinking", "redacted_thinking"):
                index = messages.index(last_assistant)
                return (f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                        f"`{first}`. When `thinking` is enabled, a final `assistant` message must start with a "
                        "thinking block (preceding the lastmost set of `tool_use` and `tool_result` blocks).")
        if messages[-1].get("role") == "assistant" and not self.paused and not self._redemption.prefill:
            return ("assistant message prefill is not supported when thinking is enabled: end the request with "
                    "a user message")
        return None

    def _build(self, reply: Reply, request: dict[str, Any], tag: str, tokens: int) -> dict[str, Any]:
        msg_id = f"msg_{reply_slug(self.scenario.name)}_{tag}"
        content = reply_content(reply, msg_id)
        return build_message(reply, request, msg_id=msg_id, input_tokens=tokens,
                             usage=self.usage(reply, request, tokens, content))

    def _wire(self, message: dict[str, Any], reply: Reply, stream: bool) -> WireReply:
        if self._redemption.usage is not None:  # on every reply to a request that carried a credit token
            message = {**message, "usage": {**message["usage"], "fallback_credit": self._redemption.usage}}
        if self._edits is not None:
            message = self._edited(message)
        self.last_stop_reason = reply.stop_reason
        self.paused = self.paused or reply.stop_reason in ("pause_turn", "compaction")
        if stream:
            return WireReply(200, {"content-type": "text/event-stream", "cache-control": "no-cache"},
                             sse_body(message, reply, self.text_chunk), "stream")
        return WireReply(200, {"content-type": "application/json"}, json.dumps(message).encode(), "message")

    def _message(self, reply: Reply, request: dict[str, Any], stream: bool, tag: str, tokens: int) -> WireReply:
        return self._wire(self._build(reply, request, tag, tokens), reply, stream)

    def _record(self, method: str, path: str, body: dict | None, stream: bool, step: int | None,
                reply: WireReply, *, kind: str | None = None, stop_reason: str | None = None,
                staged: str | None = None, not_reached: list[str] | None = None,
                final_answer_call: str | None = None, placeholder: bool = False) -> WireReply:
        if kind is not None:
            reply.kind = kind
        # every response carries a request id, as the API's do (SDK errors and clients' logs read it);
        # an error body repeats it as ``request_id``, as the API's error bodies do
        request_id = reply.headers.setdefault("request-id",
                                              f"req_agentlab_{reply_slug(self.scenario.name)}_{len(self.requests):04d}")
        if reply.status >= 400 and reply.body.startswith(b'{"type": "error"'):
            error = json.loads(reply.body)
            error.setdefault("request_id", request_id)
            reply.body = json.dumps(error).encode()
        self.requests.append(RecordedRequest(
            index=len(self.requests), method=method, path=path, body=body, stream=stream, step=step,
            status=reply.status, kind=reply.kind, stop_reason=stop_reason, staged=staged,
            not_reached=not_reached or None, final_answer_call=final_answer_call, placeholder=placeholder))
        return reply

    def staged_calls(self) -> dict[int, str]:
        """Model calls (numbered from 1, as the loop numbers them) whose usage the scenario stages, and why."""
        return {n: r.staged for n, r in enumerate(self.message_requests, 1) if r.staged}

    @property
    def model_requests(self) -> int:
        """How many model requests (``POST /v1/messages``) arrived so far; probes and token counts excluded."""
        return len(self.message_requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST" and r.path.split("?")[0].endswith("/messages")]


def choose_reply(step: Step, request: dict[str, Any], stream: bool) -> Reply:
    if step.cases is None:
        return step
    for case in step.cases:
        if case.when is None or not case.when.failures(request, stream):
            return case
    return step.cases[-1]


def fitted_reply(reply: Reply, request: dict[str, Any],
                 stand_ins: dict[str, StandIn] | None = None) -> tuple[Reply, list[str]]:
    """The scripted reply as the live API could send it to ``request`` (``offered.fit_reply``: only offered
    tools or their stand-ins, thinking only when enabled, ``tool_choice`` honoured; ``fit_stop_sequence``: a
    stop sequence only where the request set it), and why it changed (empty: as scripted, or only a stand-in
    call)."""
    fitted, why, _ = fitted_reply_and_call(reply, request, stand_ins)
    return fitted, why


def fitted_reply_and_call(reply: Reply, request: dict[str, Any], stand_ins: dict[str, StandIn] | None = None
                          ) -> tuple[Reply, list[str], str | None]:
    """:func:`fitted_reply`, and the name of the tool the reply calls in place of a finished answer under a
    forced ``tool_choice`` (None: no such call)."""
    blocks = [b.model_dump(exclude_none=True) for b in reply.content or []]
    content, stop_reason, why = fit_reply(blocks, reply.stop_reason, request,
                                          {k: v.model_dump() for k, v in (stand_ins or {}).items()})
    forced = next((str(b["name"]) for b in content if b.pop(FORCED, False)), None)
    content, stop_reason, stop_sequence, unstopped = fit_stop_sequence(content, stop_reason, reply.stop_sequence,
                                                                       request)
    why += unstopped
    if not why and content == [{k: v for k, v in b.items() if k not in SCENARIO_ONLY} for b in blocks]:
        return reply, [], None
    data = reply.model_dump(exclude_none=True, exclude={"when", "cases", "expect", "note"})
    fitted = Reply.model_validate({**data, "content": content, "stop_reason": stop_reason,
                                   "stop_sequence": stop_sequence})
    return fitted, why, forced


def normalise_request(request: dict[str, Any]) -> dict[str, Any]:
    """Accept ``role: system`` items inside ``messages`` (as some clients send) by moving them to ``system``.

    A list-form ``system`` stays a list (the items are appended as text blocks); a string ``system`` and
    string items are joined with newlines, as before. Nothing the client sent in ``system`` is lost.
    """
    messages = request.get("messages")
    if not isinstance(messages, list) or not any(
            isinstance(m, dict) and m.get("role") == "system" for m in messages):
        return request
    out = dict(request)
    original = request.get("system")
    blocks: list[Any] = text_blocks(original) if isinstance(original, str | list) and original else []
    out["messages"] = []
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "system":
            content = m.get("content")
            if isinstance(content, list):
                blocks.extend(b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in content)
            else:
                blocks.append({"type": "text", "text": "" if content is None else str(content)})
        else:
            out["messages"].append(m)
    if isinstance(original, list) or any(b.get("type") != "text" or set(b) - {"type", "text"}
                                         for b in blocks if isinstance(b, dict)):
        out["system"] = blocks
    else:
        out["system"] = "\n".join(str(b.get("text", "")) for b in blocks)
    return out


def summary_reply_text(summary: str) -> str:
    """The scripted compaction summary in the form Claude Code asks for: ``<analysis>`` (the model's notes,
    dropped by the client) then ``<summary>`` (what replaces the history). Left as is if already tagged."""
    if "<summary>" in summary:
        return summary
    return ("<analysis>\nThe conversation so far: the user's request, the tools called and what they returned, "
            "and what is still to do.\n</analysis>\n\n<summary>\n" + summary.strip() + "\n</summary>")


def reply_slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)[:40]


def _error(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> WireReply:
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return WireReply(status, {"content-type": "application/json", **(headers or {})},
                     json.dumps(body).encode(), "error")


def _error_from_spec(spec: ErrorSpec, request: dict[str, Any] | None = None) -> WireReply:
    """The error a step scripts. ``{max_tokens}`` and ``{model}`` in its message are the request's values."""
    headers = spec.sent_headers()
    error_type = spec.type if spec.type != "api_error" else ERROR_TYPES.get(spec.status, "api_error")
    message = spec.message
    for key in ("max_tokens", "model"):
        message = message.replace("{" + key + "}", str((request or {}).get(key)))
    limits = model_limits((request or {}).get("model"))
    message = message.replace("{ceiling}", str(limits.max_output)).replace("{window}", str(limits.context_window))
    message = message.replace("{over_window}", str(limits.context_window + limits.context_window // 4))
    message = message.replace("{sent_field}", str(sent_field(request or {})))
    return _error(spec.status, error_type, message, headers)


def _scripted_usage(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    """The usage numbers a reply scripts; ``window_share`` becomes input_tokens, that share of the requested
    model's context window."""
    if reply.usage is None:
        return {}
    given = reply.usage.model_dump(exclude_none=True, exclude={"staged", "window_share", "fills_window"})
    window = model_limits(request.get("model")).context_window
    if reply.usage.window_share is not None:
        given["input_tokens"] = round(window * reply.usage.window_share)
    if reply.usage.fills_window:
        content = [b.model_dump(exclude_none=True) for b in reply.content or []]
        given["input_tokens"] = window - int(given.get("output_tokens", _output_tokens(reply, request, content)))
    return given


def _output_tokens(reply: Reply, request: dict[str, Any], content: list[dict[str, Any]]) -> int:
    """A max_tokens reply used up the request's max_tokens; any other reply, the estimate of its content."""
    if reply.stop_reason == "max_tokens" and isinstance(request.get("max_tokens"), int):
        return request["max_tokens"]
    return max(2, estimate_tokens(content)) if content else 2


def signature_for(thinking: str) -> str:
    """The scripted backend's signature of a thinking text: deterministic, and any change breaks it."""
    digest = hashlib.sha256(("agentlab-thinking\x00" + thinking).encode()).digest()
    return base64.b64encode(digest * 2).decode()


def _scenario_signatures(scenario: Scenario) -> set[tuple[str, str]]:
    """(type, value) pairs a scenario hands out literally: thinking signatures and redacted data."""
    out: set[tuple[str, str]] = set()
    for step in scenario.steps:
        for reply in [step, *(step.cases or [])]:
            for block in reply.content or []:
                if block.type == "thinking" and block.signature:
                    out.add(("thinking:" + block.thinking, block.signature))
                elif block.type == "redacted_thinking":
                    out.add(("redacted", block.data))
    return out


def reply_content(reply: Reply, msg_id: str) -> list[dict[str, Any]]:
    """The content blocks a reply sends: tool ids filled in, thinking blocks signed."""
    content = []
    for i, block in enumerate(reply.content or []):
        data = block.model_dump(exclude_none=True, exclude={"partial_json", *SCENARIO_ONLY})
        if data["type"] in ("tool_use", "server_tool_use") and not data.get("id"):
            prefix = "srvtoolu" if data["type"] == "server_tool_use" else "toolu"
            data["id"] = f"{prefix}_{msg_id.rsplit('_', 1)[-1]}_{i}"
        if data["type"] == "thinking" and not data.get("signature"):
            data = {"type": "thinking", "thinking": data["thinking"], "signature": signature_for(data["thinking"])}
        content.append(data)
    return content


def build_message(reply: Reply, request: dict[str, Any], *, msg_id: str,
                  input_tokens: int | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Message JSON for a reply. ``usage`` is the engine's (``ScenarioEngine.usage``); without it, the
    scenario's numbers, else estimates from the request, with no cache use."""
    content = reply_content(reply, msg_id)
    if usage is None:
        scripted = _scripted_usage(reply, request)
        usage = {  # every field the API sends, in its order
            "input_tokens": scripted.get("input_tokens", input_tokens if input_tokens is not None
                                         else request_tokens(request)),
            "cache_creation_input_tokens": scripted.get("cache_creation_input_tokens", 0),
            "cache_read_input_tokens": scripted.get("cache_read_input_tokens", 0),
            "output_tokens": scripted.get("output_tokens", _output_tokens(reply, request, content)),
            "service_tier": "standard",
        }
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": reply.model or request.get("model") or "claude-scripted",
        "content": content,
        "stop_reason": reply.stop_reason,
        "stop_sequence": reply.stop_sequence,
        "stop_details": reply.stop_details,
        "usage": usage,
    }


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def sse_body(message: dict[str, Any], reply: Reply, chunk: int = 24) -> bytes:
    """The SSE stream the API would send for ``message``: every event type, stop_reason in message_delta."""
    usage = message["usage"]
    # message_start carries the whole usage with the output counted so far (1); message_delta the final count
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None, "stop_details": None,
             "usage": {**usage, "output_tokens": 1}}
    out = [_event("message_start", {"type": "message_start", "message": start}),
           _event("ping", {"type": "ping"})]
    partial = {i: b.partial_json for i, b in enumerate(reply.content or [])
               if isinstance(b, ToolUseBlock) and b.partial_json}
    for i, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            out.append(_event("content_block_start", {"type": "content_block_start", "index": i,
                                                      "content_block": {"type": "text", "text": ""}}))
            for piece in _pieces(block["text"], chunk):
                out.append(_event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                          "delta": {"type": "text_delta", "text": piece}}))
        elif kind in ("tool_use", "server_tool_use"):
            head = {"type": kind, "id": block["id"], "name": block["name"], "input": {}}
            out.append(_event("content_block_start", {"type": "content_block_start", "index": i,
                                                      "content_block": head}))
            raw = str(partial.get(i, json.dumps(block.get("input", {}))))
            for piece in _pieces(raw, chunk):
                out.append(_event("content_block_delta", {
                    "type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}))
        elif kind == "thinking":
            out.append(_event("content_block_start", {"type": "content_block_start", "index": i,
                                                      "content_block": {"type": "thinking", "thinking": "",
                                                                        "signature": ""}}))
            for piece in _pieces(block["thinking"], chunk):
                out.append(_event("content_block_delta", {
                    "type": "content_block_delta", "index": i,
                    "delta": {"type": "thinking_delta", "thinking": piece}}))
            out.append(_event("content_block_delta", {
                "type": "content_block_delta", "index": i,
                "delta": {"type": "signature_delta", "signature": block.get("signature", "")}}))
        elif kind == "compaction":  # its signature on the start, content and metadata in one compaction_delta
            head = {**block, "content": None, "encrypted_content": None}
            out.append(_event("content_block_start", {"type": "content_block_start", "index": i,
                                                      "content_block": head}))
            out.append(_event("content_block_delta", {
                "type": "content_block_delta", "index": i,
                "delta": {"type": "compaction_delta", "content": block.get("content"),
                          "encrypted_content": block.get("encrypted_content")}}))
        else:  # blocks that arrive whole, such as web_search_tool_result
            out.append(_event("content_block_start", {"type": "content_block_start", "index": i,
                                                      "content_block": block}))
        out.append(_event("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta: dict[str, Any] = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    if message.get("stop_details") is not None:
        delta["stop_details"] = message["stop_details"]
    # the final counts are cumulative: with the beta fields (iterations, fallback_credit) the totals come again
    beta = {k: usage[k] for k in ("iterations", "fallback_credit") if k in usage}
    final = {**({"input_tokens": usage["input_tokens"]} if beta else {}), "output_tokens": usage["output_tokens"],
             **beta}
    event: dict[str, Any] = {"type": "message_delta", "delta": delta, "usage": final}
    if message.get("context_management") is not None:
        event["context_management"] = message["context_management"]
    out.append(_event("message_delta", event))
    out.append(_event("message_stop", {"type": "message_stop"}))
    return "".join(out).encode()


def _pieces(text: str, size: int) -> list[str]:
    if not text:
        return []
    return [text[i:i + size] for i in range(0, len(text), size)]


# -- in-process transport -------------------------------------------------------------------------------

def thread_error(code: str, previous: str) -> WireReply:
    """The API's 400 for a thread it cannot continue."""
    text = {"thread_not_found": f"thread: no conversation is held for previous_message_id {previous!r}",
            "thread_already_continued": f"thread: {previous!r} has already been continued"}[code]
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": text,
                                       "details": {"error_code": code}}}
    return WireReply(400, {"content-type": "application/json"}, json.dumps(body).encode(), "error")


def _parsed(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def mock_transport(engine: ScenarioEngine):
    """An ``httpx2.MockTransport`` that answers with ``engine``, holding threads as the API does."""
    import httpx2

    from .threads import HeldThreads, thread_of

    held = HeldThreads()

    def handler(request: httpx2.Request) -> httpx2.Response:
        path, body, headers = request.url.raw_path.decode(), request.read(), dict(request.headers)
        thread = thread_of(path, _parsed(body)) if b'"thread"' in body else None
        if thread is None:
            reply = engine.handle(request.method, path, body, headers)
        else:
            reply, _ = held.answer(lambda full: engine.handle(request.method, path, full, headers), thread_error,
                                   json.loads(body), thread)
        return httpx2.Response(reply.status, headers=reply.headers, content=reply.body)

    return httpx2.MockTransport(handler)


def scripted_client(engine: ScenarioEngine, *, max_retries: int = 0):
    """The real ``anthropic.Anthropic`` client, talking to ``engine`` through an in-process transport."""
    import anthropic
    import httpx2

    return anthropic.Anthropic(
        api_key="scripted-offline-key",
        base_url="http://scripted.agentlab",
        http_client=httpx2.Client(transport=mock_transport(engine)),
        max_retries=max_retries,
    )


def scripted_async_client(engine: ScenarioEngine, *, max_retries: int = 0):
    """The real ``anthropic.AsyncAnthropic`` client, talking to ``engine`` through the same in-process transport."""
    import anthropic
    import httpx2

    return anthropic.AsyncAnthropic(
        api_key="scripted-offline-key",
        base_url="http://scripted.agentlab",
        http_client=httpx2.AsyncClient(transport=mock_transport(engine)),
        max_retries=max_retries,
    )
