"""A real trainer SIGKILLed in the middle of a background weight write, then resumed.

The trainer (a subprocess in a session of its own, killed by process group if anything is left)
trains on batches written beforehand, a checkpoint every step. Failpoint
``trainer.publish.shard_written@2`` kills it on the writer thread once the first shard of
``weights/step_2`` is written, while the training thread goes on. Afterwards no weight dir with
``STABLE`` misses a file or fails its manifest, the torn write is only a temporary dir, and
``--resume`` (from whichever checkpoint was complete: the training thread may have saved
checkpoint 2 before the kill) finishes the run with every weight dir complete.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.support.processes import kill_groups, running_in
from tests.support.rollouts import make_samples, write_step

from prime_rl.failpoints import ENV as FAILPOINT_ENV
from prime_rl.paths import RunPaths, is_stable
from prime_rl.trainer.main import command as trainer_command
from prime_rl.transport.weights import verify_weight_dir

pytestmark = pytest.mark.slow

MAX_STEPS = 3


def run_trainer(
    model: Path, out: Path, *extra: str, failpoint: str | None = None
) -> subprocess.CompletedProcess:
    """The trainer in a session of its own; whatever of its group still runs afterwards is killed."""
    env = {k: v for k, v in os.environ.items() if k not in (FAILPOINT_ENV, "PRIME_RL_LAUNCHER_PID")}
    env["OMP_NUM_THREADS"] = "1"
    if failpoint:
        env[FAILPOINT_ENV] = failpoint
    args = [
        "--model.name", str(model), "--output_dir", str(out), "--max_steps", str(MAX_STEPS),
        "--async_level", "1", "--cpu_threads", "1", "--ckpt.interval", "1",
        "--weights.keep", str(MAX_STEPS), "--weights.max_shard_bytes", str(1 << 20), *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        trainer_command(1, args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        kill_groups([proc.pid])
        proc.wait()
    assert running_in([proc.pid]) == []
    return subprocess.CompletedProcess(proc.args, proc.returncode, output)


def run_with_rollouts(model: Path, tmp_path: Path) -> tuple[Path, RunPaths]:
    """A run directory with every step's rollouts written, for the trainer alone."""
    out = tmp_path / "run"
    samples = make_samples(n_prompts=2, vocab_size=2048, seed=3)
    for step in range(MAX_STEPS):
        write_step(out, step, samples, model)
    return out, RunPaths(out)


def stable_dirs_are_complete(weights: Path) -> list[int]:
    """Every STABLE weight dir matches its manifest; returns their steps."""
    steps = []
    for d in sorted(weights.glob("step_*")):
        if is_stable(d):
            verify_weight_dir(d)
            steps.append(int(d.name.split("_")[1]))
    return steps


def test_sigkill_during_a_background_write_leaves_no_torn_stable_dir_and_resume_finishes(
    tiny_model, tmp_path
):
    out, paths = run_with_rollouts(tiny_model, tmp_path)

    killed = run_trainer(tiny_model, out, failpoint="trainer.publish.shard_written@2")
    assert killed.returncode == -9, killed.stdout[-3000:]
    assert "failpoint trainer.publish.shard_written@2: SIGKILL" in killed.stdout
    assert stable_dirs_are_complete(paths.weights_root) == [1]
    assert not paths.weights_dir(2).exists()
    assert list(paths.weights_root.glob(".step_2.tmp*"))  # the torn write: a temporary dir only

    resumed = run_trainer(tiny_model, out, "--resume")
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert stable_dirs_are_complete(paths.weights_root) == [1, 2, 3]
    assert not list(paths.weights_root.glob(".step_*"))  # the temporary dir was cleaned up
    rows = [json.loads(x) for x in paths.metrics_file.read_text().splitlines()]
    assert [r["step"] for r in rows][-1] == MAX_STEPS - 1
    assert {r["step"] for r in rows} == set(range(MAX_STEPS))


def test_a_kill_once_a_checkpoint_is_marked_leaves_the_step_s_metrics_row_written(tiny_model, tmp_path):
    """The trainer recorded a step's metrics row after checkpointing it: killed once checkpoint 2 was
    marked (the fault suite's launcher kill once checkpoint 8 existed did so, now and then), it
    resumed at step 2 and the row of step 1 was never written. The row comes first now (a resume
    drops the rows of the steps it redoes, so a kill before the mark loses nothing either)."""
    out, paths = run_with_rollouts(tiny_model, tmp_path)

    killed = run_trainer(tiny_model, out, failpoint="trainer.ckpt.stable@2")
    assert killed.returncode == -9, killed.stdout[-3000:]
    assert is_stable(paths.checkpoints_root / "step_2" / "trainer")
    rows = [json.loads(x) for x in paths.metrics_file.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
