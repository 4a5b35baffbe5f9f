"""The environment interface: a task source and a verifier (built by name in ``registry.py``).

A :class:`Task` is a JSON-serialisable dict-like record with a ``prompt`` (chat messages) and
whatever the verifier needs (``answer``, metadata). An :class:`Environment` yields tasks
(deterministically from a seed) and scores one completion of a task:
``score(task, completion) -> Score(reward, metrics)``. Scoring runs in worker processes, so an
environment must be constructible from its name and JSON options alone (see
:func:`prime_rl.envs.registry.load_env`).

Episodes: every rollout is an episode of at most :attr:`Environment.max_turns` model turns. After
each model turn the environment's :meth:`Environment.step` gets the conversation so far (its last
message is the model's turn, with any ``tool_calls``) and answers with a :class:`Turn`: the next
user/tool messages, or the end of the episode with its :class:`Score`. The default ``step`` ends
the episode at once with ``score(task, last answer)``: a single-turn environment is the one-turn
case of the same loop (:mod:`prime_rl.orchestrator.episode`). ``step`` is stateless (everything
it needs is in the task and the messages), so any worker process can answer any turn.
"""

from __future__ import annotations

import json
import math
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


def plain_score(score: Score) -> Score:
    """``score`` with plain floats, checked: a reward or metric that is no finite number (NaN, inf)
    raises ValueError naming it, and the rollout is a failed one (its error says why). Trained on,
    one NaN reward made the batch's advantages, then the loss, NaN; written, a line JSON readers refuse."""
    reward = float(score.reward)
    if not math.isfinite(reward):
        raise ValueError(f"the reward {reward} is no finite number")
    metrics = {}
    for key, value in score.metrics.items():
        metrics[key] = float(value)
        if not math.isfinite(metrics[key]):
            raise ValueError(f"the metric {key!r} = {metrics[key]} is no finite number")
    return Score(reward, metrics, score.answer)


class EnvError(ValueError):
    """An environment could not be built or a task is malformed (names the env and the problem)."""


@dataclass(frozen=True)
class Turn:
    """The environment's answer to one model turn: more messages, or the end with a score."""

    messages: tuple[dict[str, Any], ...] = ()
    """The next user or tool messages (OpenAI chat format), when the episode goes on."""
    score: Score | None = None
    """The episode's score, when it ends."""
    tool_ms: float = 0.0
    """Time spent running tools for this answer (part of the environment's time)."""
    tool_errors: tuple[str, ...] = ()
    """Reasons of the tool calls of this turn that failed (``unknown_tool``, ``bad_arguments``,
    ``raised``, ``timeout``): data for the episode's record, never an exception."""

    @property
    def done(self) -> bool:
        return self.score is not None

    @classmethod
    def end(cls, score: Score) -> Turn:
        return cls(score=score)

    @classmethod
    def reply(
        cls, *messages: dict[str, Any], tool_ms: float = 0.0, tool_errors: tuple[str, ...] = ()
    ) -> Turn:
        if not messages:
            raise EnvError("a turn that does not end the episode needs at least one message")
        return cls(messages=tuple(messages), tool_ms=tool_ms, tool_errors=tool_errors)


class Environment:
    """Base class. Subclasses implement :meth:`tasks` and :meth:`score`."""

    name: str = "base"

    required_fields: tuple[str, ...] = ()
    """Fields a task read from a file must have for :meth:`score` (``answer`` for math)."""

    def tasks(self, seed: int) -> Iterator[Task]:
        """Tasks in a deterministic order for ``seed``; may be endless (generators) or finite (files)."""
        raise NotImplementedError

    max_turns: int = 1
    """Model turns an episode may take; an episode the environment has not ended by then ends
    with outcome ``max_turns`` and reward 0. Single-turn environments keep the default 1."""

    def score(self, task: Task, completion: str) -> Score:
        """Score one completion of ``task``; may raise (recorded as a failed rollout)."""
        raise NotImplementedError

    def tool_specs(self, task: Task) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` of the request for ``task`` (none by default)."""
        return []

    def step(self, task: Task, messages: list[dict[str, Any]]) -> Turn:
        """Answer the model's last turn (``messages[-1]``, role ``assistant``): :meth:`Turn.reply`
        with the next messages, or :meth:`Turn.end` with the score. May raise: the episode is then
        recorded as failed (reward 0, its error kept). Default: end with ``score`` of the answer."""
        return Turn.end(self.score(task, messages[-1].get("content") or ""))

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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: valid JSON, but inf as a float
        raise ValueError(f"{text[:40]} is too large for a number here")
    return value


def loads_task(text: str | bytes) -> Any:
    """A task line's JSON as JSON has it: ``NaN`` and ``Infinity``, which Python's json takes, are
    refused (a ValueError naming them), and so is a number too large for a float (``1e400``, read as
    inf): echoed into the rollouts, they made lines that jq and other JSON readers refuse."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


def read_jsonl_tasks(path: Path, required: tuple[str, ...]) -> list[Task]:
    """Tasks from a JSONL file; a bad line raises :class:`EnvError` naming file, line and field."""
    path = Path(path)
    if not path.is_file():
        raise EnvError(f"task file {path} not found")
    tasks = []
    with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is named by its number
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM (as collect-rollouts takes it)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise EnvError(f"{path}:{lineno}: not UTF-8 ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            try:
                row = loads_task(line)
            except ValueError as e:
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
