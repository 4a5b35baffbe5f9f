"""``python -m prime_rl.analysis`` / ``analyze-logs``: logs (or a run directory) in, bottleneck report out."""

from __future__ import annotations

import gc
import os

# the imports below make some 0.5M objects and no garbage cycles: their collections took 60 ms of each
# run (turned back on after them, for a program that imports this module; see the end of the block)
_GC_WAS_ON = gc.isenabled()
gc.disable()

# before numpy is imported: the analyzer does no linear algebra, and OpenBLAS's idle threads (one per
# core but one) took 3% of the CPU of a 3M-line analysis, beside it
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

try:
    # first, before polars and numpy: pydantic reads the thresholds' attribute docstrings from their
    # source, finding the module by a walk over every loaded one (inspect.getmodule), 10-17 ms of every
    # start with polars' modules loaded, 8 ms without
    from prime_rl.analysis.thresholds import Thresholds  # isort: skip

    import argparse
    import json
    import sys
    from datetime import datetime
    from pathlib import Path

    from prime_rl.analysis import stats as collection
    from prime_rl.analysis.analyze import analyze
    from prime_rl.analysis.compare import write_compare
    from prime_rl.analysis.log_files import discover
    from prime_rl.analysis.parser import ParseStats, scan_files
    from prime_rl.analysis.read_ahead import read_ahead
    from prime_rl.analysis.report import write_report
    from prime_rl.analysis.report_sections import verdict
    from prime_rl.analysis.stats import FIELD_KINDS, FIELDS, prepared
    from prime_rl.analysis.trace import left_out, write_trace
    from prime_rl.analysis.trainer_clock import TrainerClock, orchestrator_first
finally:  # an import that fails leaves the collector as it was too
    if _GC_WAS_ON:
        if not gc.get_freeze_count():  # a program that froze objects itself keeps them frozen
            # every tracked object, the imports' 90k among them, goes straight to the oldest
            # generation (freeze, then unfreeze, moves them there): the first collection after would
            # scan them all for no garbage (15-22 ms of every start); a full collection still does
            gc.freeze()
            gc.unfreeze()
        gc.enable()


def _arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="analyze_logs",
        description="Read the tagged timing lines of orchestrator, inference and trainer logs and say where the time goes. "
        "Writes SUMMARY.md, *_stats.txt, slowest_updates.txt, timeline.txt/.png and summary.json.",
    )
    parser.add_argument(
        "inputs",
        nargs="*",
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
        "--async-level",
        "--async_level",
        dest="async_level",
        type=int,
        default=None,
        help="the run's async_level, for the staleness warning (default: from <run>/configs/orchestrator.json); "
        "a run whose [gen] run.start line says its own async_level is judged by that, the one it ran with",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("RUN_A", "RUN_B"),
        help="compare two runs (run directories or log files): COMPARE.md with both runs' tables side by side",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"override a threshold ({', '.join(Thresholds.model_fields)}); listed in SUMMARY.md",
    )
    parser.add_argument(
        "--tmp-dir",
        "--tmp_dir",
        dest="tmp_dir",
        type=Path,
        default=None,
        help="where a long run's weight-update lines wait on disk for their join, in a directory of their own "
        "removed at the end (default: the output directory; at most about 7%% of the log's size). When writing there "
        "fails (a full disk), they are kept in memory instead",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also write OUT/trace.json, the run as a Chrome/Perfetto trace: every process on one time axis "
        "(generation, checkpoint waits, weight updates per server, server rpc, trainer compute, waits and "
        "publish; an offline collector's samples per server, failed ones apart); open it in https://ui.perfetto.dev. "
        f"A long run's trace holds its first and last {collection.SPANS_KEPT} spans of each kind and weight "
        f"updates ({collection.SAMPLES_KEPT} of a collector's samples)",
    )
    return parser


def _async_level(inputs: list[Path]) -> int | None:
    """The run's async_level from <run>/configs/orchestrator.json, when a run directory was given. A
    config that cannot be read, or holds no usable async_level, is named on stderr and left out (the
    staleness warning then needs ``--async-level``): the logs are still analysed."""
    async_level = None
    for p in inputs:
        cfg = Path(p) / "configs" / "orchestrator.json"
        if not cfg.is_file():
            continue
        try:
            value = json.loads(cfg.read_bytes()).get("async_level")
        except (OSError, ValueError, AttributeError) as e:  # unreadable, not JSON, not an object
            why = "not a JSON object" if isinstance(e, AttributeError) else f"{type(e).__name__}: {e}"
            print(f"analyze-logs: {cfg}: async_level not read ({why})", file=sys.stderr)
            continue
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            print(
                f"analyze-logs: {cfg}: async_level {value!r} is not a whole number >= 0; left out",
                file=sys.stderr,
            )
            continue
        async_level = value
    return async_level


def _files(parser: argparse.ArgumentParser, inputs: list[Path]) -> list[tuple[str, Path]]:
    """The log files of ``inputs`` (exits with a usage error when there are none)."""
    try:
        files = discover(inputs)
    except FileNotFoundError as e:
        parser.error(str(e))
    if not files:
        parser.error(f"no log files under {', '.join(map(str, inputs))}")
    return files


def _run(
    parser: argparse.ArgumentParser,
    files: list[tuple[str, Path]],
    inputs: list[Path],
    args: argparse.Namespace,
    thresholds: Thresholds,
    out: Path,
):
    """Analyse one run's logs ``files`` (found in ``inputs``); a long run's weight-update lines wait
    for their join on disk under ``args.tmp_dir`` or else ``out``."""
    async_level = args.async_level if args.async_level is not None else _async_level(inputs)
    stats = ParseStats()
    # two threads ahead of the collection: one parses, the next puts the trainer's logs on the
    # orchestrator's clock (read first for it) and reads each tag's fields
    scanned = scan_files(orchestrator_first(files), stats, FIELDS, FIELD_KINDS, thresholds.time_jump_s)
    batches = read_ahead(prepared(TrainerClock(stats).place(read_ahead(scanned))))
    spill_dir = args.tmp_dir or out
    try:
        spill_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.error(f"cannot make {spill_dir}: {e}")
    analysis = analyze(batches, stats, thresholds, async_level, spill_dir)
    if analysis.data.spill_failed:
        print(
            f"analyze-logs: the weight-update lines were kept in memory, not on disk: {analysis.data.spill_failed}",
            file=sys.stderr,
        )
    return analysis, stats


def cli() -> None:
    """The console script (``analyze-logs``, ``python -m prime_rl.analysis``): :func:`main`, then out
    without the interpreter's teardown, which frees the analysis's objects one by one (35 ms of a
    1M-line run) when the process is about to end anyway. By then every file is written and closed
    and the threads are done; an error leaves the usual way. A reader of what it prints that went
    away (``| head -1``) gets the status the interpreter gives then, 120, without a traceback: the
    report is written before it prints."""
    try:
        main()
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        os._exit(120)
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    # one analysis makes millions of small objects and no garbage cycles worth collecting: the
    # collector's passes over them would cost seconds on a long run (turned back on after)
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        _main(argv)
    finally:
        if gc_was_on:
            gc.enable()


def _make_out(parser: argparse.ArgumentParser, out: Path) -> None:
    """The output directory, made before the logs are read: a report that cannot be written is an
    error now, not after the analysis (also when ``--tmp-dir`` puts the spill elsewhere)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.error(f"cannot make the output directory {out}: {e}")


def _main(argv: list[str] | None) -> None:
    parser = _arg_parser()
    args = parser.parse_args(argv)
    if bad := [t for t in args.threshold if "=" not in t]:
        parser.error(f"--threshold {bad[0]!r}: expected NAME=VALUE")
    try:
        overrides = dict(t.split("=", 1) for t in args.threshold)
        # the defaults as they are: pydantic builds the checks' schema (deferred) only for overrides,
        # 40 ms of every start (a test holds the defaults to the checks)
        thresholds = Thresholds(**overrides) if overrides else Thresholds.model_construct()
    except (ValueError, TypeError) as e:
        parser.error(f"--threshold: {e}")
    out = args.out or Path("bottleneck_logs") / f"analysis_{datetime.now().strftime('%Y%m%d_%H%M%S')}"
    if args.compare:
        if args.inputs:
            parser.error("--compare takes the two runs; give no other inputs")
        if args.trace:
            parser.error("--trace writes one run's trace: run it on each run without --compare")
        runs = [(_files(parser, [p]), p) for p in args.compare]  # both found before either is read
        _make_out(parser, out)
        (a, _), (b, _) = (
            _run(parser, files, [p], args, thresholds, out / ab)
            for (files, p), ab in zip(runs, "ab", strict=True)
        )
        write_report(a, out / "a")
        write_report(b, out / "b")
        report = write_compare(a, b, (str(args.compare[0]), str(args.compare[1])), out)
        print(f"A: {verdict(a)}")  # written before printed
        print(f"B: {verdict(b)}")
        print(f"report: {report}")
        return
    if not args.inputs:
        parser.error("give log files or a run directory (or --compare RUN_A RUN_B)")
    files = _files(parser, args.inputs)
    _make_out(parser, out)
    analysis, stats = _run(parser, files, args.inputs, args, thresholds, out)
    write_report(analysis, out)
    if args.trace:
        trace = write_trace(analysis.data, out / "trace.json")
        print(f"trace: {trace} (open it in https://ui.perfetto.dev)")
        if dropped := left_out(analysis.data):
            counts = ", ".join(f"{n} {kind}" for kind, n in sorted(dropped.items()))
            samples, ours = collection.kept_of(collection.SAMPLE), set(dropped) & collection.COLLECTOR_KINDS
            kept = (  # a collector's samples and verifications keep fewer (as timeline.txt)
                f"{samples}"
                if set(dropped) <= collection.COLLECTOR_KINDS
                else f"{collection.SPANS_KEPT}" + (f" ({samples} of a collector's)" if ours else "")
            )
            print(f"  a long run: the trace holds the first and last {kept} of each kind; {counts} left out")
    if not stats.tagged:
        print(
            f"analyze-logs: no tagged timing line in {stats.lines} line(s) of {len(files)} file(s): are these the "
            "processes' logs?",
            file=sys.stderr,
        )
    print(  # the verdict SUMMARY.md gives
        f"{verdict(analysis)}\nreport: {out / 'SUMMARY.md'} ({stats.lines} lines, {stats.tagged} tagged, {stats.malformed} malformed, "
        f"{stats.seconds:.2f}s)"
    )


if __name__ == "__main__":
    cli()
