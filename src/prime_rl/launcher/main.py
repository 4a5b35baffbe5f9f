"""``rl``: one config for inference + orchestrator + trainer, validated once, then supervised.

The shared keys (``model``, ``output_dir``, ``max_steps``, ``async_level``, ``seq_len``, ...) are
set once; ``[inference]``, ``[orchestrator]`` and ``[trainer]`` hold each process's own keys, typed
(``rl --help`` lists them all; :mod:`prime_rl.launcher.config`). The launcher checks the run
directory (:mod:`prime_rl.launcher.rundir`), writes the three configs to ``<output_dir>/configs/``,
starts the processes (the trainer under torchrun when ``trainer_nproc > 1``) and supervises them
(:mod:`prime_rl.launcher.supervise`). When one dies, the others are stopped, and it exits 1
naming the process and printing the end of its log. Ctrl-C stops everything (130); a bad config,
a missing model directory (:func:`~prime_rl.launcher.config.check_models`) or ``--resume --clean``
exits 2; ``--resume`` on a finished run says so and exits 0.
"""

from __future__ import annotations

import sys

from prime_rl.config import ConfigError, parse_config
from prime_rl.launcher.config import RLConfig, check_models
from prime_rl.launcher.supervise import launch
from prime_rl.logging import setup_logging
from prime_rl.paths import RunPaths


def main(argv: list[str] | None = None) -> None:
    cfg, _ = parse_config(RLConfig, argv)
    try:
        check_models(cfg)  # before anything, even the run directory's log, is made
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    setup_logging(RunPaths(cfg.output_dir).log_file("rl"))
    try:
        code = launch(cfg)
    except ConfigError as e:  # the run directory: an earlier run without --resume/--clean, no checkpoint
        print(f"error: {e}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
