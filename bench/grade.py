"""How long does grading take? One client graded live, and every committed record graded again.

Two workloads, each timed in CPU seconds of the whole process (the scripted servers and the graded loop run
in threads of it), interleaved round by round with a reference in the same process:

- live: ``grade_function`` on lesson 12's careful loop (its solution), every gradeable scenario, 4 at a time,
  each against a fresh scripted server; then its text report, JSON document and JUnit XML. The servers, the
  SDK and the loop are most of it; the rules and the verdicts the rest.
- records: every committed record in data/observed graded again (``observed_reports``) and written as the
  text report, the JSON document and JUnit XML: the rules and the verdicts alone.
- reference: the same records through ``json.dumps`` / ``json.loads`` a fixed number of times, code the
  grader does not touch, so that the ratio workload / reference says how the grader's cost moved, whatever
  the machine's speed that hour.

    .venv/bin/python bench/grade.py           # 5 rounds; bench/results/grade.json
    .venv/bin/python bench/grade.py --quick   # one round on two scenarios and one client (the tests run it)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Printer, add_arguments, record  # noqa: E402

QUICK_SCENARIOS = ["end_turn", "tool_use"]
REFERENCE_PASSES = 5


def cpu(work: Callable[[], Any]) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def live(scenarios: list[str] | None) -> Callable[[], Any]:
    from agentlab.exercises.lesson12 import SOLUTION
    from agentlab.grading.command import document, grade_function, junit_xml

    def work() -> None:
        report = grade_function(SOLUTION, scenarios, jobs=4)
        report.text(), json.dumps(document([report])), junit_xml([report])

    return work


def records(clients: list[str] | None) -> Callable[[], Any]:
    from agentlab.grading.command import document, junit_xml, observed_reports

    def work() -> None:
        reports = observed_reports(clients=clients)
        "\n\n".join(r.text() for r in reports), json.dumps(document(reports)), junit_xml(reports)

    return work


def reference() -> Callable[[], Any]:
    from agentlab.observatory.records import load_records

    found = [list(rows.values()) for rows in load_records().values()]

    def work() -> None:
        for _ in range(REFERENCE_PASSES):
            json.loads(json.dumps(found))

    return work


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    out = Printer()
    works = {"live": live(QUICK_SCENARIOS if args.quick else None),
             "records": records(["agentlab"] if args.quick else None), "reference": reference()}
    works["records"]()  # scenario files and records loaded once, as in any later run of the process
    times: dict[str, list[float]] = {name: [] for name in works}
    for n in range(1, rounds + 1):
        for name, work in works.items():
            times[name].append(cpu(work))
        out(f"round {n}: " + ", ".join(f"{name} {times[name][-1]:.2f} s" for name in works))
    medians = {name: round(statistics.median(each), 3) for name, each in times.items()}
    ratios = {name: round(statistics.median(t / r for t, r in zip(times[name], times["reference"], strict=True)), 3)
              for name in ("live", "records")}
    out(f"median CPU: live {medians['live']:.2f} s, records {medians['records']:.2f} s, reference "
        f"{medians['reference']:.2f} s; per round against the reference: live {ratios['live']:.2f}, records "
        f"{ratios['records']:.2f}")
    figures = {"rounds": rounds, "cpu_s": medians, "ratio_to_reference": ratios, "runs_cpu_s": times}
    return record("grade", figures, out.text, args=args, command="bench/grade.py" + (" --quick" if args.quick else ""))


if __name__ == "__main__":
    main()
