"""Start and stop a real ``inference`` server as a subprocess (tests, benchmarks, the demo)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from prime_rl.lifecycle import launcher_env, stop_group

# Small, fast settings for the tiny model on a CPU: eager mode starts in ~30 s, a 64 MiB
# KV cache is plenty for thousands of short sequences of a 0.8M-parameter model.
CPU_TEST_ARGS = ["--enforce-eager", "--kv-cache-memory-bytes", str(64 * 1024 * 1024)]


def free_port() -> int:
    """A TCP port that is free right now on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    """A running ``inference`` subprocess; ``log_path`` holds its stdout and stderr."""

    process: subprocess.Popen
    base_url: str
    output_dir: Path
    model: str
    log_path: Path
    admin_token: str | None = None
    argv: list[str] = field(default_factory=list)

    @property
    def weights_root(self) -> Path:
        return self.output_dir / "weights"

    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"} if self.admin_token else {}

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Block until ``/health`` answers 200; raise with the log tail if the process dies or stalls."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"inference server exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"inference server not ready after {timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server's whole process group and wait until nothing in it runs.

        Also when the server process itself has exited already: vLLM's engine core (renamed
        ``VLLM::EngineCore``) outlives a killed API server and keeps its port.
        """
        stop_group(self.process.pid, timeout_s=timeout_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def start_server(
    model: str | Path,
    output_dir: Path,
    port: int | None = None,
    admin_token: str | None = None,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Start ``inference`` on loopback (not waiting for it: call :meth:`ServerProcess.wait_ready`)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    argv = [
        sys.executable,
        "-m",
        "prime_rl.inference.main",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--output_dir",
        str(output_dir),
        *(extra_args if extra_args is not None else CPU_TEST_ARGS),
    ]
    # the server (and vLLM's engine in its group) goes down with this process, even on a SIGKILL
    full_env = {**os.environ, **launcher_env(), **(env or {})}
    if admin_token:
        full_env["PRIME_ADMIN_TOKEN"] = admin_token
    log_path = output_dir / "inference.stdout.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
    return ServerProcess(
        process, f"http://127.0.0.1:{port}", output_dir, str(model), log_path, admin_token, argv
    )
