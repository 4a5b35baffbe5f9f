"""The deployment recipe (docs/deploy.md): inference, trainer and orchestrator started separately,
each with the command ``rl --print-commands`` prints, sharing one --output_dir; then ``rl bundle``
and the analyzer on the extracted bundle."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from prime_rl.dev.server import free_port
from prime_rl.lifecycle import stop_group
from prime_rl.paths import RunPaths

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEBUG_CONFIG = REPO / "configs" / "debug" / "rl.toml"
BIN = Path(sys.executable).parent  # the console scripts of this environment
TOKEN = "test-admin-token-0123456789"


def printed_commands(model: Path, out: Path, port: int, steps: int, *extra: str) -> list[list[str]]:
    argv = [
        sys.executable,
        "-m",
        "prime_rl.launcher.main",
        "--config",
        str(DEBUG_CONFIG),
        "--model",
        str(model),
        "--output_dir",
        str(out),
        "--max_steps",
        str(steps),
        "--inference",
        json.dumps({"port": port, "host": "0.0.0.0", "admin_token": TOKEN}),
        *extra,
        "--print-commands",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert TOKEN not in done.stdout
    assert "export PRIME_ADMIN_TOKEN=" in done.stdout
    return [shlex.split(line) for line in done.stdout.splitlines() if line and not line.startswith("#")]


def test_three_processes_started_separately_finish_a_run_and_bundle_for_the_analyzer(tiny_model, tmp_path):
    out = tmp_path / "run"
    monitors = ("--monitor.tensorboard", "--monitor.wandb", "--monitor.wandb.mode", "offline")
    commands = printed_commands(tiny_model, out, free_port(), 3, *monitors)
    assert [c[0] for c in commands] == ["inference", "trainer", "orchestrator"]
    env = {**os.environ, "PRIME_ADMIN_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true"}
    env.pop("PRIME_RL_LAUNCHER_PID", None)
    procs: dict[str, subprocess.Popen] = {}
    try:
        for argv in commands:  # one "terminal" each: own session, own console log
            name = argv[0]
            with open(tmp_path / f"{name}.console", "w") as console:
                procs[name] = subprocess.Popen(
                    [str(BIN / name), *argv[1:]],
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    cwd=REPO,
                )
        deadline = time.monotonic() + 540
        for name in ("orchestrator", "trainer"):
            try:
                code = procs[name].wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = None
            console = (tmp_path / f"{name}.console").read_text()[-3000:]
            assert code == 0, f"{name} exited with {code}:\n{console}"
        assert procs["inference"].poll() is None  # the server stays up until it is stopped
    finally:
        for p in procs.values():
            stop_group(p.pid)
            p.wait(timeout=30)

    paths = RunPaths(out)
    rows = [json.loads(x) for x in paths.metrics_file.read_text().splitlines()]
    assert [r["step"] for r in rows if r["process"] == "orchestrator"] == [0, 1, 2]
    assert [r["step"] for r in rows if r["process"] == "trainer"] == [0, 1, 2]
    assert (paths.weights_root / "step_3" / "STABLE").exists()
    # each process wrote its own resolved config and log into the shared run directory
    for name in ("inference", "trainer", "orchestrator"):
        assert paths.config_file(name).is_file()
    assert json.loads(paths.config_file("inference").read_text())["host"] == "0.0.0.0"
    assert TOKEN not in paths.config_file("inference").read_text()
    assert "rpc.done" in paths.log_file("inference").read_text()  # weights swapped through the admin API

    # per-step metrics reached TensorBoard and an offline W&B run of each process
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tests.support.wandb_offline import read_offline_run

    for name, key in (("trainer", "trainer/loss"), ("orchestrator", "orchestrator/reward_mean")):
        events = EventAccumulator(str(out / "tensorboard" / name))
        events.Reload()
        assert [e.step for e in events.Scalars(key)] == [0, 1, 2], name
    runs = {r.job_type: r for r in map(read_offline_run, out.glob("wandb/offline-run-*/run-*.wandb"))}
    assert sorted(runs) == ["orchestrator", "trainer"]
    assert [step for step, row in runs["trainer"].history if "trainer/entropy" in row] == [0, 1, 2]
    assert [step for step, row in runs["orchestrator"].history if "orchestrator/staleness" in row] == [
        0,
        1,
        2,
    ]

    bundle = subprocess.run(
        [str(BIN / "rl"), "bundle", str(out), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    tarball = Path(bundle.stdout.strip())
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp_path / "laptop", filter="data")
    extracted = tmp_path / "laptop" / tarball.name.removesuffix(".tar.gz")
    analysis = subprocess.run(
        [sys.executable, "-m", "prime_rl.analysis", str(extracted), "--out", str(tmp_path / "analysis")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert analysis.returncode == 0, analysis.stderr
    summary = json.loads((tmp_path / "analysis" / "summary.json").read_text())
    assert summary["parse"]["malformed"] == 0
    assert summary["async_level"] == 1
    assert summary["stats"]["queue_ms"]["count"] == 1  # async_level 1, 3 steps: one update (step_1)
