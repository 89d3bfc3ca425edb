"""The behaviour record's format as types (agentlab.observatory.record_types): every committed record reads,
bad data is refused with one line naming the record and the field, and the grade rules read the types."""

from __future__ import annotations

import json
import re

import pytest

from agentlab.grading.rules import Run, ending
from agentlab.observatory.record_types import NO_REPLY, Record, RecordError, Request, parse_record
from agentlab.observatory.records import OBSERVED_DIR


def committed() -> list[str]:
    return sorted(str(p.relative_to(OBSERVED_DIR)) for p in OBSERVED_DIR.rglob("*.json"))


def test_every_committed_record_reads() -> None:
    names = committed()
    assert len(names) > 100
    for name in names:
        record = parse_record(json.loads((OBSERVED_DIR / name).read_text(encoding="utf-8")), name)
        assert record.requests, name
        assert all(r.reply is not None and r.reply.status >= 200 for r in record.requests), name


NAMED = {"client": "c", "version": "1", "scenario": "s"}


@pytest.mark.parametrize(("data", "said"), [
    ({**NAMED, "requests": [{"reply": {"status": "soon"}}]}, r"^x\.json: requests\[0\]\.reply\.status: .*integer"),
    ({**NAMED, "requests": [{}, {"appended": {"kept": "many"}}]}, r"^x\.json: requests\[1\]\.appended\.kept: "),
    ({**NAMED, "timing": {"request_s": [0.1, "later"]}}, r"^x\.json: timing\.request_s\[1\]: .*number"),
    ({**NAMED, "requests": {"n": 1}}, r"^x\.json: requests: "),
    ({"client": "c", "version": "1"}, r"^x\.json: scenario: missing$"),
    ([1, 2], r"^x\.json: a record is a JSON object, got list$"),
])
def test_bad_data_is_refused_naming_the_record_and_the_field(data: object, said: str) -> None:
    with pytest.raises(RecordError, match=said):
        parse_record(data, "x.json")


def test_the_grader_names_the_record_it_cannot_read() -> None:
    data = {"client": "mine", "version": "1.0", "scenario": "tool_use", "requests": [{"max_tokens": 1, "stream": []}]}
    with pytest.raises(RecordError, match=r"^the record of mine 1\.0 tool_use: requests\[0\]\.stream: "):
        Run(data, None)


def test_null_is_missing_and_unknown_fields_are_kept() -> None:
    record = parse_record({**NAMED, "requests": [{"reply": None, "appended": None, "action": None, "new_field": [1]}],
                           "result": None, "future": {"a": 1}})
    request = record.requests[0]
    assert request.answer is NO_REPLY and request.answer.status == 0
    assert request.action == "other" and request.appended.kept == 0
    assert request.new_field == [1] and record.future == {"a": 1}
    assert record.result.exit_code is None


def test_a_placeholder_reply_reads_as_no_reply() -> None:
    request = Request.model_validate({"reply": {"status": 200, "stop_reason": "end_turn"}, "placeholder_reply": True})
    assert request.answer is NO_REPLY


def test_records_are_frozen() -> None:
    record = parse_record({**NAMED, "requests": [{"n": 1}]})
    with pytest.raises(ValueError, match="frozen"):
        record.requests[0].n = 2  # type: ignore[misc]


def test_a_run_reads_a_record_or_its_data_alike() -> None:
    data = {**NAMED, "requests": [{"n": 4, "reply": {"status": 200, "stop_reason": "end_turn", "blocks": ["text"]},
                          "action": "first"}], "result": {"exit_code": 0, "subtype": "success"},
            "timing": {"request_s": [0.0]}}
    for given in (data, Record.model_validate(data)):
        run = Run(given, None)
        assert (run.n(0), run.times, run.main, run.message_replies()) == (4, [0.0], [0], 1)
        assert ending(given) == "success, exit 0"


@pytest.mark.parametrize(("text", "said"), [
    ('{"client": "c", "version": "1", "scenario": "s", "requests": [{"n": "first"}]}', r"requests\[0\]\.n: "),
    ('{"client": "c", "version": "1", "scenario": "s", "requests": [', r"cannot be read as JSON"),
    ('{"client": "c", "version": "1", "requests": []}', r"scenario: missing$"),
])
def test_loading_the_records_names_a_bad_file_and_its_field(tmp_path, text: str, said: str) -> None:
    from agentlab.observatory.records import load_records

    bad = tmp_path / "c" / "1" / "s.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(RecordError, match=f"^{re.escape(str(bad))}: {said}"):
        load_records(tmp_path)
