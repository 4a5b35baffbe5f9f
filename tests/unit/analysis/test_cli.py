"""The analyzer's command line on synthetic logs: one diagnosis per scenario, run directories, bad arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.synthetic_logs import SCENARIOS, make_run

from prime_rl.analysis.__main__ import main as analyze_main


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_gets_its_diagnosis(tmp_path, scenario, analyze):
    files = make_run(scenario, seed=1).write(tmp_path / "logs")
    summary, md = analyze(files.values(), tmp_path / "out", "--async_level", "1")
    if scenario == "healthy":
        assert summary["primary"] is None, summary["findings"]
        assert "No bottleneck found" in md and "queue_ms median" in md
    else:
        assert summary["primary"]["kind"] == scenario, summary["findings"]
        assert summary["primary"]["title"] in md and "## Next steps" in md
    for name in (
        "queue_ms_stats.txt",
        "rpc_ms_stats.txt",
        "ckpt_wait_stats.txt",
        "write_ms_stats.txt",
        "gen_dur_ms_stats.txt",
        "trunc_pct_stats.txt",
        "staleness_stats.txt",
        "verify_dur_ms_stats.txt",
        "slowest_updates.txt",
        "timeline.txt",
        "timeline.png",
        "summary.json",
    ):
        assert (tmp_path / "out" / name).is_file(), name


def test_run_directory_and_shell_wrapper(tmp_path):
    run_dir = tmp_path / "run"
    make_run("slow_reload", seed=7).write(run_dir / "logs")
    (run_dir / "configs").mkdir()
    (run_dir / "configs" / "orchestrator.json").write_text(json.dumps({"async_level": 0}))
    out = tmp_path / "out"
    script = Path(__file__).resolve().parents[3] / "bottleneck_logs" / "analyze_logs.sh"
    done = subprocess.run(
        ["bash", str(script), str(run_dir), "--out", str(out)],
        capture_output=True,
        text=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Slow engine reload" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["async_level"] == 0 and any("above async_level 0" in w for w in summary["warnings"])


def test_the_command_leaves_without_teardown_once_its_output_is_out(tmp_path):
    """The console script ends with os._exit once the report is written (the interpreter's teardown
    of a long run's objects is skipped): what it printed still reaches a pipe, every file is whole,
    an error still exits 2, and a reader that went away gets the interpreter's own status, 120."""
    make_run("slow_reload", seed=7).write(tmp_path / "logs")
    run = [sys.executable, "-m", "prime_rl.analysis", str(tmp_path / "logs"), "--out", str(tmp_path / "out")]
    done = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Slow engine reload") and "report: " in done.stdout
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["primary"]["kind"] == "slow_reload"
    bad = subprocess.run([*run, "--threshold", "x"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "expected NAME=VALUE" in bad.stderr
    at_exit = (  # an atexit handler runs in the teardown: it does not here
        "import atexit, sys; atexit.register(lambda: print('teardown ran', file=sys.stderr)); "
        f"sys.argv = ['analyze-logs', {str(tmp_path / 'logs')!r}, '--out', {str(tmp_path / 'out2')!r}]; "
        "from prime_rl.analysis.__main__ import cli; cli()"
    )
    skipped = subprocess.run([sys.executable, "-c", at_exit], capture_output=True, text=True, timeout=120)
    assert skipped.returncode == 0 and "report: " in skipped.stdout and "teardown ran" not in skipped.stderr
    r, w = os.pipe()
    os.close(r)  # nobody reads what it prints
    with os.fdopen(w, "w") as closed:
        gone = subprocess.run(run, stdout=closed, stderr=subprocess.PIPE, text=True, timeout=120)
    assert gone.returncode == 120 and "Traceback" not in gone.stderr


def test_bad_arguments_are_clear_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        analyze_main([str(tmp_path / "missing.log")])
    assert "no such log file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        analyze_main([str(tmp_path), "--threshold", "nonsense"])


def test_the_command_prints_the_verdict_summary_md_gives(tmp_path, capsys):
    """A file without a tagged line: SUMMARY.md says there is nothing to analyse, and the command
    printed "no bottleneck found" (a healthy run's verdict) on stdout. It prints SUMMARY.md's
    verdict now, for such input and for a healthy run."""
    (tmp_path / "orchestrator.log").write_text("hello\nworld\n")
    analyze_main([str(tmp_path / "orchestrator.log"), "--out", str(tmp_path / "out")])
    first = capsys.readouterr().out.splitlines()[0]
    said = "Nothing to analyse: none of the 2 line(s) of the 1 file(s) given is a tagged timing line"
    assert first == said and f"**{said}.**" in (tmp_path / "out" / "SUMMARY.md").read_text()
    files = make_run("healthy", seed=1).write(tmp_path / "healthy")
    analyze_main([*map(str, files.values()), "--out", str(tmp_path / "out2")])
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "No bottleneck found"
    assert f"**{first}: no threshold is crossed" in (tmp_path / "out2" / "SUMMARY.md").read_text()


def test_async_level_is_taken_with_a_hyphen_or_an_underscore():
    from prime_rl.analysis.__main__ import _arg_parser

    for flag in ("--async-level", "--async_level"):
        assert _arg_parser().parse_args(["run", flag, "2"]).async_level == 2
    assert "--async-level" in _arg_parser().format_help()


@pytest.mark.parametrize("on", [True, False])
def test_the_analyzers_imports_run_without_collections_and_leave_the_collector_as_it_was(on):
    """The imports make some 0.5M objects and no garbage cycles: their 130 collections took 60 ms
    of each run. Left: compiling a module not compiled before, and the one collection the
    collector makes when it is turned back on, which finds the young generations empty: the
    imports' objects went to the oldest (scanning them there took 15 ms of every start). A program
    that imports the module finds the collector as it had it, also when one of the imports fails."""
    code = (
        "import gc, sys\n"
        f"{'' if on else 'gc.disable()'}\n"
        "seen = []\n"
        "gc.callbacks.append(lambda phase, info: seen.append(phase))\n"
        "import prime_rl.analysis.__main__\n"
        "young = len(gc.get_objects(0)) + len(gc.get_objects(1))\n"
        "print(gc.isenabled(), len(seen) // 2, young)\n"  # a start and a stop each
        "del sys.modules['prime_rl.analysis.__main__']\n"
        "sys.modules['prime_rl.analysis.trace'] = None  # the last import fails\n"
        "try:\n"
        "    import prime_rl.analysis.__main__\n"
        "except ImportError:\n"
        "    print(gc.isenabled())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    enabled, collections, young, after_failure = done.stdout.split()
    assert enabled == str(on) and int(collections) <= (2 if on else 0)
    assert not on or int(young) < 5000, young  # without the move: some 90k, scanned at the first collection
    assert after_failure == str(on)


def test_the_analyzer_starts_numpy_without_blas_threads_unless_told():
    """OpenBLAS's idle threads took 3% of a long analysis's CPU on two cores: the analyzer starts
    as many threads as with OPENBLAS_NUM_THREADS=1 set beforehand; a value the user set is kept."""
    import os

    code = (
        "import os, prime_rl.analysis.__main__; "
        "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))"
    )

    def started(blas: str | None) -> list[str]:
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        env.update({"OPENBLAS_NUM_THREADS": blas} if blas else {})
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.split()

    assert started(None) == started("1")
    assert started("2")[0] == "2"


def test_a_program_that_froze_objects_finds_them_frozen_after_the_import():
    """The import moves the objects it made to the oldest generation with gc.freeze and unfreeze,
    which would also thaw what the importing program froze (a server that froze before forking);
    it leaves the collector alone then."""
    code = (
        "import gc\n"
        "kept = [[] for _ in range(1000)]\n"
        "gc.freeze()\n"
        "frozen = gc.get_freeze_count()\n"
        "import prime_rl.analysis.__main__\n"
        "print(frozen, gc.get_freeze_count())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = map(int, done.stdout.split())
    assert before > 1000 and after > before // 2  # thawed: 0 (a few frozen objects are freed meanwhile)


def test_compare_writes_its_report_before_it_prints(tmp_path):
    """With unbuffered output and a reader that went away, the first print of --compare raised
    before COMPARE.md was written."""
    for name, scenario in (("a", "healthy"), ("b", "slow_reload")):
        make_run(scenario, seed=3).write(tmp_path / name / "logs")
    run = [
        sys.executable,
        "-u",
        "-m",
        "prime_rl.analysis",
        "--compare",
        str(tmp_path / "a"),
        str(tmp_path / "b"),
    ]
    r, w = os.pipe()
    os.close(r)
    with os.fdopen(w, "w") as closed:
        done = subprocess.run(
            [*run, "--out", str(tmp_path / "out")],
            stdout=closed,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 120 and "Traceback" not in done.stderr
    assert (tmp_path / "out" / "COMPARE.md").is_file()
