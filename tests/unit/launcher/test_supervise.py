"""Supervision: secrets reach the children by env var only; a child's whole process group is stopped."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from prime_rl.config import load_config
from prime_rl.launcher.config import RLConfig
from prime_rl.launcher.supervise import Child, _child_env, _dump_for_child


def test_secrets_travel_by_env_never_in_the_written_configs(tmp_path, monkeypatch):
    monkeypatch.delenv("PRIME_ADMIN_TOKEN", raising=False)
    cfg, _ = load_config(
        RLConfig,
        [
            "--output_dir",
            str(tmp_path),
            "--inference.admin_token",
            "s3cret",
            "--orchestrator.client.api_key",
            "k3y",
        ],
    )
    for block in (cfg.inference, cfg.orchestrator, cfg.trainer):
        text = json.dumps(_dump_for_child(block))
        assert "s3cret" not in text and "k3y" not in text
    cfg.write_resolved(tmp_path / "rl.json")
    assert "s3cret" not in (tmp_path / "rl.json").read_text()
    env = _child_env(cfg)
    assert env["PRIME_ADMIN_TOKEN"] == "s3cret" and env["PRIME_CLIENT__API_KEY"] == "k3y"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped by its new parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_stop_ends_the_child_s_process_group_with_sigkill_after_sigterm(tmp_path):
    # the child ignores SIGTERM and has a grandchild that does too: both die by SIGKILL of the group
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child = Child("test", [sys.executable, "-c", script], tmp_path / "test.log", dict(os.environ))
    deadline = time.monotonic() + 20
    log = tmp_path / "test.log"
    while not (log.is_file() and log.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(log.read_text().split()[0])
    assert os.getpgid(child.proc.pid) == child.proc.pid != os.getpgid(0)  # its own process group
    child.stop(timeout_s=0.5)
    assert child.proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)
