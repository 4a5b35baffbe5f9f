"""Entry points: ``collect-rollouts [merge|verify|diagnose] ...`` and ``verify-rollouts``.

Exit codes: 0 done; 2 bad configuration or input; 3 finished with failed samples (re-run the
same command to retry them); 130 interrupted (re-run the same command to resume); 1 otherwise,
e.g. an output that cannot be written (a full disk: free space and re-run the same command).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from loguru import logger

from prime_rl.collect import interrupt
from prime_rl.collect.config import (
    CollectConfig,
    DiagnoseConfig,
    MergeConfig,
    SourceConfig,
    VerifyFileConfig,
    ray_argv,
)
from prime_rl.collect.interrupt import handle_sigterm, run_async
from prime_rl.collect.progress import setup_collect_logging
from prime_rl.collect.store import OutputError, OutputWriteError, aggregates_path, sibling
from prime_rl.collect.tasks import InputError
from prime_rl.config import parse_config
from prime_rl.envs.base import EnvError

C = TypeVar("C", bound=SourceConfig)

USAGE = """usage: collect-rollouts [--input TASKS.jsonl --output OUT.jsonl ...]   collect (see --help)
       collect-rollouts merge --output MERGED.jsonl A.jsonl B.jsonl ...  combine shards
       collect-rollouts verify --input OUT.jsonl --output SCORED.jsonl --env NAME   deferred scoring
       collect-rollouts diagnose --input TASKS.jsonl --output OUT.jsonl ...  what bounds throughput"""


def _start(model: type[C], argv: Sequence[str]) -> C:
    """Parse the subcommand's config (exits 2 with the reason) and send logs to its log file."""
    cfg, _ = parse_config(model, argv)
    setup_collect_logging(cfg.log_file or sibling(cfg.output_jsonl_fpath, "_collect.log"))
    return cfg


def _print_json(title: str, data: dict, path: Path | None = None) -> None:
    print(json.dumps(data, indent=2))
    if path is not None:
        logger.info(f"{title} written to {path}")


def _run(coro_or_fn) -> int:
    handle_sigterm()  # SIGTERM ends the run like Ctrl-C
    try:
        code = coro_or_fn()
        interrupt.check()  # a SIGTERM after the last record's check, its KeyboardInterrupt dropped
        return code
    except KeyboardInterrupt:
        logger.warning(
            "interrupted: every finished sample is in the output; run the same command again to resume"
        )
        return 130
    except (InputError, OutputError, EnvError, FileNotFoundError, ValueError) as e:
        logger.error(f"error: {e}")
        return 2
    except OutputWriteError as e:  # a full disk: one line, nothing written before is lost
        logger.error(f"error: {e}")
        return 1
    except OSError as e:  # an output that is a directory, under a file, in a directory not writable
        if e.filename is None:  # not a path's error (a connection, a pipe): not bad input
            raise
        logger.opt(exception=e).debug("the error's traceback")
        logger.error(f"error: {e.filename}: {e.strerror or e}")
        return 2
    finally:
        interrupt.clear()


def run_collect(argv: Sequence[str]) -> int:
    from prime_rl.collect.runner import CollectError, collect

    cfg = _start(CollectConfig, ray_argv(list(argv)))

    def go() -> int:
        try:
            if cfg.ray.enabled:  # --ray [ADDRESS]: the requests go out from a Ray cluster's nodes
                from prime_rl.collect.ray_driver import ClusterError, collect_ray

                try:
                    result = run_async(collect_ray(cfg))
                except ClusterError as e:
                    logger.error(f"error: {e}")
                    return 1
            else:
                result = run_async(collect(cfg))
        except CollectError as e:
            logger.error(f"error: {e}")
            return 2
        logger.info(result.summary())
        _print_json("aggregate metrics", result.aggregates, aggregates_path(cfg.output_jsonl_fpath))
        if result.estimate is not None:
            logger.info("estimate for the whole file:")
            _print_json("estimate", result.estimate, sibling(cfg.output_jsonl_fpath, "_estimate.json"))
        return 3 if result.failed else 0

    return _run(go)


def run_merge(argv: Sequence[str]) -> int:
    from prime_rl.collect.merge import merge

    cfg = _start(MergeConfig, argv)

    def go() -> int:
        result = merge(cfg)
        _print_json("aggregate metrics", result.aggregates, aggregates_path(cfg.output_jsonl_fpath))
        return 0

    return _run(go)


def run_verify(argv: Sequence[str]) -> int:
    from prime_rl.collect.verify_file import verify_file

    cfg = _start(VerifyFileConfig, argv)

    def go() -> int:
        result = run_async(verify_file(cfg))
        logger.info(result.summary())
        _print_json("aggregate metrics", result.aggregates, aggregates_path(cfg.output_jsonl_fpath))
        return 0

    return _run(go)


def run_diagnose(argv: Sequence[str]) -> int:
    from prime_rl.collect.diagnose import diagnose, render

    cfg = _start(DiagnoseConfig, argv)

    def go() -> int:
        report = run_async(diagnose(cfg))
        print(render(report))
        return 0

    return _run(go)


SUBCOMMANDS = {
    "merge": run_merge,
    "verify": run_verify,
    "verify-rollouts": run_verify,
    "diagnose": run_diagnose,
}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in SUBCOMMANDS:
        raise SystemExit(SUBCOMMANDS[args[0]](args[1:]))
    if args and not args[0].startswith("-"):
        print(f"error: unknown subcommand {args[0]!r}\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    if not args:
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(run_collect(args))


def verify_main() -> None:
    """``verify-rollouts``: the same as ``collect-rollouts verify``."""
    raise SystemExit(run_verify(sys.argv[1:]))


if __name__ == "__main__":
    main()
