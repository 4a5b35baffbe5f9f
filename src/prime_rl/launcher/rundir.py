"""The run directory before a start: refuse an earlier run's leftovers, or wipe them (``--clean``),
or resume from the latest checkpoint both trainer and orchestrator completed (``--resume``)."""

from __future__ import annotations

import shutil

from prime_rl.config import ConfigError
from prime_rl.launcher.config import RLConfig
from prime_rl.paths import RunPaths, complete_checkpoint_steps, step_dirs


def prepare_run_dir(cfg: RLConfig) -> int | None:
    """Check (and on --clean, wipe) the run directory; on --resume, return the step to resume at."""
    paths = RunPaths(cfg.output_dir)
    leftovers = [
        p
        for p in (paths.rollouts_root, paths.weights_root, paths.checkpoints_root)
        if p.is_dir() and any(p.iterdir())
    ]
    if cfg.resume:
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
        for s, d in step_dirs(paths.weights_root).items():
            if s > step:
                shutil.rmtree(d)
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
    return None
