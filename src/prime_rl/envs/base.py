"""The environment interface: a task source and a verifier (built by name in ``registry.py``).

A :class:`Task` is a JSON-serialisable dict-like record with a ``prompt`` (chat messages) and
whatever the verifier needs (``answer``, metadata). An :class:`Environment` yields tasks
(deterministically from a seed) and scores one completion of a task:
``score(task, completion) -> Score(reward, metrics)``. Scoring runs in worker processes, so an
environment must be constructible from its name and JSON options alone (see
:func:`prime_rl.envs.registry.load_env`).

Single-turn for now; a multi-turn/tool environment would add a ``step(task, history)`` that
returns the next user/tool message, with ``score`` seeing the whole transcript.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Task = dict[str, Any]
"""One task: ``{"id": str, "prompt": [{"role": ..., "content": ...}], ...verifier fields}``."""


@dataclass
class Score:
    """A verifier's verdict: the reward and any named numeric metrics (accuracy, length, ...)."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)
    answer: str | None = None
    """The final answer the verifier extracted, if any (majority voting groups samples by it)."""


class EnvError(ValueError):
    """An environment could not be built or a task is malformed (names the env and the problem)."""


class Environment:
    """Base class. Subclasses implement :meth:`tasks` and :meth:`score`."""

    name: str = "base"

    required_fields: tuple[str, ...] = ()
    """Fields a task read from a file must have for :meth:`score` (``answer`` for math)."""

    def tasks(self, seed: int) -> Iterator[Task]:
        """Tasks in a deterministic order for ``seed``; may be endless (generators) or finite (files)."""
        raise NotImplementedError

    def score(self, task: Task, completion: str) -> Score:
        """Score one completion of ``task``; may raise (recorded as a failed rollout)."""
        raise NotImplementedError

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """The chat messages of a task read from a file (see :func:`task_messages`)."""
        return task_messages(task)


PROMPT_FIELDS = ("prompt", "messages", "responses_create_params.input", "question")
"""Where a task row may hold its prompt, in the order they are looked up."""


def task_messages(task: Task, system: str | None = None) -> list[dict[str, Any]]:
    """Chat messages from a task row: ``prompt`` or ``messages`` (a message list or a string),
    ``responses_create_params.input`` (the same), else ``question`` (a string). Raises
    :class:`EnvError` naming the problem when there is none or it has the wrong shape."""
    params = task.get("responses_create_params")
    for name, value in (
        ("prompt", task.get("prompt")),
        ("messages", task.get("messages")),
        ("responses_create_params.input", params.get("input") if isinstance(params, dict) else None),
        ("question", task.get("question")),
    ):
        if value is None:
            continue
        if isinstance(value, str):
            return user_prompt(value, system)
        if (
            isinstance(value, list)
            and value
            and all(isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in value)
        ):
            return value
        raise EnvError(f"field '{name}' must be a string or a non-empty list of {{role, content}} messages")
    raise EnvError(f"no prompt: a task needs one of the fields {', '.join(PROMPT_FIELDS)}")


def read_jsonl_tasks(path: Path, required: tuple[str, ...]) -> list[Task]:
    """Tasks from a JSONL file; a bad line raises :class:`EnvError` naming file, line and field."""
    path = Path(path)
    if not path.is_file():
        raise EnvError(f"task file {path} not found")
    tasks = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise EnvError(f"{path}:{lineno}: not valid JSON: {e}") from e
            if not isinstance(row, dict):
                raise EnvError(f"{path}:{lineno}: expected a JSON object")
            for key in required:
                if key not in row:
                    raise EnvError(f"{path}:{lineno}: missing field '{key}'")
            row.setdefault("id", f"{path.stem}-{lineno}")
            tasks.append(row)
    if not tasks:
        raise EnvError(f"task file {path} holds no tasks")
    return tasks


def user_prompt(text: str, system: str | None = None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": text}]
