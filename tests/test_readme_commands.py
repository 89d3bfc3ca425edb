"""Every command the README shows works as written after its two set-up commands (`make lab`, `make test`).

The README's shell blocks are read line by line. A line is a command when it starts with ``$ ``, ``make``, a
path, ``export``, a ``NAME=value`` assignment or a bare program name (in a block that shows a session, only the
lines after ``$ ``); indented lines continue a synopsis, and the rest (a report's output, the layout) is not a
command. For each command: the program exists after the
set-up as written, from the checkout's folder (`.venv/bin/agentlab`, which `make lab` and `make test`
install; a bare ``agentlab`` or ``pytest`` is not on the ``PATH`` of a fresh shell), a make target is in the
Makefile, every option an agentlab command names is one its subcommand takes, and a command without
placeholders parses as agentlab's own parser parses it. A few run for real.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
BUILTINS = {"export", "source", "cd"}
PLACEHOLDER = re.compile(r"\[|\.\.\.|<|\b[A-Z][A-Z_]{2,}\b")   # [--opt], PATH..., <your agent>, SCENARIO, FILE


def readme_commands(text: str) -> list[str]:
    commands = []
    for block in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if block.group(1) not in ("", "sh", "bash", "console"):
            continue
        lines = block.group(2).splitlines()
        if any(line.startswith("$ ") for line in lines):   # a session: the commands after $, the rest output
            lines = [line for line in lines if line.startswith("$ ")]
        for line in lines:
            if not line or line[0].isspace() or line.startswith(("#", "✓", "✗", "…")):
                continue
            line = line.removeprefix("$ ")
            words = _words(line)
            if not words or words[0].endswith("/"):   # a folder of the layout
                continue
            first = words[0]
            if first in BUILTINS or first == "make" or "/" in first or re.fullmatch(r"[A-Z_]+=\S*", first) or \
                    first in ("agentlab", "pytest", "python", "python3", "pip"):
                commands.append(line)
    return commands


def _words(line: str) -> list[str]:
    line = re.sub(r"\s+#.*$", "", line)   # a comment after the command
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def program_problem(words: list[str]) -> str | None:
    """What keeps the command's program from running as written after the set-up; None when it runs."""
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if not words or words[0] in BUILTINS or words[0].startswith("<"):
        return None
    program = words[0]
    if program == "make":
        targets = set(re.findall(r"^([\w.-]+):", (REPO / "Makefile").read_text(), re.M))
        missing = [t for t in words[1:] if "=" not in t and t not in targets]
        return f"make targets not in the Makefile: {missing}" if missing else None
    if "/" not in program:   # on the PATH of a shell that has not activated the venv (python3, which the README needs)
        venv_bin = str(Path(sys.executable).parent)
        path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
        if program in ("agentlab", "pytest") or shutil.which(program, path=path) is None:
            return f"{program!r} is not on the PATH after `make lab`; write .venv/bin/{program}"
        return None
    if not (REPO / program).exists() and not Path(program).exists():
        return f"{program} does not exist after the set-up"
    return None


def agentlab_problem(words: list[str]) -> str | None:
    """An agentlab command: its subcommand and options are agentlab's; without placeholders it parses."""
    args = words[1:]
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")   # noqa: SLF001 - argparse's subparsers
    if not args or args[0] not in sub.choices:
        return f"no agentlab subcommand {args[:1]}"
    options = {o for action in sub.choices[args[0]]._actions for o in action.option_strings}   # noqa: SLF001
    unknown = [w.split("=")[0] for w in args if w.startswith("--") and w.split("=")[0] not in options]
    if unknown:
        return f"agentlab {args[0]} takes no {unknown}"
    if not PLACEHOLDER.search(" ".join(args)):
        try:
            parser.parse_args(args)
        except SystemExit:
            return f"agentlab's parser refuses {args}"
    for i, word in enumerate(args[:-1]):   # the command grade runs is a command too
        if word == "--command":
            inner = shlex.split(args[i + 1])
            problem = program_problem(inner) if PLACEHOLDER.search(args[i + 1]) is None else None
            if problem:
                return f"--command: {problem}"
    return None


def test_the_readme_shows_commands():
    commands = readme_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert any(c.startswith("make lab") for c in commands) and len(commands) > 15


@pytest.mark.parametrize("command", readme_commands((REPO / "README.md").read_text(encoding="utf-8")))
def test_every_readme_command_works_as_written_after_the_set_up(command):
    words = _words(command)
    problem = program_problem(words)
    if problem is None and Path(words[0]).name == "agentlab":
        problem = agentlab_problem(words)
    assert problem is None, f"README: `{command}`: {problem}"


def test_a_bare_agentlab_is_refused_and_a_real_option_is_checked():
    assert "not on the PATH" in program_problem(["agentlab", "run", "tour"])
    assert "takes no ['--no-such']" in agentlab_problem([".venv/bin/agentlab", "run", "--no-such"])
    assert program_problem(["make", "lab"]) is None


@pytest.mark.parametrize("args", [["scenarios"],
                                  ["replay", "data/sessions/claude-code/2.1.332/context_window_full.jsonl"]])
def test_the_readme_commands_that_read_only_the_checkout_run(args):
    command = f".venv/bin/agentlab {' '.join(args)}"
    assert command in readme_commands((REPO / "README.md").read_text(encoding="utf-8")) or args == ["scenarios"]
    agentlab = Path(sys.executable).with_name("agentlab")   # the venv's, as make installs it
    done = subprocess.run([str(agentlab), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
