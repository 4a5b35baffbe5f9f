"""Reading the task file: validation with line numbers, ``--limit``, ``--shard i/n``.

A task's index is its zero-based line number in the file, so it stays the same across runs,
limits and shards (a fixed malformed line keeps every other task's index). The file is read
twice, streaming: once to validate and select, once to hand out the selected tasks, so a file
of millions of tasks never sits in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_rl.envs.base import EnvError, Environment, task_messages


class InputError(ValueError):
    """The task file cannot be used (missing, unreadable, or a bad line under ``--strict``)."""


@dataclass
class InputIssue:
    line: int
    problem: str


@dataclass
class TaskSelection:
    """What :func:`scan_tasks` found."""

    path: Path
    selected: list[int] = field(default_factory=list)
    """Task indices (zero-based line numbers) this run works on, in file order."""
    valid_total: int = 0
    """Valid tasks in the whole file (before --limit and --shard)."""
    shard_total: int = 0
    """Valid tasks of this shard without --limit (what --estimate extrapolates to)."""
    issues: list[InputIssue] = field(default_factory=list)


def check_task(row: Any, env: Environment | None) -> list[dict[str, Any]]:
    """The prompt messages of one parsed row; raises :class:`EnvError` saying what is wrong."""
    if not isinstance(row, dict):
        raise EnvError(f"expected a JSON object, got {type(row).__name__}")
    messages = env.prompt(row) if env is not None else task_messages(row)
    missing = [f for f in (env.required_fields if env is not None else ()) if f not in row]
    if missing:
        raise EnvError(f"missing field {', '.join(repr(m) for m in missing)} (needed by env {env.name!r})")
    return messages


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    try:
        with open(path, "rb") as f:
            yield from enumerate(f)
    except FileNotFoundError:
        raise InputError(f"task file {path} not found") from None
    except OSError as e:
        raise InputError(f"task file {path}: cannot read: {e}") from None


def _parse(raw: bytes, env: Environment | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        row = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EnvError(f"not valid JSON ({e})") from None
    return row, check_task(row, env)


def scan_tasks(
    path: Path,
    env: Environment | None,
    limit: int | None = None,
    shard: tuple[int, int] = (0, 1),
    strict: bool = False,
) -> TaskSelection:
    """Validate every line; select the first ``limit`` valid tasks, then those of ``shard``.

    A bad line is recorded as an issue (or raises :class:`InputError` when ``strict``)."""
    sel = TaskSelection(Path(path))
    i, n = shard
    for index, raw in _lines(path):
        if not raw.strip():
            continue
        try:
            _parse(raw, env)
        except EnvError as e:
            if strict:
                raise InputError(f"{path}:{index + 1}: {e} (--strict)") from None
            sel.issues.append(InputIssue(index + 1, str(e)))
            continue
        sel.valid_total += 1
        if index % n == i:
            sel.shard_total += 1
            if limit is None or sel.valid_total <= limit:
                sel.selected.append(index)
    if sel.valid_total == 0:
        raise InputError(
            f"task file {path} holds no valid task"
            + (f" ({len(sel.issues)} bad lines)" if sel.issues else "")
        )
    return sel


def iter_tasks(
    path: Path, wanted: set[int], env: Environment | None
) -> Iterator[tuple[int, dict[str, Any], list[dict[str, Any]]]]:
    """``(task_index, row, messages)`` for the wanted indices, in file order."""
    if not wanted:
        return
    last = max(wanted)
    for index, raw in _lines(path):
        if index in wanted:
            try:
                row, messages = _parse(raw, env)
            except EnvError as e:  # the file changed since the scan
                raise InputError(f"{path}:{index + 1}: {e} (the file changed during the run)") from None
            yield index, row, messages
        if index >= last:
            return
