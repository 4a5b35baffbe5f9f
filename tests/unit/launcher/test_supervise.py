"""Supervision: secrets reach the children by env var only; a child's whole process group is stopped,
also after the child itself exited; a child that cannot start or dies at start fails the run, named."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import time
import warnings
from pathlib import Path

import pytest
from loguru import logger
from pydantic import ValidationError
from tests.support.processes import running_in_group

import prime_rl.launcher.supervise as supervise
from prime_rl.config import ConfigError, ResumeConfig, load_config
from prime_rl.dev.server import free_port
from prime_rl.launcher.config import RLConfig
from prime_rl.launcher.supervise import (
    Child,
    StartError,
    _child_env,
    _dump_for_child,
    check_port_free,
    with_resume,
)
from prime_rl.paths import mark_stable
from prime_rl.tracing import parse_tagged


def test_secrets_travel_by_env_never_in_the_written_configs(tmp_path, monkeypatch):
    monkeypatch.delenv("PRIME_ADMIN_TOKEN", raising=False)
    cfg, _ = load_config(
        RLConfig,
        [
            "--output_dir",
            str(tmp_path),
            "--inference.admin_token",
            "s3cret",
            "--orchestrator.client.api_key",
            "k3y",
        ],
    )
    for block in (cfg.inference, cfg.orchestrator, cfg.trainer):
        text = json.dumps(_dump_for_child(block))
        assert "s3cret" not in text and "k3y" not in text
    cfg.write_resolved(tmp_path / "rl.json")
    assert "s3cret" not in (tmp_path / "rl.json").read_text()
    env = _child_env(cfg)
    assert env["PRIME_ADMIN_TOKEN"] == "s3cret" and env["PRIME_CLIENT__API_KEY"] == "k3y"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped by its new parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_stop_ends_the_child_s_process_group_with_sigkill_after_sigterm(tmp_path):
    # the child ignores SIGTERM and has a grandchild that does too: both die by SIGKILL of the group
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child = Child("test", [sys.executable, "-c", script], tmp_path / "test.log", dict(os.environ))
    deadline = time.monotonic() + 20
    log = tmp_path / "test.log"
    while not (log.is_file() and log.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(log.read_text().split()[0])
    assert os.getpgid(child.proc.pid) == child.proc.pid != os.getpgid(0)  # its own process group
    child.stop(timeout_s=0.5)
    assert child.proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_stop_ends_the_group_of_a_child_that_exited_already(tmp_path):
    # like vLLM's API server killed under its EngineCore: the leader is gone, the group is not
    script = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(300)'], "
        "stdout=subprocess.PIPE)\n"
        "p.stdout.readline()\n"
        "print(p.pid, flush=True)\n"
    )
    log = tmp_path / "test.log"
    child = Child("test", [sys.executable, "-c", script], log, dict(os.environ))
    try:
        assert child.proc.wait(timeout=30) == 0
        # the orphan holds the log pipe open (its stderr), so the pump never ends: poll the log
        deadline = time.monotonic() + 10
        while not log.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.05)
        orphan = int(log.read_text().split()[0])
        assert running_in_group(child.proc.pid) == [orphan]
        child.stop(timeout_s=0.5)
        assert running_in_group(child.proc.pid) == []
    finally:
        for pid in running_in_group(child.proc.pid):
            os.kill(pid, signal.SIGKILL)


def test_a_child_that_cannot_be_started_is_named(tmp_path):
    with pytest.raises(StartError, match=r"cannot start trainer \(/no/such/torchrun\)"):
        Child("trainer", ["/no/such/torchrun"], tmp_path / "t.log", dict(os.environ))


def _rl_config(tmp_path: Path, *args: str) -> RLConfig:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    argv = ["--model", str(model), "--output_dir", str(tmp_path / "run")]
    cfg, _ = load_config(RLConfig, [*argv, "--inference", json.dumps({"port": free_port()}), *args])
    return cfg


def _scripted_children(monkeypatch, scripts: dict[str, str]) -> list[Child]:
    """launch() starts these small scripts (real processes, each in its own group) for the three."""
    started: list[Child] = []

    def child(name, argv, log_path, env, pass_fds=()):
        if scripts[name] is None:
            raise StartError(f"cannot start {name} ({argv[0]}): [Errno 2] No such file or directory")
        started.append(Child(name, [sys.executable, "-c", scripts[name]], log_path, env, pass_fds))
        return started[-1]

    monkeypatch.setattr(supervise, "Child", child)
    return started


def _errors() -> tuple[list[str], int]:
    messages: list[str] = []
    return messages, logger.add(lambda m: messages.append(m.record["message"]), level="ERROR")


SLEEP = "import time; time.sleep(300)"


def test_a_child_dying_at_start_fails_the_run_named_with_its_error_and_stops_the_others(
    tmp_path, monkeypatch
):
    dies = "print('Traceback (most recent call last):'); print('OSError: [Errno 98] Address already in use'); exit(1)"
    started = _scripted_children(monkeypatch, {"inference": dies, "trainer": SLEEP, "orchestrator": SLEEP})
    messages, sink = _errors()
    try:
        assert supervise.launch(_rl_config(tmp_path)) == 1
    finally:
        logger.remove(sink)
    assert messages[0].splitlines()[0] == (
        "inference exited with code 1: OSError: [Errno 98] Address already in use; stopping the others. "
        f"Last lines of {tmp_path / 'run' / 'logs' / 'inference.stdout.log'}:"
    )
    assert [c.name for c in started] == ["inference", "trainer", "orchestrator"]
    assert all(c.proc.returncode is not None and running_in_group(c.proc.pid) == [] for c in started)


def test_a_child_that_cannot_be_started_fails_the_run_and_stops_the_others(tmp_path, monkeypatch):
    started = _scripted_children(monkeypatch, {"inference": SLEEP, "trainer": None, "orchestrator": SLEEP})
    messages, sink = _errors()
    try:
        assert supervise.launch(_rl_config(tmp_path)) == 1
    finally:
        logger.remove(sink)
    assert messages == [
        f"cannot start trainer ({sys.executable}): [Errno 2] No such file or directory; stopping the others"
    ]
    assert [c.name for c in started] == ["inference"] and running_in_group(started[0].proc.pid) == []


def _launched(tmp_path: Path) -> tuple[int, list[str], list]:
    """The launcher run on a config under ``tmp_path``: its exit code, the messages it logged (INFO and
    above), and its ``[launcher]`` lines parsed."""
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(m.record["message"]), level="INFO")
    try:
        code = supervise.launch(_rl_config(tmp_path))
    finally:
        logger.remove(sink)
    return code, messages, [parse_tagged(m) for m in messages if m.startswith("[launcher]")]


def test_a_child_s_exit_is_logged_as_a_tagged_launcher_line_before_the_others_are_stopped(
    tmp_path, monkeypatch
):
    """The analyzer reads rl.log's tagged lines only (docs/design.md): the launcher's line for the
    exit it stops the run for names the child and its code, and how long its children had run
    (``up_s``: the analyzer takes a crashed run's processes to have run up to it); the untagged error
    follows it, as before."""
    dies = "import time; time.sleep(0.3); print('RuntimeError: boom'); exit(7)"
    _scripted_children(monkeypatch, {"inference": SLEEP, "trainer": dies, "orchestrator": SLEEP})
    began = time.monotonic()
    code, messages, tagged = _launched(tmp_path)
    assert code == 1
    assert len(tagged) == 1, messages
    line = tagged[0]
    assert (line.tag, line.event) == ("launcher", "child.exit")
    assert line.fields["process"] == "trainer" and line.fields["code"] == "7"
    assert 0.3 <= float(line.fields["up_s"]) <= time.monotonic() - began
    assert list(line.fields) == ["process", "code", "up_s"]
    error = next(
        k for k, m in enumerate(messages) if m.startswith("trainer exited with code 7: RuntimeError: boom")
    )
    assert messages.index(next(m for m in messages if m.startswith("[launcher]"))) < error


def test_a_trainer_that_never_exits_after_the_last_step_is_logged_without_a_code(tmp_path, monkeypatch):
    """The orchestrator finished (exit 0) and the trainer did not exit within TRAINER_FINISH_S: the run
    failed, and the launcher's line named it with ``code=None``, which is no exit code (the grammar's
    ``code=<c>``). It has no ``code=`` now."""
    monkeypatch.setattr(supervise, "TRAINER_FINISH_S", 0.5)
    _scripted_children(monkeypatch, {"inference": SLEEP, "trainer": SLEEP, "orchestrator": "exit(0)"})
    code, messages, tagged = _launched(tmp_path)
    assert code == 1
    assert [(t.event, t.fields.get("process"), list(t.fields)) for t in tagged] == [
        ("child.exit", "trainer", ["process", "up_s"])
    ], messages
    assert any(m.startswith("trainer did not exit 0.5 s after the orchestrator finished") for m in messages)


def test_an_interrupted_launcher_logs_a_tagged_line_before_it_stops_every_process(tmp_path, monkeypatch):
    """SIGTERM (here from the trainer, the launcher's child) stops every process (130), after a
    ``[launcher] interrupted up_s=`` line."""
    interrupts = "import os, signal, time; os.kill(os.getppid(), signal.SIGTERM); time.sleep(300)"
    started = _scripted_children(
        monkeypatch, {"inference": SLEEP, "trainer": interrupts, "orchestrator": SLEEP}
    )
    code, messages, tagged = _launched(tmp_path)
    assert code == 130
    assert [(t.event, list(t.fields)) for t in tagged] == [("interrupted", ["up_s"])], messages
    assert float(tagged[0].fields["up_s"]) >= 0
    assert messages.index(next(m for m in messages if m.startswith("[launcher]"))) < messages.index(
        "interrupted: stopping every process"
    )
    assert all(running_in_group(c.proc.pid) == [] for c in started)


def test_a_busy_inference_port_is_refused_before_anything_starts(tmp_path, monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=f"inference cannot start: port {port} on 127.0.0.1 is in use"):
            check_port_free("127.0.0.1", port)
        started = _scripted_children(
            monkeypatch, {"inference": SLEEP, "trainer": SLEEP, "orchestrator": SLEEP}
        )
        cfg = _rl_config(tmp_path, "--inference", json.dumps({"port": port}), "--clean")
        (tmp_path / "run" / "rollouts" / "step_0").mkdir(parents=True)
        with pytest.raises(ConfigError, match=f"port {port}"):
            supervise.launch(cfg)
    assert started == [] and (tmp_path / "run" / "rollouts" / "step_0").is_dir()  # nothing wiped
    check_port_free("127.0.0.1", port)  # free again


class _FullDisk:
    """A log file on a disk that fills up after ``room`` writes."""

    def __init__(self, path, room: int):
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self.room = room

    def write(self, text: str) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= 1
        return self._f.write(text)

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_a_full_disk_is_reported_once_and_the_child_is_still_drained(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(supervise, "open", lambda path, *a, **k: _FullDisk(path, room=5), raising=False)
    # far more than a pipe holds (64 KiB): the child blocks unless its output is still read
    script = (
        "import sys\n"
        "for i in range(10): print(f'line {i}', flush=True)\n"
        "print('2024 | ERROR    | first error', flush=True)\n"
        "for i in range(4000): print('x' * 100)\n"
        "print('2024 | ERROR    | last error', flush=True)\n"
    )
    log = tmp_path / "test.log"
    child = Child("test", [sys.executable, "-c", script], log, dict(os.environ))
    try:
        assert child.proc.wait(timeout=30) == 0
        child._pump.join(timeout=10)
        assert not child._pump.is_alive()
        out, err = capsys.readouterr()
        assert "[test] 2024 | ERROR    | first error" in out and "[test] 2024 | ERROR    | last error" in out
        assert err.count("cannot write") == 1 and str(log) in err and "ENOSPC" in err
        assert log.read_text().splitlines() == [f"line {i}" for i in range(5)]
        assert child.tail(2).splitlines()[-1] == "2024 | ERROR    | last error"  # from memory
    finally:
        child.stop(timeout_s=0.5)


def test_resume_reaches_the_children_validated_without_warnings(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for component in ("trainer", "orchestrator"):
        mark_stable(tmp_path / "run" / "checkpoints" / "step_2" / component)

    class Started(Exception):
        pass

    def refuse(*args, **kwargs):
        raise Started

    monkeypatch.setattr(supervise, "Child", refuse)
    cfg, _ = load_config(
        RLConfig,
        ["--model", str(model), "--output_dir", str(tmp_path / "run"), "--resume"]
        + ["--inference", json.dumps({"port": free_port()})],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Started):
            supervise.launch(cfg)
    for name in ("trainer", "orchestrator"):
        data = json.loads((tmp_path / "run" / "configs" / f"rl_{name}_input.json").read_text())
        assert data["resume"] == {"enabled": True, "step": 2}
    assert not cfg.trainer.resume.enabled  # the launcher's own config is left as it was
    resumed = with_resume(cfg.trainer, 2)
    assert isinstance(resumed.resume, ResumeConfig) and resumed.resume.step == 2
    with pytest.raises(ValidationError):  # the value is validated: a bad one fails here, not in the child
        with_resume(cfg.trainer, -1)


HANGING_ORCHESTRATOR = """
import sys, time
from pathlib import Path
from prime_rl.lifecycle import watch_launcher
watch_launcher()
for step in range(4):
    print(f"[gen] batch.start step={step} inflight=0", flush=True)
    time.sleep(0.2)
    print(f"[gen] batch.done step={step} completions=4 dur_ms=200.0", flush=True)
rollouts = Path(sys.argv[1]) / "rollouts" / "step_2"
rollouts.mkdir(parents=True)
(rollouts / "rank_0.safetensors").write_bytes(b"")
print("[ckpt] wait.start target_step=3", flush=True)
time.sleep(300)
"""

HANGING_TRAINER = """
import sys, time
from pathlib import Path
from prime_rl.lifecycle import watch_launcher
watch_launcher()
for step in range(2):
    print(f"[train] step.done step={step} wait_ms=1.0 train_ms=200.0 write_ms=1.0", flush=True)
    time.sleep(0.2)
def stuck_in_the_trainer():
    # stuck (silent) until the watchdog has had both children dump their stacks into their logs
    # (at most 120 s), then 4 s more, in which a second hang report would show
    logs = Path(sys.argv[1]) / "logs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(
        log.is_file() and "most recent call first" in log.read_text(errors="replace")
        for log in (logs / "trainer" / "stdout.log", logs / "orchestrator.stdout.log")
    ):
        time.sleep(0.05)
    time.sleep(4)
stuck_in_the_trainer()
sys.exit(3)
"""


def test_a_hang_is_named_once_and_the_children_dump_their_stacks(tmp_path, monkeypatch):
    run = tmp_path / "run"
    scripts = {
        "inference": SLEEP,  # no stack-dump handler: it must not get the signal (it would die of it)
        "orchestrator": HANGING_ORCHESTRATOR.replace("sys.argv[1]", repr(str(run))),
        "trainer": HANGING_TRAINER.replace("sys.argv[1]", repr(str(run))),
    }
    started = _scripted_children(monkeypatch, scripts)
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(m.record["message"]), level="INFO")
    try:
        cfg = _rl_config(tmp_path, "--watchdog", json.dumps({"factor": 2, "min_s": 1}))
        assert supervise.launch(cfg) == 1
    finally:
        logger.remove(sink)
    hangs = [m for m in seen if m.startswith("[hang] detected")]
    assert len(hangs) == 1, seen
    assert "waits=orchestrator>trainer:weights/step_3 " in hangs[0] + " "
    story = next(m for m in seen if m.startswith("the run seems to hang"))
    assert "trainer: computing step 2 (rollouts/step_2 is there)" in story
    # the trainer (not the inference server, which has no handler) is what ended the run
    assert any(m.startswith("trainer exited with code 3") for m in seen), seen
    trainer_log = (run / "logs" / "trainer" / "stdout.log").read_text()
    assert "most recent call first" in trainer_log and "in stuck_in_the_trainer" in trainer_log
    orchestrator_log = (run / "logs" / "orchestrator.stdout.log").read_text()
    assert "most recent call first" in orchestrator_log
    dumped = next(m for m in seen if m.startswith("Python stacks dumped"))
    assert "trainer (pid" in dumped and "orchestrator (pid" in dumped and "inference" not in dumped
    assert all(running_in_group(c.proc.pid) == [] for c in started)
