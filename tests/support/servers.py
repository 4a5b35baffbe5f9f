"""A real inference server for tests: started with a fault file, ready, and stopped afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def serving(
    model: Path, output_dir: Path, fault_file: Path, admin_token: str, extra_args: list[str] | None = None
) -> Iterator:
    """The server (``prime_rl.dev.server.ServerProcess``) on ``model`` with ``PRIME_RL_FAULT_FILE``
    set to ``fault_file``; ``extra_args`` replace the CPU test arguments. Waits up to
    ``PRIME_TEST_SERVER_TIMEOUT`` seconds (420) for it to be ready; stops it with its group."""
    from prime_rl.dev.server import start_server
    from prime_rl.failpoints import FAULT_FILE_ENV

    server = start_server(
        model,
        output_dir,
        admin_token=admin_token,
        extra_args=extra_args,
        env={FAULT_FILE_ENV: str(fault_file)},
    )
    try:
        server.wait_ready(timeout_s=float(os.environ.get("PRIME_TEST_SERVER_TIMEOUT", "420")))
        yield server
    finally:
        server.stop()
