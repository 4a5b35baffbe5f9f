"""``rl bundle OUTPUT_DIR``: one tarball of a run's logs and resolved configs, for the analyzer.

The deployment guide's step "collect logs after the run" as one command: it writes
``bottleneck_logs_<YYYYmmdd_HHMMSS>.tar.gz`` holding ``logs/`` (every process's log, the trainer's
ranks, the launcher's copies), ``configs/`` (the resolved configs, secrets masked) and
``metrics.jsonl``, under one top folder named like the tarball. Extracted, that folder is a run
directory as the analyzer reads one (``analyze_logs.sh bottleneck_logs_<ts>/``), with the run's
``async_level`` in ``configs/orchestrator.json``. Logs written elsewhere (``inference ... | tee
~/logs/inference.log``) are added with ``--extra FILE`` (under ``logs/extra/``). Weights, rollouts
and checkpoints stay out.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
from datetime import datetime
from pathlib import Path

from prime_rl.paths import RunPaths


class BundleError(ValueError):
    """The run directory has nothing to bundle, or an extra file is missing."""


def bundle_run(
    output_dir: Path, dest_dir: Path | None = None, extra: list[Path] = (), now: datetime | None = None
) -> Path:
    """Write the tarball into ``dest_dir`` (default: ``output_dir``) and return its path."""
    output_dir = Path(output_dir)
    paths = RunPaths(output_dir)
    if not paths.logs_dir.is_dir():
        raise BundleError(f"{output_dir}: no logs/ directory (is it a run's --output_dir?)")
    for f in extra:
        if not Path(f).is_file():
            raise BundleError(f"--extra {f}: no such file")
    stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M%S")
    name = f"bottleneck_logs_{stamp}"
    dest_dir = Path(dest_dir) if dest_dir is not None else output_dir
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / f"{name}.tar.gz"
    tmp = target.with_name(f".{target.name}.tmp")
    members = [p for p in sorted(paths.logs_dir.rglob("*")) if p.is_file()]
    if paths.configs_dir.is_dir():
        members += [p for p in sorted(paths.configs_dir.rglob("*")) if p.is_file()]
    if paths.metrics_file.is_file():
        members.append(paths.metrics_file)
    with tarfile.open(tmp, "w:gz") as tar:
        for p in members:
            tar.add(p, arcname=f"{name}/{p.relative_to(output_dir).as_posix()}", recursive=False)
        for f in extra:
            tar.add(f, arcname=f"{name}/logs/extra/{Path(f).name}", recursive=False)
    tmp.replace(target)
    return target


def main(argv: list[str]) -> int:
    """``rl bundle OUTPUT_DIR [--out DIR] [--extra FILE ...]``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="rl bundle",
        description="Write bottleneck_logs_<timestamp>.tar.gz with a run's logs, resolved configs and "
        "metrics.jsonl. Extract it and run ./bottleneck_logs/analyze_logs.sh on the folder inside.",
    )
    parser.add_argument("output_dir", type=Path, help="the run directory (--output_dir of the run)")
    parser.add_argument(
        "--out", type=Path, default=None, help="where to write the tarball (default: OUTPUT_DIR)"
    )
    parser.add_argument(
        "--extra", type=Path, action="append", default=[], help="another log file to include (repeatable)"
    )
    args = parser.parse_args(argv)
    try:
        target = bundle_run(args.output_dir, args.out, args.extra)
    except (BundleError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(target)
    return 0
