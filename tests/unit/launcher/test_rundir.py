"""The run directory before a start: locked by one launcher, refused, cleaned, or resumed at the
latest complete checkpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from prime_rl.config import ConfigError, load_config
from prime_rl.launcher.config import RLConfig
from prime_rl.launcher.rundir import RunComplete, RunDirInUse, lock_run_dir, prepare_run_dir
from prime_rl.paths import RunPaths, mark_stable

# holds the run directory's lock; with "child": hands the descriptor to a child, then dies alone
HOLDER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from prime_rl.launcher.rundir import lock_run_dir
    with lock_run_dir(sys.argv[1]) as fd:
        if sys.argv[2] == "child":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], pass_fds=(fd,))
            print(child.pid, flush=True)
        print("locked", flush=True)
        time.sleep(300)
    """
)


def _hold(run, mode: str = "alone") -> tuple[subprocess.Popen, list[str]]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run), mode], stdout=subprocess.PIPE, text=True
    )
    out = [holder.stdout.readline().strip()]
    while out[-1] not in ("locked", ""):
        out.append(holder.stdout.readline().strip())
    assert out[-1] == "locked", out
    return holder, out


def test_a_second_launcher_is_refused_naming_the_holder_until_the_holder_is_killed(tmp_path):
    run = tmp_path / "run"
    holder, _ = _hold(run)
    try:
        with pytest.raises(RunDirInUse) as refused, lock_run_dir(run):
            pass
        message = str(refused.value)
        assert message.startswith(
            f"{run} is in use by another rl launcher (pid {holder.pid} on {socket.gethostname()}"
        )
        assert "\n" not in message and "has exited" not in message
        holder.kill()  # SIGKILL: nothing of its own releases the lock, the kernel does
        holder.wait()
        with lock_run_dir(run):
            assert RunPaths(run).lock_file.read_text().startswith(f"pid={os.getpid()} host=")
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_lasts_while_a_child_of_the_killed_holder_runs(tmp_path):
    run = tmp_path / "run"
    holder, out = _hold(run, "child")
    child = int(out[0])
    try:
        holder.kill()
        holder.wait()
        with (
            pytest.raises(
                RunDirInUse, match=f"pid {holder.pid} .*; it has exited, processes it started still hold"
            ),
            lock_run_dir(run),
        ):
            pass
    finally:
        os.kill(child, signal.SIGKILL)
    for _ in range(100):  # the child is reaped by whoever adopted it; its descriptor closes when it dies
        try:
            with lock_run_dir(run):
                break
        except RunDirInUse:
            time.sleep(0.05)
    else:
        pytest.fail("the lock was not released after the last holder died")


def test_rl_refuses_a_used_run_dir_without_resume_or_clean(tmp_path):
    (tmp_path / "rollouts" / "step_0").mkdir(parents=True)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path)])
    with pytest.raises(ConfigError, match="--resume.*--clean"):
        prepare_run_dir(cfg)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume"])
    with pytest.raises(ConfigError, match="no checkpoint"):
        prepare_run_dir(cfg)
    paths = RunPaths(tmp_path)
    paths.trainer_log(0).parent.mkdir(parents=True)
    for log in (paths.log_file("rl"), paths.log_file("orchestrator"), paths.trainer_log(0)):
        log.write_text("an earlier run\n")
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--clean"])
    assert prepare_run_dir(cfg) is None and not (tmp_path / "rollouts").exists()
    # the earlier run's logs go (the analyzer would read them with the new run's); rl.log is open
    assert sorted(p.name for p in paths.logs_dir.iterdir()) == ["rl.log"]


def test_clean_deletes_the_earlier_runs_tensorboard_events_and_keeps_offline_wandb_runs(tmp_path):
    (tmp_path / "rollouts" / "step_0").mkdir(parents=True)
    (tmp_path / "tensorboard" / "trainer").mkdir(parents=True)
    (tmp_path / "tensorboard" / "trainer" / "events.out.tfevents.1").write_bytes(b"x")
    (tmp_path / "wandb" / "offline-run-1").mkdir(parents=True)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--clean"])
    assert prepare_run_dir(cfg) is None
    assert not (tmp_path / "tensorboard").exists()
    assert (tmp_path / "wandb" / "offline-run-1").is_dir()


def test_resume_takes_the_latest_complete_checkpoint_and_drops_what_came_after(tmp_path):
    for step in (2, 4):
        for component in ("trainer", "orchestrator"):
            (tmp_path / "checkpoints" / f"step_{step}" / component).mkdir(parents=True)
            if step == 2 or component == "trainer":  # step 4: the orchestrator never finished
                mark_stable(tmp_path / "checkpoints" / f"step_{step}" / component)
    for step in range(5):
        (tmp_path / "rollouts" / f"step_{step}").mkdir(parents=True)
        (tmp_path / "weights" / f"step_{step}").mkdir(parents=True)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume"])
    assert prepare_run_dir(cfg) == 2
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == ["step_0", "step_1"]
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["step_0", "step_1", "step_2"]


def _checkpoint(root, step, *components):
    for component in ("trainer", "orchestrator"):
        (root / "checkpoints" / f"step_{step}" / component).mkdir(parents=True, exist_ok=True)
    for component in components:
        mark_stable(root / "checkpoints" / f"step_{step}" / component)


def test_resume_drops_newer_incomplete_checkpoints_and_the_metric_rows_of_redone_steps(tmp_path):
    _checkpoint(tmp_path, 2, "trainer", "orchestrator")
    _checkpoint(tmp_path, 4, "trainer")  # the orchestrator never finished it
    (tmp_path / "checkpoints" / "step_6" / "trainer").mkdir(parents=True)  # cut short
    rows = [{"process": p, "step": s} for s in range(5) for p in ("orchestrator", "trainer")]
    lines = [json.dumps(r) for r in rows]
    lines.insert(3, "not json")  # kept as it is: what it was cannot be told
    lines.insert(5, json.dumps({"process": "trainer", "note": "no step"}))  # kept too
    text = "\n".join(lines) + '\n{"process": "trainer", "st'  # the crash cut the last write short
    (tmp_path / "metrics.jsonl").write_text(text)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume", "--max_steps", "10"])
    assert prepare_run_dir(cfg) == 2
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_2"]
    kept = (tmp_path / "metrics.jsonl").read_text()
    assert kept.endswith("\n")
    parsed = [json.loads(line) if line.startswith("{") else line for line in kept.splitlines()]
    assert [r["step"] for r in parsed if isinstance(r, dict) and "step" in r] == [0, 0, 1, 1]
    assert "not json" in parsed and {"process": "trainer", "note": "no step"} in parsed
    # resuming again at the same step changes nothing
    assert prepare_run_dir(cfg) == 2
    assert (tmp_path / "metrics.jsonl").read_text() == kept


@pytest.mark.parametrize("finished_by", ["checkpoint", "weights"])
def test_resume_on_a_finished_run_touches_nothing(tmp_path, finished_by):
    _checkpoint(tmp_path, 4, "trainer", "orchestrator")
    if finished_by == "checkpoint":
        _checkpoint(tmp_path, 6, "trainer", "orchestrator")
    else:  # max_steps not a multiple of the checkpoint interval: the last weights show it
        mark_stable(tmp_path / "weights" / "step_6")
    (tmp_path / "rollouts" / "step_5").mkdir(parents=True)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"process": "trainer", "step": 5}) + "\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume", "--max_steps", "6"])
    with pytest.raises(RunComplete, match="complete"):
        prepare_run_dir(cfg)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    # a higher max_steps continues the run
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume", "--max_steps", "8"])
    assert prepare_run_dir(cfg) == (6 if finished_by == "checkpoint" else 4)


def test_resume_and_clean_together_are_refused(tmp_path):
    (tmp_path / "rollouts" / "step_0").mkdir(parents=True)
    with pytest.raises(ConfigError, match="--resume and --clean contradict"):
        load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume", "--clean"])
    assert (tmp_path / "rollouts" / "step_0").is_dir()
