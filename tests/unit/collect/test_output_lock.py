"""prime_rl.collect.store.exclusive across machines: the lock file names its holder (host, pid,
heartbeat), so a run on another host sharing the filesystem, where the flock may not reach, is
refused while that holder is alive and taken over once it is stale. Another machine is simulated
by writing its entry into the lock file. (The flock within one machine: test_store.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from loguru import logger
from tests.support.collect import collect_config, write_tasks
from tests.support.http_server import LocalTestServer

from prime_rl.collect import store
from prime_rl.collect.runner import collect
from prime_rl.collect.store import OutputError, exclusive

OTHER = "other-node-7"


def lock_of(output: Path) -> Path:
    real = Path(os.path.realpath(output))
    return real.with_name(f".{real.name}.lock")


def plant(output: Path, host: str = OTHER, pid: int = 4242, age_s: float = 0.0) -> str:
    """Another run's entry in ``output``'s lock file, last refreshed ``age_s`` ago."""
    line = json.dumps(
        {"host": host, "pid": pid, "started": "2030-01-01T00:00:00+00:00", "heartbeat": time.time() - age_s}
    )
    lock_of(output).parent.mkdir(parents=True, exist_ok=True)
    lock_of(output).write_text(line + "\n")
    return line + "\n"


def entry(output: Path) -> dict | None:
    text = lock_of(output).read_text()
    return json.loads(text) if text else None


@pytest.fixture
def messages():
    seen: list[str] = []
    sink = logger.add(
        lambda m: seen.append(f"{m.record['level'].name} {m.record['message']}"), level="WARNING"
    )
    yield seen
    logger.remove(sink)


def test_a_live_holder_on_another_host_is_refused_and_its_entry_kept(tmp_path):
    out = tmp_path / "out.jsonl"
    planted = plant(out, age_s=5)
    with pytest.raises(OutputError) as err, exclusive(out, settle_s=0):
        pytest.fail("entered")
    msg = str(err.value)
    assert str(Path(os.path.realpath(out))) in msg and OTHER in msg and "pid 4242" in msg
    assert "last seen 5 s ago" in msg and f"delete {lock_of(out)}" in msg and "another --output" in msg
    assert lock_of(out).read_text() == planted
    lock_of(out).unlink()  # what the message says to do once that run is gone
    with exclusive(out, settle_s=0):
        assert entry(out)["pid"] == os.getpid()


def test_a_stale_holder_on_another_host_is_taken_over_with_a_warning(tmp_path, messages):
    out = tmp_path / "out.jsonl"
    plant(out, age_s=120)
    with exclusive(out, settle_s=0):
        now = entry(out)
        assert now["host"] == socket.gethostname() and now["pid"] == os.getpid()
    assert any(
        m.startswith("WARNING") and OTHER in m and "pid 4242" in m and "120 s ago" in m for m in messages
    )


def test_the_staleness_window_is_a_module_constant(tmp_path, monkeypatch):
    out = tmp_path / "out.jsonl"
    plant(out, age_s=5)
    monkeypatch.setattr(store, "LOCK_STALE_S", 2.0)
    monkeypatch.setattr(store, "LOCK_SETTLE_S", 0.0)
    with exclusive(out):
        assert entry(out)["pid"] == os.getpid()


def test_an_entry_of_this_host_is_stale_by_construction(tmp_path, messages):
    """A run on this machine killed a moment ago left its entry; its flock is gone, so it is gone."""
    out = tmp_path / "out.jsonl"
    plant(out, host=socket.gethostname(), pid=999_999_999, age_s=1)
    with exclusive(out, settle_s=0):
        assert entry(out)["pid"] == os.getpid()
    assert messages == []


def test_the_heartbeat_advances_from_a_thread_while_the_main_thread_is_blocked(tmp_path):
    out = tmp_path / "out.jsonl"
    with exclusive(out, heartbeat_s=0.05, settle_s=0):
        first = entry(out)
        time.sleep(0.4)  # blocks this thread (as a stuck event loop would)
        later = entry(out)
    assert later["heartbeat"] > first["heartbeat"]
    assert {k: later[k] for k in ("host", "pid", "started")} == {
        k: first[k] for k in ("host", "pid", "started")
    }
    assert later["started"].endswith("+00:00")


def test_after_exit_the_lock_file_names_no_holder(tmp_path):
    out = tmp_path / "out.jsonl"
    with exclusive(out, settle_s=0):
        assert entry(out) is not None
    assert lock_of(out).exists() and lock_of(out).read_text() == ""
    with pytest.raises(RuntimeError), exclusive(out, settle_s=0):  # also when the run fails
        raise RuntimeError("boom")
    assert lock_of(out).read_text() == ""


def test_the_flock_refusal_names_the_holder(tmp_path):
    out = tmp_path / "out.jsonl"
    with exclusive(out, settle_s=0):
        with pytest.raises(OutputError, match=rf"another process \(pid {os.getpid()} on host"):
            exclusive(tmp_path / "." / "out.jsonl").__enter__()
        assert entry(out)["pid"] == os.getpid()  # the refused one left it alone


class SettleTime:
    """``store``'s ``time`` module, but its sleep (the settle wait) is where the other host writes."""

    def __init__(self, during_sleep) -> None:
        self.during_sleep = during_sleep
        self.slept: list[float] = []

    def __getattr__(self, name: str):
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.during_sleep()


def test_a_host_writing_its_entry_in_the_same_instant_wins_and_this_run_refuses(tmp_path, monkeypatch):
    """Both found the file empty; the other wrote after us, so on re-reading we find its entry."""
    out = tmp_path / "out.jsonl"
    lock = lock_of(out)
    planted: list[str] = []

    def other_host() -> None:  # within our settle wait, after our entry was written
        assert entry(out)["pid"] == os.getpid()
        planted.append(plant(out))

    clock = SettleTime(other_host)
    monkeypatch.setattr(store, "time", clock)
    with (
        pytest.raises(OutputError, match=rf"another machine took its lock .* pid 4242 on host {OTHER}"),
        exclusive(out, settle_s=1.0),
    ):
        pytest.fail("entered")
    assert clock.slept == [1.0] and len(planted) == 1
    assert lock.read_text() == planted[0]  # its entry is not cleared by the refused run


def test_a_holder_taken_over_while_running_logs_an_error_and_leaves_the_new_entry(
    tmp_path, messages, monkeypatch
):
    """A holder paused past the window (or whose lock file was reset) sees it and says so."""
    out = tmp_path / "out.jsonl"
    planted: list[str] = []
    read_holder = store._read_holder

    def other_host_first(lock: Path) -> dict | None:
        # the other host writes its entry just before our heartbeat thread's first look (so
        # never between that look and its write: the order is fixed, not timed)
        if threading.current_thread().name.startswith("lock ") and not planted:
            planted.append(plant(out))
        return read_holder(lock)

    monkeypatch.setattr(store, "_read_holder", other_host_first)
    with exclusive(out, heartbeat_s=0.05, settle_s=0):
        deadline = time.monotonic() + 30
        while not any(m.startswith("ERROR") for m in messages) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(planted) == 1
        assert lock_of(out).read_text() == planted[0]  # not overwritten by our heartbeat
    assert lock_of(out).read_text() == planted[0]  # nor emptied at exit
    assert any(m.startswith("ERROR") and OTHER in m and "another run may be writing" in m for m in messages)


def test_a_collect_run_is_refused_before_any_request_when_another_host_holds_the_output(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 4)
    out = tmp_path / "out.jsonl"
    before = json.dumps({"task_index": 0, "repeat_index": 0, "task": {"id": "t0"}}) + '\n{"task_ind'
    out.write_text(before)  # a torn tail a run would cut off
    planted = plant(out, age_s=1)
    with LocalTestServer() as server:
        with pytest.raises(OutputError, match=rf"another machine: pid 4242 on host {OTHER}"):
            asyncio.run(collect(collect_config(server.base_url, tmp_path)))
        assert server.state.requests == 0 and server.state.seen == []
    assert out.read_text() == before and lock_of(out).read_text() == planted
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.jsonl.lock", "out.jsonl", "tasks.jsonl"]
