"""``orchestrator`` console script: parse config, set up logging, run the loop."""

from __future__ import annotations

import asyncio
import sys

from loguru import logger

from prime_rl.config import parse_config
from prime_rl.lifecycle import watch_launcher
from prime_rl.logging import setup_logging
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.paths import RunPaths


def main(argv: list[str] | None = None) -> None:
    watch_launcher()  # started by rl: this process group ends when the launcher does
    config, _ = parse_config(OrchestratorConfig, argv)
    paths = RunPaths(config.output_dir)
    setup_logging(paths.log_file("orchestrator"), level=config.log_level)
    config.write_resolved(paths.config_file("orchestrator"))
    from prime_rl.envs.base import EnvError
    from prime_rl.orchestrator.loop import Orchestrator, OrchestratorError
    from prime_rl.paths import CheckpointError

    try:
        asyncio.run(Orchestrator(config).run())
    except (OrchestratorError, EnvError, CheckpointError) as e:
        logger.error(f"orchestrator: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
