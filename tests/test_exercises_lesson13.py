"""Lesson 13's exercise: the solution passes, wrong answers fail naming the case, the stub is "not solved yet"."""

from __future__ import annotations

import pytest

from agentlab.exercises import lesson13
from agentlab.exercises.lesson13 import check_cost_of_call


def test_the_solution_passes(capsys):
    check_cost_of_call(lesson13.SOLUTION)
    out = capsys.readouterr().out
    assert out.startswith("Right:") and "what_a_run_costs" in out and "Not solved" not in out


def test_the_stub_is_not_solved_yet_and_does_not_raise(capsys):
    def cost_of_call(usage, price):
        raise NotImplementedError("price each usage count at its own rate")

    check_cost_of_call(cost_of_call)
    out = capsys.readouterr().out
    assert out.startswith("Not solved yet: cost_of_call") and "Right" not in out


def all_prompt_at_input_price(usage, price):
    prompt = (usage.get("input_tokens", 0) + usage.get("cache_creation_input_tokens", 0)
              + usage.get("cache_read_input_tokens", 0))
    return (prompt * price["input"] + usage.get("output_tokens", 0) * price["output"]) / 1e6


def cache_counts_left_out(usage, price):
    return (usage.get("input_tokens", 0) * price["input"] + usage.get("output_tokens", 0) * price["output"]) / 1e6


def reads_subtracted_from_input(usage, price):
    uncached = usage.get("input_tokens", 0) - usage.get("cache_read_input_tokens", 0)
    return (uncached * price["input"] + usage.get("cache_read_input_tokens", 0) * price["cache_read"]
            + usage.get("cache_creation_input_tokens", 0) * price["cache_write"]
            + usage.get("output_tokens", 0) * price["output"]) / 1e6


def not_per_million(usage, price):
    return lesson13.SOLUTION(usage, price) * 1_000_000


def missing_key_crashes(usage, price):
    return (usage["input_tokens"] * price["input"] + usage["cache_read_input_tokens"] * price["cache_read"]
            + usage["cache_creation_input_tokens"] * price["cache_write"]
            + usage["output_tokens"] * price["output"]) / 1e6


def writes_at_the_input_price(usage, price):
    """Prices cache writes like plain input (a write costs 1.25 x input)."""
    return (usage.get("input_tokens", 0) * price["input"] + usage.get("cache_creation_input_tokens", 0) * price["input"]
            + usage.get("cache_read_input_tokens", 0) * price["cache_read"]
            + usage.get("output_tokens", 0) * price["output"]) / 1e6


@pytest.mark.parametrize("wrong, case", [
    (writes_at_the_input_price, "the first call writes the prefix"),
    (all_prompt_at_input_price, "the first call writes the prefix"),
    (cache_counts_left_out, "the first call writes the prefix"),
    (reads_subtracted_from_input, "a later call reads it back"),
    (not_per_million, "no caching at all"),
    (missing_key_crashes, "no caching at all"),
])
def test_wrong_answers_fail_naming_case_expected_got_and_rule(wrong, case):
    with pytest.raises(AssertionError) as info:
        check_cost_of_call(wrong)
    message = str(info.value)
    assert f"case {case!r}" in message and "expected $" in message and "got" in message
    assert "each usage count at its own price" in message


def test_the_hint_and_the_solution_are_there():
    assert "million" in lesson13.HINT and lesson13.SOLUTION.__name__ == "cost_of_call"
