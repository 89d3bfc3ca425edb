"""The trace: events in memory or streamed only, JSONL written as they happen, secrets never kept."""

import json

from agentlab.core.trace import Trace
from agentlab.lab import scenario_loop


def test_a_streamed_trace_keeps_nothing_in_memory_but_writes_and_notifies_everything(tmp_path):
    seen = []
    trace = Trace(tmp_path / "run.jsonl", keep=False)
    trace.subscribe(seen.append)
    loop = scenario_loop("tour", trace=trace)
    result = loop.run()
    trace.close()
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert result.subtype == "success"
    assert trace.events == [] and len(trace) == len(seen) == len(lines) > 0
    assert [line["seq"] for line in lines] == list(range(len(lines)))
    assert lines[-1]["kind"] == "result" and lines[-1]["data"]["subtype"] == "success"


def test_kept_and_streamed_traces_record_the_same_events(tmp_path):
    kept = scenario_loop("tour")
    kept.run()
    streamed_trace = Trace(tmp_path / "run.jsonl", keep=False)
    streamed = scenario_loop("tour", trace=streamed_trace)
    streamed.run()
    streamed_trace.close()
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert [(e.kind, e.call, e.data) for e in kept.trace] == [(x["kind"], x["call"], x["data"]) for x in lines]


def test_the_clients_key_is_redacted_from_events_without_being_configured():
    trace = Trace()
    trace.add_secret("sk-ant-api03-" + "k" * 20)
    event = trace.emit("api_error", 1, {"message": "bad key sk-ant-api03-" + "k" * 20})
    assert "sk-ant" not in json.dumps(event.data) and "[redacted]" in event.data["message"]


def test_a_result_reads_back_from_its_event():
    from dataclasses import replace

    from agentlab.core.loop import Result

    loop = scenario_loop("tour")
    result = loop.run()
    event = loop.trace.of_kind("result")[-1]
    assert Result.from_event(event.data) == replace(result, messages=[])
