"""The naive agent loop, on the raw anthropic SDK: call the model, run the tools it asks for, and stop as
soon as ``stop_reason`` is not ``"tool_use"``.

Many tutorials start from this loop. It answers the two common endings and gets the others wrong: a reply
cut off by max_tokens, a paused server-tool turn, a tool call labelled end_turn, an empty reply after tool
results, a prompt that has grown too long. ``agentlab grade`` names each miss:

    agentlab grade --command "python examples/naive_loop.py"

The prompt is the last command-line argument; the SDK reads ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY.
"""

from __future__ import annotations

import ast
import operator
import os
import sys

import anthropic

TOOLS = [
    {"name": "calculator", "description": "Evaluate an arithmetic expression and return the result.",
     "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}},
                      "required": ["expression"]}},
    {"name": "get_weather", "description": "Get the current weather for a location.",
     "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}},
    {"name": "read_file", "description": "Read a text file from the working folder.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "run_tests", "description": "Run the project's test suite.",
     "input_schema": {"type": "object", "properties": {}}},
    # a server tool: the API runs the search itself, and a long search can pause the turn (pause_turn)
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
]
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.Pow: operator.pow, ast.USub: operator.neg}


def calculate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return calculate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](calculate(node.left), calculate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](calculate(node.operand))
    raise ValueError("only numbers and + - * / ** are allowed")


def run_tool(name: str, tool_input: dict) -> str:
    try:
        if name == "calculator":
            return f"{calculate(ast.parse(tool_input['expression'], mode='eval')):g}"
        if name == "get_weather":
            return f"Weather in {tool_input['location']}: 12°C, light rain"
        if name == "read_file":
            with open(tool_input["path"], encoding="utf-8") as f:
                return f.read(20_000)
        if name == "run_tests":
            return "12 passed, 0 failed"
        return f"error: no tool named {name}"
    except Exception as exc:  # the model gets the error as the tool's result
        return f"error: {exc}"


def main(prompt: str) -> None:
    client = anthropic.Anthropic()
    model = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-6")
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = client.messages.create(model=model, max_tokens=1024, tools=TOOLS, messages=messages)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            break
        results = [{"type": "tool_result", "tool_use_id": block.id, "content": run_tool(block.name, block.input)}
                   for block in reply.content if block.type == "tool_use"]
        messages.append({"role": "user", "content": results})
    print("".join(block.text for block in reply.content if block.type == "text"))


if __name__ == "__main__":
    main(sys.argv[-1])
