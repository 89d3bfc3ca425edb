"""Every lesson's exercise, as the notebooks ship it: a stub, a check whose committed output is "Not solved yet",
and no cell that defines the answer (so Run All can never show a pass for code the learner did not write)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from agentlab.exercises import lesson_module

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# lesson -> (notebook, the name the learner defines, the check)
EXERCISES = {
    "lesson00": ("00_the_loop", "naive_loop", "check_naive_loop"),
    "lesson01": ("01_content_not_label", "tools_to_run", "check_tools_to_run"),
    "lesson02": ("02_max_tokens", "on_max_tokens", "check_on_max_tokens"),
    "lesson03": ("03_context_window", "drop_middle", "check_drop_middle"),
    "lesson04": ("04_refusal", "on_refusal", "check_on_refusal"),
    "lesson05": ("05_stop_sequence", "my_scenario", "check_stop_scenario"),
    "lesson06": ("06_pause_turn", "finish_turn", "check_finish_turn"),
    "lesson07": ("07_api_errors", "retry_delay", "check_retry_delay"),
    "lesson08": ("08_max_turns", "runaway", "check_runaway_scenario"),
    "lesson09": ("09_hooks", "check_once", "check_stop_once_hook"),
    "lesson10": ("10_the_whole_decision", "my_decide", "check_my_decide"),
    "lesson11": ("11_real_claude_code", "after_max_tokens", "check_after_max_tokens"),
    "lesson13": ("13_what_a_run_costs", "cost_of_call", "check_cost_of_call"),
    "lesson14": ("14_your_own_sessions", "count_calls", "check_count_calls"),
}


def _source(cell: dict[str, Any]) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _output_text(cell: dict[str, Any]) -> str:
    parts = []
    for out in cell.get("outputs", []):
        for value in (out.get("text"), (out.get("data") or {}).get("text/plain"), out.get("evalue")):
            if value:
                parts.append("".join(value) if isinstance(value, list) else value)
    return "\n".join(parts)


def _is_stub(body: list[ast.stmt]) -> bool:
    """A stub's body ends by raising NotImplementedError and holds no loop, branch or return before that."""
    if not body or not isinstance(body[-1], ast.Raise):
        return False
    raised = body[-1].exc
    target = raised.func if isinstance(raised, ast.Call) else raised
    if not (isinstance(target, ast.Name) and target.id == "NotImplementedError"):
        return False
    return not any(isinstance(node, ast.Return | ast.If | ast.For | ast.While | ast.Try | ast.With)
                   for stmt in body[:-1] for node in ast.walk(stmt))


def exercise_problems(cells: list[dict[str, Any]], lesson: str, name: str, check: str) -> list[str]:
    """What is wrong with one notebook's exercise, in words; [] when it follows the convention."""
    problems = []
    code = [(i, c) for i, c in enumerate(cells) if c["cell_type"] == "code"]
    calls = [i for i, c in code if f"{check}({name})" in _source(c)]
    if len(calls) != 1:
        return [f"expected one cell calling {check}({name}), found {len(calls)}"]
    check_at = calls[0]
    check_cell = cells[check_at]
    if "check" not in check_cell.get("metadata", {}).get("tags", []):
        problems.append(f"cell {check_at} calls {check} but is not tagged 'check'")
    said = _output_text(check_cell)
    if not said.startswith("Not solved yet:"):
        problems.append(f"the check cell's committed output should be the 'Not solved yet' state, it is {said[:120]!r}")
    if "pass" in said.lower() or "correct" in said.lower():
        problems.append(f"the check cell's committed output reports a pass: {said[:120]!r}")
    definitions = []
    for i, cell in code:
        tags = cell.get("metadata", {}).get("tags", [])
        if "solution" in tags:
            problems.append(f"cell {i} is tagged 'solution'")
        source = _source(cell)
        imported = source.split(f"exercises.{lesson} import", 1)[1] if f"exercises.{lesson} import" in source else ""
        if "SOLUTION" in imported or f" {name}" in imported.split("\n", 1)[0]:
            problems.append(f"cell {i} imports the solution from agentlab.exercises.{lesson}")
        try:
            tree = ast.parse(source)
        except SyntaxError:  # IPython magics; no lesson defines its answer in one
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == name:
                definitions.append(i)
                if not _is_stub(node.body):
                    problems.append(f"cell {i} defines {name} with a body that is not a stub (it should end in "
                                    "`raise NotImplementedError(...)`)")
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                problems.append(f"cell {i} assigns {name} instead of defining the stub function")
    if len(definitions) != 1:
        problems.append(f"expected {name} to be defined in exactly one cell (the stub), found {definitions}")
    elif definitions[0] > check_at:
        problems.append(f"the stub of {name} (cell {definitions[0]}) comes after its check (cell {check_at})")
    elif "exercise" not in cells[definitions[0]].get("metadata", {}).get("tags", []):
        problems.append(f"cell {definitions[0]}, the stub, is not tagged 'exercise'")
    return problems


def _cells(notebook: str) -> list[dict[str, Any]]:
    return json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]


def test_every_lesson_has_an_exercise() -> None:
    lessons = sorted(p.name[:2] for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert [f"lesson{n}" for n in lessons if f"lesson{n}" in EXERCISES] == sorted(EXERCISES)


@pytest.mark.parametrize("lesson", sorted(EXERCISES))
def test_the_notebook_ships_the_stub_and_the_not_solved_state(lesson: str) -> None:
    notebook, name, check = EXERCISES[lesson]
    assert exercise_problems(_cells(notebook), lesson, name, check) == []


@pytest.mark.parametrize("lesson", sorted(EXERCISES))
def test_the_notebook_stub_is_not_solved_yet(lesson: str, capsys) -> None:
    notebook, name, check = EXERCISES[lesson]
    (stub,) = [_source(c) for c in _cells(notebook) if "exercise" in c.get("metadata", {}).get("tags", [])]
    namespace: dict[str, Any] = {}
    exec(compile(stub, f"{notebook}:exercise", "exec"), namespace)
    verdict = getattr(lesson_module(lesson), check)(namespace[name])
    assert verdict.status == "not solved"
    out = capsys.readouterr().out
    assert out.startswith(f"Not solved yet: {name} still raises NotImplementedError")
    assert f"show_solution('{lesson}')" in out


@pytest.mark.parametrize("lesson", sorted(EXERCISES))
def test_the_markdown_tells_the_learner_about_hint_and_show_solution(lesson: str) -> None:
    notebook, _, _ = EXERCISES[lesson]
    markdown = "\n".join(_source(c) for c in _cells(notebook) if c["cell_type"] == "markdown")
    assert f'hint("{lesson}")' in markdown and f'show_solution("{lesson}")' in markdown


def test_the_rule_catches_a_solution_cell_and_a_pass_in_the_committed_output() -> None:
    """The notebooks as they were before the stubs: a hidden solution after the stub, and a pass shown."""
    def cell(source: str, tags: list[str], output: str | None = None) -> dict[str, Any]:
        outputs = [{"output_type": "stream", "name": "stdout", "text": output}] if output else []
        return {"cell_type": "code", "source": source, "metadata": {"tags": tags}, "outputs": outputs}

    stub = cell("def tools_to_run(message):\n    ...  # your code here\n", ["exercise"])
    solution = cell("def tools_to_run(message):\n    return [b['id'] for b in message['content']]\n", ["solution"])
    check = cell("check_tools_to_run(tools_to_run)\n", ["check"], "All 10 cases pass: you dispatch on the content.")
    problems = exercise_problems([stub, solution, check], "lesson01", "tools_to_run", "check_tools_to_run")
    assert any("'Not solved yet' state" in p for p in problems)
    assert any("reports a pass" in p for p in problems)
    assert any("tagged 'solution'" in p for p in problems)
    assert any("cell 0 defines tools_to_run with a body that is not a stub" in p for p in problems)
    assert any("cell 1 defines tools_to_run with a body that is not a stub" in p for p in problems)
