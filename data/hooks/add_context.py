#!/usr/bin/env python3
"""UserPromptSubmit hook: add a line of context to every prompt.

Plain text printed on stdout by a UserPromptSubmit hook that exits 0 is added to the conversation as
extra context next to the user's prompt (for other events plain stdout is ignored). The date is fixed so
that lessons give the same output on every run.

Settings (the UserPromptSubmit part of settings.example.json):

    {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "timeout": 10,
        "command": "\"$CLAUDE_PROJECT_DIR\"/data/hooks/add_context.py"}]}]}}
"""

import json
import sys

json.load(sys.stdin)  # {"prompt": ..., "hook_event_name": "UserPromptSubmit", ...}; not needed here
print("Today's date in the lab is 2026-01-01.")
