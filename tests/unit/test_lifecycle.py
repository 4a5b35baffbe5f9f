"""Children die with the launcher: a child watching it takes its whole process group down when the
launcher is killed (SIGKILL), grandchildren that ignore SIGTERM included, also when the launcher
was gone before the watch began. Processes are tracked by pid and process group, never by name."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.support.processes import running_in_group

from prime_rl.lifecycle import LAUNCHER_PID_ENV, group_members, stop_group, watch_launcher

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups via /proc")

# a child of the "launcher" (or a torchrun rank): watches it, starts a grandchild in its group that
# ignores SIGTERM
CHILD = textwrap.dedent(
    """
    import os, subprocess, sys, time
    # one write per line: torchrun runs its ranks unbuffered, where print() writes word by word and
    # the lines of two ranks sharing the file would interleave
    say = lambda *words: os.write(1, (" ".join(map(str, words)) + "\\n").encode())
    say("started", os.getpid())
    if sys.argv[1] == "late":  # begin watching only once the launcher is gone (we were re-parented)
        while os.getppid() == int(os.environ["PRIME_RL_LAUNCHER_PID"]):
            time.sleep(0.01)
    from prime_rl.lifecycle import watch_launcher
    watch_launcher(grace_s=1.0)
    grandchild = subprocess.Popen([sys.executable, "-c",
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); os.write(1, b'ready\\\\n'); "
        "time.sleep(300)"])
    say("grandchild", grandchild.pid)
    time.sleep(300)
    """
)


def wait_for(predicate, timeout_s: float, what) -> None:
    """Wait until ``predicate()``; on timeout fail with ``what`` (a callable is asked then, so the
    message shows the state at the timeout, not at the start)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.05)


def kill_all(launcher: subprocess.Popen, *pgids: int | None) -> None:
    """Clean up after a failed test: the launcher, and what runs in the children's groups."""
    launcher.kill()
    launcher.wait()
    for pgid in pgids:
        for pid in running_in_group(pgid) if pgid else []:
            os.kill(pid, signal.SIGKILL)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


def start_launcher(tmp_path: Path, launcher_code: str, when: str = "now") -> tuple[subprocess.Popen, Path]:
    """A stand-in for ``rl`` running ``launcher_code``; every process writes to ``out``."""
    out = tmp_path / "out.txt"
    (tmp_path / "child.py").write_text(CHILD)
    code = textwrap.dedent(launcher_code).format(child=tmp_path / "child.py", when=when, out=out)
    with open(out, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=f, stderr=subprocess.STDOUT)
    return proc, out


def test_a_child_takes_its_group_down_when_the_launcher_is_killed(tmp_path):
    launcher, out = start_launcher(
        tmp_path,
        """
        import os, subprocess, sys, time
        from prime_rl.lifecycle import launcher_env
        child = subprocess.Popen([sys.executable, "{child}", "{when}"], env={{**os.environ, **launcher_env()}},
                                 start_new_session=True)
        print("child", child.pid, flush=True)
        time.sleep(300)
        """,
    )
    child = None
    try:
        wait_for(lambda: "ready" in lines(out), 60, lambda: f"the grandchild did not start: {lines(out)}")
        pids = {line.split()[0]: int(line.split()[1]) for line in lines(out) if " " in line}
        assert pids["started"] == pids["child"]
        child, grandchild = pids["child"], pids["grandchild"]
        assert os.getpgid(child) == child == os.getpgid(grandchild) != os.getpgid(launcher.pid)
        launcher.kill()
        launcher.wait()
        wait_for(
            lambda: not running_in_group(child),
            15,
            lambda: f"group {child} survived: {running_in_group(child)}",
        )
    finally:
        kill_all(launcher, child)


def test_a_launcher_gone_before_the_watch_began_is_noticed_at_once(tmp_path):
    # the launcher exits right after starting the child, which starts watching only after that
    launcher, out = start_launcher(
        tmp_path,
        """
        import os, subprocess, sys
        from prime_rl.lifecycle import launcher_env
        child = subprocess.Popen([sys.executable, "{child}", "{when}"], env={{**os.environ, **launcher_env()}},
                                 start_new_session=True)
        print("child", child.pid, flush=True)
        os._exit(0)
        """,
        when="late",
    )
    assert launcher.wait(timeout=30) == 0
    child = int(next(line for line in lines(out) if line.startswith("child ")).split()[1])
    try:
        wait_for(
            lambda: not running_in_group(child),
            30,
            lambda: f"group {child} survived: {running_in_group(child)}",
        )
        assert "ready" not in lines(out)  # it stopped at the watch, before starting anything
    finally:
        kill_all(launcher, child)


def test_the_launcher_s_children_watch_it(tmp_path):
    """The real launcher's Child passes its PID, so the child (here the stand-in above) watches it."""
    launcher, out = start_launcher(
        tmp_path,
        """
        import os, sys, time
        from pathlib import Path
        from prime_rl.launcher.supervise import Child
        child = Child("test", [sys.executable, "{child}", "{when}"], Path("{out}").with_name("child.log"),
                      dict(os.environ))
        print("child", child.proc.pid, flush=True)
        time.sleep(300)
        """,
    )
    log = tmp_path / "child.log"
    child = None
    try:
        wait_for(
            lambda: "ready" in lines(log), 60, f"the grandchild did not start: {lines(out)} {lines(log)}"
        )
        child = int(next(line for line in lines(out) if line.startswith("child ")).split()[1])
        assert len(running_in_group(child)) == 2
        launcher.kill()
        launcher.wait()
        wait_for(
            lambda: not running_in_group(child),
            15,
            lambda: f"group {child} survived: {running_in_group(child)}",
        )
    finally:
        kill_all(launcher, child)


TORCHRUN_LAUNCHER = """
import os, subprocess, sys, time
from prime_rl.lifecycle import launcher_env
argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "{child}", "{when}"]
# torchrun reads options from PET_* variables (a log dir, redirects): none may hide the ranks' output
env = {{k: v for k, v in os.environ.items() if not k.startswith("PET_")}}
torchrun = subprocess.Popen(argv, env={{**env, **launcher_env()}}, start_new_session=True)
print("torchrun", torchrun.pid, flush=True)
time.sleep(300)
"""


def _pids(out: Path, word: str) -> list[int]:
    """Pids printed as ``word PID``, found anywhere in a line: torchrun and its ranks share ``out``,
    and torchrun may prefix or interleave what its ranks print."""
    text = out.read_text() if out.is_file() else ""
    return [int(pid) for pid in re.findall(rf"\b{word} (\d+)", text)]


def _torchrun_up(out: Path) -> tuple[int, list[int]]:
    up = lambda: len(_pids(out, "started")) == 2 and len(_pids(out, "grandchild")) == 2  # noqa: E731
    wait_for(up, 180, lambda: f"the ranks did not start: {lines(out)}")
    (torchrun,) = _pids(out, "torchrun")
    ranks = _pids(out, "started")
    # torchrun starts each rank in a session of its own: its group holds torchrun alone
    assert (
        len(ranks) == 2
        and all(os.getpgid(r) == r for r in ranks)
        and running_in_group(torchrun) == [torchrun]
    )
    return torchrun, ranks


@pytest.mark.slow
def test_trainer_ranks_under_torchrun_go_with_the_launcher_and_torchrun_too(tmp_path):
    launcher, out = start_launcher(tmp_path, TORCHRUN_LAUNCHER)
    torchrun, ranks = None, []
    try:
        torchrun, ranks = _torchrun_up(out)
        launcher.kill()
        launcher.wait()
        gone = lambda: not any(running_in_group(g) for g in (torchrun, *ranks))  # noqa: E731
        wait_for(gone, 20, lambda: f"survived: {[running_in_group(g) for g in (torchrun, *ranks)]}")
    finally:
        kill_all(launcher, torchrun, *ranks)


@pytest.mark.slow
def test_trainer_ranks_go_when_torchrun_is_killed_under_them(tmp_path):
    launcher, out = start_launcher(tmp_path, TORCHRUN_LAUNCHER)
    torchrun, ranks = None, []
    try:
        torchrun, ranks = _torchrun_up(out)
        os.kill(torchrun, signal.SIGKILL)  # as the launcher does to a torchrun that ignores SIGTERM
        gone = lambda: not any(running_in_group(g) for g in ranks)  # noqa: E731
        wait_for(gone, 20, lambda: f"survived: {[running_in_group(g) for g in ranks]}")
        assert launcher.poll() is None
    finally:
        kill_all(launcher, torchrun, *ranks)


def test_outside_rl_nothing_is_watched(monkeypatch):
    monkeypatch.delenv(LAUNCHER_PID_ENV, raising=False)
    assert watch_launcher() is None


def test_stop_group_stops_orphans_of_an_exited_leader(tmp_path):
    # the leader exits at once; its child (in its group, ignoring SIGTERM) runs on until stopped
    script = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(300)'], "
        "stdout=subprocess.PIPE)\n"
        "p.stdout.readline()\n"
        "print(p.pid, flush=True)\n"
    )
    leader = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    orphan = int(leader.stdout.readline())
    assert leader.wait(timeout=30) == 0
    try:
        assert group_members(leader.pid) == [orphan] == running_in_group(leader.pid)
        assert stop_group(leader.pid, timeout_s=0.5)
        assert running_in_group(leader.pid) == [] == group_members(leader.pid)
    finally:
        for pid in running_in_group(leader.pid):
            os.kill(pid, signal.SIGKILL)


def test_a_dev_server_is_told_to_watch_the_process_that_started_it(tmp_path, monkeypatch):
    """Benchmarks and tests start servers with prime_rl.dev.server.start_server: killing them
    (a timeout's SIGTERM, a SIGKILL) used to leave the server and vLLM's engine running."""
    from prime_rl.dev import server as dev_server
    from prime_rl.lifecycle import LAUNCHER_PID_ENV

    seen = {}

    class FakePopen:
        def __init__(self, argv, env=None, **kwargs):
            seen["env"], seen["kwargs"] = env, kwargs

    monkeypatch.setattr(dev_server.subprocess, "Popen", FakePopen)
    monkeypatch.setenv(LAUNCHER_PID_ENV, "1")  # started under some other launcher: this process counts
    dev_server.start_server("models/tiny", tmp_path, port=1)
    assert seen["env"][LAUNCHER_PID_ENV] == str(os.getpid()) and seen["kwargs"]["start_new_session"]
