"""Helpers of the collector tests (unit runs against the fake server, integration runs of the CLI):
a task file, a run's config, the records of an output file, and the collector's command line."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from prime_rl.collect.config import CollectConfig
from prime_rl.collect.store import iter_records
from prime_rl.config import load_config

CLI = [sys.executable, "-m", "prime_rl.collect.main"]
"""``collect-rollouts`` as a child process."""


def cli_command(tasks: Path, out: Path, server_url: str, *extra: str) -> list[str]:
    """The command line of a collector child process: ``tasks`` into ``out`` from ``server_url``
    (model ``m``) with the toy env and no bar; ``extra`` flags last."""
    return [
        *CLI,
        "--input",
        str(tasks),
        "--output",
        str(out),
        "--env",
        "toy",
        "--base_urls",
        server_url,
        "--model",
        "m",
        "--no-progress",
        *extra,
    ]


def write_tasks(path: Path, n: int) -> Path:
    """``n`` tasks ``t0 .. t{n-1}`` with a prompt each, one JSON line per task."""
    path.write_text(
        "".join(json.dumps({"id": f"t{i}", "prompt": f"Say vowels, number {i}."}) + "\n" for i in range(n))
    )
    return path


def collect_config(
    server_url: str | list[str], tmp: Path, *extra: str, model=CollectConfig, tasks: Path | None = None
):
    """A run of ``tmp/tasks.jsonl`` (or ``tasks``) into ``tmp/out.jsonl`` with the toy env, model
    ``m``, 6 output tokens, inline scoring, no bar and a fast retry backoff; ``extra`` flags last."""
    urls = server_url if isinstance(server_url, list) else [server_url]
    cfg, _ = load_config(
        model,
        [
            "--input",
            str(tasks or tmp / "tasks.jsonl"),
            "--output",
            str(tmp / "out.jsonl"),
            "--env",
            "toy",
            "--base_urls",
            json.dumps(urls),
            "--model",
            "m",
            "--responses_create_params.max_output_tokens",
            "6",
            "--verify.workers",
            "0",
            "--no-progress",
            "--retry.backoff_s",
            "0.01",
            *extra,
        ],
    )
    return cfg


def records(path: Path) -> list[dict]:
    """Every record of an output file, in file order."""
    return [r for _, r in iter_records(path)]


def keys(path: Path) -> Counter:
    """How many times each (task_index, repeat_index) pair is in an output file."""
    return Counter((r["task_index"], r["repeat_index"]) for r in records(path))


@contextlib.contextmanager
def sigint_reaches_children() -> Iterator[None]:
    """Child processes started inside get SIGINT's default action (Python: ``KeyboardInterrupt``)
    even when this process was started with SIGINT ignored, as a background job of a
    non-interactive shell is (``make test &``, some CI runners): an ignored signal stays ignored
    across ``exec``, so without this a collector started by the test would ignore the SIGINT it is
    sent and finish its run (exit 0). A handled signal is reset to the default across ``exec``.
    Main thread only (``signal.signal``)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


FAST_FLAGS = [
    "--verify.workers",
    "0",
    "--responses_create_params.max_output_tokens",
    "6",
    "--retry.backoff_s",
    "0.01",
]
"""Collector flags that keep a test run short: inline scoring, 6 output tokens, quick retries."""


def wait_for(condition, proc: subprocess.Popen, what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail if ``proc`` exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, f"the collector exited (rc {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:.0f} s"
        time.sleep(0.01)
