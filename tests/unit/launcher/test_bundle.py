"""``rl bundle``: a run's logs and configs in one tarball that the analyzer reads once extracted."""

from __future__ import annotations

import json
import tarfile
from datetime import datetime
from pathlib import Path

import pytest
from tests.support.synthetic_logs import make_run

from prime_rl.analysis.__main__ import main as analyze
from prime_rl.launcher.bundle import BundleError, bundle_run
from prime_rl.launcher.main import main as rl_main


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    files = make_run("slow_reload", seed=3).write(run / "logs")
    (run / "logs" / "trainer").mkdir()
    files["trainer"].rename(run / "logs" / "trainer" / "rank_0.log")
    (run / "logs" / "orchestrator.stdout.log").write_text("console copy\n")
    (run / "configs").mkdir()
    (run / "configs" / "orchestrator.json").write_text(json.dumps({"async_level": 1}))
    (run / "configs" / "inference.json").write_text(json.dumps({"admin_token": "**********"}))
    (run / "metrics.jsonl").write_text(json.dumps({"process": "trainer", "step": 0}) + "\n")
    (run / "weights" / "step_1").mkdir(parents=True)
    (run / "weights" / "step_1" / "model.safetensors").write_bytes(b"x" * 100)
    (run / ".rl.lock").write_text("pid=1\n")
    return run


def test_bundle_holds_every_log_the_configs_and_metrics_and_nothing_else(run_dir, tmp_path):
    target = bundle_run(run_dir, tmp_path / "out", now=datetime(2026, 2, 3, 4, 5, 6))
    assert target == tmp_path / "out" / "bottleneck_logs_20260203_040506.tar.gz"
    with tarfile.open(target) as tar:
        names = sorted(m.name for m in tar.getmembers())
    top = "bottleneck_logs_20260203_040506"
    assert names == sorted(
        f"{top}/{p}"
        for p in (
            "logs/orchestrator.log",
            "logs/inference.log",
            "logs/trainer/rank_0.log",
            "logs/orchestrator.stdout.log",
            "configs/orchestrator.json",
            "configs/inference.json",
            "metrics.jsonl",
        )
    )


def test_the_extracted_bundle_gives_the_analyzer_the_same_report_as_the_run_directory(run_dir, tmp_path):
    """The analyzer takes a run directory, not a tarball: the bundle is extracted first, as the
    deployment guide does on the laptop."""
    target = bundle_run(run_dir, tmp_path / "out")
    with tarfile.open(target) as tar:
        tar.extractall(tmp_path / "laptop", filter="data")
    extracted = tmp_path / "laptop" / target.name.removesuffix(".tar.gz")

    analyze([str(extracted), "--out", str(tmp_path / "from_bundle")])
    analyze([str(run_dir), "--out", str(tmp_path / "from_run")])
    from_bundle = json.loads((tmp_path / "from_bundle" / "summary.json").read_text())
    from_run = json.loads((tmp_path / "from_run" / "summary.json").read_text())
    assert from_bundle["primary"]["kind"] == "slow_reload"
    assert from_bundle["async_level"] == 1  # read from the bundled configs/orchestrator.json
    assert from_bundle["stats"] == from_run["stats"]
    same_files = [Path(f).relative_to(extracted) for f in from_bundle["parse"]["files"]]
    assert same_files == [Path(f).relative_to(run_dir) for f in from_run["parse"]["files"]]
    assert from_bundle["parse"]["tagged"] == from_run["parse"]["tagged"] > 200
    assert from_bundle["parse"]["malformed"] == from_run["parse"]["malformed"] == 0


def test_extra_logs_go_under_logs_extra(run_dir, tmp_path):
    tee = tmp_path / "inference_20260101.log"
    tee.write_text("a log written by tee\n")
    target = bundle_run(run_dir, extra=[tee])
    assert target.parent == run_dir
    with tarfile.open(target) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("logs/extra/inference_20260101.log"))
        assert tar.extractfile(member).read() == b"a log written by tee\n"


def test_rl_bundle_subcommand_prints_the_tarball_and_refuses_a_directory_without_logs(
    run_dir, tmp_path, capsys
):
    with pytest.raises(SystemExit) as e:
        rl_main(["bundle", str(run_dir), "--out", str(tmp_path / "b")])
    assert e.value.code == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith(str(tmp_path / "b" / "bottleneck_logs_")) and printed.endswith(".tar.gz")
    assert tarfile.is_tarfile(printed)

    with pytest.raises(SystemExit) as e:
        rl_main(["bundle", str(tmp_path / "nothing")])
    assert e.value.code == 2
    assert "no logs/ directory" in capsys.readouterr().err
    with pytest.raises(BundleError, match="--extra .*missing.log: no such file"):
        bundle_run(run_dir, extra=[tmp_path / "missing.log"])


def test_analyze_logs_sh_reads_the_bundle_directly_and_names_a_bad_one(run_dir, tmp_path):
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[3] / "bottleneck_logs" / "analyze_logs.sh"
    target = bundle_run(run_dir, tmp_path / "out")
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        ["bash", str(script), str(target), "--out", str(tmp_path / "direct")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "direct" / "summary.json").read_text())
    assert summary["primary"]["kind"] == "slow_reload" and summary["async_level"] == 1
    assert summary["parse"]["tagged"] > 200
    bad = tmp_path / "broken.tar.gz"
    bad.write_bytes(b"not a tarball")
    done = subprocess.run(["bash", str(script), str(bad)], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "broken.tar.gz: not a readable tar.gz bundle" in done.stderr
