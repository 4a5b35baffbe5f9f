"""The ``rl`` entry point: what is refused (exit 2) or found done (exit 0) before anything starts:
also a run directory another launcher holds and an inference port in use, each in one line."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from loguru import logger

import prime_rl.launcher.supervise as supervise
from prime_rl.launcher.main import main
from prime_rl.paths import mark_stable


class _Started(Exception):
    pass


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch):
    """A Child is never started here: the test fails instead of launching vLLM and the trainer."""

    def refuse(name, *args, **kwargs):
        raise _Started(name)

    monkeypatch.setattr(supervise, "Child", refuse)
    for key in ("PRIME_MAX_STEPS", "PRIME_OUTPUT_DIR", "PRIME_MODEL"):
        monkeypatch.delenv(key, raising=False)
    yield
    logger.remove()  # main() pointed loguru at this test's captured stderr and run directory
    logger.add(sys.stderr)


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def _exit_code(argv) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code


def test_resume_on_a_finished_run_says_so_and_starts_nothing(tmp_path, model_dir, capsys):
    run = tmp_path / "run"
    for component in ("trainer", "orchestrator"):
        mark_stable(run / "checkpoints" / "step_5" / component)
    mark_stable(run / "weights" / "step_5")
    (run / "metrics.jsonl").write_text(json.dumps({"process": "trainer", "step": 4}) + "\n")
    argv = ["--model", str(model_dir), "--output_dir", str(run), "--max_steps", "5", "--resume"]
    assert _exit_code(argv) == 0
    assert "complete" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_text().count("\n") == 1
    assert not (run / "configs").exists()  # nothing written for children that never start


def test_resume_with_clean_is_refused(tmp_path, model_dir, capsys):
    (tmp_path / "run" / "rollouts" / "step_0").mkdir(parents=True)
    argv = ["--model", str(model_dir), "--output_dir", str(tmp_path / "run"), "--resume", "--clean"]
    assert _exit_code(argv) == 2
    assert "--resume and --clean contradict" in capsys.readouterr().err
    assert (tmp_path / "run" / "rollouts" / "step_0").is_dir()


@pytest.mark.parametrize("missing", ["nope", "no_config"])
def test_a_missing_model_directory_is_one_line_before_anything_starts(tmp_path, capsys, missing):
    model = tmp_path / missing
    if missing == "no_config":
        model.mkdir()
    argv = ["--model", str(model), "--output_dir", str(tmp_path / "run")]
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model directory ") and str(model) in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_second_launcher_on_the_same_run_is_one_line_naming_the_holder(tmp_path, model_dir, capsys):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from prime_rl.launcher.rundir import lock_run_dir\n"
            "with lock_run_dir(sys.argv[1]):\n"
            "    print('locked', flush=True)\n"
            "    time.sleep(300)\n",
            str(run),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert _exit_code(["--model", str(model_dir), "--output_dir", str(run), "--resume"]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run} is in use by another rl launcher (pid {holder.pid} on ")
    assert err.count("\n") == 1
    assert not (run / "logs").exists()  # nothing written into the running run's logs


def test_a_busy_inference_port_is_one_line_naming_inference(tmp_path, model_dir, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["--model", str(model_dir), "--output_dir", str(tmp_path / "run")]
        assert _exit_code([*argv, "--inference", json.dumps({"port": port})]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: inference cannot start: port {port} on 127.0.0.1 is in use")
    assert err.count("\n") == 1
