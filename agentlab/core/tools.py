"""A small tool registry for the Messages API, plus the demo tools used by the lessons.

A tool is a plain typed Python function. Registering it derives the JSON schema the model sees from the
signature (via pydantic) and the description from the docstring::

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def shout(text: str, times: int = 1) -> str:
        '''Upper-case some text.'''
        return text.upper() * times

    reg.schemas()                      # -> the `tools` parameter of messages.create
    reg.run("shout", {"text": "hi"})   # -> ToolOutcome(content="HI", is_error=False)

`ToolRegistry.run` never raises: every failure (unknown tool, bad input, a tool that blows up) comes back as
a `ToolOutcome` with ``is_error=True``, which is exactly what goes into a ``tool_result`` block.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import math
import operator
import os
import queue
import re
import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pydantic
from pydantic.json_schema import GenerateJsonSchema

__all__ = ["TestsState", "ToolError", "ToolOutcome", "ToolRegistry", "ToolsCancelled", "demo_tools"]


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call produced: the text for the ``tool_result`` block and whether it is an error."""

    content: str
    is_error: bool = False


class ToolError(Exception):
    """Raise from a tool to report a clean error: the message is passed to the model as is."""


class ToolsCancelled(KeyboardInterrupt):
    """Ctrl-C while tools ran together: the wait stopped at once. ``cancelled`` names the calls that had not
    finished (still running, left to end on their own with their result dropped, or never started)."""

    def __init__(self, cancelled: list[str]) -> None:
        super().__init__(f"{len(cancelled)} tool call(s) cancelled: {', '.join(cancelled)}")
        self.cancelled = cancelled


# --------------------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------------------

_F = typing.TypeVar("_F", bound=Callable[..., Any])
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what the Messages API accepts as a tool name
_MAX_REPORTED_ERRORS = 5


class _NoTitles(GenerateJsonSchema):
    """Leave out pydantic's auto-generated per-field titles; the model only needs names and descriptions."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


@dataclass(frozen=True)
class _Tool:
    name: str
    description: str
    fn: Callable[..., Any]
    input_model: type[pydantic.BaseModel]
    input_schema: dict[str, Any]
    read_only: bool
    arg_fields: tuple[tuple[str, str], ...]  # (model field name, function parameter name)


def _first_paragraph(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


def _input_model(
    fn: Callable[..., Any], name: str
) -> tuple[type[pydantic.BaseModel], tuple[tuple[str, str], ...]]:
    """Build a pydantic model mirroring the function's parameters.

    Fields get neutral internal names and the parameter name as alias, so a parameter may be called
    ``json``, ``schema`` or ``model_x`` without clashing with BaseModel's own attributes.
    """
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError, AttributeError):  # unresolvable forward references: use the raw annotations
        hints = {}
    fields: dict[str, Any] = {}
    arg_fields: list[tuple[str, str]] = []
    for index, (param_name, param) in enumerate(signature.parameters.items()):
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(
                f"tool {name!r}: parameter {param_name!r} must be an ordinary named parameter "
                "(no *args, **kwargs or positional-only parameters)"
            )
        annotation = hints.get(param_name, param.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        field_name = f"arg{index}"
        fields[field_name] = (annotation, pydantic.Field(default, alias=param_name))
        arg_fields.append((field_name, param_name))
    model = pydantic.create_model(
        f"{name}_input",
        __config__=pydantic.ConfigDict(extra="forbid"),
        **fields,
    )
    return model, tuple(arg_fields)


def _validation_message(tool_name: str, error: pydantic.ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False)[:_MAX_REPORTED_ERRORS]:
        where = ".".join(str(part) for part in item["loc"]) or "(input)"
        problems.append(f"{where}: {item['msg']}")
    hidden = error.error_count() - len(problems)
    if hidden > 0:
        problems.append(f"... and {hidden} more")
    return f"Invalid input for {tool_name}: " + "; ".join(problems)


def _render(value: object) -> ToolOutcome:
    if isinstance(value, ToolOutcome):
        return value
    if isinstance(value, str):
        return ToolOutcome(value)
    return ToolOutcome(json.dumps(value, sort_keys=True, default=str))


class ToolRegistry:
    """An ordered collection of tools: schemas for the request, and a safe way to run what the model asks for."""

    def __init__(self) -> None:
        self._tools: dict[str, _Tool] = {}

    @typing.overload
    def tool(self, fn: _F, *, name: str | None = None, description: str | None = None,
             read_only: bool = False) -> _F: ...

    @typing.overload
    def tool(self, fn: None = None, *, name: str | None = None, description: str | None = None,
             read_only: bool = False) -> Callable[[_F], _F]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
    ) -> Any:
        """Register a function as a tool; usable as ``@reg.tool`` or ``@reg.tool(read_only=True)``.

        The function is returned unchanged. ``read_only`` marks tools without side effects, which
        `run_many` may run concurrently with their read-only neighbours.
        """

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            self._add(func, name=name, description=description, read_only=read_only)
            return func

        if fn is None:
            return register
        return register(fn)

    def _add(
        self, fn: Callable[..., Any], *, name: str | None, description: str | None, read_only: bool
    ) -> None:
        tool_name = str(name or getattr(fn, "__name__", ""))
        if not _TOOL_NAME.fullmatch(tool_name):
            raise ValueError(f"invalid tool name {tool_name!r}: use 1-64 letters, digits, '_' or '-'")
        if tool_name in self._tools:
            raise ValueError(f"a tool named {tool_name!r} is already registered")
        text = description if description is not None else _first_paragraph(fn)
        if not text.strip():
            text = f"The {tool_name} tool."
        model, arg_fields = _input_model(fn, tool_name)
        try:
            schema = model.model_json_schema(schema_generator=_NoTitles)
        except pydantic.PydanticUserError as error:
            raise TypeError(
                f"tool {tool_name!r}: cannot build an input schema from its annotations "
                f"(types used in them must be importable from the function's module): {error}"
            ) from error
        schema.pop("title", None)
        self._tools[tool_name] = _Tool(
            name=tool_name,
            description=text.strip(),
            fn=fn,
            input_model=model,
            input_schema=schema,
            read_only=read_only,
            arg_fields=arg_fields,
        )

    def schemas(self) -> list[dict[str, Any]]:
        """The ``tools`` parameter for the Messages API, in registration order."""
        return [
            {
                "name": t.name,
                "description": t.description,
                "input_schema": json.loads(json.dumps(t.input_schema)),
            }
            for t in self._tools.values()
        ]

    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def is_read_only(self, name: str) -> bool:
        """Whether the tool is marked read-only; False for unknown names."""
        tool = self._tools.get(name) if isinstance(name, str) else None
        return tool is not None and tool.read_only

    def run(self, name: str, tool_input: object) -> ToolOutcome:
        """Validate the input and call the tool. Never raises; failures come back with ``is_error=True``."""
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            known = ", ".join(self._tools) or "(none)"
            return ToolOutcome(f"Unknown tool {name!r}. Known tools: {known}.", is_error=True)
        if not isinstance(tool_input, dict):
            return ToolOutcome(
                f"Invalid input for {tool.name}: expected a JSON object of arguments, "
                f"got {type(tool_input).__name__}",
                is_error=True,
            )
        try:
            validated = tool.input_model.model_validate(tool_input)
        except pydantic.ValidationError as error:
            return ToolOutcome(_validation_message(tool.name, error), is_error=True)
        kwargs = {param: getattr(validated, field) for field, param in tool.arg_fields}
        try:
            return _render(tool.fn(**kwargs))
        except ToolError as error:
            return ToolOutcome(str(error) or f"{tool.name} failed", is_error=True)
        except Exception as error:  # noqa: BLE001 - any failure of the tool becomes an error outcome
            message = f"{tool.name} raised {type(error).__name__}"
            if str(error):
                message += f": {error}"
            return ToolOutcome(message, is_error=True)

    def run_many(self, calls: list[tuple[str, str, object]], *, max_workers: int = 4) -> list[ToolOutcome]:
        """Run ``(tool_use_id, name, input)`` calls and return the outcomes in the original order.

        Consecutive read-only calls run concurrently (up to ``max_workers`` at once); any other call
        waits for everything before it and finishes before anything after it starts.
        """
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        outcomes: list[ToolOutcome] = []
        batch: list[tuple[str, object]] = []

        def flush() -> None:
            if len(batch) == 1 or max_workers == 1:
                outcomes.extend(self.run(n, i) for n, i in batch)
            elif batch:
                outcomes.extend(_together(self.run, batch, min(max_workers, len(batch))))
            batch.clear()

        for _tool_use_id, name, tool_input in calls:
            if self.is_read_only(name):
                batch.append((name, tool_input))
                continue
            flush()
            outcomes.append(self.run(name, tool_input))
        flush()
        return outcomes


_WAIT_SLICE_S = 0.1  # the wait for tools running together is cut in slices, so that Ctrl-C is seen at once


def _together(run: Callable[[str, object], ToolOutcome], batch: list[tuple[str, object]],
              workers: int) -> list[ToolOutcome]:
    """Run the calls on ``workers`` daemon threads; their outcomes in order. Interrupted (Ctrl-C), it stops
    waiting at once: the calls not yet finished are cancelled (:class:`ToolsCancelled` names them); one still
    running is left to end on its own, its outcome dropped (it writes only to this call's own list, so nothing
    of the run changes), and being a daemon thread it does not hold the process open at its exit."""
    outcomes: list[ToolOutcome | None] = [None] * len(batch)
    jobs: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(batch)):
        jobs.put(index)
    stop = threading.Event()
    finished = threading.Semaphore(0)

    def worker() -> None:
        while not stop.is_set():
            try:
                index = jobs.get_nowait()
            except queue.Empty:
                return
            outcomes[index] = run(*batch[index])
            finished.release()

    try:
        for k in range(workers):
            threading.Thread(target=worker, daemon=True, name=f"agentlab-tool-{k}").start()
        for _ in batch:
            while not finished.acquire(timeout=_WAIT_SLICE_S):
                pass
    except KeyboardInterrupt as exc:
        stop.set()
        raise ToolsCancelled([name for (name, _), out in zip(batch, outcomes, strict=True) if out is None]) from exc
    return [out for out in outcomes if out is not None]


# --------------------------------------------------------------------------------------------------------------
# calculator: arithmetic from an AST walk, never eval
# --------------------------------------------------------------------------------------------------------------

_MAX_EXPRESSION_CHARS = 1_000
_MAX_EXPONENT = 10_000
_MAX_MAGNITUDE = 1e300
_TOO_LARGE = f"calculator: number too large (the limit is {_MAX_MAGNITUDE:g} in magnitude)"

_BINARY_OPS: dict[type[ast.operator], tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
    ast.Pow: ("**", operator.pow),
}
_UNARY_OPS: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_OP_SYMBOLS = {
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.BitAnd: "&",
    ast.MatMult: "@",
    ast.Invert: "~",
    ast.Not: "not",
}


def _checked(value: object) -> float:
    if isinstance(value, complex):
        raise ToolError("calculator: the result is not a real number")
    if not isinstance(value, (int, float)):
        raise ToolError(f"calculator: unexpected value {value!r}")
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > _MAX_MAGNITUDE:
        raise ToolError(_TOO_LARGE)
    return value


def _check_power(base: float, exponent: float) -> None:
    if abs(exponent) > _MAX_EXPONENT:
        raise ToolError(f"calculator: exponent {exponent:g} is too large (the limit is {_MAX_EXPONENT})")
    # Refuse huge integer powers before computing them rather than after.
    too_big = (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and abs(base) > 1
        and exponent * math.log10(abs(base)) > math.log10(_MAX_MAGNITUDE)
    )
    if too_big:
        raise ToolError(_TOO_LARGE)


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant):
        value = node.value
        if type(value) in (int, float):
            return _checked(value)
        if isinstance(value, complex):
            raise ToolError("calculator: imaginary numbers are not supported")
        raise ToolError(f"calculator: only numbers are allowed, not {type(value).__name__} {value!r}")
    if isinstance(node, ast.UnaryOp):
        unary = _UNARY_OPS.get(type(node.op))
        if unary is None:
            raise ToolError(f"calculator: operator {_OP_SYMBOLS.get(type(node.op), '?')!r} is not supported")
        return _checked(unary(_evaluate(node.operand)))
    if isinstance(node, ast.BinOp):
        entry = _BINARY_OPS.get(type(node.op))
        if entry is None:
            raise ToolError(f"calculator: operator {_OP_SYMBOLS.get(type(node.op), '?')!r} is not supported")
        symbol, apply = entry
        left, right = _evaluate(node.left), _evaluate(node.right)
        if symbol == "**":
            _check_power(left, right)
        try:
            return _checked(apply(left, right))
        except ZeroDivisionError:
            raise ToolError("calculator: division by zero") from None
        except OverflowError:
            raise ToolError(_TOO_LARGE) from None
    if isinstance(node, ast.Name):
        raise ToolError(f"calculator: names are not allowed (found {node.id!r}); use numbers only")
    if isinstance(node, ast.Call):
        raise ToolError("calculator: function calls are not allowed")
    if isinstance(node, ast.Attribute):
        raise ToolError("calculator: attribute access is not allowed")
    raise ToolError(
        f"calculator: unsupported syntax ({type(node).__name__}); use numbers, + - * / // % ** and ()"
    )


def _format_number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    return format(value, ".15g")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression safely; raises ToolError with a readable message on bad input."""
    text = expression.strip()
    if not text:
        raise ToolError("calculator: the expression is empty")
    if len(text) > _MAX_EXPRESSION_CHARS:
        raise ToolError(f"calculator: the expression is longer than {_MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        raise ToolError(f"calculator: not a valid expression ({error.msg})") from None
    except (ValueError, RecursionError, MemoryError) as error:
        raise ToolError(f"calculator: not a valid expression ({error})") from None
    try:
        return _format_number(_evaluate(tree.body))
    except RecursionError:
        raise ToolError("calculator: the expression is nested too deeply") from None


# --------------------------------------------------------------------------------------------------------------
# get_weather: made up, but stable across runs and machines
# --------------------------------------------------------------------------------------------------------------

_MILD_CONDITIONS = (
    "sunny",
    "clear skies",
    "partly cloudy",
    "overcast",
    "light rain",
    "heavy rain",
    "fog",
    "thunderstorms",
    "windy",
)
_COLD_CONDITIONS = ("clear skies", "overcast", "light snow", "heavy snow", "sleet", "fog")


def fake_weather(location: str) -> str:
    """A deterministic weather report: the same place always gets the same weather."""
    place = " ".join(location.split())
    if not place:
        raise ToolError("get_weather: the location is empty")
    digest = hashlib.sha256(place.casefold().encode("utf-8")).digest()
    temperature = digest[0] % 41 - 8  # -8 .. 32 °C
    choices = _COLD_CONDITIONS if temperature <= 1 else _MILD_CONDITIONS
    condition = choices[digest[1] % len(choices)]
    return f"Weather in {place}: {temperature}°C, {condition}"


# --------------------------------------------------------------------------------------------------------------
# read_file: text files inside one sandbox folder only
# --------------------------------------------------------------------------------------------------------------

READ_LIMIT_CHARS = 20_000
_LISTING_LIMIT = 50


def read_sandboxed(sandbox: Path | None, path: str, limit: int = READ_LIMIT_CHARS) -> str:
    """Read a text file below ``sandbox``; raises ToolError for anything outside it or unreadable.

    Refuses absolute paths and ``..`` outright, then resolves symlinks and checks the real path is still
    inside the sandbox's real path. (A teaching sandbox: it does not guard against files being swapped
    between the check and the read.)
    """
    if sandbox is None:
        raise ToolError("read_file: no sandbox configured, so there are no files to read")
    if not path.strip():
        raise ToolError("read_file: the path is empty")
    if "\x00" in path:
        raise ToolError("read_file: the path contains a NUL character")
    relative = Path(path)
    if relative.is_absolute():
        raise ToolError(
            f"read_file: refused {path!r}: absolute paths are not allowed, use a path relative to "
            "the sandbox folder"
        )
    if ".." in relative.parts:
        raise ToolError(f"read_file: refused {path!r}: '..' is not allowed in paths")
    try:
        root = Path(sandbox).resolve()
        target = (root / relative).resolve()
    except (OSError, RuntimeError) as error:  # e.g. a symlink loop
        raise ToolError(f"read_file: cannot resolve {path!r}: {error}") from None
    if not root.is_dir():
        raise ToolError("read_file: the sandbox folder does not exist")
    if not target.is_relative_to(root):
        raise ToolError(f"read_file: refused {path!r}: it leads outside the sandbox folder")
    try:
        if not target.exists():
            raise ToolError(f"read_file: no such file: {path!r}")
        if target.is_dir():
            entries = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())
            shown = ", ".join(entries[:_LISTING_LIMIT]) or "(empty)"
            more = f" and {len(entries) - _LISTING_LIMIT} more" if len(entries) > _LISTING_LIMIT else ""
            raise ToolError(f"read_file: {path!r} is a directory; it contains: {shown}{more}")
        if not target.is_file():
            raise ToolError(f"read_file: {path!r} is not a regular file")
        with open(target, encoding="utf-8", errors="replace") as handle:
            text = handle.read(limit + 1)
    except OSError as error:
        raise ToolError(f"read_file: cannot read {path!r}: {error.strerror or error}") from None
    if "\x00" in text:
        raise ToolError(f"read_file: {path!r} looks like a binary file")
    if len(text) > limit:
        return text[:limit] + f"\n[truncated: showing the first {limit} characters]"
    return text


# --------------------------------------------------------------------------------------------------------------
# run_tests: a pretend test suite whose result the lesson decides
# --------------------------------------------------------------------------------------------------------------


@dataclass
class TestsState:
    """Controls the pretend test suite behind ``run_tests``.

    ``passing`` decides the result, unless ``fail_times`` is set: then the first ``fail_times`` runs fail
    and later ones pass. ``runs`` counts calls.
    """

    __test__ = False  # not a pytest test class, despite the name

    passing: bool = False
    runs: int = 0
    fail_times: int | None = None


FAILING_REPORT = "1 failed, 2 passed: test_checkout FAILED"
PASSING_REPORT = "3 passed"


def run_pretend_tests(state: TestsState) -> str:
    failing = state.runs < state.fail_times if state.fail_times is not None else not state.passing
    state.runs += 1
    return FAILING_REPORT if failing else PASSING_REPORT


# --------------------------------------------------------------------------------------------------------------
# The demo registry
# --------------------------------------------------------------------------------------------------------------


def demo_tools(
    sandbox: str | os.PathLike[str] | None = None, tests: TestsState | None = None
) -> ToolRegistry:
    """A fresh registry with calculator, get_weather, read_file and run_tests.

    ``sandbox`` is the only folder read_file may read from (without one it answers with an error);
    ``tests`` is the state run_tests reports from (a fresh, failing one if not given).
    """
    registry = ToolRegistry()
    root = Path(sandbox) if sandbox is not None else None
    state = tests if tests is not None else TestsState()
    tests_lock = threading.Lock()

    @registry.tool(read_only=True)
    def calculator(
        expression: Annotated[
            str, pydantic.Field(description="Arithmetic such as '(2 + 3) * 4 / 7' or '2 ** 8'")
        ],
    ) -> str:
        """Evaluate an arithmetic expression and return the result.
        Supports numbers, + - * / // % **, unary minus and parentheses; no variables or functions.
        """
        return calculate(expression)

    @registry.tool(read_only=True)
    def get_weather(location: Annotated[str, pydantic.Field(description="A city name, e.g. 'Paris'")]) -> str:
        """Get the current weather for a location (a demo service with made-up but stable answers)."""
        return fake_weather(location)

    @registry.tool(read_only=True)
    def read_file(
        path: Annotated[
            str, pydantic.Field(description="Path relative to the sandbox folder, e.g. 'notes.txt'")
        ],
    ) -> str:
        """Read a text file from the sandbox folder. Long files are cut off after 20,000 characters."""
        return read_sandboxed(root, path)

    @registry.tool
    def run_tests() -> str:
        """Run the project's test suite and report how many tests passed and failed."""
        with tests_lock:
            return run_pretend_tests(state)

    return registry
