"""Does `agentlab replay` of a Claude Code transcript take time in proportion to its calls? 2,500 and 10,000 calls.

The transcript is built in code, in the shape Claude Code 2.1.332 writes: per call an ``api-request`` entry, a
streamed reply as two ``assistant`` entries sharing one message id (a text, then a tool_use), the tool result,
and every tenth call a Stop hook's summary. Each size is replayed as the command does it (read, turned into
agentlab's trace, printed as the per-call table) and timed; the sizes are interleaved in one process.

Besides the time, a count that does not depend on the machine: the Python lines executed to replay the file
(``sys.settrace``), on two smaller sizes, one twice the other. Time in proportion to the calls doubles it
(ratio 2); the earlier replay, which looked through every event after each call, gave a ratio growing with the
size (about 3 at 300 calls). A full run also replays a 200 MB transcript (1 MB tool results) in a child process
and reports its time and peak resident memory.

    .venv/bin/python bench/replay.py           # 2,500 and 10,000 calls, 3 runs each, and 200 MB; results/replay.json
    .venv/bin/python bench/replay.py --quick   # 100 and 200 calls, once each, no 200 MB file (the tests run it)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from agentlab.sessions.command import load_any
from agentlab.sessions.transcript import table_lines

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Printer, add_arguments, record  # noqa: E402

BASE = {"sessionId": "s1", "cwd": "/home/me/proj", "version": "2.1.332", "timestamp": "2026-12-01T10:00:00.000Z",
        "isSidechain": False}
USAGE = {"input_tokens": 12, "output_tokens": 40, "cache_read_input_tokens": 21_000,
         "cache_creation_input_tokens": 300}


def _call_entries(i: int, result: str) -> list[dict[str, Any]]:
    """One call: its request, its streamed reply (two entries), the tool's result; a Stop hook every tenth."""
    reply = {"id": f"msg_{i:06d}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
             "stop_reason": "tool_use", "usage": USAGE}
    blocks = [{"type": "text", "text": f"Step {i}: listing the folder."},
              {"type": "tool_use", "id": f"toolu_{i:06d}", "name": "Bash", "input": {"command": "ls"}}]
    params = {"model": "claude-sonnet-4-6", "max_tokens": 32000}
    out = [{**BASE, "type": "api-request", "id": f"q{i}", "params": params}]
    out += [{**BASE, "type": "assistant", "uuid": f"a{i}.{j}", "requestId": f"req_{i:06d}", "requestRef": f"q{i}",
             "message": {**reply, "content": [block]}} for j, block in enumerate(blocks)]
    out.append({**BASE, "type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"toolu_{i:06d}", "content": result}]}})
    if i % 10 == 0:
        out.append({**BASE, "type": "system", "subtype": "stop_hook_summary", "uuid": f"h{i}", "hookCount": 1,
                    "hookErrors": [], "hookInfos": []})
    return out


def build_transcript(path: Path, calls: int, *, result: str = "a.txt\nb.txt", megabytes: int = 0) -> int:
    """A transcript of ``calls`` tool calls and a final answer (or of at least ``megabytes`` MB when given, with
    ``result`` as every tool result); the number of calls written."""
    with path.open("w", encoding="utf-8") as out:
        prompt = {"role": "user", "content": "go"}
        out.write(json.dumps({**BASE, "type": "user", "uuid": "p", "message": prompt}) + "\n")
        i = 0
        while (i < calls) if not megabytes else (out.tell() < megabytes << 20):
            i += 1
            out.writelines(json.dumps(e) + "\n" for e in _call_entries(i, result))
        final = {"id": "msg_final", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
                 "stop_reason": "end_turn", "usage": USAGE, "content": [{"type": "text", "text": "Done."}]}
        out.write(json.dumps({**BASE, "type": "assistant", "uuid": "end", "requestId": "req_final",
                              "message": final}) + "\n")
    return i + 1


def replay(path: Path) -> int:
    """What `agentlab replay PATH` does: read, build the trace, make the table; the number of calls."""
    session, _trace, _summary = load_any([str(path)])
    assert session is not None
    table_lines(session)
    return len(session.calls)


def lines_executed(run: Callable[[], Any]) -> int:
    """The Python lines executed by ``run()``: a count that is the same on every machine."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(previous)
    return count


def line_counts(sizes: tuple[int, int], folder: Path) -> dict[int, int]:
    """The lines executed to replay a transcript of each size (built beforehand, not counted)."""
    paths = {}
    for size in sizes:
        paths[size] = folder / f"count_{size}.jsonl"
        build_transcript(paths[size], size)
        replay(paths[size])   # imports and the price table's first load are not the replay's
    return {size: lines_executed(lambda p=paths[size]: replay(p)) for size in sizes}


def _peak_rss() -> int:
    """This process's peak resident memory (bytes): VmHWM, which exec starts afresh (ru_maxrss would count the
    parent's memory at the fork); ru_maxrss where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _big_child(megabytes: int) -> None:
    """In a fresh process: replay a ``megabytes`` MB transcript; print its calls, seconds and peak RSS (bytes)."""
    with tempfile.TemporaryDirectory(prefix="agentlab-bench-replay-") as tmp:
        path = Path(tmp) / "big.jsonl"
        build_transcript(path, 0, result="x" * (1 << 20), megabytes=megabytes)
        started = time.perf_counter()
        cpu = time.process_time()
        calls = replay(path)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        print(calls, round(seconds, 3), round(cpu, 3), _peak_rss())


def big_file(megabytes: int) -> dict[str, float]:
    child = subprocess.run([sys.executable, __file__, "--big-child", str(megabytes)], capture_output=True,
                           text=True, check=True)
    calls, seconds, cpu, peak = child.stdout.split()[-4:]
    return {"megabytes": megabytes, "calls": int(calls), "seconds": float(seconds), "cpu_seconds": float(cpu),
            "peak_rss_mb": round(int(peak) / 2**20, 1)}


def timed(sizes: tuple[int, int], runs: int, folder: Path) -> dict[str, dict[int, list[float]]]:
    """Wall and CPU seconds of each replay, by clock and size (CPU time: the machine may be shared)."""
    paths = {size: folder / f"time_{size}.jsonl" for size in sizes}
    for size, path in paths.items():
        build_transcript(path, size)
    replay(paths[sizes[0]])   # warm-up
    seconds: dict[str, dict[int, list[float]]] = {"wall": {s: [] for s in sizes}, "cpu": {s: [] for s in sizes}}
    for _ in range(runs):
        for size in reversed(sizes):   # interleaved: both sizes see the same machine
            started, cpu = time.perf_counter(), time.process_time()
            replay(paths[size])
            seconds["wall"][size].append(time.perf_counter() - started)
            seconds["cpu"][size].append(time.process_time() - cpu)
    return seconds


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=2_500)
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=300, help="the larger size of the line count (and half of it)")
    parser.add_argument("--big-mb", type=int, default=200, help="the size of the transcript of 1 MB tool results")
    parser.add_argument("--big-child", type=int, help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.big_child:
        _big_child(args.big_child)
        return None
    if args.quick:
        args.small, args.large, args.runs, args.count, args.big_mb = 100, 200, 1, 200, 0
    out = Printer()
    with tempfile.TemporaryDirectory(prefix="agentlab-bench-replay-") as tmp:
        counts = line_counts((args.count // 2, args.count), Path(tmp))
        seconds = timed((args.small, args.large), args.runs, Path(tmp))
    half, full = args.count // 2, args.count
    line_ratio = counts[full] / counts[half]
    out(f"replay: Claude Code 2.1.332-shaped transcripts (a streamed tool call a call), "
        f"python {sys.version.split()[0]}")
    out(f"  lines executed: {counts[half]:,} for {half} calls, {counts[full]:,} for {full} "
        f"(ratio {line_ratio:.2f}; in proportion to the calls = 2)")
    medians = {size: statistics.median(s) for size, s in seconds["wall"].items()}
    cpu = {size: statistics.median(s) for size, s in seconds["cpu"].items()}
    for size, median in medians.items():
        out(f"  {size:>6,} calls: median {median:.2f} s wall, {cpu[size]:.2f} s cpu of {args.runs} run(s), "
            f"{cpu[size] * 1000 / size:.3f} ms cpu per call")
    time_ratio = (cpu[args.large] / args.large) / (cpu[args.small] / args.small)
    out(f"  cpu time per call({args.large:,})/cpu time per call({args.small:,}) = {time_ratio:.2f} (flat = 1)")
    figures: dict[str, Any] = {
        "lines": {str(k): v for k, v in counts.items()}, "line_ratio": round(line_ratio, 3),
        "sizes": {str(size): {"seconds": round(medians[size], 3), "cpu_seconds": round(cpu[size], 3),
                              "cpu_ms_per_call": round(cpu[size] * 1000 / size, 4), "runs": args.runs}
                  for size in medians},
        "cpu_time_per_call_ratio": round(time_ratio, 3), "big": None}
    if args.big_mb:
        big = figures["big"] = big_file(args.big_mb)
        out(f"  {big['megabytes']} MB transcript ({big['calls']:,} calls, 1 MB tool results): {big['seconds']:.2f} s "
            f"wall, {big['cpu_seconds']:.2f} s cpu, peak resident memory {big['peak_rss_mb']:.0f} MB")
    return record("replay", figures, out.text, args=args,
                  command="bench/replay.py" + (" --quick" if args.quick else ""))


if __name__ == "__main__":
    main()
