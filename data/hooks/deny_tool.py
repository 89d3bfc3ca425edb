#!/usr/bin/env python3
"""PreToolUse hook: deny the tools named on the command line (default: get_weather).

For a denied tool it prints Claude Code's PreToolUse answer

    {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                            "permissionDecisionReason": "..."}}

so the tool does not run and the model gets the reason as the tool's error result. For any other tool it
prints nothing: no opinion, the normal permission rules apply.

Settings (the PreToolUse part of settings.example.json; list several tools as arguments if you like):

    {"hooks": {"PreToolUse": [{"matcher": "get_weather", "hooks": [{"type": "command", "timeout": 10,
        "command": "\"$CLAUDE_PROJECT_DIR\"/data/hooks/deny_tool.py get_weather"}]}]}}
"""

import json
import sys

DENIED = sys.argv[1:] or ["get_weather"]


def main():
    payload = json.load(sys.stdin)
    tool = payload.get("tool_name")
    if tool in DENIED:
        print(json.dumps({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": f"The tool {tool} is switched off in this lab; answer without it.",
        }}))


if __name__ == "__main__":
    main()
