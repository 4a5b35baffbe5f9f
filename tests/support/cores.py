"""Which cores the vLLM servers of one pytest-xdist worker run their model on.

vLLM's CPU worker binds its OpenMP threads, and with them its busy-polling main thread, to cores
it picks itself (``VLLM_CPU_OMP_THREADS_BIND=auto``). It picks the same ones in every server: on a
2-core machine core 0, keeping core 1 for the API server. With ``make test``'s two workers, two
tests that start servers at once then run both servers' models on core 0 while core 1 has only
their front ends. Each worker gives its servers their own share of the cores instead.
"""

from __future__ import annotations

import os

BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"


def worker_cores(worker: str, workers: int, cpus: list[int]) -> list[int]:
    """The cores of xdist worker ``worker`` (``gw0``, ``gw1``, ...) when ``workers`` share ``cpus``:
    the worker's contiguous share of them (on hosts whose SMT siblings are numbered after the
    cores, a share of whole cores). A worker xdist started in place of a crashed one (``gw2`` of 2)
    takes the share of the one it replaces, by its index modulo ``workers``. Empty when there are
    fewer cores than workers (the worker then leaves vLLM to pick)."""
    if not worker.startswith("gw") or not worker[2:].isdigit():
        raise ValueError(f"not an xdist worker id: {worker!r}")
    if workers < 1:
        raise ValueError(f"{workers} workers")
    ordered = sorted(cpus)
    if len(ordered) < workers:
        return []
    index, size = int(worker[2:]) % workers, len(ordered) // workers
    return ordered[index * size : (index + 1) * size]


def bind_worker_servers(environ=os.environ) -> str | None:
    """On an xdist worker, set ``VLLM_CPU_OMP_THREADS_BIND`` to the worker's cores, unless the
    user set it: every server the worker's tests start inherits it. Returns what was set."""
    worker = environ.get("PYTEST_XDIST_WORKER")
    count = environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker is None or count is None or BIND_ENV in environ:
        return None
    cores = worker_cores(worker, int(count), list(os.sched_getaffinity(0)))
    if not cores:
        return None
    environ[BIND_ENV] = ",".join(str(core) for core in cores)
    return environ[BIND_ENV]
