"""``trainer`` console script: parse config, call the train loop (which sets up logging per rank)."""

from __future__ import annotations

import sys

from prime_rl.config import parse_config
from prime_rl.lifecycle import watch_launcher
from prime_rl.trainer.config import TrainerConfig


def command(nproc: int, args: list[str]) -> list[str]:
    """The trainer's command line: one process, or torchrun with ``nproc`` ranks on this host."""
    if nproc == 1:
        return [sys.executable, "-m", "prime_rl.trainer.main", *args]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "prime_rl.trainer.main",
        *args,
    ]


def main(argv: list[str] | None = None) -> None:
    watch_launcher()  # started by rl: this process group ends when the launcher does
    config, _ = parse_config(TrainerConfig, argv)
    from prime_rl.trainer.train import train

    train(config)


if __name__ == "__main__":
    main()
