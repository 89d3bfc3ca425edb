"""Tests for the tool registry and the demo tools."""

from __future__ import annotations

import datetime as dt
import re
import threading
from pathlib import Path
from typing import Annotated

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlab.core.tools import TestsState, ToolError, ToolOutcome, ToolRegistry, demo_tools

# --------------------------------------------------------------------------------------------------------------
# Registration and schemas
# --------------------------------------------------------------------------------------------------------------


def test_schema_is_derived_from_the_signature_and_docstring() -> None:
    reg = ToolRegistry()

    @reg.tool
    def search(
        query: Annotated[str, pydantic.Field(description="What to look for")],
        limit: int = 10,
        tags: list[str] | None = None,
        exact: bool = False,
    ) -> list[str]:
        """Search the notes
        for a phrase.

        This second paragraph is for humans only.
        """
        return []

    [schema] = reg.schemas()
    assert schema["name"] == "search"
    assert schema["description"] == "Search the notes for a phrase."
    input_schema = schema["input_schema"]
    assert input_schema["type"] == "object"
    assert input_schema["required"] == ["query"]
    props = input_schema["properties"]
    assert list(props) == ["query", "limit", "tags", "exact"]
    assert props["query"] == {"type": "string", "description": "What to look for"}
    assert props["limit"] == {"type": "integer", "default": 10}
    assert props["exact"] == {"type": "boolean", "default": False}
    assert {"type": "array", "items": {"type": "string"}} in props["tags"]["anyOf"]
    assert "title" not in input_schema


def test_decorator_forms_overrides_and_lookup() -> None:
    reg = ToolRegistry()

    @reg.tool
    def first() -> str:
        """One."""
        return "1"

    @reg.tool(name="second-tool", description="Explicit description.", read_only=True)
    def second(x: int) -> int:
        """Ignored docstring."""
        return x * 2

    assert first() == "1" and second(4) == 8  # the functions are returned unchanged
    assert reg.names() == ["first", "second-tool"]
    assert [s["name"] for s in reg.schemas()] == ["first", "second-tool"]
    assert reg.schemas()[1]["description"] == "Explicit description."
    assert "second-tool" in reg and "second" not in reg and "nope" not in reg
    assert reg.is_read_only("second-tool") and not reg.is_read_only("first")
    assert not reg.is_read_only("unknown")
    assert reg.run("second-tool", {"x": 21}) == ToolOutcome("42")


def test_schemas_returns_copies() -> None:
    reg = ToolRegistry()

    @reg.tool
    def ping(host: str) -> str:
        """Ping a host."""
        return host

    reg.schemas()[0]["input_schema"]["properties"].clear()
    assert "host" in reg.schemas()[0]["input_schema"]["properties"]


def test_parameter_names_that_clash_with_pydantic_attributes() -> None:
    reg = ToolRegistry()

    @reg.tool
    def store(json: str, schema: int = 1) -> str:
        """Store a document."""
        return f"{json}:{schema}"

    assert set(reg.schemas()[0]["input_schema"]["properties"]) == {"json", "schema"}
    assert reg.run("store", {"json": "doc", "schema": 2}) == ToolOutcome("doc:2")


def test_registration_errors() -> None:
    reg = ToolRegistry()

    @reg.tool
    def dup() -> str:
        """A tool."""
        return ""

    with pytest.raises(ValueError, match="already registered"):
        reg.tool(dup)
    with pytest.raises(ValueError, match="invalid tool name"):
        reg.tool(name="has space")(lambda: "")
    with pytest.raises(TypeError, match=r"\*args"):

        @reg.tool
        def variadic(*items: str) -> str:
            """Nope."""
            return ""


def test_unresolvable_annotations_fail_at_registration() -> None:
    class Local(pydantic.BaseModel):  # invisible to get_type_hints because this module defers annotations
        x: int

    reg = ToolRegistry()
    with pytest.raises(TypeError, match="cannot build an input schema"):

        @reg.tool
        def use(value: Local) -> str:
            """Uses a local type."""
            return ""

    assert "use" not in reg


def test_missing_docstring_gets_a_fallback_description() -> None:
    reg = ToolRegistry()
    reg.tool(name="bare")(lambda: "ok")
    assert reg.schemas()[0]["description"] == "The bare tool."


# --------------------------------------------------------------------------------------------------------------
# run(): results and errors
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture
def reg() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool
    def echo(text: str, times: int = 1) -> str:
        """Repeat text."""
        return text * times

    @reg.tool
    def stats(values: list[float]) -> dict[str, object]:
        """Summarise numbers."""
        return {"n": len(values), "max": max(values), "when": dt.date(2024, 1, 2)}

    @reg.tool
    def explode(reason: str) -> str:
        """Always fails."""
        raise ValueError(reason)

    @reg.tool
    def refuse() -> str:
        """Fails politely."""
        raise ToolError("not today")

    @reg.tool
    def custom() -> ToolOutcome:
        """Builds its own outcome."""
        return ToolOutcome("made by hand", is_error=True)

    return reg


def test_run_returns_strings_as_is_and_other_values_as_sorted_json(reg: ToolRegistry) -> None:
    assert reg.run("echo", {"text": "ab", "times": 3}) == ToolOutcome("ababab")
    assert reg.run("echo", {"text": "x"}) == ToolOutcome("x")
    out = reg.run("stats", {"values": [3, 1.5]})
    assert out == ToolOutcome('{"max": 3.0, "n": 2, "when": "2024-01-02"}')


def test_unknown_tool_names_the_tool_and_lists_known_ones(reg: ToolRegistry) -> None:
    out = reg.run("delete_everything", {})
    assert out.is_error
    assert "delete_everything" in out.content
    for name in ("echo", "stats", "explode"):
        assert name in out.content
    assert ToolRegistry().run("x", {}).content == "Unknown tool 'x'. Known tools: (none)."


def test_schema_failures_name_the_fields(reg: ToolRegistry) -> None:
    missing = reg.run("echo", {})
    assert missing.is_error
    assert missing.content == "Invalid input for echo: text: Field required"

    wrong = reg.run("echo", {"text": "a", "times": "many", "colour": "red"})
    assert wrong.is_error
    assert wrong.content.startswith("Invalid input for echo: ")
    assert "times: Input should be a valid integer" in wrong.content
    assert "colour: Extra inputs are not permitted" in wrong.content

    nested = reg.run("stats", {"values": [1, "x"]})
    assert nested.is_error and "values.1:" in nested.content


@pytest.mark.parametrize("bad_input", [None, "text", ["a"], 3])
def test_input_that_is_not_an_object_is_an_error(reg: ToolRegistry, bad_input: object) -> None:
    out = reg.run("echo", bad_input)
    assert out.is_error
    assert (
        out.content
        == f"Invalid input for echo: expected a JSON object of arguments, got {type(bad_input).__name__}"
    )


def test_a_raising_tool_becomes_an_error_outcome(reg: ToolRegistry) -> None:
    assert reg.run("explode", {"reason": "disk on fire"}) == ToolOutcome(
        "explode raised ValueError: disk on fire", is_error=True
    )
    assert reg.run("refuse", {}) == ToolOutcome("not today", is_error=True)
    assert reg.run("custom", {}) == ToolOutcome("made by hand", is_error=True)


# --------------------------------------------------------------------------------------------------------------
# run_many(): ordering and concurrency
# --------------------------------------------------------------------------------------------------------------


def test_run_many_keeps_the_original_order(reg: ToolRegistry) -> None:
    calls: list[tuple[str, str, object]] = [
        ("t1", "echo", {"text": "a"}),
        ("t2", "nope", {}),
        ("t3", "explode", {"reason": "r"}),
        ("t4", "echo", {"text": "b", "times": 2}),
    ]
    outs = reg.run_many(calls)
    assert [o.content for o in outs] == [
        "a",
        "Unknown tool 'nope'. Known tools: echo, stats, explode, refuse, custom.",
        "explode raised ValueError: r",
        "bb",
    ]
    assert reg.run_many([]) == []
    with pytest.raises(ValueError):
        reg.run_many(calls, max_workers=0)


def test_read_only_tools_run_concurrently() -> None:
    # Each call waits at a two-party barrier: both can only get through if they run at the same time.
    barrier = threading.Barrier(2, timeout=5)
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def left(tag: str) -> str:
        """Waits for right."""
        barrier.wait()
        return f"left {tag}"

    @reg.tool(read_only=True)
    def right(tag: str) -> str:
        """Waits for left."""
        barrier.wait()
        return f"right {tag}"

    outs = reg.run_many([("a", "right", {"tag": "1"}), ("b", "left", {"tag": "2"})])
    assert outs == [ToolOutcome("right 1"), ToolOutcome("left 2")]


def test_a_tool_that_is_not_read_only_runs_alone_and_in_order() -> None:
    log: list[tuple[str, str]] = []
    lock = threading.Lock()
    before = threading.Barrier(2, timeout=5)
    after = threading.Barrier(2, timeout=5)
    reg = ToolRegistry()

    def record(event: str, who: str) -> None:
        with lock:
            log.append((event, who))

    @reg.tool(read_only=True)
    def look(who: str, phase: str) -> str:
        """Read something."""
        record("start", who)
        (before if phase == "before" else after).wait()
        record("end", who)
        return who

    @reg.tool
    def write() -> str:
        """Change something."""
        record("start", "write")
        record("end", "write")
        return "written"

    outs = reg.run_many(
        [
            ("1", "look", {"who": "r1", "phase": "before"}),
            ("2", "look", {"who": "r2", "phase": "before"}),
            ("3", "write", {}),
            ("4", "look", {"who": "r3", "phase": "after"}),
            ("5", "look", {"who": "r4", "phase": "after"}),
        ]
    )
    assert [o.content for o in outs] == ["r1", "r2", "written", "r3", "r4"]
    assert not any(o.is_error for o in outs)
    pos = {entry: i for i, entry in enumerate(log)}
    assert pos[("start", "write")] > max(pos[("end", "r1")], pos[("end", "r2")])
    assert pos[("end", "write")] < min(pos[("start", "r3")], pos[("start", "r4")])
    assert pos[("end", "write")] == pos[("start", "write")] + 1


# --------------------------------------------------------------------------------------------------------------
# Demo tools
# --------------------------------------------------------------------------------------------------------------


def test_demo_registry_contents() -> None:
    tools = demo_tools()
    assert tools.names() == ["calculator", "get_weather", "read_file", "run_tests"]
    assert [tools.is_read_only(n) for n in tools.names()] == [True, True, True, False]
    by_name = {s["name"]: s for s in tools.schemas()}
    assert by_name["calculator"]["input_schema"]["required"] == ["expression"]
    assert by_name["calculator"]["input_schema"]["properties"]["expression"]["type"] == "string"
    assert by_name["get_weather"]["input_schema"]["required"] == ["location"]
    assert by_name["read_file"]["input_schema"]["required"] == ["path"]
    assert by_name["run_tests"]["input_schema"]["properties"] == {}
    assert all(s["description"] for s in tools.schemas())


def calc(expression: str) -> ToolOutcome:
    return demo_tools().run("calculator", {"expression": expression})


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("96 * 72", "6912"),
        ("2 ** 8 * 27", "6912"),
        ("5 / 2", "2.5"),
        ("4 / 2", "2"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("(1 + 2) * -(3 - 5)", "6"),
        ("+4", "4"),
        ("2 ** -2", "0.25"),
        ("1.5e3 + 1", "1501"),
        ("0.1 + 0.2", "0.3"),
        ("  12  ", "12"),
        ("10 ** 300", "1" + "0" * 300),
    ],
)
def test_calculator_arithmetic(expression: str, expected: str) -> None:
    assert calc(expression) == ToolOutcome(expected)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "function calls are not allowed"),
        ("__import__('os').system('true')", "not allowed"),
        ("abs(-1)", "function calls are not allowed"),
        ("x + 1", "names are not allowed"),
        ("(1).real", "attribute access is not allowed"),
        ("().__class__", "attribute access is not allowed"),
        ("2**10**10", "exponent"),
        ("9 ** 10001", "exponent"),
        ("10 ** 301", "too large"),
        ("1e308 * 10", "too large"),
        ("1e999", "too large"),
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("1j", "imaginary"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("1 << 4", "not supported"),
        ("1 < 2", "unsupported syntax"),
        ("[1, 2]", "unsupported syntax"),
        ("lambda: 1", "unsupported syntax"),
        ("1 +", "not a valid expression"),
        ("import os", "not a valid expression"),
        ("", "empty"),
        ("1+" * 600 + "1", "longer than"),
    ],
)
def test_calculator_rejects(expression: str, message: str) -> None:
    out = calc(expression)
    assert out.is_error
    assert out.content.startswith("calculator: ")
    assert message in out.content


@settings(deadline=None)
@given(st.text(max_size=300))
def test_calculator_never_raises_on_random_text(text: str) -> None:
    out = calc(text)
    assert isinstance(out, ToolOutcome)
    # Every failure is one of the calculator's own messages, never an unexpected exception.
    assert not out.content.startswith("calculator raised")


def _arithmetic() -> st.SearchStrategy[tuple[str, int]]:
    leaves = st.integers(min_value=-1000, max_value=1000).map(lambda n: (f"({n})", n))

    def combine(children: st.SearchStrategy[tuple[str, int]]) -> st.SearchStrategy[tuple[str, int]]:
        ops = st.sampled_from(
            [("+", lambda a, b: a + b), ("-", lambda a, b: a - b), ("*", lambda a, b: a * b)]
        )
        return st.tuples(children, ops, children).map(
            lambda t: (f"({t[0][0]} {t[1][0]} {t[2][0]})", t[1][1](t[0][1], t[2][1]))
        )

    return st.recursive(leaves, combine, max_leaves=12)


@settings(deadline=None)
@given(_arithmetic())
def test_calculator_agrees_with_integer_arithmetic(case: tuple[str, int]) -> None:
    expression, value = case
    assert calc(expression) == ToolOutcome(str(value))


def test_get_weather_is_deterministic() -> None:
    tools = demo_tools()
    paris = tools.run("get_weather", {"location": "Paris"})
    assert paris == ToolOutcome("Weather in Paris: 14°C, light rain")  # sha256-based, so stable everywhere
    assert tools.run("get_weather", {"location": "  PARIS "}) == ToolOutcome(
        "Weather in PARIS: 14°C, light rain"
    )
    reports = {
        tools.run("get_weather", {"location": city}).content for city in ["Oslo", "Lima", "Cairo", "Perth"]
    }
    for report in reports:
        assert re.fullmatch(r"Weather in \w+: -?\d+°C, [a-z ]+", report)
    assert len({r.split(": ", 1)[1] for r in reports}) > 1
    assert tools.run("get_weather", {"location": "  "}).is_error


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    box = tmp_path / "box"
    (box / "docs").mkdir(parents=True)
    (box / "hello.txt").write_text("hello world\n", encoding="utf-8")
    (box / "docs" / "plan.md").write_text("# Plan\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("top secret", encoding="utf-8")
    return box


def read(sandbox: Path | None, path: str) -> ToolOutcome:
    return demo_tools(sandbox=sandbox).run("read_file", {"path": path})


def test_read_file_reads_inside_the_sandbox(sandbox: Path) -> None:
    assert read(sandbox, "hello.txt") == ToolOutcome("hello world\n")
    assert read(sandbox, "docs/plan.md") == ToolOutcome("# Plan\n")
    assert read(sandbox, "./docs/plan.md") == ToolOutcome("# Plan\n")
    assert demo_tools(sandbox=str(sandbox)).run("read_file", {"path": "hello.txt"}).content == "hello world\n"


def test_read_file_follows_symlinks_that_stay_inside(sandbox: Path) -> None:
    (sandbox / "alias.txt").symlink_to(sandbox / "hello.txt")
    assert read(sandbox, "alias.txt") == ToolOutcome("hello world\n")


@pytest.mark.parametrize("path", ["../secret.txt", "docs/../../secret.txt", "docs/../hello.txt", ".."])
def test_read_file_refuses_dot_dot(sandbox: Path, path: str) -> None:
    out = read(sandbox, path)
    assert out.is_error
    assert "'..' is not allowed" in out.content
    assert "top secret" not in out.content


def test_read_file_refuses_absolute_paths(sandbox: Path) -> None:
    for path in [str(sandbox / "hello.txt"), "/etc/passwd"]:
        out = read(sandbox, path)
        assert out.is_error
        assert "absolute paths are not allowed" in out.content


def test_read_file_refuses_symlinks_that_leave_the_sandbox(sandbox: Path) -> None:
    (sandbox / "escape.txt").symlink_to(sandbox.parent / "secret.txt")
    (sandbox / "up").symlink_to(sandbox.parent, target_is_directory=True)
    for path in ["escape.txt", "up/secret.txt"]:
        out = read(sandbox, path)
        assert out.is_error
        assert "leads outside the sandbox" in out.content
        assert "top secret" not in out.content


def test_read_file_other_errors(sandbox: Path) -> None:
    missing = read(sandbox, "nope.txt")
    assert missing.is_error and "no such file" in missing.content
    folder = read(sandbox, "docs")
    assert folder.is_error and "is a directory" in folder.content and "plan.md" in folder.content
    assert read(sandbox, "").is_error
    unconfigured = read(None, "hello.txt")
    assert unconfigured.is_error and "no sandbox configured" in unconfigured.content
    (sandbox / "blob.bin").write_bytes(b"\x00\x01\x02")
    assert "binary" in read(sandbox, "blob.bin").content


def test_read_file_truncates_long_files(sandbox: Path) -> None:
    (sandbox / "big.txt").write_text("x" * 50_000, encoding="utf-8")
    out = read(sandbox, "big.txt")
    assert not out.is_error
    assert out.content.startswith("x" * 20_000)
    assert not out.content.startswith("x" * 20_001)
    assert "truncated" in out.content
    assert len(out.content) < 20_100


def test_run_tests_follows_the_lesson_state() -> None:
    state = TestsState()
    tools = demo_tools(tests=state)
    assert tools.run("run_tests", {}) == ToolOutcome("1 failed, 2 passed: test_checkout FAILED")
    assert state.runs == 1
    state.passing = True
    assert tools.run("run_tests", {}) == ToolOutcome("3 passed")
    assert state.runs == 2


def test_run_tests_fail_times_then_pass() -> None:
    state = TestsState(fail_times=2)
    tools = demo_tools(tests=state)
    results = [tools.run("run_tests", {}).content for _ in range(4)]
    assert results == ["1 failed, 2 passed: test_checkout FAILED"] * 2 + ["3 passed"] * 2
    assert state.runs == 4


def test_demo_registries_do_not_share_state() -> None:
    first, second = demo_tools(), demo_tools()
    assert first.run("run_tests", {}).content.startswith("1 failed")
    assert second.run("run_tests", {}).content.startswith("1 failed")
    shared = TestsState(passing=True)
    assert demo_tools(tests=shared).run("run_tests", {}) == ToolOutcome("3 passed")
    assert shared.runs == 1
