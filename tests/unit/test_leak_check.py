"""The session's leak check (tests/conftest.py): torch's own compile-worker pool, which torch closes
at exit, is closed before the check and not reported as a process the tests leaked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

POOL_TEST = """
import psutil

def test_starts_torchs_compile_workers():
    from torch._inductor.async_compile import AsyncCompile

    AsyncCompile.process_pool()  # what FlexAttention's or a layer's torch.compile starts on a GPU
    assert psutil.Process().children(recursive=True)
"""


def test_torchs_compile_workers_are_closed_not_reported_as_leaked(tmp_path):
    (tmp_path / "test_pool.py").write_text(POOL_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "--rootdir", str(tmp_path), str(tmp_path / "test_pool.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "2"},
    )  # fmt: skip
    assert "1 passed" in done.stdout, done.stdout[-2000:]
    assert "outlived the session" not in done.stdout
    assert done.returncode == 0, done.stdout[-2000:]
