"""The cores each pytest-xdist worker's vLLM servers are bound to (tests/support/cores.py)."""

from __future__ import annotations

import os

import pytest
from tests.support.cores import BIND_ENV, bind_worker_servers, worker_cores


def test_two_workers_on_two_cores_get_one_core_each():
    assert worker_cores("gw0", 2, [1, 0]) == [0]
    assert worker_cores("gw1", 2, [0, 1]) == [1]


def test_workers_get_contiguous_shares_without_overlap():
    cpus = list(range(16))  # SMT siblings numbered after the cores (0-7, then 8-15)
    parts = [worker_cores(f"gw{i}", 2, cpus) for i in range(2)]
    assert parts == [list(range(8)), list(range(8, 16))]
    assert worker_cores("gw1", 2, [3, 5, 7, 8, 9]) == [7, 8]  # an odd core is left to nobody's servers


def test_a_worker_started_in_place_of_a_crashed_one_takes_its_share():
    assert worker_cores("gw2", 2, [0, 1]) == [0] and worker_cores("gw3", 2, [0, 1]) == [1]


def test_fewer_cores_than_workers_leaves_vllm_to_pick():
    assert worker_cores("gw2", 3, [0, 1]) == []


@pytest.mark.parametrize(("worker", "workers"), [("master", 2), ("gw", 2), ("gw0", 0)])
def test_a_worker_outside_the_session_is_refused(worker, workers):
    with pytest.raises(ValueError):
        worker_cores(worker, workers, [0, 1])


def test_a_worker_binds_its_servers_to_its_own_cores():
    cpus = sorted(os.sched_getaffinity(0))
    environ = {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "1"}
    assert bind_worker_servers(environ) == ",".join(map(str, cpus))
    assert environ[BIND_ENV] == ",".join(map(str, cpus))


def test_the_users_own_binding_is_kept():
    environ = {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2", BIND_ENV: "nobind"}
    assert bind_worker_servers(environ) is None
    assert environ[BIND_ENV] == "nobind"


def test_outside_xdist_nothing_is_set():
    environ = {}
    assert bind_worker_servers(environ) is None
    assert environ == {}
