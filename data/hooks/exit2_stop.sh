#!/bin/sh
# Stop hook in its simplest form: exit code 2 blocks, and whatever is on stderr is the reason the model
# reads. It blocks every time, so a run ends only through the loop's cap on consecutive Stop blocks.
# An optional first argument replaces the reason.
#
# Settings:  {"hooks": {"Stop": [{"hooks": [{"type": "command",
#              "command": "\"$CLAUDE_PROJECT_DIR\"/data/hooks/exit2_stop.sh 'Run the tests first.'"}]}]}}
cat >/dev/null
echo "${1:-Not done yet: check your work once more before finishing.}" >&2
exit 2
