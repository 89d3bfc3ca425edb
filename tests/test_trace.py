"""The trace: events in memory or streamed only, JSONL written as they happen, secrets never kept."""

import dataclasses
import json

import pytest

from agentlab.core.events import EVENT_KINDS, PAYLOADS, ApiError, RetryEvent, TransitionEvent, payload_from_data
from agentlab.core.trace import Trace, without_lone_surrogates
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
    event = trace.emit(ApiError(status=401, message="bad key sk-ant-api03-" + "k" * 20), 1)
    assert "sk-ant" not in json.dumps(event.data) and "[redacted]" in event.data["message"]
    assert isinstance(event.payload, ApiError) and "[redacted]" in event.payload.message


def test_a_result_reads_back_from_its_event():
    from dataclasses import replace

    from agentlab.core.loop import Result

    loop = scenario_loop("tour")
    result = loop.run()
    event = loop.trace.of_kind("result")[-1]
    assert Result.from_event(event.data) == replace(result, messages=[])


def test_every_event_kind_has_one_frozen_payload_class_that_round_trips():
    loop = scenario_loop("tour")
    loop.run()
    kinds = {e.kind for e in loop.trace}
    assert kinds <= set(EVENT_KINDS) and {"start", "request", "response", "transition", "append", "result"} <= kinds
    for event in loop.trace:
        assert type(event.payload) is PAYLOADS[event.kind]
        assert payload_from_data(event.kind, event.data) == event.payload
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.payload.extra = {}  # type: ignore[misc]


@pytest.mark.parametrize("kind", EVENT_KINDS)
def test_each_payloads_quick_init_makes_what_the_dataclass_init_makes(kind):
    """Payloads are built by a generated __init__ that fills __dict__ at once: the same signature, defaults,
    factories (a new dict each time) and instances as the frozen dataclass's own."""
    import inspect

    cls = PAYLOADS[kind]
    reference = type("Reference", (cls,), {})  # a plain dataclass subclass keeps the generated dataclass __init__
    reference = dataclasses.dataclass(frozen=True)(reference)
    assert str(inspect.signature(cls)) == str(inspect.signature(reference))
    names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
    given = {name: f"v{i}" for i, name in enumerate(names)}
    for kwargs in ({}, given, {**given, "extra": {"note": "n"}}):
        made, expected = cls(**kwargs), reference(**kwargs)
        assert {f.name: getattr(made, f.name) for f in dataclasses.fields(cls)} == \
            {f.name: getattr(expected, f.name) for f in dataclasses.fields(cls)}
    first, second = cls(), cls()
    assert first == second and hash(first) is not None if not any(
        isinstance(getattr(first, n), dict) for n in names + ["extra"]) else first == second
    assert first.extra is not second.extra  # the factory runs for each payload
    positional = [given[n] for n in names]
    assert cls(*positional) == cls(**given)
    with pytest.raises(TypeError):
        cls(**{"no_such_field": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.extra = {}  # type: ignore[misc]


def test_a_trace_line_written_before_typed_events_reads_back(tmp_path):
    """The JSONL shape is unchanged: a line with fewer keys, or keys a payload does not know, still loads,
    and the unknown keys are written back as they were."""
    line = {"call": 2, "kind": "retry", "seq": 7, "wall_ms": None,
            "data": {"attempt": 1, "delay_s": "?", "model": "m", "reason": "529", "client_action": "retry"}}
    (tmp_path / "old.jsonl").write_text(json.dumps(line) + "\n")
    (event,) = Trace.load(tmp_path / "old.jsonl").events
    assert isinstance(event.payload, RetryEvent) and event.payload.attempt == 1
    assert event.payload.extra == {"client_action": "retry"}
    assert json.loads(event.to_json()) == line


def test_a_transition_written_with_the_old_names_of_the_in_a_row_counts_reads_back():
    old = {"branch": "max_tokens_continue", "row": "3", "continuations": 2, "pause_continuations": 1}
    payload = payload_from_data("transition", old)
    assert isinstance(payload, TransitionEvent)
    assert (payload.continuations_in_a_row, payload.pauses_in_a_row) == (2, 1) and payload.extra == {}
    data = payload.to_data()
    assert "continuations" not in data and data["continuations_in_a_row"] == 2 and data["pauses_in_a_row"] == 1
    loop = scenario_loop("max_tokens_give_up")
    loop.run()
    ended = loop.trace.of_kind("transition")[-1].payload
    assert isinstance(ended, TransitionEvent) and ended.continuations_in_a_row == 3 == loop.result.continuations


def test_an_unknown_event_kind_is_a_clear_error(tmp_path):
    (tmp_path / "bad.jsonl").write_text(json.dumps({"call": 0, "kind": "telepathy", "seq": 0, "data": {}}) + "\n"
                                        + json.dumps({"call": 0, "kind": "start", "seq": 1, "data": {}}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: line 1 is not an event: unknown event kind 'telepathy'"):
        Trace.load(tmp_path / "bad.jsonl")


@pytest.mark.parametrize("value,expected,count", [
    ({"content": [{"type": "text", "text": "a\ud800b"}], "usage": {"input_tokens": 3}},
     {"content": [{"type": "text", "text": "a\ufffdb"}], "usage": {"input_tokens": 3}}, 1),
    ({"k\udc00": ["ok", ("x\ud801",)]}, {"k\ufffd": ["ok", ("x\ufffd",)]}, 2),
    # not JSON (a set inside, a tuple as a key): every string is looked at all the same
    ({"ids": {1, 2}, "t": "\ud800"}, {"ids": {1, 2}, "t": "\ufffd"}, 1),
    ({(1, 2): "x\udfff"}, {(1, 2): "x\ufffd"}, 1),
])
def test_lone_surrogates_are_replaced_wherever_they_sit(value, expected, count):
    assert without_lone_surrogates(value) == (expected, count)


def test_a_value_without_lone_surrogates_comes_back_as_the_same_object():
    value = {"content": [{"type": "text", "text": "caf\u00e9 \U0001f600 \\ud800 as text"}], "n": 1.5}
    cleaned, count = without_lone_surrogates(value)
    assert cleaned is value and count == 0
