"""``trainer`` console script: parse config, call the train loop (which sets up logging per rank)."""

from __future__ import annotations

from prime_rl.config import parse_config
from prime_rl.trainer.config import TrainerConfig


def main(argv: list[str] | None = None) -> None:
    config, _ = parse_config(TrainerConfig, argv)
    from prime_rl.trainer.train import train

    train(config)


if __name__ == "__main__":
    main()
