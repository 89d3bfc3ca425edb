#!/usr/bin/env python3
"""Stop hook: do not let the agent finish until the tests have passed.

Claude Code (and agentlab) run this when the model is about to end its turn, with the event's JSON on
stdin. It answers in one of two ways:

* it prints {"decision": "block", "reason": "..."}: the loop must not stop; the reason goes back to the
  model as a user message and another turn runs;
* it prints nothing and exits 0: no objection, the run may end.

How does it know whether the tests passed? It reads a small state file whose path is in the environment
variable AGENTLAB_TESTS_STATE. Whoever runs the tests (a `run_tests` tool in a lesson, a CI step, you in a
terminal) writes "passed" or "failed" on its first line. This was chosen over reading the transcript
(`transcript_path`) because the state file is one line a lesson can flip in a cell, it does not depend on
the transcript format of any client, and the same script works under the real Claude Code CLI.

It never blocks when it cannot decide: no variable, no file, or a first line that is neither "passed"
nor "failed" all mean "no objection" (a note goes to stderr, which is recorded but not shown to the
model). It does not check `stop_hook_active`, so it keeps blocking while the tests fail; the loop's own
cap (8 consecutive blocks, as in Claude Code) is what ends a run whose tests never pass.

Settings (the Stop part of settings.example.json):

    {"hooks": {"Stop": [{"hooks": [{"type": "command", "timeout": 30, "command":
        "AGENTLAB_TESTS_STATE=\"${AGENTLAB_TESTS_STATE:-$CLAUDE_PROJECT_DIR/.tests_state}\" \"$CLAUDE_PROJECT_DIR\"/data/hooks/stop_until_tests_pass.py"}]}]}}

    (the state file defaults to .tests_state in the project directory unless the variable is already set)
"""

import json
import os
import sys

REASON = "Tests have not passed yet: run run_tests and fix failures before finishing."


def tests_state():
    """'passed', 'failed', or None when there is nothing to go on."""
    path = os.environ.get("AGENTLAB_TESTS_STATE")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline().strip().lower()
    except OSError:
        return None
    return first if first in ("passed", "failed") else None


def main():
    json.load(sys.stdin)  # the Stop payload; this hook only needs to know that the run wants to stop
    state = tests_state()
    if state is None:
        print("stop_until_tests_pass: no test result to go on, not blocking", file=sys.stderr)
    elif state == "failed":
        print(json.dumps({"decision": "block", "reason": REASON}))


if __name__ == "__main__":
    main()
