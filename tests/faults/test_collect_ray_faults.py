"""collect-rollouts --ray under faults, on a real local Ray cluster of two nodes
(``tests.support.ray_cluster``): a worker SIGKILLed mid-run, then a whole node removed, then the
driver itself SIGTERMed and SIGKILLed. Every (task, repeat) pair lands in the output exactly once
all the same: a lost worker's unfinished pairs go to the others (a replacement starts on its node
while the node lives), and the same command resumes after the driver is killed (the dead driver's
workers go with its job)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter

import pytest

pytest.importorskip("ray")

from tests.support.collect import (  # noqa: E402
    FAST_FLAGS,
    cli_command,
    keys,
    sigint_reaches_children,
    wait_for,
    write_tasks,
)
from tests.support.http_server import LocalTestServer  # noqa: E402
from tests.support.ray_cluster import no_ray_env, wait_gone, workers_started  # noqa: E402

pytestmark = pytest.mark.slow


def lines(path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def test_a_killed_worker_and_a_removed_node_lose_no_pair_and_write_none_twice(tmp_path, ray_cluster):
    n = 2000
    tasks = write_tasks(tmp_path / "tasks.jsonl", n)
    out = tmp_path / "out.jsonl"
    log = tmp_path / "out_collect.log"
    with LocalTestServer() as server:
        server.state.default_delay_s = 0.01
        cmd = cli_command(
            tasks,
            out,
            server.base_url,
            "--ray",
            ray_cluster.address,
            "--parallel",
            "8",
            "--ray.check_interval_s",
            "1",
            *FAST_FLAGS,
        )
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=no_ray_env()
        )
        try:
            wait_for(
                lambda: len(workers_started(log)) == 2 and lines(out) >= 200,
                proc,
                "two workers at work",
                timeout_s=180,  # Ray workers start slowly on a loaded machine
            )
            on_head = next(
                w for w in workers_started(log) if ray_cluster.head.id.startswith(w.node_id_prefix)
            )
            os.kill(on_head.pid, signal.SIGKILL)  # the worker process itself, as the OOM killer would
            wait_for(lambda: len(workers_started(log)) == 3, proc, "a replacement worker", timeout_s=180)
            replacement = workers_started(log)[-1]
            assert replacement.node_id_prefix == on_head.node_id_prefix  # its node lives: a new one there
            written = lines(out)
            wait_for(lambda: lines(out) >= written + 100, proc, "records after the replacement")
            ray_cluster.remove_other()  # the other node, its raylet and its worker, at once
            _, err = proc.communicate(timeout=120)
        finally:
            stop(proc)
    assert proc.returncode == 0, err[-3000:]
    assert keys(out) == Counter({(t, 0): 1 for t in range(n)})
    lost = [line for line in log.read_text().splitlines() if " lost (" in line]
    assert len(lost) == 2, lost
    for line in lost:  # each had unfinished pairs, handed to the other workers
        assert int(line.split("its ")[1].split()[0]) > 0, line
    assert len(workers_started(log)) == 3  # no worker on the removed node again
    assert json.loads((tmp_path / "out_aggregate_metrics.json").read_text())["num_records"] == n
    ray_cluster.add_node()  # for the next test


def test_the_driver_stopped_or_killed_resumes_with_each_pair_once(tmp_path, ray_cluster):
    ray_cluster.ensure_two_nodes()
    n = 1500
    tasks = write_tasks(tmp_path / "tasks.jsonl", n)
    out = tmp_path / "out.jsonl"
    log = tmp_path / "out_collect.log"
    with LocalTestServer() as server, sigint_reaches_children():
        server.state.default_delay_s = 0.01
        cmd = cli_command(
            tasks, out, server.base_url, "--ray", ray_cluster.address, "--parallel", "8", *FAST_FLAGS
        )

        # SIGTERM: the run ends as interrupted (exit 130), every finished record kept
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=no_ray_env()
        )
        try:
            wait_for(lambda: lines(out) >= 150, proc, "150 records")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            stop(proc)
        assert proc.returncode == 130, err[-3000:]
        assert "interrupted: every finished sample is in the output" in err
        assert wait_gone([w.pid for w in workers_started(log)]) == []

        # SIGKILL: nothing can be cleaned up; the cluster ends the dead driver's workers
        started = len(workers_started(log))
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=no_ray_env())
        try:
            first = lines(out)
            wait_for(lambda: lines(out) >= first + 300, proc, "300 more records")
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finally:
            stop(proc)
        assert wait_gone([w.pid for w in workers_started(log)[started:]]) == []
        before = out.read_bytes()
        assert lines(out) < n

        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=no_ray_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming" in done.stderr
    complete = before[: before.rfind(b"\n") + 1]
    assert out.read_bytes().startswith(complete)  # nothing finished before a kill was rewritten
    assert keys(out) == Counter({(t, 0): 1 for t in range(n)})
    assert json.loads((tmp_path / "out_aggregate_metrics.json").read_text())["num_records"] == n
