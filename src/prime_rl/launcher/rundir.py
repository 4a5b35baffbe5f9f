"""The run directory before a start: refuse an earlier run's leftovers, or wipe them (``--clean``),
or resume from the latest checkpoint both trainer and orchestrator completed (``--resume``).

On ``--resume`` at step N (checkpoint ``step_N``: N steps done, step N is the next one):

- a finished run (a complete checkpoint at ``max_steps`` or later, or ``weights/step_M/STABLE`` with
  M >= ``max_steps``: the trainer publishes those only after its last step) raises
  :class:`RunComplete` and nothing is touched;
- ``rollouts/step_S`` for S >= N, ``weights/step_S`` for S > N and ``checkpoints/step_S`` for S > N
  (incomplete ones: a complete one newer than N would have been chosen) are deleted;
- ``metrics.jsonl`` is rewritten atomically keeping the rows with ``step`` < N (both processes
  number rows by the step they did, from 0, and redo steps N, N+1, ...). A row that is not a JSON
  object with an integer ``step`` is kept as it is (what it is cannot be told, so it is not
  destroyed), except an unparsable last line without a newline: a write the crash cut short.

One launcher per run directory: :func:`lock_run_dir` holds ``<output_dir>/.rl.lock`` (``flock``) for
the run's life; the children inherit the descriptor, so the lock is released by the kernel when the
launcher and every child it started are gone, however they end (a launcher killed with SIGKILL
included). A second launcher on the same directory is refused, naming the PID that holds it.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from prime_rl.config import ConfigError
from prime_rl.launcher.config import RLConfig
from prime_rl.paths import RunPaths, atomic_write_bytes, complete_checkpoint_steps, is_stable, step_dirs


class RunComplete(Exception):
    """``--resume`` on a run that already did ``max_steps``: nothing to do."""


class RunDirInUse(ConfigError):
    """Another launcher (or processes it started) holds the run directory's lock."""


def _holder(lock: Path) -> str:
    """Who holds ``lock``, from what the holder wrote in it (``pid=.. host=.. started=..``)."""
    fields: dict[str, str] = {}
    for _ in range(20):  # the holder may be between truncating the file and writing it
        with contextlib.suppress(OSError):
            fields = dict(part.split("=", 1) for part in lock.read_text().split() if "=" in part)
        if "pid" in fields:
            break
        time.sleep(0.05)
    pid, host = fields.get("pid"), fields.get("host")
    if pid is None:
        return "another process"
    who = (
        f"pid {pid}"
        + (f" on {host}" if host else "")
        + (f", started {fields['started']}" if "started" in fields else "")
    )
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            who += f"; it has exited, processes it started still hold the lock (fuser -v {lock})"
        except PermissionError:
            pass
    return who


@contextlib.contextmanager
def lock_run_dir(output_dir: Path) -> Iterator[int]:
    """Hold ``<output_dir>/.rl.lock`` while the block runs; yields the descriptor (for children to
    inherit). Raises :class:`RunDirInUse` naming the holder when another process has it."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    lock = RunPaths(output_dir).lock_file
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirInUse(
                f"{output_dir} is in use by another rl launcher ({_holder(lock)}); "
                "wait for it to end or stop it"
            ) from None
        started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()} started={started}\n".encode(), 0)
        yield fd
    finally:
        os.close(fd)  # releases the lock unless a child still holds the descriptor


def finished_step(paths: RunPaths, max_steps: int) -> int | None:
    """The step showing that a run of ``max_steps`` is done, or None when it is not."""
    done = [
        s
        for s in complete_checkpoint_steps(paths.checkpoints_root, "trainer", "orchestrator")
        if s >= max_steps
    ]
    done += [s for s, d in step_dirs(paths.weights_root).items() if s >= max_steps and is_stable(d)]
    return max(done) if done else None


def _metric_step(line: bytes) -> int | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def truncate_metrics(paths: RunPaths, step: int) -> int:
    """Rewrite ``metrics.jsonl`` atomically without the rows of steps >= ``step``; returns rows dropped."""
    path = paths.metrics_file
    if not path.is_file():
        return 0
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n") and _metric_step(lines[-1]) is None:
        lines.pop()  # a write the crash cut short
    kept = [line for line in lines if (s := _metric_step(line)) is None or s < step]
    out = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in kept)
    if out != data:
        atomic_write_bytes(path, out)
    return len(data.splitlines()) - len(kept)


def check_unfinished(cfg: RLConfig) -> None:
    """On --resume, raise :class:`RunComplete` when the run already did ``max_steps``; touches nothing."""
    if not cfg.resume:
        return
    done = finished_step(RunPaths(cfg.output_dir), cfg.max_steps)
    if done is not None:
        raise RunComplete(
            f"run in {cfg.output_dir} is complete ({done} steps done, max_steps = {cfg.max_steps}): "
            "nothing to resume; raise --max_steps to train further"
        )


def prepare_run_dir(cfg: RLConfig) -> int | None:
    """Check (and on --clean, wipe) the run directory; on --resume, return the step to resume at.

    Raises :class:`RunComplete` on --resume when the run is already finished.
    """
    if cfg.resume and cfg.clean:
        raise ConfigError("--resume and --clean contradict each other: pass one")
    paths = RunPaths(cfg.output_dir)
    leftovers = [
        p
        for p in (paths.rollouts_root, paths.weights_root, paths.checkpoints_root)
        if p.is_dir() and any(p.iterdir())
    ]
    if cfg.resume:
        check_unfinished(cfg)
        steps = complete_checkpoint_steps(paths.checkpoints_root, "trainer", "orchestrator")
        if not steps:
            raise ConfigError(
                f"--resume: no checkpoint under {paths.checkpoints_root} that both trainer and orchestrator completed"
            )
        step = steps[-1]
        # what the crashed run produced after that checkpoint is regenerated, never consumed
        for s, d in step_dirs(paths.rollouts_root).items():
            if s >= step:
                shutil.rmtree(d)
        for root in (paths.weights_root, paths.checkpoints_root):
            for s, d in step_dirs(root).items():
                if s > step:
                    shutil.rmtree(d)
        truncate_metrics(paths, step)
        return step
    if leftovers and not cfg.clean:
        raise ConfigError(
            f"{cfg.output_dir} holds an earlier run ({', '.join(p.name for p in leftovers)}): "
            "pass --resume to continue it or --clean to start over"
        )
    if cfg.clean:
        for p in leftovers:
            shutil.rmtree(p)
        paths.metrics_file.unlink(missing_ok=True)
        # an earlier run's logs would be read with this one's (the analyzer reads logs/);
        # rl.log is this launcher's own, open already: it keeps its history
        if paths.logs_dir.is_dir():
            for p in paths.logs_dir.iterdir():
                if p == paths.log_file("rl"):
                    continue
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        # TensorBoard would draw the earlier run's scalars into this one's (W&B runs are separate:
        # an offline run not yet synced under wandb/ is kept)
        tensorboard = paths.root / "tensorboard"
        if cfg.monitor.tensorboard.log_dir is None and tensorboard.is_dir():
            shutil.rmtree(tensorboard)
    return None
