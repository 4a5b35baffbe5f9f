"""A small tmpfs for full-disk tests: real ENOSPC from the kernel, not a mocked write."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size_mb: float) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` at ``where`` (root only; the test is skipped otherwise), unmounted
    on exit. :func:`grow` gives it more room (free space) in place."""
    where.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("a full disk needs a small tmpfs mount, which needs root")
    size = f"{int(size_mb * 1024)}k"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def grow(where: Path, size_mb: float) -> None:
    """Resize the tmpfs at ``where`` (what freeing space on a full disk does)."""
    subprocess.run(["mount", "-o", f"remount,size={int(size_mb * 1024)}k", str(where)], check=True)
