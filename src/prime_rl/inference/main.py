"""``inference`` console script: parse config, set up logging, serve."""

from __future__ import annotations

import os
import sys

from loguru import logger

from prime_rl.config import parse_config
from prime_rl.inference.config import InferenceConfig
from prime_rl.lifecycle import watch_launcher
from prime_rl.logging import intercept_stdlib, setup_logging
from prime_rl.paths import RunPaths


def main(argv: list[str] | None = None) -> None:
    watch_launcher()  # started by rl: this process group ends when the launcher does
    config, passthrough = parse_config(InferenceConfig, argv)
    paths = RunPaths(config.output_dir)
    setup_logging(paths.log_file("inference"), level=config.log_level)

    from prime_rl.inference import server
    from prime_rl.inference.worker import RELOAD_ENV

    server.prepare_environment()
    os.environ[RELOAD_ENV] = config.weight_reload  # the workers vLLM spawns read it at start
    try:
        args = server.parse_vllm_args(server.vllm_argv(config, passthrough))
    except SystemExit as e:  # argparse already printed which vLLM argument is wrong
        sys.exit(e.code if e.code else 2)
    # vLLM binds what it parsed: --host/--port passed through to it win over ours
    if problem := server.startup_problem(config, args):
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    if (args.host, args.port) != (config.host, config.port):
        logger.warning(
            f"inference: vLLM arguments set the address: serving on host {args.host!r} port {args.port} "
            f"(not {config.host!r} port {config.port})"
        )
        config = config.model_copy(update={"host": args.host or "", "port": args.port})
    config.write_resolved(paths.config_file("inference"))
    intercept_stdlib(("vllm",), config.log_level)  # vLLM installed its own handlers on import

    import uvloop

    uvloop.run(server.serve(config, args))


if __name__ == "__main__":
    main()
