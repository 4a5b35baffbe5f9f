"""Tools for tool-using environments: typed Python functions, OpenAI-style calls, results as data.

A tool is a plain (sync or async) function with type hints and a Google-style docstring::

    def add(a: int, b: int = 0) -> int:
        \"\"\"Add two integers.

        Args:
            a: the first number
            b: the second number
        \"\"\"

:meth:`Tool.from_function` (or the :func:`tool` decorator) derives its OpenAI spec (``{"type":
"function", "function": {name, description, parameters}}``) from the signature: the first
paragraph of the docstring is the description, the ``Args:`` section describes the parameters,
and a parameter with a default is not required. Parameter types are those a model can write as
JSON: ``str``, ``int``, ``float``, ``bool``, ``list[T]``, ``dict[str, T]``, ``Literal[...]`` and
``T | None`` (``Optional[T]``), nested freely (``Annotated[T, pydantic.Field(...)]`` adds
constraints). Anything else, or a missing annotation, raises :class:`ToolError` naming the
function and the parameter.

Each parameter's JSON schema comes from a pydantic ``TypeAdapter`` of its annotation, and the same
adapter validates the model's argument for it, so the schema a model sees and the validation its
call gets cannot disagree. One adapter per parameter (not ``pydantic.create_model`` over the whole
signature) keeps every parameter name usable (``create_model`` warns on names such as ``schema``
or ``json`` that shadow ``BaseModel`` attributes and takes ``model_config`` as configuration),
and the schemas are plain OpenAI-compatible JSON: no ``title`` keys, no ``$defs``.

:class:`ToolBox` runs the calls of a model turn (``tool_calls`` entries). Whatever happens is a
:class:`ToolResult` with a reason (``ok``, ``unknown_tool``, ``bad_arguments``, ``raised``,
``timeout``), never an exception, and :meth:`ToolResult.message` is the ``tool`` message the model
reads back, errors included. A synchronous tool runs in a daemon thread: past its timeout the call
is answered with the error, but a thread cannot be stopped, so code that may loop or eat memory
belongs in the sandbox (:func:`prime_rl.envs.sandbox.python_tool`), whose process group is killed.
An async tool is cancelled at its timeout (it must not block the event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re
import threading
import time
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic
from pydantic_core import PydanticSerializationError

Reason = Literal["ok", "unknown_tool", "bad_arguments", "raised", "timeout"]
"""How a tool call ended; everything but ``ok`` is an error told to the model."""

SUPPORTED_TYPES = "str, int, float, bool, list[T], dict[str, T], Literal[...], T | None"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What OpenAI-compatible servers accept as a function name."""


class ToolError(TypeError):
    """A function cannot be a tool, or two tools share a name (names the function and parameter)."""


class ArgumentsError(ValueError):
    """A call's arguments do not fit the tool's signature (the message lists every problem)."""


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call: what the model is told, and why."""

    content: str
    """The ``tool`` message's content: the tool's output, or ``error: ...``."""
    ok: bool
    error: str | None
    """What went wrong (``None`` when ``ok``); ``content`` is ``"error: " + error``."""
    reason: Reason
    ms: float
    """Wall-clock time of the call, validation included."""

    def message(self, tool_call_id: str) -> dict[str, str]:
        """The ``{"role": "tool", "tool_call_id", "content"}`` message answering the call."""
        return {"role": "tool", "tool_call_id": tool_call_id, "content": self.content}


@dataclass(frozen=True)
class _Param:
    name: str
    adapter: pydantic.TypeAdapter
    required: bool


@dataclass(frozen=True)
class Tool:
    """A function a model can call: its name, description, JSON-schema parameters and callable."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object (``type: object``, ``properties``, ``required``)."""
    fn: Callable[..., Any]
    params: tuple[_Param, ...] | None = field(default=None, repr=False, compare=False)
    """Per-parameter validators (set by :meth:`from_function`). ``None`` for a tool built by hand
    from a schema: its calls are then only checked for required and unknown names."""

    @classmethod
    def from_function(
        cls, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ) -> Tool:
        """The tool for ``fn``: name, description and parameter schema from its signature and
        docstring (see the module docstring); raises :class:`ToolError` naming what cannot be
        described to a model."""
        name = name or getattr(fn, "__name__", None)
        if not isinstance(name, str) or not _NAME.match(name):
            raise ToolError(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
        try:
            signature = inspect.signature(fn, eval_str=True)
        except (NameError, SyntaxError, TypeError, ValueError) as e:
            raise ToolError(f"tool {name!r}: cannot read its signature: {e}") from e
        summary, arg_docs = _doc(fn)
        properties: dict[str, Any] = {}
        required: list[str] = []
        params: list[_Param] = []
        for p in signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                star = "*" if p.kind is p.VAR_POSITIONAL else "**"
                raise ToolError(f"tool {name!r}: parameter {star}{p.name} cannot be described to a model")
            if p.kind is p.POSITIONAL_ONLY:
                raise ToolError(f"tool {name!r}: parameter {p.name!r} is positional-only (calls pass names)")
            if p.annotation is inspect.Parameter.empty:
                raise ToolError(f"tool {name!r}: parameter {p.name!r} has no type annotation")
            problem = _unsupported(p.annotation)
            if problem is not None:
                raise ToolError(
                    f"tool {name!r}: parameter {p.name!r} has an unsupported type {problem} "
                    f"(supported: {SUPPORTED_TYPES})"
                )
            try:
                adapter = pydantic.TypeAdapter(p.annotation)
                schema = _strip_titles(adapter.json_schema())
            except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as e:
                raise ToolError(f"tool {name!r}: parameter {p.name!r}: {e}") from e
            if p.name in arg_docs:
                schema["description"] = arg_docs[p.name]
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
            else:
                with contextlib.suppress(PydanticSerializationError, TypeError, ValueError):
                    schema["default"] = adapter.dump_python(p.default, mode="json", warnings=False)
            properties[p.name] = schema
            params.append(_Param(p.name, adapter, p.default is inspect.Parameter.empty))
        parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            parameters["required"] = required
        parameters["additionalProperties"] = False
        return cls(name, summary if description is None else description, parameters, fn, tuple(params))

    def openai_spec(self) -> dict[str, Any]:
        """The entry of a chat request's ``tools``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: Any) -> dict[str, Any]:
        """The keyword arguments for :attr:`fn`, validated (and coerced, e.g. ``"3"`` -> ``3`` for an
        ``int``) by pydantic; raises :class:`ArgumentsError` listing every problem."""
        if not isinstance(arguments, dict):
            raise ArgumentsError(f"the arguments must be a JSON object, not {type(arguments).__name__}")
        known = list(self.parameters.get("properties", {}))
        problems = [
            f"unexpected argument {key!r} (parameters: {', '.join(known) or 'none'})"
            for key in arguments
            if key not in known
        ]
        required = self.parameters.get("required", [])
        problems += [f"missing required argument {key!r}" for key in required if key not in arguments]
        values: dict[str, Any] = {}
        for p in self.params or ():
            if p.name not in arguments:
                continue  # the function's own default applies
            try:
                values[p.name] = p.adapter.validate_python(arguments[p.name])
            except pydantic.ValidationError as e:
                for err in e.errors():
                    where = ".".join(str(x) for x in (p.name, *err["loc"]))
                    problems.append(f"{where}: {err['msg']} (got {_short(err.get('input'))})")
        if problems:
            raise ArgumentsError("; ".join(problems))
        if self.params is None:
            return {k: v for k, v in arguments.items() if k in known}
        return values


def tool(fn: Callable[..., Any]) -> Tool:
    """Decorator form of :meth:`Tool.from_function`: ``@tool`` turns a function into a :class:`Tool`."""
    return Tool.from_function(fn)


class ToolBox:
    """Tools by name; runs OpenAI ``tool_calls`` entries with a per-call wall-clock limit."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]], timeout_s: float = 30.0):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.tools: dict[str, Tool] = {}
        for t in tools:
            t = t if isinstance(t, Tool) else Tool.from_function(t)
            if t.name in self.tools:
                raise ToolError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t
        self.timeout_s = float(timeout_s)

    def specs(self) -> list[dict[str, Any]]:
        """The request's ``tools``: one OpenAI function spec per tool."""
        return [t.openai_spec() for t in self.tools.values()]

    async def acall(self, tool_call: dict[str, Any]) -> ToolResult:
        """Run one ``{"id", "type": "function", "function": {"name", "arguments"}}`` call; every
        outcome is a :class:`ToolResult` (never raises, except when the caller is cancelled)."""
        start = time.perf_counter()

        def fail(reason: Reason, error: str) -> ToolResult:
            return ToolResult(f"error: {error}", False, error, reason, (time.perf_counter() - start) * 1000.0)

        fn_part = tool_call.get("function") if isinstance(tool_call, dict) else None
        fn_part = fn_part if isinstance(fn_part, dict) else {}
        name = fn_part.get("name")
        t = self.tools.get(name) if isinstance(name, str) else None
        if t is None:
            return fail("unknown_tool", f"unknown tool {name!r} (known: {', '.join(self.tools) or 'none'})")
        raw = fn_part.get("arguments", "{}")
        try:
            if isinstance(raw, str):
                try:
                    arguments = json.loads(raw) if raw.strip() else {}
                except json.JSONDecodeError as e:
                    raise ArgumentsError(f"the arguments are not valid JSON ({e})") from e
            else:
                arguments = raw
            values = t.validate(arguments)
        except ArgumentsError as e:
            return fail("bad_arguments", f"bad arguments for {t.name}: {str(e)[:1000]}")
        try:
            if inspect.iscoroutinefunction(t.fn):
                out = await asyncio.wait_for(_guarded(t.fn(**values)), self.timeout_s)
            else:
                out = await asyncio.wait_for(_in_daemon_thread(t, values), self.timeout_s)
                if inspect.isawaitable(out):  # a sync function that returned a coroutine
                    remaining = self.timeout_s - (time.perf_counter() - start)
                    out = await asyncio.wait_for(_guarded(out), max(remaining, 0.001))
        except TimeoutError:  # only the limit's: the tool's own exceptions come back as _Raised
            return fail("timeout", f"{t.name} did not finish within {self.timeout_s:g}s and was abandoned")
        if isinstance(out, _Raised):  # a tool's failure is told to the model and recorded, never a crash
            e = out.error
            return fail("raised", f"{t.name} raised {type(e).__name__}: {e}")
        return ToolResult(_content(out), True, None, "ok", (time.perf_counter() - start) * 1000.0)

    def call(self, tool_call: dict[str, Any]) -> ToolResult:
        """:meth:`acall` for synchronous callers (an environment's ``step`` in a worker process).
        Called from inside a running event loop, it runs on a helper thread and blocks that loop
        for the call: async callers should await :meth:`acall`."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.acall(tool_call))
        box: list[ToolResult] = []
        helper = threading.Thread(target=lambda: box.append(asyncio.run(self.acall(tool_call))), daemon=True)
        helper.start()
        helper.join()
        return box[0]

    def answer(
        self, tool_calls: Sequence[dict[str, Any]]
    ) -> tuple[list[dict[str, str]], float, tuple[str, ...]]:
        """Run a turn's calls in order: their ``tool`` messages, the time they took (ms) and the
        reasons of those that failed."""
        messages, ms, errors = [], 0.0, []
        for i, tool_call in enumerate(tool_calls):
            result = self.call(tool_call)
            call_id = tool_call.get("id") if isinstance(tool_call, dict) else None
            messages.append(result.message(str(call_id or f"call_{i}")))
            ms += result.ms
            if not result.ok:
                errors.append(result.reason)
        return messages, ms, tuple(errors)


@dataclass(frozen=True)
class _Raised:
    error: BaseException


async def _guarded(awaitable: Any) -> Any:
    """The awaitable's value, or its exception as :class:`_Raised` (cancellation still propagates)."""
    try:
        return await awaitable
    except Exception as e:
        return _Raised(e)


def _in_daemon_thread(t: Tool, values: dict[str, Any]) -> asyncio.Future:
    """Run a sync tool on its own daemon thread (not the loop's executor, so that a tool that never
    returns cannot hold up ``asyncio.run``'s shutdown); an exception comes back as :class:`_Raised`."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def settle(value: Any) -> None:
        if not future.done():
            future.set_result(value)

    def target() -> None:
        try:
            value = t.fn(**values)
        except BaseException as e:  # SystemExit from a tool is reported like any other exception
            value = _Raised(e)
        with contextlib.suppress(RuntimeError):  # the loop is gone: the call was answered (timeout)
            loop.call_soon_threadsafe(settle, value)

    threading.Thread(target=target, name=f"tool:{t.name}", daemon=True).start()
    return future


def _content(out: Any) -> str:
    if isinstance(out, str):
        return out
    try:
        return json.dumps(out, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(out)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unsupported(annotation: Any) -> str | None:
    """``None`` when a model can write ``annotation`` as JSON, else the offending type, named."""
    if annotation in (str, int, float, bool, None, type(None)):
        return None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _unsupported(args[0])
    if origin is Literal:
        bad = [a for a in args if not (a is None or isinstance(a, (str, int, bool)))]
        return f"Literal[{', '.join(map(repr, bad))}]" if bad else None
    if origin in (typing.Union, types.UnionType):
        return next((p for p in map(_unsupported, args) if p is not None), None)
    if origin is list and len(args) == 1:
        return _unsupported(args[0])
    if origin is dict and len(args) == 2:
        if args[0] is not str:
            return f"{_type_name(annotation)} (dict keys must be str)"
        return _unsupported(args[1])
    if annotation in (list, dict):
        return f"{annotation.__name__} without item types (write list[str], dict[str, int], ...)"
    return _type_name(annotation)


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        module = annotation.__module__
        qualname = annotation.__qualname__
        return qualname if module in ("builtins", "typing") else f"{module}.{qualname}"
    return repr(annotation).replace("typing.", "")


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


_ARG_LINE = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _doc(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The first paragraph of the docstring (on one line), and the Google-style ``Args:`` section's
    description of each parameter (continuation lines joined)."""
    doc = inspect.getdoc(fn) or ""
    lines = doc.splitlines()
    summary_lines: list[str] = []
    for line in lines:
        if not line.strip():
            break
        summary_lines.append(line.strip())
    args: dict[str, str] = {}
    start = next((i for i, line in enumerate(lines) if line.strip() in ("Args:", "Arguments:")), None)
    if start is not None:
        header_indent = _indent(lines[start])
        current: str | None = None
        item_indent: int | None = None
        for line in lines[start + 1 :]:
            if not line.strip():
                continue
            indent = _indent(line)
            if indent <= header_indent:
                break  # the next section (Returns:, Raises:, ...)
            m = _ARG_LINE.match(line.strip())
            if m and (item_indent is None or indent <= item_indent):
                item_indent, current = indent, m.group(1)
                args[current] = m.group(2).strip()
            elif current is not None:
                args[current] = f"{args[current]} {line.strip()}".strip()
    return " ".join(summary_lines), args


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())
