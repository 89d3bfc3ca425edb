"""Refusal fallbacks as the Messages API serves them: server-side ``fallbacks`` and fallback credit tokens.

Sources (the SDK's docstrings are exact; the pages say the same in prose):

- https://platform.claude.com/docs/en/build-with-claude/refusals-and-fallback ("Refusals and fallback") and
  the SDK's ``BetaFallbacksParam``, ``BetaFallbackParam``, ``BetaFallbackBlock``,
  ``BetaFallbackMessageIterationUsage``: a ``fallbacks`` list (or ``"default"``, the model's own chain) retries a
  declined request on each model in order; the reply carries one ``fallback`` block per hop where a model ran
  and declined, and a ``fallback_message`` entry in ``usage.iterations`` for the hop that served it. A list on a
  model that has no fallbacks is a 400; ``"default"`` there runs the model alone. An entry takes ``model`` and
  the overrides ``max_tokens``, ``thinking``, ``output_config``, ``speed``; "any other key is rejected".
- https://platform.claude.com/docs/en/build-with-claude/fallback-credit ("Fallback credit") and the SDK's
  ``BetaRefusalStopDetails``, ``BetaFallbackCreditTokenParam``, ``BetaFallbackCreditUsage``: with the beta
  header ``fallback-credit-2026-07-01`` (``server-side-fallback-2026-07-01`` and ``fallback-credit-2026-06-01``
  grant the same fields) a refusal's ``stop_details`` carries ``fallback_credit_token`` (expires 5 minutes
  after the refusal) and ``fallback_has_prefill_claim``; both null when the refused model is not eligible. The
  retry goes to an eligible fallback model with the same body, or the same body plus one appended assistant
  message holding the partial content (trailing whitespace stripped), which the token authorises as a prefill
  on models that refuse prefill; a token minted after server tools ran, with a partial to continue, redeems only
  that second way (``continuation_only``). ``strict`` (the bare string, the default) answers a failing redemption with a
  400; ``best_effort`` serves the retry and reports the reason in ``usage.fallback_credit``. A malformed token,
  and a token combined with ``fallbacks``, are 400s in both modes. "Resending a token for an already-warm prefix
  is permitted but yields no additional credit": a token used again is redeemed again.

Nothing here knows of scenarios: the engine (:mod:`.scripted`) asks, and decides what the models answer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.caching import without_breakpoints
from .models import ModelLimits, model_limits

SERVER_FALLBACK_BETAS = ("server-side-fallback-2026-07-01", "server-side-fallback-2026-06-01")
CREDIT_BETAS = ("fallback-credit-2026-07-01", "fallback-credit-2026-06-01", *SERVER_FALLBACK_BETAS)
OBJECT_FORM_BETA = "fallback-credit-2026-07-01"   # the {token, mode} form needs this one (BetaFallbackCreditTokenParam)
TOKEN_LIFETIME_S = 300.0                           # "Expires 5 minutes after the refusal"
ENTRY_KEYS = ("model", "max_tokens", "thinking", "output_config", "speed")  # BetaFallbackParam
# the fields that shape what the model reads: a retry keeps them ("system, messages, tools, and other
# render-shaping fields"); a fallbacks entry may change max_tokens, thinking, output_config and speed
BODY_FIELDS = ("system", "messages", "tools", "tool_choice")
CATEGORIES = ("cyber", "bio", "frontier_llm", "reasoning_extraction", "general_harms")  # stop_details.category


def betas_of(headers: dict[str, str] | None) -> frozenset[str] | None:
    """The ``anthropic-beta`` values a request sent (comma separated, any case of the header name); None when
    the headers are not known (an engine called without them answers as if every beta were on)."""
    if headers is None:
        return None
    values = [v for k, v in headers.items() if k.lower() == "anthropic-beta"]
    return frozenset(b.strip() for v in values for b in v.split(",") if b.strip())


def has_beta(betas: frozenset[str] | None, wanted: tuple[str, ...]) -> bool:
    return betas is None or any(b in betas for b in wanted)


# -- server-side fallbacks ------------------------------------------------------------------------------------

def fallback_chain(request: dict[str, Any], betas: frozenset[str] | None) -> tuple[list[str], str | None]:
    """The models a request's ``fallbacks`` asks to try after its own, and the 400 message when the field is
    refused (None when accepted). No ``fallbacks``: an empty chain."""
    given = request.get("fallbacks")
    if given is None:
        return [], None
    if not has_beta(betas, SERVER_FALLBACK_BETAS):
        return [], (f"fallbacks: requires the anthropic-beta header {SERVER_FALLBACK_BETAS[0]}")
    if request.get("fallback_credit_token") is not None:
        return [], "fallback_credit_token cannot be combined with fallbacks"
    limits = model_limits(request.get("model"))
    if given == "default":  # the model's own chain; a model without one runs alone
        return list(limits.fallbacks or ()), None
    if not isinstance(given, list) or not given:
        return [], f"fallbacks: expected \"default\" or a non-empty list of fallback entries, got {_short(given)}"
    chain: list[str] = []
    for i, entry in enumerate(given):
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            return [], f"fallbacks.{i}.model: Field required"
        extra = [k for k in entry if k not in ENTRY_KEYS]
        if extra:
            return [], f"fallbacks.{i}.{extra[0]}: Extra inputs are not permitted"
        # "validated as if the request were made to model": its max_tokens (the request's when left out)
        max_tokens = entry.get("max_tokens") if entry.get("max_tokens") is not None else request.get("max_tokens")
        ceiling = model_limits(entry["model"]).max_output
        if isinstance(max_tokens, int) and max_tokens > ceiling:
            return [], (f"fallbacks.{i}.max_tokens: {max_tokens} > {ceiling}, which is the maximum allowed number of "
                        f"output tokens for {entry['model']}")
        chain.append(entry["model"])
    if not limits.fallbacks:
        return [], f"fallbacks: {request.get('model')} does not support fallbacks"
    allowed = [m for m in chain if m not in limits.fallbacks]
    if allowed:
        return [], (f"fallbacks.{chain.index(allowed[0])}.model: {allowed[0]} is not an allowed fallback model for "
                    f"{request.get('model')} (allowed: {', '.join(limits.fallbacks)})")
    return chain, None


def fallback_block(from_model: str, to_model: str, category: str | None) -> dict[str, Any]:
    """The ``fallback`` content block at a hop where ``from_model`` declined (BetaFallbackBlock)."""
    return {"type": "fallback", "from": {"model": from_model}, "to": {"model": to_model},
            "trigger": {"type": "refusal", "category": category}}


def iteration(kind: str, model: str, usage: dict[str, Any]) -> dict[str, Any]:
    """One ``usage.iterations`` entry: ``message`` for a hop that declined, ``fallback_message`` for the fallback
    hop that served (BetaMessageIterationUsage, BetaFallbackMessageIterationUsage)."""
    return {"type": kind, "model": model, "input_tokens": usage.get("input_tokens", 0),
            "output_tokens": usage.get("output_tokens", 0),
            "cache_creation_input_tokens": usage.get("cache_creation_input_tokens", 0),
            "cache_read_input_tokens": usage.get("cache_read_input_tokens", 0)}


# -- fallback credit --------------------------------------------------------------------------------------------

@dataclass
class Credit:
    """A token the server minted on a refusal: what a retry must keep to redeem it."""

    token: str
    refused_model: str
    targets: tuple[str, ...]
    body: str                       # the render-shaping fields of the refused request, canonical JSON
    partial: list[dict[str, Any]] | None  # the appended-assistant content a prefill claim allows; None: no claim
    issued: float
    continuation_only: bool = False  # minted after server tools ran, with a partial: the same body is refused


@dataclass
class Redemption:
    """What a request's ``fallback_credit_token`` came to: ``problem`` is the 400 message that refuses the request
    (None: it is served), ``usage`` the ``usage.fallback_credit`` it reports, ``prefill`` whether the token
    authorises the request's final assistant message."""

    problem: str | None = None
    usage: dict[str, Any] | None = None
    prefill: bool = False


@dataclass
class CreditBook:
    """The fallback credit tokens one server minted, checked against the clock it is given."""

    clock: Callable[[], float]
    minted: dict[str, Credit] = field(default_factory=dict)

    def mint(self, request: dict[str, Any], limits: ModelLimits, content: list[dict[str, Any]],
             betas: frozenset[str] | None) -> dict[str, Any]:
        """The credit fields of a refusal's ``stop_details`` to ``request`` on the model ``limits`` describes."""
        if not limits.classifiers or not limits.credit_targets or not has_beta(betas, CREDIT_BETAS):
            return {"fallback_credit_token": None, "fallback_has_prefill_claim": None}
        partial = continuation(content)
        claim = bool(partial) and not _forced_or_formatted(request)
        digest = hashlib.sha256(f"{len(self.minted)}\x00{_body(request)}".encode()).hexdigest()[:24]
        token = f"fct_agentlab_{len(self.minted):04d}_{digest}"
        self.minted[token] = Credit(token, str(request.get("model")), limits.credit_targets, _body(request),
                                    partial if claim else None, self.clock(),
                                    continuation_only=bool(partial) and ran_server_tools(content))
        return {"fallback_credit_token": token, "fallback_has_prefill_claim": claim}

    def redeem(self, request: dict[str, Any], betas: frozenset[str] | None) -> Redemption:
        """Check a request's ``fallback_credit_token`` (none: nothing to redeem)."""
        given = request.get("fallback_credit_token")
        if given is None:
            return Redemption()
        token, mode, problem = _token_and_mode(given, betas)
        if problem is not None:
            return Redemption(problem)
        credit = self.minted.get(token)
        if credit is None:  # hard in both modes
            return Redemption("fallback_credit_token: malformed token (not one this server issued)")
        if request.get("fallbacks") is not None:
            return Redemption("fallback_credit_token cannot be combined with fallbacks")
        reason, prefill = self._reason(credit, request)
        if reason is None:
            return Redemption(usage={"status": {"type": "redeemed"}}, prefill=prefill)
        if mode == "best_effort":  # served at normal price; the reason is reported
            return Redemption(usage={"status": {"type": "not_applied", "reason": reason}}, prefill=False)
        return Redemption(f"fallback_credit_token: the token cannot be redeemed ({reason}): {_WHY[reason]}")

    def _reason(self, credit: Credit, request: dict[str, Any]) -> tuple[str | None, bool]:
        """Why ``credit`` does not redeem on ``request`` (a ``BetaFallbackCreditNotApplied`` reason), and whether
        the request's appended assistant message is the continuation the token authorises."""
        if self.clock() - credit.issued > TOKEN_LIFETIME_S:
            return "expired", False
        if str(request.get("model")) not in credit.targets:
            return "invalid_target_model", False
        if _body(request) == credit.body:
            return ("continuation_only" if credit.continuation_only else None), False
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages or _body({**request, "messages": messages[:-1]}) != \
                credit.body or not isinstance(messages[-1], dict) or messages[-1].get("role") != "assistant":
            return "body_mismatch", False
        if credit.partial is None:
            return "continuation_excluded", False
        if _content(messages[-1]) != credit.partial:
            return "body_mismatch", False
        return None, True


_WHY = {
    "expired": f"it expired {TOKEN_LIFETIME_S / 60:g} minutes after the refusal",
    "invalid_target_model": "the retry must go to an eligible fallback model of the refused model",
    "body_mismatch": "the retry must keep the refused request's body (system, messages, tools, tool_choice), or "
                     "append only the refusal's partial content as one assistant message",
    "continuation_excluded": "this refusal grants no prefill claim: resend the original body unchanged",
    # BetaRefusalStopDetails: "A token minted mid-server-tool-loop whose partial content was continuable may only
    # be redeemed the second way — if a same-body retry is rejected with a 400 saying the token must be redeemed
    # by continuing the partial response, retry the second way instead."
    "continuation_only": "the token must be redeemed by continuing the partial response: server tools ran before "
                         "the refusal, so append its partial content as one assistant message (or, without a "
                         "prefill claim, retry without the token)",
}


def ran_server_tools(content: list[dict[str, Any]]) -> bool:
    """Server tools (web search, code execution, MCP connector tools) ran before the refusal: its content holds
    their blocks (``server_tool_use``, ``mcp_tool_use``, a ``*_tool_result`` other than a client ``tool_result``)."""
    kinds = {str(b.get("type")) for b in content if isinstance(b, dict)}
    return bool(kinds & {"server_tool_use", "mcp_tool_use"}) or any(
        k.endswith("_tool_result") and k != "tool_result" for k in kinds)


def continuation(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A refusal's partial content as the appended assistant message holds it: trailing whitespace stripped from
    the final text block, ``tool_use`` blocks (unpaired) and ``fallback`` blocks left out, empty text dropped."""
    out = [dict(b) for b in content if b.get("type") not in ("tool_use", "fallback")]
    if out and out[-1].get("type") == "text":
        out[-1]["text"] = str(out[-1].get("text", "")).rstrip()
    return [b for b in out if not (b.get("type") == "text" and not b.get("text"))]


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's content as the prompt reads it: a string is one text block, cache markers left out."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [without_breakpoints(b) for b in content or [] if isinstance(b, dict)]


def _token_and_mode(given: Any, betas: frozenset[str] | None) -> tuple[str, str, str | None]:
    if isinstance(given, str):
        return given, "strict", None
    if not isinstance(given, dict) or not isinstance(given.get("token"), str):
        return "", "", "fallback_credit_token: expected a string or an object {token, mode}"
    if betas is not None and OBJECT_FORM_BETA not in betas:
        return "", "", (f"fallback_credit_token: the object form requires the anthropic-beta header "
                        f"{OBJECT_FORM_BETA}; without it the field accepts the bare string only")
    mode = given.get("mode", "strict")
    if mode not in ("strict", "best_effort") or set(given) - {"token", "mode"}:
        return "", "", f"fallback_credit_token.mode: expected 'strict' or 'best_effort', got {_short(mode)}"
    return given["token"], str(mode), None


def _forced_or_formatted(request: dict[str, Any]) -> bool:
    """A forced tool choice or an output format: the appended-assistant form is not available."""
    choice = request.get("tool_choice")
    config = request.get("output_config")
    return (isinstance(choice, dict) and choice.get("type") in ("any", "tool")) or request.get("output_format") \
        is not None or (isinstance(config, dict) and config.get("format") is not None)


def _body(request: dict[str, Any]) -> str:
    """The render-shaping fields as the prompt reads them: string content and a string system prompt as the text
    blocks they stand for (the API takes them as equivalent), cache markers left out (they do not change the
    prompt; a loop moves its breakpoint to the last message on every request)."""
    messages = request.get("messages")
    system = request.get("system")
    shaped = {
        "system": [{"type": "text", "text": system}] if isinstance(system, str) and system else system or None,
        "messages": [{"role": m.get("role"), "content": _content(m)} if isinstance(m, dict) else m
                     for m in messages] if isinstance(messages, list) else messages,
        "tools": request.get("tools"), "tool_choice": request.get("tool_choice")}
    return json.dumps(without_breakpoints(shaped), sort_keys=True, default=str)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:60] + "…"
