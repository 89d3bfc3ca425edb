"""Hooks checked on the wire: the agentlab CLI against a minimal, independent Messages API server.

The server (wire.py) is written from the API's JSON shapes only, not from agentlab's scripted engine: it answers
POST /v1/messages with canned messages in order and records every request body.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from forked import run_forked
from wire import MessagesServer, last_user_text, message


def run_cli(url: str, settings: Path, tmp_path: Path, *extra: str) -> tuple[int, dict, str]:
    ran = run_forked(["run", "--base-url", url, "--settings", str(settings), "--tools", "demo", "--json", "--prompt",
                      "Do the task.", "--trace", str(tmp_path / "trace.jsonl"), *extra], cwd=tmp_path, timeout=60)
    lines = ran.stdout.strip().splitlines()
    return ran.code, json.loads(lines[-1]) if lines else {}, ran.stderr


def write_settings(tmp_path: Path, event: str, command: str, *, matcher: str | None = None,
                   timeout: float | None = None) -> Path:
    hook: dict = {"type": "command", "command": command}
    if timeout is not None:
        hook["timeout"] = timeout
    entry: dict = {"hooks": [hook]}
    if matcher is not None:
        entry["matcher"] = matcher
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"hooks": {event: [entry]}}))
    return path


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("import json, sys\n" + body)
    return f"{sys.executable} {path}"


@pytest.mark.parametrize("form", ["json", "exit2"])
def test_stop_hook_block_is_fed_back_on_the_wire(tmp_path, form):
    state = tmp_path / "stops"
    if form == "json":
        body = (f"p = '{state}'\nimport os\nn = int(open(p).read()) if os.path.exists(p) else 0\n"
                "open(p, 'w').write(str(n + 1))\n"
                "payload = json.load(sys.stdin)\n"
                "if n == 0:\n    print(json.dumps({'decision': 'block', 'reason': 'run the tests first'}))\n")
    else:
        body = (f"p = '{state}'\nimport os\nn = int(open(p).read()) if os.path.exists(p) else 0\n"
                "open(p, 'w').write(str(n + 1))\n"
                "payload = json.load(sys.stdin)\n"
                "if n == 0:\n    sys.stderr.write('run the tests first')\n    sys.exit(2)\n")
    settings = write_settings(tmp_path, "Stop", script(tmp_path, "stop.py", body))
    replies = [message([{"type": "text", "text": "Done."}], "end_turn"),
               message([{"type": "text", "text": "Tests run, done."}], "end_turn")]
    with MessagesServer(replies) as server:
        code, result, stderr = run_cli(server.url, settings, tmp_path)
    assert code == 0, stderr
    assert result["subtype"] == "success" and result["stop_hook_blocks"] == 1
    assert len(server.bodies) == 2
    second = server.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert "Stop hook feedback" in last_user_text(server.bodies[1])
    assert "run the tests first" in last_user_text(server.bodies[1])


def test_stop_hook_sees_stop_hook_active_after_a_block(tmp_path):
    log = tmp_path / "inputs.jsonl"
    body = (f"payload = json.load(sys.stdin)\nopen('{log}', 'a').write(json.dumps(payload) + '\\n')\n"
            "if not payload['stop_hook_active']:\n"
            "    print(json.dumps({'decision': 'block', 'reason': 'once more'}))\n")
    settings = write_settings(tmp_path, "Stop", script(tmp_path, "stop.py", body))
    replies = [message([{"type": "text", "text": "A."}], "end_turn"),
               message([{"type": "text", "text": "B."}], "end_turn")]
    with MessagesServer(replies) as server:
        code, result, _ = run_cli(server.url, settings, tmp_path)
    inputs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [i["stop_hook_active"] for i in inputs] == [False, True]
    assert [i["last_assistant_message"] for i in inputs] == ["A.", "B."]
    assert all(i["hook_event_name"] == "Stop" and Path(i["transcript_path"]).exists() for i in inputs)
    assert code == 0 and result["num_turns"] == 2


def test_pre_tool_use_deny_becomes_an_error_tool_result(tmp_path):
    body = ("payload = json.load(sys.stdin)\n"
            "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse', "
            "'permissionDecision': 'deny', 'permissionDecisionReason': 'weather is off limits'}}))\n")
    settings = write_settings(tmp_path, "PreToolUse", script(tmp_path, "deny.py", body), matcher="get_weather")
    tool_use = {"type": "tool_use", "id": "toolu_w1", "name": "get_weather", "input": {"location": "Oslo"}}
    replies = [message([tool_use], "tool_use"), message([{"type": "text", "text": "OK."}], "end_turn")]
    with MessagesServer(replies) as server:
        code, result, _ = run_cli(server.url, settings, tmp_path)
    assert code == 0
    results = server.bodies[1]["messages"][-1]["content"]
    assert len(results) == 1 and results[0]["type"] == "tool_result"
    assert results[0]["tool_use_id"] == "toolu_w1" and results[0]["is_error"] is True
    assert "weather is off limits" in results[0]["content"]


def test_matcher_leaves_other_tools_alone(tmp_path):
    body = "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse', 'permissionDecision': 'deny'}}))\n"
    settings = write_settings(tmp_path, "PreToolUse", script(tmp_path, "deny.py", body), matcher="get_weather")
    tool_use = {"type": "tool_use", "id": "toolu_c1", "name": "calculator", "input": {"expression": "6 * 7"}}
    replies = [message([tool_use], "tool_use"), message([{"type": "text", "text": "42."}], "end_turn")]
    with MessagesServer(replies) as server:
        code, _, _ = run_cli(server.url, settings, tmp_path)
    result_block = server.bodies[1]["messages"][-1]["content"][0]
    assert code == 0 and result_block["content"] == "42" and not result_block.get("is_error")


def test_a_hanging_hook_is_killed_at_its_timeout_and_the_run_goes_on(tmp_path):
    body = "import time\njson.load(sys.stdin)\ntime.sleep(60)\n"
    settings = write_settings(tmp_path, "Stop", script(tmp_path, "hang.py", body), timeout=1)
    replies = [message([{"type": "text", "text": "Done."}], "end_turn")]
    with MessagesServer(replies) as server:
        code, result, _ = run_cli(server.url, settings, tmp_path)
    assert code == 0 and result["subtype"] == "success" and len(server.bodies) == 1
    events = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    hooks = [e["data"] for e in events if e["kind"] == "hook"]
    assert len(hooks) == 1 and hooks[0]["timed_out"] is True and hooks[0]["error"]
