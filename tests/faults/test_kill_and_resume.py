"""The fault suite: kill each process of a real run at a chosen point, resume, and check the run.

One run of the `rl` launcher (real vLLM server, trainer, orchestrator) is killed four times,
each followed by ``rl --resume``:

1. the trainer, between renaming ``weights/step_3`` into place and marking it STABLE
   (failpoint ``trainer.publish.renamed@3``);
2. the orchestrator, between writing ``rollouts/step_5`` and its metrics row
   (failpoint ``orchestrator.rollouts.written@5``);
3. the inference server (SIGKILL of the launcher's inference child) once checkpoint 6 exists;
4. the launcher itself (SIGKILL) once checkpoint 8 exists.

After each fault the launcher exits 1 naming the process that died (except when it is the one
killed), and no process of the run is left (vLLM's renamed engine included), found by process
group. At the end the run completes at ``max_steps`` with exit 0, every step has exactly one
metrics row per process, every trained sample's staleness (from the policy step the server
reported) lies in ``0..async_level``, and every STABLE weight dir matches its manifest. The
full-disk case puts the run directory on a small tmpfs (root only, else skipped): the run stops
with ENOSPC named, nothing marked complete is torn, and ``--resume`` with space again finishes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.disk import grow, small_tmpfs
from tests.support.processes import (
    children_groups,
    descendants,
    kill_groups,
    new_descendants,
    running_in,
    wait_groups_gone,
)

from prime_rl.dev.server import free_port
from prime_rl.failpoints import ENV as FAILPOINT_ENV
from prime_rl.paths import RunPaths, is_stable, rollout_path
from prime_rl.transport.rollouts import read_rollout_batch
from prime_rl.transport.weights import verify_weight_dir

pytestmark = pytest.mark.slow

DEBUG_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "debug" / "rl.toml"
MAX_STEPS = 10
ASYNC_LEVEL = 1


def rl_argv(model: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "prime_rl.launcher.main",
        "--config", str(DEBUG_CONFIG), "--model", str(model), "--output_dir", str(out),
        "--max_steps", str(MAX_STEPS), "--async_level", str(ASYNC_LEVEL),
        "--inference", json.dumps({"port": free_port()}),
        "--orchestrator.batch_size", "16", "--orchestrator.rollouts_per_example", "4",
        "--trainer.ckpt.interval", "2",
        *extra,
    ]  # fmt: skip


class Run:
    """One `rl` launcher process and the process groups of its three children."""

    def __init__(
        self, model: Path, out: Path, *extra: str, failpoint: str | None = None, log_dir: Path | None = None
    ):
        env = dict(os.environ)
        env.pop(FAILPOINT_ENV, None)
        if failpoint:
            env[FAILPOINT_ENV] = failpoint
        self.argv = rl_argv(model, out, *extra)
        log = (log_dir or out.parent) / f"{out.name}-launcher-{time.monotonic_ns()}.log"
        self.log = open(log, "w+")  # noqa: SIM115
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.groups: dict[str, int] = {}
        self.groups = children_groups(self.proc)

    def wait_for(self, what, timeout: float = 400) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if self.proc.poll() is not None:
                raise AssertionError(f"rl exited ({self.proc.returncode}) early:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting; rl output:\n{self.output()[-3000:]}")
            time.sleep(0.2)

    def finish(self, timeout: float = 600) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"rl did not finish:\n{self.output()[-3000:]}") from None

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def kill_all(self) -> None:
        """Clean up after a failure (the test has failed already if anything was left)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        kill_groups(self.groups.values())


def both_checkpointed(out: Path, step: int) -> bool:
    ck = RunPaths(out).checkpoints_root / f"step_{step}"
    return is_stable(ck / "trainer") and is_stable(ck / "orchestrator")


def metrics_steps(out: Path, process: str) -> list[int]:
    rows = [json.loads(x) for x in RunPaths(out).metrics_file.read_text().splitlines() if x.strip()]
    return [r["step"] for r in rows if r["process"] == process]


def test_kills_of_every_process_at_chosen_points_then_resume_finish_the_run_exactly(tiny_model, tmp_path):
    out = tmp_path / "run"
    before = descendants()
    runs: list[Run] = []
    try:
        # 1. the trainer dies between renaming weights/step_3 into place and marking it STABLE
        run = Run(tiny_model, out, failpoint="trainer.publish.renamed@3")
        runs.append(run)
        assert set(run.groups) == {"inference", "trainer", "orchestrator"}
        # meanwhile a second launcher on the same run directory is refused, naming the first
        second = subprocess.run([*run.argv, "--resume"], capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr[-3000:]
        assert f"is in use by another rl launcher (pid {run.proc.pid} on " in second.stderr
        assert run.finish() == 1
        assert "trainer exited with code -9" in run.output(), run.output()[-3000:]
        assert running_in(run.groups.values()) == []  # all stopped before the launcher returned
        weights3 = RunPaths(out).weights_dir(3)
        assert weights3.is_dir() and not is_stable(weights3)  # complete on disk, never marked

        # 2. the orchestrator dies between writing rollouts/step_5 and its metrics row
        run = Run(tiny_model, out, "--resume", failpoint="orchestrator.rollouts.written@5")
        runs.append(run)
        assert run.finish() == 1
        assert "orchestrator exited with code -9" in run.output(), run.output()[-3000:]
        assert running_in(run.groups.values()) == []

        # 3. the inference server (SIGKILL of the launcher's child) once checkpoint 6 exists:
        # its vLLM engine (renamed, in its group) must not outlive it
        run = Run(tiny_model, out, "--resume")
        runs.append(run)
        run.wait_for(lambda: both_checkpointed(out, 6))
        inference = run.groups["inference"]  # the child leads its group
        assert sum("EngineCore" in line for line in running_in([inference])) == 1
        os.kill(inference, signal.SIGKILL)
        assert run.finish() == 1
        assert "inference exited with code -9; stopping the others" in run.output(), run.output()[-3000:]
        assert running_in(run.groups.values()) == []

        # 4. the launcher itself (SIGKILL: nothing of its own runs) once checkpoint 8 exists:
        # every process of the run follows it without help from the test
        run = Run(tiny_model, out, "--resume")
        runs.append(run)
        run.wait_for(lambda: both_checkpointed(out, 8))
        run.proc.kill()
        run.proc.wait()
        left = wait_groups_gone(run.groups.values(), timeout_s=30)
        assert left == [], f"processes of the killed launcher's children still run: {left}"

        # 5. the last resume finishes the run
        run = Run(tiny_model, out, "--resume")
        runs.append(run)
        assert run.finish() == 0, run.output()[-3000:]
        assert running_in(run.groups.values()) == []
    finally:
        for r in runs:
            r.kill_all()
    assert new_descendants(before) == []

    paths = RunPaths(out)
    assert "resumed from checkpoint step 8" in paths.trainer_log(0).read_text()
    assert metrics_steps(out, "orchestrator") == list(range(MAX_STEPS))  # no row twice, none missing
    assert metrics_steps(out, "trainer") == list(range(MAX_STEPS))
    for step in range(MAX_STEPS):
        batch = read_rollout_batch(rollout_path(paths.rollouts_dir(step), 0))
        assert batch.num_samples == 16
        staleness = [step - p for p in batch.policy_steps.tolist()]
        assert all(0 <= s <= ASYNC_LEVEL for s in staleness), (step, staleness)
    for weight_dir in paths.weights_root.glob("step_*"):
        if is_stable(weight_dir):
            verify_weight_dir(weight_dir)


def test_a_full_disk_stops_the_run_with_a_clear_error_and_resume_finishes_it(tiny_model, tmp_path):
    with small_tmpfs(tmp_path / "disk", 28) as disk:
        out = disk / "run"
        run = Run(tiny_model, out, log_dir=tmp_path)
        try:
            code = run.finish()
            text = run.output()
            assert code == 1, text[-3000:]
            assert "No space left on device" in text, text[-3000:]
            assert running_in(run.groups.values()) == []
        finally:
            run.kill_all()
        paths = RunPaths(out)
        steps = metrics_steps(out, "orchestrator")
        assert steps == sorted(set(steps)) and len(steps) < MAX_STEPS
        for weight_dir in paths.weights_root.glob("step_*"):
            if is_stable(weight_dir):
                verify_weight_dir(weight_dir)  # nothing marked complete is torn
        grow(disk, 512)
        run = Run(tiny_model, out, "--resume", log_dir=tmp_path)
        try:
            assert run.finish() == 0, run.output()[-3000:]
            assert running_in(run.groups.values()) == []
        finally:
            run.kill_all()
        assert metrics_steps(out, "orchestrator") == list(range(MAX_STEPS))
        assert metrics_steps(out, "trainer") == list(range(MAX_STEPS))
