"""Each fact of the loop is stated once, in its home module, and every other user reads it from there.

A fact here is a value that two parts of agentlab must agree on: the transient HTTP statuses, the patterns of
the two 400 messages the loop reads numbers from, the stop reasons and the branch each one takes, the
reference loop's bounds. Each test imports the fact from its home and checks that the other users hold the
same object, and that no other module of the package writes the fact out again. The lessons' exercises
(agentlab/exercises) are left out of the scan: their solutions are shown to learners as code that stands alone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, get_args

import pytest
from anthropic.types import StopReason as SdkStopReason
from anthropic.types.beta import BetaStopReason

from agentlab.core import transitions
from agentlab.core.transitions import (
    DEFAULT_MODEL,
    MAX_TOKENS_OVER_CEILING,
    PROMPT_TOO_LONG_SIZES,
    RECOVERY_STOP_REASONS,
    STOP_REASON_BRANCH,
    STOP_REASONS,
    TRANSIENT_STATUSES,
    Limits,
    LoopState,
    decide,
    is_prompt_too_long,
    max_tokens_ceiling,
)

PACKAGE = Path(transitions.__file__).resolve().parents[1]


def sources() -> dict[str, str]:
    """Every module of the package but the lessons' exercises, by its path below agentlab/."""
    return {str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))
            if p.relative_to(PACKAGE).parts[0] != "exercises"}


def modules_stating(pattern: str) -> list[str]:
    return [name for name, text in sources().items() if re.search(pattern, text)]


# --- the stop reasons and the branch of each ----------------------------------------------------------------

def test_the_table_names_every_stop_reason_of_the_sdk_once() -> None:
    """A stop reason the SDK adds (to StopReason or BetaStopReason) fails here until it has a branch."""
    sdk = set(get_args(SdkStopReason)) | set(get_args(BetaStopReason))
    assert set(STOP_REASON_BRANCH) == sdk, (
        f"not in the table: {sorted(sdk - set(STOP_REASON_BRANCH))}; "
        f"not in the SDK: {sorted(set(STOP_REASON_BRANCH) - sdk)}")
    assert sorted(STOP_REASONS) == sorted(sdk)


@pytest.mark.parametrize("stop_reason", sorted(STOP_REASON_BRANCH))
def test_each_stop_reason_takes_the_branch_the_table_gives(stop_reason: str) -> None:
    """An empty reply right after tool results, at the start of a run: the table's branch, whatever it is."""
    state = LoopState(model=DEFAULT_MODEL, max_tokens=1024, after_tool_results=True)
    transition = decide({"content": [], "stop_reason": stop_reason}, state, Limits())
    assert transition.branch == STOP_REASON_BRANCH[stop_reason]  # type: ignore[index]


@pytest.mark.parametrize("stop_reason", ["something_new", None])
def test_a_stop_reason_the_table_does_not_hold_completes_and_says_so(stop_reason: Any) -> None:
    state = LoopState(model=DEFAULT_MODEL, max_tokens=1024, after_tool_results=True)
    transition = decide({"content": [{"type": "text", "text": "Hi"}], "stop_reason": stop_reason}, state, Limits())
    assert transition.branch == "complete"
    assert ("unknown stop_reason 'something_new'" if stop_reason else "no stop_reason") in transition.reason


def test_the_recovery_stop_reasons_are_those_whose_branch_is_no_answer() -> None:
    from agentlab.grading import rules as grade_rules

    assert RECOVERY_STOP_REASONS == {"max_tokens", "model_context_window_exceeded", "pause_turn", "compaction",
                                     "refusal"}
    assert grade_rules.RECOVERY_STOPS is RECOVERY_STOP_REASONS


def test_the_transcript_reader_knows_the_cores_stop_reasons() -> None:
    from agentlab.sessions import transcript

    assert transcript.STOP_REASONS == {*STOP_REASONS, None}


def modules_listing(values: set[Any], least: int) -> dict[str, list[int]]:
    """The modules, and their lines, where a list, set, tuple or Literal holds ``least`` or more of ``values``."""
    found: dict[str, list[int]] = {}
    for name, text in sources().items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.List | ast.Set | ast.Tuple) and len(
                    {e.value for e in node.elts if isinstance(e, ast.Constant)} & values) >= least:
                found.setdefault(name, []).append(node.lineno)
    return found


def test_no_other_module_lists_the_stop_reasons() -> None:
    found = modules_listing(set(STOP_REASONS), 4)
    assert set(found) == {"core/transitions.py"}, found


# --- the transient statuses, and the numbers in two 400 messages ---------------------------------------------

def test_the_grader_retries_what_the_loop_retries() -> None:
    from agentlab.grading import command as grade, rules as grade_rules

    assert grade_rules.TRANSIENT_STATUSES is TRANSIENT_STATUSES
    assert grade.TRANSIENT_STATUSES is TRANSIENT_STATUSES
    found = modules_listing(set(TRANSIENT_STATUSES), 3)
    assert set(found) == {"core/transitions.py"}, found


def test_the_max_tokens_ceiling_is_read_in_one_place() -> None:
    message = "max_tokens: 64000 > 4096, which is the maximum allowed number of output tokens for claude-x"
    assert max_tokens_ceiling(400, message) == 4096
    assert max_tokens_ceiling(500, message) is None
    assert max_tokens_ceiling(400, "max_tokens: must be a number") is None
    assert MAX_TOKENS_OVER_CEILING.pattern == r"max_tokens:\s*(\d+)\s*>\s*(\d+)"
    assert modules_stating(r"max_tokens:(\\s\*|\s)\(?\\d") == ["core/transitions.py"]


def test_the_grader_reads_a_ceiling_and_a_long_prompt_as_the_loop_does() -> None:
    from agentlab.grading import rules as grade_rules

    assert grade_rules.max_tokens_ceiling is max_tokens_ceiling
    assert grade_rules.is_prompt_too_long is is_prompt_too_long
    assert is_prompt_too_long(400, "Prompt is too long: 210000 tokens > 200000 maximum")
    assert not is_prompt_too_long(413, "prompt is too long")


def test_the_size_a_too_long_prompt_gives_is_read_in_one_place() -> None:
    pytest.importorskip("matplotlib")
    from agentlab.ui import plots

    assert plots.PROMPT_TOO_LONG_SIZES is PROMPT_TOO_LONG_SIZES
    assert PROMPT_TOO_LONG_SIZES.search("prompt is too long: 250000 tokens > 200000 maximum").groups() == (
        "250000", "200000")
    assert modules_stating(r"tokens\\s\*>") == ["core/transitions.py"]


# --- the reference loop's bounds -----------------------------------------------------------------------------

BOUNDS = {"MAX_CONTINUATIONS": "max_continuations", "OVERLOADS_BEFORE_FALLBACK": "overloads_before_fallback",
          "MAX_COMPACTIONS": "max_compactions", "MAX_PAUSE_RESUMES": "max_pause_continuations",
          "MAX_STOP_BLOCKS": "stop_hook_block_cap"}


def test_the_grader_reads_the_reference_loops_bounds_from_limits() -> None:
    from agentlab.grading import rules as grade_rules

    defaults = Limits()
    assert {name: getattr(grade_rules, name) for name in BOUNDS} == {
        name: getattr(defaults, field) for name, field in BOUNDS.items()}
    tree = ast.parse(Path(grade_rules.__file__).read_text(encoding="utf-8"))
    written = [t.id for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
               for t in node.targets if isinstance(t, ast.Name) and t.id in BOUNDS]
    assert written == [], f"grade_rules writes these bounds out instead of reading Limits: {written}"


# --- helpers that had two copies -----------------------------------------------------------------------------

def test_observe_reads_a_python_clients_version_with_the_frameworks_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlab.observatory import frameworks, observe_clients

    asked: list[str] = []
    monkeypatch.setattr(frameworks, "python_version", lambda name: asked.append(name) or f"{name} 9.9")
    versions = {name: observe_clients.CLIENTS[name].version() for name in ("pydantic-ai", "langchain")}
    assert versions == {"pydantic-ai": "pydantic-ai-slim 9.9", "langchain": "langchain 9.9"}
    assert asked == ["pydantic-ai-slim", "langchain"]
    assert modules_stating(r"except PackageNotFoundError") == ["observatory/frameworks.py"]


def test_every_framework_notes_what_it_leaves_out_with_one_helper() -> None:
    """The notes a framework's record carries about a Stop hook or a fallback model it has no place for, in
    each framework's words (the committed records hold these texts)."""
    from agentlab.backend.scenario import load_scenario
    from agentlab.observatory import frameworks

    hook, fallback = load_scenario("stop_hook"), load_scenario("overloaded_fallback")
    assert frameworks.common_notes(hook, "pydantic-ai") == [
        "pydantic-ai has no Stop hooks: the scenario's hook is not applied"]
    assert frameworks.common_notes(fallback, "strands") == [
        "no fallback model configured in strands: the scenario's fallback model is not used"]
    assert frameworks.common_notes(fallback, "create_agent", "no fallback model middleware configured") == [
        "no fallback model middleware configured: the scenario's fallback model is not used"]
    assert modules_stating(r"has no Stop hooks: the scenario's hook") == ["observatory/frameworks.py",
                                                                          "observatory/observe_clients.py"]
    assert len(re.findall(r"has no Stop hooks", sources()["observatory/observe_clients.py"])) == 1  # tool runner's


def test_the_tool_runner_is_sent_the_body_the_core_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlab.backend.scenario import load_scenario
    from agentlab.core import wire
    from agentlab.observatory import observe_clients

    built: list[dict[str, Any]] = []
    build = wire.request_params

    class Built(Exception):
        """Raised once the body is built: nothing is sent."""

    def request_params(*args: Any, **kwargs: Any) -> dict[str, Any]:
        built.append(build(*args, **kwargs))
        raise Built

    monkeypatch.setattr(wire, "request_params", request_params)
    scenario = load_scenario("stop_sequence")
    with pytest.raises(Built):
        observe_clients.run_tool_runner(scenario, "http://127.0.0.1:9", Path("."), 1.0)
    assert built[0]["model"] == scenario.model and built[0]["stop_sequences"] == list(scenario.stop_sequences)
    assert modules_stating(r'\{"model": [^,]+, "max_tokens": [^,]+,\s*"messages"') == ["core/wire.py"]


# --- the block summaries -----------------------------------------------------------------------------------------

def test_the_three_block_summaries_read_blocks_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace line (ui.report), the compaction's list of removed blocks and the transcript pane (ui.widgets)
    each show what core.blocks.summarise_block reads: a block type it is taught to read as a tool call is
    shown as one by all three, and a tool result's error flag reaches all three."""
    from agentlab.core import blocks
    from agentlab.core.compaction import _describe_message
    from agentlab.ui.report import _content_summary
    from agentlab.ui.widgets import render_block

    call = {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "lookup", "input": {"q": "x"}}
    failed = {"type": "tool_result", "tool_use_id": "mcptoolu_1", "content": [{"type": "text", "text": "no"}],
              "is_error": True}
    before = (_content_summary([call]), _describe_message({"role": "assistant", "content": [call]}, "turn 1", {}),
              render_block(call))
    assert before[0] == "mcp_tool_use" and "block (" in before[1][0] and "mcp_tool_use · lookup" not in before[2]
    monkeypatch.setitem(blocks._KINDS, "mcp_tool_use", "tool_call")
    assert _content_summary([call]) == "mcp_tool_use lookup({'q': 'x'})"
    assert _describe_message({"role": "assistant", "content": [call]}, "turn 1", {}) == [
        "turn 1: mcp_tool_use mcptoolu_1 lookup"]
    assert "mcp_tool_use · lookup · mcptoolu_1" in render_block(call)
    assert _content_summary([failed]).startswith("tool_result ERROR ")
    assert _describe_message({"role": "user", "content": [failed]}, "turn 2", {"mcptoolu_1": "lookup"}) == [
        "turn 2: tool_result mcptoolu_1 (lookup, 8 tokens, error)"]
    assert "tool_result for mcptoolu_1 · is_error" in render_block(failed) and ">no</div>" in render_block(failed)
