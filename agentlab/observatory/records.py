"""Behaviour records: what a client sent turned into a record (:func:`build_record`: each request's
diff from the previous one, its action label, the reply it got), written, read back, compared with the
committed ones (:func:`drift`) and described in a few words (:func:`describe`). The record format is in
:mod:`agentlab.observatory.observe`."""

from __future__ import annotations

import hashlib
import json
import platform
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlab.backend.scenario import Scenario, is_summary_request, request_payload
from agentlab.backend.scripted import normalise_request
from agentlab.backend.serve import ScenarioServer
from agentlab.core.errors import ConfigError, sdk_error_text
from agentlab.core.compaction import estimate_tokens, text_blocks
from agentlab.core.paths import observed_dir, project_dir, write_output
from agentlab.observatory.record_types import Record, Result

REPO = project_dir()
OBSERVED_DIR = observed_dir()
CLIENTS_PINS = OBSERVED_DIR / "clients-constraints.txt"  # the framework versions the records are of
# clients `make record` runs at the newest release their range admits, not at a pin (the SDK's own tool runner)
NEWEST_RELEASE_CLIENTS = ("tool-runner",)
RECORD_FORMAT = 1
TEXT_LIMIT = 160
SERVER_TOOLS_NOT_OFFERED = "never offered the server tool"  # in a record's notes (grade reports them)


# -- what changed between two requests ------------------------------------------------------------------

def shorten(text: Any, limit: int = TEXT_LIMIT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _norm_block(block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    return {k: v for k, v in block.items() if k != "cache_control" and v is not None}


def _norm_message(message: Any) -> dict[str, Any]:
    if not isinstance(message, dict):
        return {"role": None, "content": [message]}
    blocks = text_blocks(message.get("content"))
    return {"role": message.get("role"), "content": [_norm_block(b) for b in blocks]}


def _result_text(block: dict[str, Any]) -> str:
    inner = block.get("content")
    if isinstance(inner, list):
        return "\n".join(str(b.get("text", "")) for b in inner if isinstance(b, dict))
    return "" if inner is None else str(inner)


def describe_message(message: dict[str, Any]) -> dict[str, Any]:
    """A short, stable description of one message: role, block types, texts, tool calls and results."""
    m = _norm_message(message)
    out: dict[str, Any] = {"role": m["role"], "blocks": [b.get("type") if isinstance(b, dict) else "?"
                                                          for b in m["content"]]}
    texts = [shorten(b.get("text", "")) for b in m["content"] if isinstance(b, dict) and b.get("type") == "text"]
    if texts:
        out["texts"] = texts
    uses = [{"id": b.get("id"), "name": b.get("name")} for b in m["content"]
            if isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use")]
    if uses:
        out["tool_uses"] = uses
    results = [{"tool_use_id": b.get("tool_use_id"), "is_error": bool(b.get("is_error")),
                "content": shorten(_result_text(b))}
               for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        out["tool_results"] = results
    compacted = [compaction_digest(b) for b in m["content"] if isinstance(b, dict) and b.get("type") == "compaction"]
    if compacted:
        out["compactions"] = compacted
    return out


def compaction_digest(block: dict[str, Any]) -> str:
    """A short digest of what a ``compaction`` block must carry back unchanged (its content, signature, encrypted
    content and tool changes: the SDK's BetaCompactionBlock, "to be round-tripped verbatim"), so a record can say
    whether a block came back as it was sent without holding its text."""
    kept = {k: block.get(k) for k in ("content", "encrypted_content", "signature", "tool_changes")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def refusal_facts(stop_details: Any) -> dict[str, Any]:
    """What a refusal's ``stop_details`` offers a fallback retry (the SDK's BetaRefusalStopDetails), for a record:
    ``credit_token`` (a token was given; the token itself is never recorded), ``prefill_claim``,
    ``recommended_model``. Empty when it offers none of them."""
    if not isinstance(stop_details, dict):
        return {}
    out: dict[str, Any] = {}
    if stop_details.get("fallback_credit_token"):
        out["credit_token"] = True
        out["prefill_claim"] = bool(stop_details.get("fallback_has_prefill_claim"))
    if stop_details.get("recommended_model"):
        out["recommended_model"] = stop_details["recommended_model"]
    return out


def credit_token_of(token: Any) -> str | None:
    """The token a request's ``fallback_credit_token`` carries (the bare string, or the ``{token, mode}`` form)."""
    if isinstance(token, dict):
        token = token.get("token")
    return token if isinstance(token, str) and token else None


def request_fallback_facts(body: dict[str, Any], refused_token: str | None) -> dict[str, Any]:
    """A request's server-side ``fallbacks`` (the models named, or "default") and whether its
    ``fallback_credit_token`` echoes the token of the refusal before it (``credit_token``: "echoed" or "other")."""
    out: dict[str, Any] = {}
    chain = body.get("fallbacks")
    if chain == "default":
        out["fallbacks"] = "default"
    elif isinstance(chain, list):
        out["fallbacks"] = [e.get("model") if isinstance(e, dict) else e for e in chain]
    token = credit_token_of(body.get("fallback_credit_token"))
    if token is not None:
        out["credit_token"] = "echoed" if token == refused_token else "other"
    return out


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return str(system or "")


def _merged_text(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The text ``new`` adds when it is ``old`` with more text merged in (same role, no non-text block lost,
    every old text still there in order); None otherwise."""
    if old["role"] != new["role"]:
        return None

    def parts(m: dict[str, Any]) -> tuple[list[str], list[Any]]:
        texts = [str(b.get("text", "")) for b in m["content"] if isinstance(b, dict) and b.get("type") == "text"]
        others = [b for b in m["content"] if not (isinstance(b, dict) and b.get("type") == "text")]
        return texts, others

    (old_texts, old_other), (new_texts, new_other) = parts(old), parts(new)
    if old_other != new_other[:len(old_other)]:
        return None
    joined = "\n".join(new_texts)
    position = 0
    for text in old_texts:
        found = joined.find(text, position)
        if found < 0:
            return None
        position = found + len(text)
    rest = joined[position:].strip()
    if not rest:
        rest = "\n".join(t for t in new_texts if t not in old_texts).strip()
    return rest or None


def _common_prefix(before: list[dict[str, Any]], after: list[dict[str, Any]]
                   ) -> tuple[int, bool, bool, dict[str, Any] | None]:
    """How many messages ``after`` keeps from ``before`` unchanged, whether it continued the last one in place
    (``extended``: blocks added) or merged text into it (``merged``), and what was added to it (``extra``)."""
    kept = 0
    while kept < min(len(before), len(after)) and before[kept] == after[kept]:
        kept += 1
    extended = merged = False
    extra: dict[str, Any] | None = None
    if kept == len(before) - 1 and len(after) > kept:
        old, new = before[kept], after[kept]
        n = len(old["content"])
        extended = (old["role"] == new["role"] and len(new["content"]) > n and new["content"][:n] == old["content"])
        if extended:
            extra = {"role": new["role"], "content": new["content"][n:]}
        else:  # the same message with text merged into it (a re-prompt written into the last user turn)
            added = _merged_text(old, new)
            if added is not None:
                merged = True
                extra = {"role": new["role"], "content": [{"type": "text", "text": added}]}
    return kept, extended, merged, extra


def diff_requests(prev_body: dict[str, Any] | None, body: dict[str, Any]) -> dict[str, Any]:
    """What ``body`` changed relative to ``prev_body`` (None for the first request): a pure function.

    Messages are compared after dropping ``cache_control`` and null fields and turning string content into
    a text block, so clients that move cache markers around still show an unchanged history. ``kept`` is the
    length of the common prefix; ``dropped`` counts earlier messages that did not survive (a rewritten or
    compacted history); ``extended_last`` says the previous last message was continued in place (a
    paused assistant turn merged with its continuation); ``merged_last`` says text was merged into the
    previous last message instead (a re-prompt written into the user turn, not a compaction). ``appended``
    describes the messages after the prefix; ``injected_user_texts``, ``injected_system_texts`` (``role:
    system`` items), ``tool_results``
    and ``assistant_blocks`` pick them apart. ``changed`` lists top-level fields that differ.
    """
    prev = prev_body or {}
    before = [_norm_message(m) for m in prev.get("messages") or []]
    after = [_norm_message(m) for m in body.get("messages") or []]
    kept, extended, merged, extra = _common_prefix(before, after)
    dropped = len(before) - kept - (1 if extra is not None else 0)
    tail = after[kept + (1 if extra is not None else 0):]
    if dropped > 0 and any(m["role"] == "system" for m in before):
        # role: system items are read as the system prompt, not as turns: a client that keeps one after the
        # last turn and merges a re-prompt into that turn has not rewritten its history
        chat_before = [m for m in before if m["role"] != "system"]
        chat_after = [m for m in after if m["role"] != "system"]
        k, e, g, x = _common_prefix(chat_before, chat_after)
        if len(chat_before) - k - (1 if x is not None else 0) == 0:
            kept, extended, merged, extra, dropped = k, e, g, x, 0
            tail = chat_after[k + (1 if x is not None else 0):] + [
                m for m in after if m["role"] == "system" and m not in before]
    appended: list[dict[str, Any]] = []
    if extra is not None:
        appended.append({**describe_message(extra), "extends_previous": True, **({"merged": True} if merged else {})})
    appended += [describe_message(m) for m in tail]
    user_texts = [t for a in appended if a["role"] == "user" for t in a.get("texts", [])]
    system_texts = [t for a in appended if a["role"] == "system" for t in a.get("texts", [])]
    results = [r for a in appended for r in a.get("tool_results", [])]
    assistant = [b for a in appended if a["role"] == "assistant" for b in a["blocks"]]
    changed: dict[str, Any] = {}
    if prev_body is not None:
        for key in ("model", "max_tokens", "stream"):
            if prev.get(key) != body.get(key):
                changed[key] = [prev.get(key), body.get(key)]
        if _system_text(prev) != _system_text(body):
            changed["system"] = True
        if prev.get("tools") != body.get("tools"):
            changed["tools"] = True
    last = after[-1]["role"] if after else None
    return {
        "messages_before": len(before), "messages_after": len(after), "kept": kept,
        "dropped": dropped, "extended_last": extended,
        "merged_last": merged,
        "same_messages": prev_body is not None and before == after,
        "appended": appended, "injected_user_texts": user_texts, "injected_system_texts": system_texts,
        "tool_results": results, "assistant_blocks": assistant, "changed": changed,
        "summary_request": is_summary_request(normalise_request(body)), "ends_with": last,
    }


def classify(diff: dict[str, Any], prev_reply: dict[str, Any] | None) -> str:
    """One word for what a request did, given its diff and the reply to the previous main request."""
    if prev_reply is None:
        return "first"
    if diff["summary_request"]:
        return "summary"
    if diff["dropped"] > 0:
        return "compacted"
    model_changed = "model" in diff["changed"]
    if diff["same_messages"]:
        if model_changed:
            return "fallback_model"
        if prev_reply.get("status", 200) >= 400:
            return "retry"
        old, new = diff["changed"].get("max_tokens", [0, 0])
        if (new or 0) > (old or 0):
            return "escalate"
        return "resend"
    if model_changed and prev_reply.get("status", 200) >= 400 and not (diff["tool_results"] or
                                                                       diff["assistant_blocks"]):
        # another model after a failed request is a fallback, also when the client lays out for the new model
        # what it sent the old one differently (Claude Code falling back from claude-opus-5-5 to claude-haiku-4-5
        # merges the reminders of its role: system items into the user message)
        return "fallback_model"
    if diff["tool_results"]:
        return "tool_results"
    if diff["ends_with"] == "assistant" or (diff["extended_last"] and diff["appended"][0]["role"] == "assistant"):
        return "resume"
    if diff["injected_user_texts"] or diff["injected_system_texts"]:
        if prev_reply.get("stop_reason") in ("max_tokens", "model_context_window_exceeded"):
            return "continuation"
        if prev_reply.get("stop_reason") == "refusal":  # asked the refusing model again, with a note
            return "reprompt"
        if prev_reply.get("status", 200) < 400 and not prev_reply.get("blocks"):
            return "nudge"
        return "reprompt"
    return "other"


# -- reading what the server sent back ----------------------------------------------------------------------

def reply_summary(status: int, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """Status, stop_reason and content block types of a reply (JSON or SSE), or the error type."""
    out: dict[str, Any] = {"status": status}
    if status >= 400:
        try:
            out["error"] = json.loads(body)["error"]["type"]
        except (ValueError, KeyError, TypeError):
            out["error"] = "unknown"
        return out
    message = reply_message(headers, body)
    if message is not None:
        out.update(stop_reason=message.get("stop_reason"), blocks=[b.get("type") for b in message["content"]])
        out.update(refusal_facts(message.get("stop_details")))
        compacted = [compaction_digest(b) for b in message["content"] if b.get("type") == "compaction"]
        if compacted:
            out["compactions"] = compacted
    return out


def reply_message(headers: dict[str, str], body: bytes) -> dict[str, Any] | None:
    """A message reply (JSON or SSE) as one message: ``stop_reason``, ``stop_details`` and ``content`` (each
    block as it started, with a compaction block's content and a text block's text filled in from their deltas);
    None when the body is not a message."""
    if headers.get("content-type", "").startswith("text/event-stream"):
        message: dict[str, Any] = {"stop_reason": None, "stop_details": None, "content": []}
        for line in body.decode("utf-8", "replace").splitlines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event.get("type") == "content_block_start":
                message["content"].append(dict(event["content_block"]))
            elif event.get("type") == "content_block_delta" and message["content"]:
                delta = event.get("delta") or {}
                if delta.get("type") == "compaction_delta":
                    block = message["content"][-1]
                    block.update({k: v for k, v in delta.items() if k != "type"})
            elif event.get("type") == "message_delta":
                message["stop_reason"] = event["delta"].get("stop_reason")
                message["stop_details"] = event["delta"].get("stop_details")
        return message
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if isinstance(parsed, dict) and parsed.get("type") == "message":
        return parsed
    return None


@dataclass
class ClientOutcome:
    """How a client run ended, as the client reported it."""

    result: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# -- building a record -----------------------------------------------------------------------------------------------

def build_record(scenario: Scenario, server: ScenarioServer, client: str, version: str,
                 outcome: ClientOutcome, wall_s: float,
                 replacements: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The behaviour record of one run, from the requests the server saw and the replies it gave.

    ``replacements`` (old, new) are applied to each request before its size is estimated, so that what
    differs from machine to machine (the temporary folder, the OS release a client writes into its system
    prompt) does not change the ``tokens`` of a record.
    """
    requests: list[dict[str, Any]] = []
    arrivals: list[float] = []
    probes: list[str] = []
    side: list[dict[str, Any]] = []
    prev_body: dict[str, Any] | None = None
    prev_reply: dict[str, Any] | None = None
    prev_step_tokens: int | None = None
    refused_token: str | None = None  # the credit token of the last reply (never written into the record)
    for exchange in server.exchanges:
        recorded, reply = exchange.request, exchange.reply
        route = recorded.path.split("?", 1)[0]
        if recorded.method != "POST" or not route.endswith("/messages") or recorded.body is None:
            probes.append(f"{recorded.method} {route}")
            continue
        body = recorded.body
        if recorded.kind.startswith("side:"):  # beside the loop (a title, a quota probe): listed apart
            side.append({"what": recorded.kind.split(":", 1)[1], "model": body.get("model"), "path": recorded.path})
            continue
        normalised = normalise_request(body)
        summary = reply_summary(reply.status, reply.headers, reply.body)
        diff = diff_requests(prev_body, body)
        entry: dict[str, Any] = {
            "n": len(requests) + 1, "path": recorded.path, "model": body.get("model"),
            "max_tokens": body.get("max_tokens"), "stream": recorded.stream, "step": recorded.step,
            "kind": recorded.kind, "action": classify(diff, prev_reply), "reply": summary, "appended": diff,
        }
        entry.update(request_fallback_facts(body, refused_token))
        if recorded.not_reached:
            entry["not_reached"] = list(recorded.not_reached)
        if recorded.final_answer_call:  # the server's call of the client's final-answer tool (tool_choice)
            entry["final_answer_call"] = recorded.final_answer_call
        if recorded.placeholder:  # the server's own text: nothing of the scripted reply could be sent
            entry["placeholder_reply"] = True
        if exchange.thread is not None:
            entry["thread"] = exchange.thread.get("type")
            entry["sent_messages"] = len((exchange.sent or {}).get("messages") or [])
        tokens = estimate_tokens(request_payload(scrub(normalised, replacements or [])))
        if recorded.step is not None:
            step = scenario.steps[recorded.step]
            if step.expect is not None:
                unmet = step.expect.failures(normalised, recorded.stream, prev_step_tokens)
                if unmet:
                    entry["expect_unmet"] = unmet
            prev_step_tokens = tokens
        entry["tokens"] = tokens
        if reply.status >= 400:
            try:
                entry["error"] = shorten(json.loads(reply.body)["error"]["message"], 300)
            except (ValueError, KeyError, TypeError):
                pass
            steering = {k: v for k, v in reply.headers.items() if k.lower() in RETRY_HEADERS}
            entry["headers"] = dict(sorted(steering.items()))
            spec = _error_spec(scenario, recorded.step, normalised, recorded.stream)
            if spec is not None and spec.api_headers is not None:
                entry["api_headers"] = dict(sorted((k.lower(), v) for k, v in spec.api_headers.items()))
        requests.append(entry)
        arrivals.append(exchange.at)
        if prev_body is None or not diff["summary_request"]:
            prev_body, prev_reply = body, summary
            message = reply_message(reply.headers, reply.body) if reply.status < 400 else None
            refused_token = credit_token_of(((message or {}).get("stop_details") or {}).get("fallback_credit_token"))
    notes = list(outcome.notes)
    # the server's own failures (a scenario whose numbers disagree with the request, the server raising): no
    # reply the live API would give, and no fault of the client's; a grade of this run is not a verdict
    server_errors = [{"n": r["n"], "kind": r["kind"], "message": r.get("error", "")} for r in requests
                     if r["kind"] in SERVER_ERROR_KINDS]
    if requests and requests[0]["kind"] == "prompt_too_long":
        notes.append(f"the first request ({requests[0]['tokens']:,} tokens) already exceeds the scenario's "
                     f"context_window ({scenario.context_window:,} tokens), so the scripted branch is never reached")
    if scenario.server_tools:
        offered = {t.get("name") for r in requests for t in (_body_tools(server, r["n"]) or [])}
        missing = [t.get("name") for t in scenario.server_tools if t.get("name") not in offered]
        if missing:
            notes.append(f"the client {SERVER_TOOLS_NOT_OFFERED}(s) {', '.join(map(str, missing))} that the "
                         "scripted model uses; the live API would not have answered with their blocks")
    record = {
        "format": RECORD_FORMAT, "client": client, "version": version, "scenario": scenario.name,
        "row": scenario.row, "description": scenario.description,
        "settings": outcome.settings, "notes": notes,
        "requests": requests, "probes": sorted(set(probes)),
        **({"side_requests": side} if side else {}),
        **({"server_errors": server_errors} if server_errors else {}),
        "summary": _summary(scenario, requests), "result": outcome.result,
        "timing": {"wall_s": round(wall_s, 3),
                   "request_s": [round(t - arrivals[0], 3) for t in arrivals] if arrivals else []},
    }
    return record


RETRY_HEADERS = ("x-should-retry", "retry-after", "retry-after-ms")
SERVER_ERROR_KINDS = ("scenario_error", "server_error")  # requests the server failed on (``server_errors``)


def _error_spec(scenario: Scenario, step: int | None, request: dict[str, Any], stream: bool):
    """The ErrorSpec the scenario answered ``request`` with at ``step`` (None for engine errors)."""
    from agentlab.backend.scripted import choose_reply

    if step is None or step >= len(scenario.steps):
        return None
    return choose_reply(scenario.steps[step], request, stream).error


def _body_tools(server: ScenarioServer, n: int) -> list[dict[str, Any]] | None:
    """The ``tools`` of the n-th model request the server saw (1-based), or None."""
    bodies = [e.request.body for e in server.exchanges if e.request.method == "POST" and e.request.body is not None
              and e.request.path.split("?", 1)[0].endswith("/messages")]
    tools = bodies[n - 1].get("tools") if n <= len(bodies) else None
    return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None


def _summary(scenario: Scenario, requests: list[dict[str, Any]]) -> dict[str, Any]:
    def distinct(values: Iterable[Any]) -> list[Any]:
        out: list[Any] = []
        for v in values:
            if not out or out[-1] != v:
                out.append(v)
        return out

    streams = {r["stream"] for r in requests}
    max_tokens = distinct(r["max_tokens"] for r in requests)
    steps = {r["step"] for r in requests if r["step"] is not None}
    return {
        "requests": len(requests),
        "actions": [r["action"] for r in requests[1:]],
        "max_tokens": max_tokens,
        "max_tokens_raised": any(b > a for a, b in zip(max_tokens, max_tokens[1:], strict=False)
                                 if isinstance(a, int) and isinstance(b, int)),
        "models": distinct(r["model"] for r in requests),
        "streamed": "all" if streams == {True} else "none" if streams == {False} else "mixed" if streams else "-",
        "error_replies": sum(1 for r in requests if r["reply"]["status"] >= 400 and r["kind"] == "error"),
        "beyond_script": sum(1 for r in requests if r["kind"] == "unexpected"),
        "expect_unmet": sum(1 for r in requests if r.get("expect_unmet")),
        "steps_used": f"{len(steps)}/{len(scenario.steps)}",
    }


def scrub(value: Any, replacements: list[tuple[str, str]]) -> Any:
    text = json.dumps(value, ensure_ascii=False)
    for old, new in replacements:
        if old:
            text = text.replace(json.dumps(old, ensure_ascii=False)[1:-1], new)
    text = re.sub(r"http://127\.0\.0\.1:\d+", "<server>", text)
    text = re.sub(r"\b20\d\d-\d\d-\d\d\b", "<date>", text)
    return json.loads(text)


def machine_replacements(tmp: str | Path) -> list[tuple[str, str]]:
    """What differs from one machine or run to the next, and the placeholder that stands for it in a record:
    the interpreter (which venv records), the temporary folder, the checkout, and the OS release (Claude Code
    writes ``OS Version: Linux <release>`` into its system prompt)."""
    tmp = str(tmp)
    found = [(str(Path(sys.executable).resolve()), "<python>"), (sys.executable, "<python>"),
             (str(Path(tmp).resolve()), "<tmp>"), (tmp, "<tmp>"), (str(REPO), "<repo>")]
    release = platform.release()
    if release:
        found.append((release, "<os-release>"))
    return found


def record_path(out: Path, client: str, version: str, scenario: str) -> Path:
    return out / client / version / f"{scenario}.json"


def write_record(record: dict[str, Any], out: str | Path | None = None) -> Path:
    path = record_path(Path(out) if out else OBSERVED_DIR, record["client"], record["version"], record["scenario"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_output(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n", "a record")  # whole or not at all
    return path


# -- reading records back ----------------------------------------------------------------------------------

def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its wall time: what comparisons between runs look at."""
    return {k: v for k, v in record.items() if k != "timing"}


def load_records(out: str | Path | None = None) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """Every committed record: ``{(client, version): {scenario: record}}``."""
    root = Path(out) if out else OBSERVED_DIR
    found: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for path in sorted(root.glob("*/*/*.json")):
        record = read_record(path)
        found.setdefault((record["client"], record["version"]), {})[record["scenario"]] = record
    return found


# digests of the record texts already checked against the format in this process: a text read again (the grade
# and compare commands, the lessons and the tests read the committed records many times) is parsed as JSON again,
# into new dicts, but not checked again, which took 17 times as long as the parse. Bounded; cleared when full.
_CHECKED: set[bytes] = set()
_CHECKED_MAX = 8192


def read_record(path: Path) -> dict[str, Any]:
    """One record file's data, checked against the format (record_types): RecordError naming the file and the
    field when it is not JSON, or not a record."""
    from agentlab.observatory.record_types import RecordError, parse_record

    try:
        raw = path.read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: cannot be read as JSON: {exc}") from None
    digest = hashlib.blake2b(raw, digest_size=16).digest()
    if digest not in _CHECKED:
        parse_record(data, str(path))
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED.add(digest)
    return data


def drift(fresh: list[dict[str, Any]], out: str | Path | None = None) -> list[str]:
    """What differs between fresh records and the committed ones, one line per scenario (empty: none)."""
    committed = load_records(out)
    lines = []
    unrecorded: set[tuple[str, str]] = set()
    for record in fresh:
        key = (record["client"], record["version"])
        if key not in committed:
            if key not in unrecorded:  # a whole version without records: one line that says what to do
                unrecorded.add(key)
                others = sorted((v for c, v in committed if c == key[0]), key=version_key)
                where = (f"`make record` runs {key[0]} at the newest anthropic release pyproject.toml admits; to "
                         f"record {key[1]}, run `make record UPDATE=1`") if key[0] in NEWEST_RELEASE_CLIENTS else (
                    f"the records are of the versions in {CLIENTS_PINS.name}, which `make record` installs; to "
                    f"observe {key[1]}, pin it there and run `make record UPDATE=1`")
                lines.append(f"{key[0]} {key[1]} has no committed records (committed: {', '.join(others) or 'none'})"
                             f"; {where}")
            continue
        saved = committed[key].get(record["scenario"])
        if saved is None:
            lines.append(f"{record['scenario']}: no committed {record['client']} {record['version']} record")
        elif comparable(saved) != comparable(record):
            lines.append(f"{record['scenario']}: now {describe(record)!r}; committed {describe(saved)!r}"
                         + ("" if describe(record) != describe(saved) else " (the details differ)"))
    return lines


# -- describing records -----------------------------------------------------------------------------------------

def outcome(record: Record | dict[str, Any]) -> str:
    """``error`` when the run ended in error as the client reported it (``Result.failed``), else ``ok``."""
    result = record.result if isinstance(record, Record) else Result.model_validate(record.get("result") or {})
    return "error" if result.failed else "ok"


def overflowed(record: dict[str, Any]) -> bool:
    """The client's first request was already over the scenario's context window: the run says nothing about
    the branch the scenario is for (Claude Code's own system prompt and tools are ~29k tokens)."""
    requests = record.get("requests") or []
    return bool(requests) and requests[0].get("kind") == "prompt_too_long"


def _compress(actions: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(actions):
        j = i
        while j < len(actions) and actions[j] == actions[i]:
            j += 1
        out.append(actions[i] + (f" ×{j - i}" if j - i > 1 else ""))
        i = j
    return ", ".join(out)


def describe(record: dict[str, Any]) -> str:
    """A short description of a behaviour record, e.g. "4 requests: continuation ×3; no max_tokens raise;
    ended in error: is_error true, though its subtype says success (exit 1)"."""
    summary, result = record["summary"], record.get("result") or {}
    if overflowed(record):
        first = record["requests"][0]
        window = re.search(r"> (\d+) maximum", first.get("error", ""))
        size = f"{first['tokens']:,}" if isinstance(first.get("tokens"), int) else "?"
        return (f"not comparable: its first request (~{size} tokens of its own system prompt and tools) is "
                f"already over the {int(window.group(1)):,}-token window" if window else
                f"not comparable: its first request (~{size} tokens) is already over the window")
    n = summary["requests"]
    parts = [f"{n} request{'s' if n != 1 else ''}" + (f": {_compress(summary['actions'])}"
                                                      if summary["actions"] else "")]
    max_tokens = [m for m in summary["max_tokens"] if isinstance(m, int)]
    if summary["max_tokens_raised"]:
        parts.append("max_tokens " + "→".join(str(m) for m in max_tokens))
    elif str(record.get("row")) in ("1", "3"):
        parts.append("no max_tokens raise")
    if len(summary["models"]) > 1:
        parts.append("model " + "→".join(str(m) for m in summary["models"]))
    if summary.get("beyond_script"):
        parts.append(f"{summary['beyond_script']} beyond the script")
    if result.get("timed_out"):
        ending = "timed out"
    elif result.get("raised"):
        status = f" {result['status']}" if result.get("status") else ""
        ending = f"raised {result['raised']}{status}"
    elif result.get("subtype") == "success" and result.get("is_error"):   # Claude Code's error endings
        ending = "ended in error: is_error true, though its subtype says success"
    elif result.get("subtype"):
        ending = result["subtype"]
    else:
        ending = f"stop_reason {result.get('stop_reason')}"
    if result.get("exit_code") not in (None, 0):
        ending += f" (exit {result['exit_code']})"
    parts.append(ending)
    return "; ".join(parts)


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key for client versions: numbers as numbers, so 2.1.197 < 2.1.332; any other part ("x", "rc1")
    sorts after the numbers and by its text, never raising."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in version.replace("-", ".").split("."))


# -- what a client's run raised, and a client that is not installed ---------------------------------------------

def record_raised(result: dict[str, Any], exc: BaseException) -> None:
    """What a framework raised, into its run's result: the exception's type, its message, its HTTP status."""
    result.update(raised=type(exc).__name__, is_error=True, error=shorten(sdk_error_text(exc), 300))
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        result["status"] = status


def missing_extra(package: str, exc: ImportError) -> ConfigError:
    """The error for a client whose package (of the ``clients`` extra) is not installed."""
    return ConfigError(f"{package} is not installed ({exc}): it is in the `clients` extra, outside agentlab's own "
                       "dependencies. `make record` installs it into .venv-clients; or `pip install "
                       "'agentlab[clients]'`")
