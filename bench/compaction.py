"""Do the compaction strategies and the context meter scale linearly with the length of a history?

A history of N tool_use turns (each an assistant text + tool_use and a user tool_result of ~200 characters)
is compacted by each strategy, and fed message by message to a ContextMeter, at 1,000 and 10,000 turns,
several times, the two sizes interleaved in one process. Printed: the median time per size and the ratio
time-per-turn(10k) / time-per-turn(1k): linear cost gives a ratio near 1, cost growing with the length of
the history (a quadratic pass) would push it towards 10.

    .venv/bin/python bench/compaction.py            # --runs N (default 5); writes bench/results/compaction.json
    .venv/bin/python bench/compaction.py --quick    # 100 and 1,000 turns, once (the tests run it)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentlab.core.compaction import ContextMeter, clear_tool_results, drop_oldest, estimate_tokens, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Printer, add_arguments, record  # noqa: E402

SIZES = (1_000, 10_000)
RATIO_LIMIT = 2.0   # per-turn cost at 10k within twice that at 1k: linear, not quadratic


def long_history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Start the long job."}]
    for i in range(turns):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"step {i}"},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "run", "input": {"step": i}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"step {i} output " + "y" * 200}]})
    return messages


def operations(history: list[dict[str, Any]]) -> dict[str, Callable[[], Any]]:
    target = estimate_tokens(history) // 10

    def meter() -> int:
        m = ContextMeter()
        for message in history:
            m.appended(message)
        return m.tokens

    return {
        "clear_tool_results": lambda: clear_tool_results(history),
        "drop_oldest": lambda: drop_oldest(history, target_tokens=target),
        "summarize": lambda: summarize(history, lambda older: "summary of the long job", keep_last_turns=2),
        "ContextMeter.appended": meter,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per size (default 5)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    sizes, runs = ((100, 1_000), 1) if args.quick else (SIZES, args.runs)
    histories = {n: long_history(n) for n in sizes}
    ops = {n: operations(h) for n, h in histories.items()}
    times: dict[tuple[str, int], list[float]] = {}
    load_before = os.getloadavg()[0]
    for _ in range(runs):
        for n in sizes:   # interleaved: drift in the machine's load hits both sizes alike
            for name, op in ops[n].items():
                start = time.perf_counter()
                op()
                times.setdefault((name, n), []).append(time.perf_counter() - start)
    small, large = sizes
    out = Printer()
    out(f"compaction: {runs} runs per size, {os.cpu_count()} cores")
    failed = False
    figures: dict[str, Any] = {"small": small, "large": large, "runs": runs, "operations": {}}
    for name in ops[small]:
        a, b = statistics.median(times[(name, small)]), statistics.median(times[(name, large)])
        ratio = (b / large) / (a / small)
        ok = ratio <= RATIO_LIMIT
        failed |= not ok
        out(f"  {name:<22} {small:>6,} turns {a * 1000:8.1f} ms   {large:>6,} turns {b * 1000:8.1f} ms   "
            f"per-turn ratio {ratio:4.2f} ({'linear' if ok else 'NOT linear'}, limit {RATIO_LIMIT})")
        figures["operations"][name] = {"small_ms": round(a * 1000, 2), "large_ms": round(b * 1000, 2),
                                       "per_turn_ratio": round(ratio, 3)}
    out(f"  load average (1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    record("compaction", figures, out.text, args=args,
           command="bench/compaction.py" + (" --quick" if args.quick else ""))
    return 1 if failed and not args.quick else 0  # a quick run checks the script, its figures are too small


if __name__ == "__main__":
    sys.exit(main())
