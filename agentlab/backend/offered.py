"""What the live API could send *this* request: a scripted reply fitted to the tools, the ``tool_choice`` and
the thinking setting the request carries.

The scripted model may only call a tool the request offers, and only send thinking blocks when the request
enables thinking. Where the scripted reply cannot be sent as written, :func:`fit_reply` changes it the way
the live API would answer, and says why; the engine records the reason (``not_reached``), and ``agentlab
grade`` shows that scenario's branch as not reached (–), neither a pass nor a failure:

- a ``thinking`` or ``redacted_thinking`` block, when the request does not enable thinking: left out;
- a ``server_tool_use`` block (and its result) for a server tool the request does not offer: left out;
- a ``tool_use`` block for a tool the request does not offer: the scenario's stand-in call (``stand_ins``:
  for instance a Bash command for a client whose tools are its own) when the request offers that tool, else a
  call to an offered tool when the scenario marks the call ``interchangeable`` (any tool will do for its
  branch), sent as written when it marks it ``unoffered`` (the model names a tool it was not given, on
  purpose), else left out;
- ``tool_choice: {"type": "none"}``: no ``tool_use`` block at all;
- ``tool_choice: {"type": "any"}`` or ``{"type": "tool", "name": ...}``: a finished answer without a tool
  call (``end_turn``, ``stop_sequence``) calls the chosen tool (for ``any``: a tool whose name says it gives
  the final answer, else the first offered one), its text as the input's string fields, and the reply says
  which call it made (``final_answer_call``); a forced ``tool`` call of another name is left out. A reply
  that ends otherwise (``refusal``, ``max_tokens``, ``model_context_window_exceeded``, ``pause_turn``) is
  sent as written: the live API stops so under any ``tool_choice``;
- ``stop_sequence``: only to a request that set that sequence in ``stop_sequences``; to another the reply
  goes on past it, the sequence written out, and ends with ``end_turn``.

A reply left without content says in a text block what the scripted model would have done; a ``tool_use``
stop reason left without a tool call, and a ``pause_turn`` left without its server tool, become ``end_turn``.
``auto`` and no ``tool_choice`` change nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

FINAL_ANSWER_TOOLS = ("final_answer", "final_result", "answer", "respond", "submit")
# the stop reasons of a reply that a forced tool choice turns into a tool call: a finished answer. The others
# (refusal, max_tokens, model_context_window_exceeded, pause_turn, ...) end a turn under any tool_choice, and
# are served as written.
ANSWER_STOPS = ("end_turn", "stop_sequence", "tool_use", None)
CANNOT_SEND = "[agentlab] The scripted reply cannot be sent to this request: "  # the text of a reply left empty
SCENARIO_ONLY = ("interchangeable", "unoffered")  # a scripted tool_use's own flags, never sent
FORCED = "forced_final_answer"  # marks the tool call fit_reply makes of a finished answer under a forced tool_choice


def thinking_enabled(request: dict[str, Any]) -> bool:
    thinking = request.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def offered_tools(request: dict[str, Any]) -> tuple[list[dict[str, Any]], set[str]]:
    """The client tools (definitions with an ``input_schema``) and the names of the server tools a request
    offers."""
    client, server = [], set()
    for tool in request.get("tools") or []:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        if tool.get("type") in (None, "custom"):
            client.append(tool)
        else:
            server.add(tool["name"])
    return client, server


def _tool_choice(request: dict[str, Any]) -> tuple[str, str | None]:
    choice = request.get("tool_choice")
    if not isinstance(choice, dict):
        return "auto", None
    kind = str(choice.get("type") or "auto")
    return kind, (str(choice.get("name")) if kind == "tool" else None)


def input_for(tool: dict[str, Any], text: str) -> dict[str, Any]:
    """An input for ``tool`` from its schema: its required fields, strings carrying ``text``."""
    raw_schema = tool.get("input_schema")
    schema: dict[str, Any] = raw_schema if isinstance(raw_schema, dict) else {}
    raw_props = schema.get("properties")
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)] or list(props)[:1]
    empty = {"number": 0, "integer": 0, "boolean": False, "array": [], "object": {}, "null": None}
    out: dict[str, Any] = {}
    for name in required:
        prop = props.get(name)
        kind = prop.get("type") if isinstance(prop, dict) else "string"
        out[name] = empty.get(str(kind), text) if kind != "string" else text
    return out


def _plain_text(content: list[dict[str, Any]]) -> str:
    return " ".join(str(b.get("text", "")) for b in content if b.get("type") == "text").strip() or "Done."


def fit_reply(content: list[dict[str, Any]], stop_reason: str | None, request: dict[str, Any],
              stand_ins: dict[str, dict[str, Any]] | None = None) -> tuple[list[dict[str, Any]], str | None, list[str]]:
    """The scripted content and stop reason fitted to the request, and why it changed (empty: unchanged).

    ``content`` holds the scenario's blocks as dicts (a ``tool_use`` may carry ``interchangeable``);
    ``stand_ins`` maps a tool name to the call (``name``, ``input``) that stands in for it when the request
    does not offer that tool but offers the stand-in's."""
    why: list[str] = []
    client_tools, server_names = offered_tools(request)
    names = [t["name"] for t in client_tools]
    choice, forced = _tool_choice(request)
    out: list[dict[str, Any]] = []
    dropped_servers: set[str] = set()
    for block in content:
        kind = block.get("type")
        if kind in ("thinking", "redacted_thinking") and not thinking_enabled(request):
            _once(why, "the request does not enable thinking, so the live API sends no thinking blocks")
            continue
        if kind == "server_tool_use" and block.get("name") not in server_names:
            dropped_servers.add(str(block.get("id")))
            _once(why, f"the scripted model uses the server tool {block.get('name')}, which the request does not "
                       "offer")
            continue
        if kind == "web_search_tool_result" and block.get("tool_use_id") in dropped_servers:
            continue
        if kind and kind != "tool_result" and kind.endswith("_tool_result") \
                and kind.removesuffix("_tool_result") not in server_names:
            # a server tool's result in a later step (after a pause) for a tool the request never offered
            _once(why, f"the scripted model shows a {kind} block of the server tool "
                       f"{kind.removesuffix('_tool_result')}, which the request does not offer")
            continue
        if kind == "tool_use":
            fitted = _fit_call(_stood_in(block, names, stand_ins or {}), names, client_tools, choice, forced, why)
            if fitted is None:
                continue
            block = fitted
        out.append({k: v for k, v in block.items() if k not in SCENARIO_ONLY})
    if choice in ("any", "tool") and client_tools and stop_reason in ANSWER_STOPS \
            and not any(b.get("type") == "tool_use" for b in out):
        target = _forced_tool(client_tools, forced)
        if target is not None:
            why.append(f"tool_choice {choice}: the scripted reply has no call to "
                       f"{forced or 'a tool'}, so it is sent as a call to {target['name']}")
            out = [b for b in out if b.get("type") != "text"] + [
                {"type": "tool_use", "name": target["name"], "input": input_for(target, _plain_text(content)),
                 FORCED: True}]
            stop_reason = "tool_use"
    if why and not any(b.get("type") == "tool_use" for b in out) and stop_reason == "tool_use" and any(
            b.get("type") == "tool_use" for b in content):
        stop_reason = "end_turn"
    if dropped_servers and stop_reason == "pause_turn":  # nothing runs on the server: nothing to pause
        stop_reason = "end_turn"
    if why and not out:
        out = [{"type": "text", "text": CANNOT_SEND + "; ".join(why) + "."}]
    return out, stop_reason, why


def _stood_in(block: dict[str, Any], names: list[str], stand_ins: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A call to a tool the request does not offer, as the scenario's stand-in call when the request offers that;
    ``{field}`` in the stand-in's input strings is the scripted input's field."""
    stand_in = stand_ins.get(str(block.get("name")))
    if block.get("name") in names or stand_in is None or stand_in.get("name") not in names:
        return block
    cut = block.get("partial_json")
    given = _partial_fields(str(cut)) if cut else block.get("input") or {}

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            for key, field in given.items():
                value = value.replace("{" + str(key) + "}", str(field))
        return value

    filled = {k: fill(v) for k, v in (stand_in.get("input") or {}).items()}
    if not cut:
        return {**block, "name": stand_in["name"], "input": filled}
    # a call cut off by max_tokens stays cut off in its stand-in: the stand-in's own input, cut short (what was
    # streamed of it), and nothing whole to run
    text = json.dumps(filled)
    return {**block, "name": stand_in["name"], "input": {}, "partial_json": text[:max(1, len(text) // 2)]}


def _partial_fields(partial_json: str) -> dict[str, str]:
    """The string fields of a tool input cut off mid-way (``{"expression": "(17 * 2``), as far as they go."""
    return {m.group(1): m.group(2) for m in re.finditer(r'"(\w+)"\s*:\s*"((?:[^"\\]|\\.)*)', partial_json)}


def _fit_call(block: dict[str, Any], names: list[str], tools: list[dict[str, Any]], choice: str,
              forced: str | None, why: list[str]) -> dict[str, Any] | None:
    name = block.get("name")
    if choice == "none":
        _once(why, "tool_choice none: the live API calls no tool")
        return None
    if forced is not None and name != forced:
        if block.get("interchangeable") and forced in names:
            tool = next(t for t in tools if t["name"] == forced)
            return {**block, "name": forced, "input": input_for(tool, _plain_text([]))}
        _once(why, f"tool_choice names {forced}, not the scripted {name}")
        return None
    if name in names:
        return block
    if block.get("unoffered") and choice != "any":
        return block  # on purpose: the model names a tool the request does not offer
    if block.get("interchangeable") and tools:
        return {**block, "name": tools[0]["name"], "input": input_for(tools[0], "")}
    offered = f"it offers {', '.join(names)}" if names else "it offers no tools"
    _once(why, f"the scripted model calls {name}, which the request does not offer ({offered})")
    return None


def _forced_tool(tools: list[dict[str, Any]], forced: str | None) -> dict[str, Any] | None:
    if forced is not None:
        return next((t for t in tools if t["name"] == forced), None)
    return next((t for t in tools if t["name"].lower() in FINAL_ANSWER_TOOLS), tools[0])


def _once(why: list[str], text: str) -> None:
    if text not in why:
        why.append(text)


def fit_stop_sequence(content: list[dict[str, Any]], stop_reason: str | None, stop_sequence: str | None,
                      request: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None, str | None, list[str]]:
    """A ``stop_sequence`` stop as the live API could send it to ``request``: only when the request set that
    sequence in ``stop_sequences``. To another request the model writes the sequence and goes on, and the reply
    ends with ``end_turn``: the sequence is appended to the last text, and the reason says why (empty: unchanged)."""
    if stop_reason != "stop_sequence":
        return content, stop_reason, stop_sequence, []
    asked = [s for s in request.get("stop_sequences") or [] if isinstance(s, str)]
    if stop_sequence is not None and stop_sequence in asked:
        return content, stop_reason, stop_sequence, []
    why = (f"the request does not set the stop sequence {stop_sequence!r} (its stop_sequences: "
           f"{', '.join(map(repr, asked)) or 'none'}), so the live API does not stop on it")
    out = [dict(b) for b in content]
    last = next((b for b in reversed(out) if b.get("type") == "text"), None)
    if last is not None and stop_sequence:
        last["text"] = str(last.get("text", "")) + stop_sequence
    elif stop_sequence:
        out.append({"type": "text", "text": stop_sequence})
    return out, "end_turn", None, [why]
