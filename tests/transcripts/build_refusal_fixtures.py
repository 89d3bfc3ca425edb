"""The Claude Code 2.1.332 refusal transcripts the tests read, built from the recorded one.

``data/sessions/claude-code/2.1.332/refusal.jsonl`` is what 2.1.332 wrote on claude-sonnet-4-6 (no built-in
fallback): a refused request, the classifier notice and one more request to the same model, a second refusal,
then ``model_refusal_no_fallback`` and an ``isApiErrorMessage`` entry whose stop_reason is ``refusal``.
The tests read it as it is for the sonnet-4-6 case.
``build("claude-opus-5-5")`` is the same session on Claude Code's default model, where the second
refusal is followed by a ``system`` entry of subtype ``model_refusal_fallback`` (``originalModel``,
``fallbackModel``, ``requestId``, ``apiRefusalCategory``, and ``trigger``, ``direction``,
``retractedMessageUuids``) and a third request, to claude-opus-4-8, whose answer ends the turn. That session was
not recorded here (the scripted server cannot make Claude Code pick its default model's fallback): every entry
is a recorded one with the model, the ids and the texts that differ changed; what no recording says (the model's
knowledge cutoff) is a placeholder.

    .venv/bin/python tests/transcripts/build_refusal_fixtures.py   # writes tests/transcripts/2.1.332/
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
RECORDED = REPO / "data" / "sessions" / "claude-code" / "2.1.332"
OUT = HERE / "2.1.332"
FALLBACK = {"claude-opus-5-5": "claude-opus-4-8"}   # Claude Code 2.1.332's built-in refusal fallback
NAMES = {"claude-sonnet-4-6": "Sonnet 4.6", "claude-opus-5-5": "Opus 5.5", "claude-opus-4-8": "Opus 4.8"}
FILES = {"claude-opus-5-5": "refusal_opus_fallback.jsonl"}


def _id(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"agentlab-fixture/{name}"))


def _recorded(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (RECORDED / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _renamed(value: Any, model: str) -> Any:
    """``value`` with the recorded model's id and name replaced by ``model``'s."""
    text = json.dumps(value, ensure_ascii=False)
    for old, new in (("claude-sonnet-4-6", model), (NAMES["claude-sonnet-4-6"], NAMES[model]),
                     ("August 2025", "<cutoff>" if model != "claude-sonnet-4-6" else "August 2025")):
        text = text.replace(old, new)
    return json.loads(text)


def build(model: str) -> list[dict[str, Any]]:
    """The session's entries on ``model``, a model with a built-in refusal fallback (FALLBACK)."""
    entries = _recorded("refusal.jsonl")
    fallback = FALLBACK[model]
    notice = next(i for i, e in enumerate(entries) if e.get("subtype") == "model_refusal_no_fallback")
    head = [_renamed(e, model) for e in entries[:notice]]
    system = _renamed(entries[notice], model)
    system.update(subtype="model_refusal_fallback", fallbackModel=fallback, trigger="refusal", direction="retry",
                  retractedMessageUuids=[], content="")
    return head + [system] + _fallback_answer(entries, system, fallback)


def _fallback_answer(entries: list[dict[str, Any]], system: dict[str, Any], fallback: str) -> list[dict[str, Any]]:
    """The third request (to the fallback model) and its answer, in the shape of the recorded ones."""
    requests = [e for e in entries if e.get("type") == "api-request"]
    request = copy.deepcopy(requests[-1])
    request["params"]["model"] = fallback
    request.update(id=_id("fallback-request"), timestamp="2026-12-02T12:07:36.010Z")
    reply = _recorded("tool_use.jsonl")[27]   # a recorded end_turn reply: its fields, in their order
    answer = copy.deepcopy(reply)
    answer["message"].update(id="msg_refusal_002", model=fallback, content=[{"type": "text", "text": (
        "I can help you check your router's firmware for known vulnerabilities and update it.")}])
    answer.update(parentUuid=system["uuid"], requestId="req_agentlab_refusal_0002", requestRef=request["id"],
                  requestedModel=fallback, uuid=_id("fallback-answer"), timestamp="2026-12-02T12:07:36.030Z",
                  sessionId=system["sessionId"], cwd=system["cwd"])
    tail = [e for e in entries if e.get("type") in ("last-prompt", "atis-latch", "cost-state")]
    tail = [copy.deepcopy(e) for e in tail]
    tail[0]["leafUuid"] = answer["uuid"]
    tail[-1].update(_cost_state(tail[-1], system["originalModel"], fallback, answer["message"]["usage"]))
    return [request, answer, *tail]


def _cost_state(recorded: dict[str, Any], model: str, fallback: str, usage: dict[str, Any]) -> dict[str, Any]:
    """What Claude Code reports it spent: the refused calls' tokens as recorded, now on ``model``, and the
    answer's on ``fallback``, each priced from data/prices.yaml."""
    from agentlab.core.cost import usage_cost

    refused = dict(recorded["modelUsage"]["claude-sonnet-4-6"])
    refused["costUSD"] = usage_cost({"input_tokens": refused["inputTokens"], "output_tokens": refused["outputTokens"],
                                     "cache_read_input_tokens": refused["cacheReadInputTokens"],
                                     "cache_creation_input_tokens": refused["cacheCreationInputTokens"]}, model)
    answer = {**refused, "inputTokens": usage["input_tokens"], "outputTokens": usage["output_tokens"],
              "cacheReadInputTokens": usage["cache_read_input_tokens"],
              "cacheCreationInputTokens": usage["cache_creation_input_tokens"],
              "cacheCreationEphemeral5mInputTokens": usage["cache_creation_input_tokens"],
              "costUSD": usage_cost(usage, fallback)}
    costs = [refused["costUSD"], answer["costUSD"]]
    total = round(sum(costs), 8) if None not in costs else None
    return {"totalCostUSD": total, "modelUsage": {model: refused, fallback: answer}}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for model, name in FILES.items():
        text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in build(model))
        (OUT / name).write_text(text, encoding="utf-8")
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
