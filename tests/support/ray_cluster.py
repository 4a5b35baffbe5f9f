"""A local Ray cluster of two nodes for the ``collect-rollouts --ray`` tests, and what they read
back from a run: the workers it started (from its log file) and their processes.

The cluster is Ray's own test utility (:class:`ray.cluster_utils.Cluster`): a head and a second
node on this machine, each its own raylet with one CPU, no dashboard, a small object store and
its own short temp dir (Unix socket paths must stay short). The collector under test runs as a
child process and connects with ``--ray <address>``, so the test can kill a node, a worker or
the collector itself. Ray's processes are children of the test process; ``shutdown`` ends them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

NODE_ARGS = {"num_cpus": 1, "object_store_memory": 80 * 2**20}

WORKER_LINE = re.compile(r"ray: worker (w\d+) \(pid (\d+), node (\S+) ([0-9a-f]+)\) sends to (.+)$")


@dataclass
class Node:
    id: str
    handle: object


class TwoNodeCluster:
    """``cluster.address``, ``cluster.head``/``cluster.other`` (their Ray node ids), ``remove_other()``."""

    def __init__(self) -> None:
        self.temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
        # Ray writes the head's address to its default temp dir whatever temp_dir says, and fails
        # where no Ray ran on this machine before (a fresh CI machine): make that directory
        Path(ray._private.utils.get_ray_address_file(None)).parent.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster_utils.Cluster(
            initialize_head=True,
            head_node_args={**NODE_ARGS, "include_dashboard": False, "temp_dir": self.temp},
        )
        try:
            self.address = self.cluster.address
            self.head = Node(self.cluster.head_node.node_id, self.cluster.head_node)
            self.other = self.add_node()
        except BaseException:  # the head runs already: a failed second node must not leave it behind
            self.shutdown()
            raise

    def add_node(self) -> Node:
        """A second node (again); returns once it is registered (a node removed before may still
        count as alive in the GCS for a while: no waiting for every node, only for this one)."""
        node = self.cluster.add_node(wait=True, **NODE_ARGS)
        self.other = Node(node.node_id, node)
        return self.other

    def remove_other(self) -> None:
        self.cluster.remove_node(self.other.handle, allow_graceful=False)

    def ensure_two_nodes(self) -> None:
        if self.other.handle not in self.cluster.worker_nodes:
            self.add_node()

    def shutdown(self) -> None:
        try:
            self.cluster.shutdown()
        finally:
            shutil.rmtree(self.temp, ignore_errors=True)


@contextlib.contextmanager
def two_node_cluster() -> Iterator[TwoNodeCluster]:
    """A fresh two-node cluster, shut down (every raylet, GCS and worker gone) on exit."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.delenv("RAY_ADDRESS", raising=False)
        cluster = TwoNodeCluster()
        try:
            yield cluster
        finally:
            cluster.shutdown()


@dataclass
class WorkerLine:
    name: str
    pid: int
    node_ip: str
    node_id_prefix: str
    urls: str


def workers_started(log: Path) -> list[WorkerLine]:
    """The workers a run's log file says it started, in order."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text(errors="replace").splitlines():
        m = WORKER_LINE.search(line)
        if m:
            found.append(WorkerLine(m[1], int(m[2]), m[3], m[4], m[5]))
    return found


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    """Wait until none of ``pids`` runs; returns those still running after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def no_ray_env() -> dict[str, str]:
    """The environment of a collector child: no RAY_ADDRESS (the test names the cluster)."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env
