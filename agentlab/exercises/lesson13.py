"""Lesson 13, what a run costs: price one call from its usage.

The learner writes ``cost_of_call(usage, price) -> float``: the US dollars one model call costs, given the
``usage`` block of its response and the model's ``price`` row (dollars per million tokens, keys ``input``,
``cache_write``, ``cache_read`` and ``output``). The three prompt counts are disjoint: ``input_tokens`` is only
the part neither read from nor written to the cache. ``check_cost_of_call`` prices scripted cases and every
call of the lesson's run, and compares with the run's own ``cost_usd``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from . import exercise


def bill(loop: Any):
    """One row per model call of a finished loop (a DataFrame indexed by call): the four parts of its prompt
    and output as the API's ``usage`` reports them, and what the call cost in US dollars."""
    import pandas as pd

    rows = []
    for e in loop.trace.of_kind("response"):
        d = e.data
        rows.append({"call": e.call, "uncached input": d["input_tokens"],
                     "cache writes": d["cache_creation_input_tokens"],
                     "cache reads": d["cache_read_input_tokens"], "output": d["output_tokens"],
                     "cost $": round(d["cost_usd"], 5)})
    return pd.DataFrame(rows).set_index("call")

HINT = """
Each of the four counts in usage has its own price: input_tokens at price["input"],
cache_creation_input_tokens at price["cache_write"], cache_read_input_tokens at price["cache_read"],
output_tokens at price["output"]. The counts do not overlap, so add the four products, then divide by a
million (prices are per million tokens). A count the usage leaves out is 0.
"""

SONNET = {"input": 3.0, "cache_write": 3.75, "cache_read": 0.30, "output": 15.0}
HAIKU = {"input": 1.0, "cache_write": 1.25, "cache_read": 0.10, "output": 5.0}

# (case, usage, price, expected dollars)
CASES: tuple[tuple[str, dict[str, int], dict[str, float], float], ...] = (
    ("no caching at all", {"input_tokens": 2000, "output_tokens": 500}, SONNET, (2000 * 3.0 + 500 * 15.0) / 1e6),
    ("the first call writes the prefix",
     {"input_tokens": 40, "cache_creation_input_tokens": 1100, "cache_read_input_tokens": 0, "output_tokens": 35},
     SONNET, (40 * 3.0 + 1100 * 3.75 + 35 * 15.0) / 1e6),
    ("a later call reads it back",
     {"input_tokens": 60, "cache_creation_input_tokens": 900, "cache_read_input_tokens": 2200, "output_tokens": 30},
     SONNET, (60 * 3.0 + 900 * 3.75 + 2200 * 0.30 + 30 * 15.0) / 1e6),
    ("another model's prices",
     {"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 5000, "output_tokens": 100},
     HAIKU, (10 * 1.0 + 5000 * 0.10 + 100 * 5.0) / 1e6),
)

RULE = ("each usage count at its own price, per million tokens: input_tokens excludes the cached part, so "
        "nothing is counted twice or left out")


def _check(cost_of_call: Callable[[dict[str, Any], dict[str, float]], float]) -> str:
    from ..core.cost import default_prices
    from ..lab import scenario_loop

    cases = list(CASES)
    loop = scenario_loop("what_a_run_costs")
    loop.run()
    table = default_prices()
    for event in loop.trace.of_kind("response"):
        row = table.price(event.data["model"])
        assert row is not None, f"no price for {event.data['model']!r} in data/prices.yaml"
        price = {"input": row.input, "cache_write": row.cache_write, "cache_read": row.cache_read,
                 "output": row.output}
        usage = {k: event.data["usage"].get(k, 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                           "cache_read_input_tokens", "output_tokens")}
        cases.append((f"call {event.call} of what_a_run_costs", usage, price, float(event.data["cost_usd"])))
    for case, usage, price, want in cases:
        try:
            got = cost_of_call(dict(usage), dict(price))
        except Exception as exc:  # a crashing answer is a wrong case, named like the others
            raise AssertionError(f"case {case!r}: expected ${want:.6f}, got {type(exc).__name__}: {exc}: "
                                 f"{RULE}") from None
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise AssertionError(f"case {case!r}: expected a number of dollars (${want:.6f}), got {got!r}")
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-12):
            raise AssertionError(f"case {case!r}: usage {usage}, price {price}: expected ${want:.6f}, "
                                 f"got ${got:.6f}: {RULE}")
    assert loop.result is not None
    return (f"Right: {len(cases)} cases pass, the {len(cases) - len(CASES)} calls of what_a_run_costs included; "
            f"the run costs ${loop.result.cost_usd:.4f}.")


@exercise("lesson13", "cost_of_call", todo="write the body of cost_of_call in the exercise cell above: "
          "each usage count times its price, per million tokens")
def check_cost_of_call(cost_of_call: Callable[[dict[str, Any], dict[str, float]], float]) -> str:
    """Check ``cost_of_call`` on scripted cases and on every call of ``what_a_run_costs``."""
    return _check(cost_of_call)


def cost_of_call(usage, price):  # as the exercise cell writes it: no annotations to import
    counts = {"input": "input_tokens", "cache_write": "cache_creation_input_tokens",
              "cache_read": "cache_read_input_tokens", "output": "output_tokens"}
    return sum(usage.get(count, 0) * price[kind] for kind, count in counts.items()) / 1_000_000


SOLUTION = cost_of_call
