"""``trainer`` console script: parse config, call the train loop (which sets up logging per rank)."""

from __future__ import annotations

import sys

from prime_rl.config import parse_config
from prime_rl.lifecycle import watch_launcher
from prime_rl.trainer.config import TrainerConfig


def command(
    nproc: int,
    args: list[str],
    nnodes: int = 1,
    node_rank: int = 0,
    master: tuple[str, int] | None = None,
) -> list[str]:
    """The trainer's command line: one process, torchrun with ``nproc`` ranks on this host, or
    this host's part of a ``nnodes``-node job (static rendezvous at ``master`` = (address, port),
    node 0's address; every node runs the same command with its own ``node_rank``, and all of
    them see the run directory at the same path)."""
    if nnodes > 1:
        if master is None:
            raise ValueError("a multi-node trainer needs the master address and port (node 0's)")
        launch = [
            f"--nnodes={nnodes}",
            f"--node-rank={node_rank}",
            f"--master-addr={master[0]}",
            f"--master-port={master[1]}",
        ]
    elif nproc == 1:
        return [sys.executable, "-m", "prime_rl.trainer.main", *args]
    else:
        launch = ["--standalone"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *launch,
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
