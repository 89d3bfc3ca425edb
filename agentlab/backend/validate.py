"""The Messages API's request validation, in one place: what the live API answers with a 400
``invalid_request_error``, in its own words, before any model sees the request.

``agentlab serve``, ``agentlab grade`` and ``agentlab observe`` all answer through the scripted engine, which
calls :func:`request_problem` on every Messages and count_tokens body; a request it refuses uses up no
scenario step. :func:`field_problem` is the part the HTTP server checks before the body reaches the engine
(fields and blocks of the wrong type), and :func:`conversation_problem` the rules on the order and content
of the messages that clients trip over:

- ``tool_use`` blocks without ``tool_result`` blocks for every id in the next message;
- ``tool_result`` blocks whose id no ``tool_use`` block of the previous message carries;
- a message with empty content anywhere but as the final assistant message;
- text blocks that are empty, or only whitespace;
- a final assistant message that ends with whitespace (a prefill);
- two tools of one name in ``tools`` (a client's tool and a server tool, or two of either): "tools: Tool names
  must be unique." (the tools array holds client and server tools side by side:
  https://platform.claude.com/docs/en/agents-and-tools/tool-use/tool-reference).

What the API accepts is accepted: ``role: "system"`` items inside ``messages`` (Claude Code sends them; they
are read as part of the system prompt), string content, unknown top-level fields, consecutive messages of
the same role (the API joins them), a conversation that starts with an assistant message, and tool calls
told as text ("Calling tools: ..." then "Observation: ..."), which are plain text to the API, and a request that
continues a thread the server holds (``thread: {"type": "continue", ...}``, as the SDK's tool runner sends): its
``messages`` are only the new ones, so tool results at its start answer the held message's tool calls.
"""

from __future__ import annotations

from typing import Any

# the string fields of the content blocks a client sends, as the API checks their types
_BLOCK_STRINGS = {"text": ("text",), "thinking": ("thinking", "signature"), "redacted_thinking": ("data",),
                  "tool_use": ("id", "name"), "server_tool_use": ("id", "name"), "tool_result": ("tool_use_id",)}

TOOL_USE_UNANSWERED = ("messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                       "{ids}. Each `tool_use` block must have a corresponding `tool_result` block in the next "
                       "message.")
TOOL_RESULT_UNEXPECTED = ("messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {ids}. "
                          "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
                          "message.")
EMPTY_MESSAGE = "messages.{i}: all messages must have non-empty content except for the optional final assistant message"
EMPTY_TEXT = "messages: text content blocks must be non-empty"
WHITESPACE_TEXT = "messages: text content blocks must contain non-whitespace text"
TRAILING_WHITESPACE = "messages: final assistant content cannot end with trailing whitespace"
# the model's limits (data/models.yaml), in the live API's words
OVER_CEILING = "max_tokens: {max_tokens} > {ceiling}, which is the maximum allowed number of output tokens for {model}"
# two tools of one name, a client's own and a server tool, or two of either: the live API's words
DUPLICATE_TOOL_NAMES = "tools: Tool names must be unique."
NO_PREFILL = ("This model does not support assistant message prefill. The conversation must end with a user "
              "message.")


def request_problem(request: dict[str, Any], *, count_tokens: bool = False) -> str | None:
    """What the API would refuse in a Messages (or count_tokens) body, in its words; None when it accepts it.

    The required fields (``model`` and ``messages``, and ``max_tokens`` for a Messages request), the types of
    the fields and blocks, then the rules of the conversation, in the order the API checks them."""
    return shape_problem(request, count_tokens=count_tokens) or field_problem(request) or conversation_problem(request)


def shape_problem(request: dict[str, Any], *, count_tokens: bool = False) -> str | None:
    """The required fields and the types of the top-level fields and of the messages."""
    for name in ("model", "messages", *(() if count_tokens else ("max_tokens",))):
        if name not in request:
            return f"{name}: Field required"
    messages = request.get("messages")
    if not isinstance(messages, list):
        return f"messages: expected a list of messages, got {type_name(messages)}"
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"messages.{i}: expected an object, got {type_name(m)}"
        if m.get("role") not in ("user", "assistant", "system"):
            return f"messages.{i}.role: expected 'user' or 'assistant', got {str(m.get('role'))[:40]!r}"
        content = m.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            return f"messages.{i}.content: expected a string or a list of content blocks, got {type_name(content)}"
        for j, block in enumerate(content):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                return f"messages.{i}.content.{j}: expected a content block with a type, got {type_name(block)}"
    checks = (("system", (str, list)), ("tools", (list,)), ("stream", (bool,)), ("model", (str,)),
              ("stop_sequences", (list,)))
    for name, kinds in checks:
        if name in request and request[name] is not None and not isinstance(request[name], kinds):
            return f"{name}: expected {' or '.join(k.__name__ for k in kinds)}, got {type_name(request[name])}"
    max_tokens = request.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        return f"max_tokens: expected a whole number of at least 1, got {str(max_tokens)[:40]}"
    if not any(m.get("role") != "system" for m in messages):
        return "messages: at least one user or assistant message is required"
    return None


def field_problem(request: Any) -> str | None:
    """Fields and content blocks of the wrong type (the thinking object, system blocks, tools, the string
    fields of each block, tool inputs and tool result contents); None for anything that is not a dict."""
    if not isinstance(request, dict):
        return None
    thinking = request.get("thinking")
    if thinking is not None and not isinstance(thinking, dict):
        return f"thinking: expected an object, got {type(thinking).__name__}"
    system = request.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
                return f"system.{i}: expected a text block with a string text"
    tools = request.get("tools")
    if isinstance(tools, list):
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                return f"tools.{i}: expected an object, got {type(tool).__name__}"
        names = [tool["name"] for tool in tools if isinstance(tool.get("name"), str)]
        if len(names) != len(set(names)):
            return DUPLICATE_TOOL_NAMES
    messages = request.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            if isinstance(block, dict):
                problem = _block_problem(block, f"messages.{i}.content.{j}")
                if problem is not None:
                    return problem
    return None


def _block_problem(block: dict[str, Any], where: str) -> str | None:
    for name in _BLOCK_STRINGS.get(str(block.get("type")), ()):
        if name in block and not isinstance(block[name], str):
            return f"{where}.{name}: expected a string, got {type(block[name]).__name__}"
    if block.get("type") in ("tool_use", "server_tool_use") and not isinstance(block.get("input", {}), dict):
        return f"{where}.input: expected an object, got {type(block['input']).__name__}"
    if block.get("type") == "tool_result" and not isinstance(block.get("content", ""), str | list):
        return f"{where}.content: expected a string or a list of blocks, got {type(block['content']).__name__}"
    return None


# -- the conversation ---------------------------------------------------------------------------------------

def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _turns(messages: list[Any]) -> list[tuple[int, str, list[tuple[int, int, dict[str, Any]]]]]:
    """The conversation as the API reads it: ``role: system`` items left out, consecutive messages of one role
    joined; each turn is (index of its first message, role, [(message index, block index, block)])."""
    turns: list[tuple[int, str, list[tuple[int, int, dict[str, Any]]]]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            continue
        blocks = [(i, j, b) for j, b in enumerate(_blocks(m))]
        if turns and turns[-1][1] == m["role"]:
            turns[-1][2].extend(blocks)
        else:
            turns.append((i, m["role"], blocks))
    return turns


def conversation_problem(request: dict[str, Any]) -> str | None:
    """The rules on the messages themselves (see the module's docstring); None when the API accepts them."""
    messages = request.get("messages")
    if not isinstance(messages, list):
        return None
    thread = request.get("thread")
    continues = isinstance(thread, dict) and thread.get("type") == "continue"
    return _empty_problem(messages) or _pairing_problem(_turns(messages), held_before=continues)


def _empty_problem(messages: list[Any]) -> str | None:
    chat = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") in ("user", "assistant")]
    last = chat[-1] if chat else None
    for i in chat:
        m = messages[i]
        content = m.get("content")
        if (content == "" or content == []) and not (i == last and m.get("role") == "assistant"):
            return EMPTY_MESSAGE.format(i=i)
        for block in _blocks(m):
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                if block["text"] == "" and not (i == last and m.get("role") == "assistant" and content == ""):
                    return EMPTY_TEXT
                if block["text"] and not block["text"].strip():
                    return WHITESPACE_TEXT
    if last is not None and messages[last].get("role") == "assistant":
        blocks = _blocks(messages[last])
        final = blocks[-1] if blocks else None
        if final is not None and final.get("type") == "text" and str(final.get("text", "")) != \
                str(final.get("text", "")).rstrip():
            return TRAILING_WHITESPACE
    return None


def _pairing_problem(turns: list[tuple[int, str, list[tuple[int, int, dict[str, Any]]]]], *,
                     held_before: bool = False) -> str | None:
    """``held_before``: the conversation goes on from a message the server holds (a thread), which the first
    turn's tool results may answer."""
    for k, (_, role, blocks) in enumerate(turns):
        if role == "user" and k == 0 and held_before:
            continue
        if role == "user":
            asked = {str(b.get("id")) for _, _, b in turns[k - 1][2] if b.get("type") == "tool_use"} \
                if k > 0 and turns[k - 1][1] == "assistant" else set()
            for i, j, b in blocks:
                if b.get("type") == "tool_result" and str(b.get("tool_use_id")) not in asked:
                    return TOOL_RESULT_UNEXPECTED.format(i=i, j=j, ids=b.get("tool_use_id"))
            continue
        uses = [(i, str(b.get("id"))) for i, _, b in blocks if b.get("type") == "tool_use"]
        if not uses or k + 1 >= len(turns):
            continue  # a final assistant turn is the model's to continue
        answered = {str(b.get("tool_use_id")) for _, _, b in turns[k + 1][2] if b.get("type") == "tool_result"}
        missing = [x for _, x in uses if x not in answered]
        if missing:
            return TOOL_USE_UNANSWERED.format(i=uses[0][0], ids=", ".join(missing))
    return None


def model_problem(request: dict[str, Any], *, resuming: bool = False) -> str | None:
    """What the model the request asks for refuses (data/models.yaml), in the API's words; None when it accepts:
    a ``max_tokens`` above its output ceiling, and a prefill (the last message an assistant's) to a model that
    takes none. ``resuming``: the last reply was paused (``pause_turn``), which is sent back as the last
    message to be continued and is no prefill; so is a final assistant turn that holds a server tool call."""
    from .models import model_limits

    limits = model_limits(request.get("model"))
    max_tokens = request.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens > limits.max_output:
        return OVER_CEILING.format(max_tokens=max_tokens, ceiling=limits.max_output, model=request.get("model"))
    if limits.prefill or resuming:
        return None
    turns = _turns(request.get("messages") or [])
    if turns and turns[-1][1] == "assistant" and not any(
            b.get("type") == "server_tool_use" for _, _, b in turns[-1][2]):
        return NO_PREFILL
    return None


def type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
