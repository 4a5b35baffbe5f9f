"""``python -m prime_rl.analysis`` / ``analyze-logs``: logs (or a run directory) in, bottleneck report out."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

from prime_rl.analysis.analyze import Thresholds, collect, diagnose
from prime_rl.analysis.parser import ParseStats, discover, parse_files
from prime_rl.analysis.report import write_report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="analyze_logs",
        description="Read the tagged timing lines of orchestrator, inference and trainer logs and say where the time goes. "
        "Writes SUMMARY.md, *_stats.txt, slowest_updates.txt, timeline.txt/.png and summary.json.",
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        type=Path,
        help="orchestrator.log [inference.log] [trainer logs ...], .gz or rotated parts, or a run directory",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default bottleneck_logs/analysis_<timestamp>)",
    )
    parser.add_argument(
        "--async_level",
        type=int,
        default=None,
        help="the run's async_level, for the staleness warning (default: from <run>/configs/orchestrator.json)",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"override a threshold ({', '.join(Thresholds.model_fields)}); listed in SUMMARY.md",
    )
    args = parser.parse_args(argv)
    try:
        overrides = dict(t.split("=", 1) for t in args.threshold)
        thresholds = Thresholds(**overrides)
    except (ValueError, TypeError) as e:
        parser.error(f"--threshold: {e}")
    try:
        files = discover(args.inputs)
    except FileNotFoundError as e:
        parser.error(str(e))
    if not files:
        parser.error(f"no log files under {', '.join(map(str, args.inputs))}")
    async_level = args.async_level
    if async_level is None:
        for p in args.inputs:
            cfg = Path(p) / "configs" / "orchestrator.json"
            if cfg.is_file():
                async_level = json.loads(cfg.read_text()).get("async_level")
    stats = ParseStats()
    analysis = diagnose(collect(parse_files(files, stats), stats, thresholds, async_level))
    out = args.out or Path("bottleneck_logs") / f"analysis_{datetime.now().strftime('%Y%m%d_%H%M%S')}"
    write_report(analysis, out)
    head = analysis.primary["title"] if analysis.primary else "no bottleneck found"
    print(
        f"{head}\nreport: {out / 'SUMMARY.md'} ({stats.lines} lines, {stats.tagged} tagged, {stats.malformed} malformed, "
        f"{stats.seconds:.2f}s)"
    )


if __name__ == "__main__":
    sys.exit(main())
