"""``rl``: one config for inference + orchestrator + trainer, validated once, then supervised.

The shared keys (``model``, ``output_dir``, ``max_steps``, ``async_level``, ``seq_len``, ...) are
set once; ``[inference]``, ``[orchestrator]`` and ``[trainer]`` hold each process's own keys, typed
(``rl --help`` lists them all; :mod:`prime_rl.launcher.config`). The launcher checks the run
directory (:mod:`prime_rl.launcher.rundir`), writes the three configs to ``<output_dir>/configs/``,
starts the processes (the trainer under torchrun when ``trainer_nproc > 1``) and supervises them
(:mod:`prime_rl.launcher.supervise`). When one dies or cannot be started, the others are stopped,
and it exits 1 naming the process, the error it ended with and the end of its log. The processes
die with the launcher, even one killed with SIGKILL (:mod:`prime_rl.lifecycle`). Ctrl-C stops
everything (130); a bad config, a missing model directory
(:func:`~prime_rl.launcher.config.check_models`), ``--resume --clean``, a run directory another
launcher holds (``<output_dir>/.rl.lock``, naming its PID) or an inference port in use exits 2 with
one line; ``--resume`` on a finished run says so and exits 0.

``rl --print-commands`` prints the three commands instead of running them
(:mod:`prime_rl.launcher.commands`); ``rl bundle OUTPUT_DIR`` packs a run's logs and configs into
``bottleneck_logs_<timestamp>.tar.gz`` for the analyzer (:mod:`prime_rl.launcher.bundle`).
"""

from __future__ import annotations

import sys

from prime_rl.config import ConfigError, parse_config
from prime_rl.launcher import bundle
from prime_rl.launcher.commands import render_commands
from prime_rl.launcher.config import RLConfig, check_models
from prime_rl.launcher.rundir import lock_run_dir
from prime_rl.launcher.supervise import launch
from prime_rl.logging import setup_logging
from prime_rl.paths import RunPaths


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["bundle"]:
        sys.exit(bundle.main(args[1:]))
    cfg, _ = parse_config(RLConfig, args)
    try:
        check_models(cfg)  # before anything, even the run directory's log, is made
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if cfg.print_commands:
        print(render_commands(cfg), end="")
        sys.exit(0)
    try:
        # before the log file: a refused second launcher writes nothing into the running run's logs
        with lock_run_dir(cfg.output_dir) as lock_fd:
            setup_logging(RunPaths(cfg.output_dir).log_file("rl"))
            code = launch(cfg, lock_fd)
    except ConfigError as e:  # the run directory (in use; an earlier run without --resume/--clean;
        # no checkpoint) or the inference port in use
        print(f"error: {e}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
