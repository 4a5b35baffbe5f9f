"""The bottleneck analyzer on synthetic logs: diagnosis per scenario, statistics, robustness."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import numpy as np
import pytest
from tests.support.synthetic_logs import SCENARIOS, make_run

from prime_rl.analysis.__main__ import main as analyze_main


def analyze(paths, out, *extra):
    analyze_main([*map(str, paths), "--out", str(out), *extra])
    return json.loads((out / "summary.json").read_text()), (out / "SUMMARY.md").read_text()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_gets_its_diagnosis(tmp_path, scenario):
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


def test_front_end_saturation_names_the_numbers_and_the_fix(tmp_path):
    files = make_run("frontend_queue_saturation", seed=2).write(tmp_path / "logs")
    summary, md = analyze(files.values(), tmp_path / "out")
    assert "Front-end queue saturation" in md and "queue_ms mean" in md and "vs rpc_ms mean" in md
    assert "client.send -> server.recv median" in summary["primary"]["evidence"]
    assert any("dedicated admin client" in s for s in summary["primary"]["next"])


def test_statistics_match_an_independent_computation(tmp_path):
    run = make_run("healthy", steps=40, seed=3)
    files = run.write(tmp_path / "logs")
    summary, _ = analyze(files.values(), tmp_path / "out")
    for key in ("queue_ms", "rpc_ms", "ckpt_wait_ms", "gen_dur_ms", "write_ms", "verify_dur_ms", "staleness"):
        vals = run.values[key]
        st = summary["stats"][key]
        assert st["count"] == len(vals), key
        assert st["mean"] == pytest.approx(statistics.fmean(vals), abs=1e-6), key
        assert st["stddev"] == pytest.approx(statistics.stdev(vals), abs=1e-6), key
        assert st["min"] == min(vals) and st["max"] == max(vals)
        for q in (50, 95, 99):
            assert st[f"p{q}"] == pytest.approx(float(np.percentile(vals, q)), abs=1e-6), (key, q)
    text = (tmp_path / "out" / "queue_ms_stats.txt").read_text()
    assert f"count:   {len(run.values['queue_ms'])}" in text and "p99:" in text


def test_empty_garbage_cut_and_gzip_logs_never_crash(tmp_path):
    run = make_run("frontend_queue_saturation", seed=4)
    logs = tmp_path / "logs"
    files = run.write(logs, gz=True)
    garbage = logs / "garbage.log"
    garbage.write_bytes(
        b"\x00\xff random bytes\n[weights][abc def] client.done wall_ms=\n[gen]\n[ckpt] =3\nno tags here\n"
        b"2026-01-01 12:00:00.000 | INFO    | [weights][t9999] client.done wall_ms=12"
    )  # cut mid-line, no newline
    empty = logs / "empty.log"
    empty.write_text("")
    summary, md = analyze([*files.values(), garbage, empty], tmp_path / "out")
    assert summary["primary"]["kind"] == "frontend_queue_saturation"
    assert summary["parse"]["malformed"] >= 3 and "malformed" in md
    assert any(u["tid"] == "t9999" for u in summary["updates"])  # the cut line still gave what it had

    summary, md = analyze([empty], tmp_path / "out2")
    assert summary["primary"] is None and "no [weights] lines" in md


def test_missing_server_log_still_diagnoses_with_a_warning(tmp_path):
    files = make_run("frontend_queue_saturation", seed=5).write(tmp_path / "logs")
    summary, md = analyze([files["orchestrator"]], tmp_path / "out")
    assert summary["primary"]["kind"] == "frontend_queue_saturation"
    assert "pass the inference log too" in md


def test_staleness_and_truncation_warnings_and_thresholds(tmp_path):
    files = make_run("generation_bound", seed=6, async_level=2).write(tmp_path / "logs")
    summary, md = analyze(
        files.values(), tmp_path / "out", "--async_level", "1", "--threshold", "trunc_pct_warn=20"
    )
    assert any("above async_level 1" in w for w in summary["warnings"])
    assert any("trunc_pct" in w for w in summary["warnings"])
    assert "`trunc_pct_warn` = 20.0" in md
    summary, _ = analyze(files.values(), tmp_path / "out2", "--threshold", "train_wait_share=0.99")
    assert summary["primary"] is None or summary["primary"]["kind"] != "generation_bound"


def test_run_directory_and_shell_wrapper(tmp_path):
    run_dir = tmp_path / "run"
    make_run("slow_reload", seed=7).write(run_dir / "logs")
    (run_dir / "configs").mkdir()
    (run_dir / "configs" / "orchestrator.json").write_text(json.dumps({"async_level": 0}))
    out = tmp_path / "out"
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bottleneck_logs" / "analyze_logs.sh"
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


def test_bad_arguments_are_clear_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        analyze_main([str(tmp_path / "missing.log")])
    assert "no such log file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        analyze_main([str(tmp_path), "--threshold", "nonsense"])


def test_trace_ids_repeated_across_appended_runs_are_joined_per_run(tmp_path):
    """Logs appended over two runs reuse trace ids: each client.send pairs with its own server lines."""
    first = make_run("frontend_queue_saturation", steps=6, seed=8)
    second = make_run("healthy", steps=6, seed=9, start_offset_s=3600.0)
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("orchestrator", "inference"):
        lines = getattr(first, name) + getattr(second, name)
        (logs / f"{name}.log").write_text("\n".join(lines) + "\n")
    summary, _ = analyze([logs / "orchestrator.log", logs / "inference.log"], tmp_path / "out")
    updates = summary["updates"]
    assert len(updates) == len(first.values["queue_ms"]) + len(second.values["queue_ms"])
    gaps = [u["send_to_recv_ms"] for u in updates]
    assert all(g is not None and 0 <= g < 60_000 for g in gaps), (
        gaps
    )  # never across the hour between the runs
