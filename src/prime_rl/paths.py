"""The ``<output_dir>`` layout of DESIGN.md in one place, plus atomic publishing helpers.

Every file another process reads is published atomically: written to a temporary name in the
same directory, fsynced, then renamed with ``os.replace``. A directory is complete only once its
``STABLE`` marker exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

STABLE = "STABLE"


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
