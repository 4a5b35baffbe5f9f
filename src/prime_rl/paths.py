"""The ``<output_dir>`` layout of docs/design.md in one place, plus atomic publishing helpers.

Every file another process reads is published atomically: written to a temporary name in the
same directory, fsynced, then renamed with ``os.replace``. A directory is complete only once its
``STABLE`` marker exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

STABLE = "STABLE"
_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointError(RuntimeError):
    """No usable checkpoint where one was asked for."""


@dataclass(frozen=True)
class RunPaths:
    """Paths of one run directory (``--output_dir``)."""

    root: Path

    @property
    def configs_dir(self) -> Path:
        return self.root / "configs"

    def config_file(self, process: str) -> Path:
        return self.configs_dir / f"{process}.json"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def log_file(self, process: str) -> Path:
        """``logs/<process>.log`` (orchestrator, inference, rl, ...)."""
        return self.logs_dir / f"{process}.log"

    def trainer_log(self, rank: int) -> Path:
        return self.logs_dir / "trainer" / f"rank_{rank}.log"

    @property
    def rollouts_root(self) -> Path:
        return self.root / "rollouts"

    def rollouts_dir(self, step: int) -> Path:
        return self.rollouts_root / f"step_{step}"

    @property
    def weights_root(self) -> Path:
        return self.root / "weights"

    def weights_dir(self, step: int) -> Path:
        return self.weights_root / f"step_{step}"

    @property
    def checkpoints_root(self) -> Path:
        return self.root / "checkpoints"

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_root / f"step_{step}"

    @property
    def metrics_file(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def lock_file(self) -> Path:
        """``.rl.lock``: held (flock) by the launcher of the run and the processes it started."""
        return self.root / ".rl.lock"


def rollout_path(rollouts_dir: Path, rank: int) -> Path:
    """Where rank ``rank``'s batch of a step lives in that step's ``rollouts/step_N`` directory
    (here, not in :mod:`prime_rl.transport.rollouts`, so that a process that only looks for the
    file, like the launcher's watchdog, need not import torch)."""
    return Path(rollouts_dir) / f"rank_{rank}.safetensors"


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it is durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same directory, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: object) -> None:
    """:func:`atomic_write_bytes` for an object rendered as indented JSON."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def is_stable(directory: Path) -> bool:
    """Whether ``directory`` carries its ``STABLE`` marker (is complete)."""
    return (Path(directory) / STABLE).is_file()


def mark_stable(directory: Path) -> None:
    """Write the ``STABLE`` marker of a directory whose contents are already durable."""
    atomic_write_bytes(Path(directory) / STABLE, b"")


def step_dirs(root: Path) -> dict[int, Path]:
    """The ``step_N`` directories under ``root`` by N, ascending (temporary and other names ignored)."""
    root = Path(root)
    if not root.is_dir():
        return {}
    found = {int(m.group(1)): p for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()}
    return dict(sorted(found.items()))


def complete_checkpoint_steps(root: Path, *components: str) -> list[int]:
    """Steps under ``checkpoints/`` where every named component (trainer, orchestrator) carries STABLE."""
    return [s for s, p in step_dirs(root).items() if all(is_stable(p / c) for c in components)]


def resolve_resume_step(root: Path, step: int | None, *components: str) -> int:
    """The checkpoint step to resume from: ``step`` (checked complete) or the latest complete one."""
    steps = complete_checkpoint_steps(root, *components)
    parts = "/".join(components)
    if step is None:
        if not steps:
            raise CheckpointError(
                f"--resume: no complete checkpoint under {root} (none carries {parts}/{STABLE})"
            )
        return steps[-1]
    if step not in steps:
        where = Path(root) / f"step_{step}"
        reason = "is incomplete (no STABLE marker)" if where.exists() else "does not exist"
        raise CheckpointError(
            f"--resume.step {step}: checkpoint {where} ({parts}) {reason}; complete ones: {steps or 'none'}"
        )
    return step
