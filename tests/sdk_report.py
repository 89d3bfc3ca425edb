"""Grade a small loop on the error scenarios and print the SDK's version, then the report's text.

Run by tests/test_sdk_versions.py in a fresh interpreter, once with the installed SDK and once with the oldest
release pyproject.toml admits put first on ``PYTHONPATH``: the two reports must be the same text.
"""

from __future__ import annotations

import sys

import anthropic

from agentlab.grading.serving import grade_function

SCENARIOS = ["api_errors", "api_error_fatal", "prompt_too_long", "overloaded_fallback"]


def gives_up_on_errors(client, prompt, tools, run_tool):
    """One call without the SDK's own retries; any API error is raised to the grader."""
    client = client.with_options(max_retries=0)
    reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, tools=tools,
                                   messages=[{"role": "user", "content": prompt}])
    return "".join(b.text for b in reply.content if b.type == "text")


def main() -> int:
    report = grade_function(gives_up_on_errors, SCENARIOS, jobs=1, label="gives up on errors")
    print(anthropic.__version__)
    print(report.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
