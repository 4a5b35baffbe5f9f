"""``inference`` console script: parse config, set up logging, serve."""

from __future__ import annotations

import sys

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
    config.write_resolved(paths.config_file("inference"))

    from prime_rl.inference.server import parse_vllm_args, prepare_environment, serve, vllm_argv

    prepare_environment()
    try:
        args = parse_vllm_args(vllm_argv(config, passthrough))
    except SystemExit as e:  # argparse already printed which vLLM argument is wrong
        sys.exit(e.code if e.code else 2)
    intercept_stdlib(("vllm",), config.log_level)  # vLLM installed its own handlers on import

    import uvloop

    uvloop.run(serve(config, args))


if __name__ == "__main__":
    main()
