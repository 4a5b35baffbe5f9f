"""Reading the task file: validation with line numbers, ``--limit``, ``--shard i/n``.

A task's index is its zero-based line number in the file, so it stays the same across runs,
limits and shards (a fixed malformed line keeps every other task's index). The file is read
twice, streaming: once to validate and select, once to hand out the selected tasks, so a file
of millions of tasks never sits in memory.

A rejected line (blank, not JSON, not an object, no or an empty prompt, a field the env needs
missing) is written to the rejects file with its 1-based line number, the reason and the start of
the line; each scan rewrites that file (atomically), or removes it when the input has no bad line.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from array import array
from collections.abc import Container, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_rl.envs.base import PROMPT_FIELDS, EnvError, Environment, loads_task, task_messages
from prime_rl.paths import fsync_dir

REJECT_RAW_CHARS = 500
"""How much of a rejected line its entry in the rejects file quotes."""


class InputError(ValueError):
    """The task file cannot be used (missing, unreadable, no valid task, a bad line under
    ``--strict``, or more bad lines than ``--max_bad_lines``)."""


@dataclass
class InputIssue:
    line: int
    problem: str


@dataclass
class TaskSelection:
    """What :func:`scan_tasks` found."""

    path: Path
    selected: array = field(default_factory=lambda: array("q"))
    """Task indices (zero-based line numbers) this run works on, in file order (8 bytes each)."""
    valid_total: int = 0
    """Valid tasks in the whole file (before --limit and --shard)."""
    shard_total: int = 0
    """Valid tasks of this shard without --limit (what --estimate extrapolates to)."""
    issues: list[InputIssue] = field(default_factory=list)
    rejects: Path | None = None
    """Where every rejected line was written (``None``: none was, or no rejects file was asked for)."""


def check_task(row: Any, env: Environment | None) -> list[dict[str, Any]]:
    """The prompt messages of one parsed row; raises :class:`EnvError` saying what is wrong."""
    if not isinstance(row, dict):
        raise EnvError(f"expected a JSON object, got {type(row).__name__}")
    messages = env.prompt(row) if env is not None else task_messages(row)
    missing = [f for f in (env.required_fields if env is not None else ()) if f not in row]
    if missing:
        raise EnvError(f"missing field {', '.join(repr(m) for m in missing)} (needed by env {env.name!r})")
    asks = [m for m in messages if not isinstance(m, dict) or m.get("role") not in _INSTRUCTION_ROLES]
    if not any(not isinstance(m, dict) or _has_text(m.get("content")) for m in asks):
        raise EnvError(_empty_prompt(row))
    return messages


_INSTRUCTION_ROLES = ("system", "developer")
"""Roles that instruct the model; a prompt of only these (or of empty messages) asks nothing."""


def _has_text(content: Any) -> bool:
    """Whether a message's content says anything: a non-blank string, or a list of parts with a
    non-blank text part or a non-text part (an image, audio)."""
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(
            _has_text(part.get("text"))
            if isinstance(part, dict) and part.get("type") == "text"
            else bool(part)
            for part in content
        )
    return content is not None and content != {}


def _empty_prompt(row: dict[str, Any]) -> str:
    """The reason a row's prompt is empty, naming the field it came from (the first one present,
    as :func:`task_messages` looks them up)."""
    params = row.get("responses_create_params")
    for name in PROMPT_FIELDS:
        if name == "responses_create_params.input":
            value = params.get("input") if isinstance(params, dict) else None
        else:
            value = row.get(name)
        if isinstance(value, str):
            return f"empty prompt: field '{name}' is blank"
        if value is not None:
            return f"empty prompt: no message of field '{name}' has content (system messages aside)"
    return "empty prompt: the env built a prompt with no content"


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    try:
        with open(path, "rb") as f:
            yield from enumerate(f)
    except FileNotFoundError:
        raise InputError(f"task file {path} not found") from None
    except OSError as e:
        raise InputError(f"task file {path}: cannot read: {e}") from None


def _parse(raw: bytes, env: Environment | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if not raw.strip():
        raise EnvError("blank line")
    try:
        row = loads_task(raw)
    except ValueError as e:  # not JSON, not UTF-8, NaN or Infinity
        raise EnvError(f"not valid JSON ({e})") from None
    return row, check_task(row, env)


def scan_tasks(
    path: Path,
    env: Environment | None,
    limit: int | None = None,
    shard: tuple[int, int] = (0, 1),
    strict: bool = False,
    rejects: Path | None = None,
) -> TaskSelection:
    """Validate every line; select the first ``limit`` valid tasks, then those of ``shard``.

    A bad line (a blank one too: it keeps its index, so no task's index moves) is recorded as an
    issue, and written to ``rejects`` when given (or raises :class:`InputError` when ``strict``,
    after writing it). ``rejects`` is rewritten by every scan that reads the whole file, and
    removed when no line is bad."""
    sel = TaskSelection(Path(path))
    i, n = shard
    with _RejectsFile(rejects) as out:
        for index, raw in _lines(path):
            try:
                _parse(raw, env)
            except EnvError as e:
                out.add(index + 1, str(e), raw)
                if strict:
                    out.publish()
                    raise InputError(f"{path}:{index + 1}: {e} (--strict)") from None
                sel.issues.append(InputIssue(index + 1, str(e)))
                continue
            sel.valid_total += 1
            if index % n == i:
                sel.shard_total += 1
                if limit is None or sel.valid_total <= limit:
                    sel.selected.append(index)
        out.publish()
    sel.rejects = rejects if sel.issues and rejects is not None else None
    if sel.valid_total == 0:
        raise InputError(
            f"task file {path} holds no valid task"
            + (f" ({len(sel.issues)} bad lines{_see(sel)})" if sel.issues else "")
        )
    return sel


def row_at(path: Path, index: int) -> Any:
    """The parsed row of line ``index`` (zero-based) of the task file; None past its end or when that
    line is no JSON."""
    for i, raw in _lines(path):
        if i == index:
            try:
                return loads_task(raw)
            except ValueError:
                return None
    return None


def check_bad_lines(sel: TaskSelection, max_bad_lines: int | None) -> None:
    """Raise :class:`InputError` when the scan found more bad lines than ``max_bad_lines``
    (``None``: no limit): an input that broken is more likely the wrong file than a few typos."""
    if max_bad_lines is not None and len(sel.issues) > max_bad_lines:
        raise InputError(
            f"task file {sel.path}: {len(sel.issues)} bad lines, more than --max_bad_lines {max_bad_lines}"
            f"{_see(sel)}; nothing was sent. Fix the input, or raise --max_bad_lines (none: no limit)"
        )


def _see(sel: TaskSelection) -> str:
    return f"; every rejected line with its reason is in {sel.rejects}" if sel.rejects is not None else ""


class _RejectsFile:
    """The rejects file of one scan: ``{"line", "reason", "raw"}`` per rejected line, written to a
    temporary file beside it and published with ``os.replace`` by :meth:`publish` (which removes
    a stale one when nothing was rejected). Left unpublished (the scan failed), nothing changes."""

    def __init__(self, path: Path | None):
        self.path = None if path is None else Path(path)
        self._tmp: str | None = None
        self._f = None
        self._done = False

    def __enter__(self) -> _RejectsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._f is not None:
            self._f.close()
        if self._tmp is not None and not self._done:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp)

    def add(self, line: int, reason: str, raw: bytes) -> None:
        if self.path is None:
            return
        if self._f is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(
                prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
            )
            self._f = os.fdopen(fd, "w", encoding="utf-8")
        head = raw[: 4 * REJECT_RAW_CHARS]  # enough bytes for the characters quoted, of any line length
        text = head.decode("utf-8", errors="replace").rstrip("\r\n")[:REJECT_RAW_CHARS]
        self._f.write(json.dumps({"line": line, "reason": reason, "raw": text}, ensure_ascii=False) + "\n")

    def publish(self) -> None:
        if self.path is None or self._done:
            return
        if self._f is None:
            if self.path.exists():
                self.path.unlink(missing_ok=True)
                fsync_dir(self.path.parent)
        else:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            self._f = None
            os.replace(self._tmp, self.path)  # type: ignore[arg-type]
            fsync_dir(self.path.parent)
        self._done = True


class Pairs:
    """The ``(task_index, repeat_index)`` pairs a run still has to do: one byte per pair up to the
    largest task index (a million tasks of one sample: 1 MB, where a dict of lists took 150)."""

    def __init__(self, repeats: int) -> None:
        self.repeats = repeats
        self._flags = bytearray()
        self.count = 0
        """Pairs to do."""
        self.tasks = 0
        """Tasks with at least one pair to do."""
        self.last = -1
        """The largest task index with a pair to do."""

    def add(self, task: int, repeat: int) -> None:
        base = task * self.repeats
        if base + self.repeats > len(self._flags):
            self._flags.extend(bytes(base + self.repeats - len(self._flags)))
        if self._flags.find(1, base, base + self.repeats) == -1:
            self.tasks += 1
        if not self._flags[base + repeat]:
            self._flags[base + repeat] = 1
            self.count += 1
        self.last = max(self.last, task)

    def __contains__(self, task: object) -> bool:
        if not isinstance(task, int) or task < 0:
            return False
        base = task * self.repeats
        return base < len(self._flags) and self._flags.find(1, base, base + self.repeats) != -1

    def __len__(self) -> int:
        return self.tasks

    def repeats_of(self, task: int) -> list[int]:
        """The repeat indices of ``task`` still to do."""
        base = task * self.repeats
        return [r for r in range(self.repeats) if base + r < len(self._flags) and self._flags[base + r]]


def iter_tasks(
    path: Path, wanted: Container[int], env: Environment | None
) -> Iterator[tuple[int, dict[str, Any], list[dict[str, Any]]]]:
    """``(task_index, row, messages)`` for the wanted indices (a set, or :class:`Pairs`), in file order."""
    if not wanted:
        return
    last = wanted.last if isinstance(wanted, Pairs) else max(wanted)  # type: ignore[call-overload]
    for index, raw in _lines(path):
        if index in wanted:
            try:
                row, messages = _parse(raw, env)
            except EnvError as e:  # the file changed since the scan
                raise InputError(f"{path}:{index + 1}: {e} (the file changed during the run)") from None
            yield index, row, messages
        if index >= last:
            return
