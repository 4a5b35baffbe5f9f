"""Fixtures shared by unit and integration tests, and the session-end check for leaked processes.

The test session makes itself a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a process any
test started that outlives its parent (vLLM's engine under a killed server, a launcher's children)
is re-parented to pytest instead of init, so it stays a descendant of the session. When the session
ends, after every fixture is torn down, a descendant still running fails the run (exit 1), named
with its pid and process name, and is killed. multiprocessing's own helpers of this process (its
resource tracker and forkserver, which live as long as the interpreter) are not leaks.

``make test`` runs the session on two pytest-xdist workers (``-n 2 --dist loadgroup``): most of the
suite's time is the start of real vLLM servers and trainers, one import after another on one core,
so two tests at once keep both cores busy. The vLLM servers each worker's tests start run their
model on that worker's own cores (tests/support/cores.py), not all on the core vLLM would pick for
every one of them. Each worker is its own subreaper and checks its own
leftovers; it hands what it found to the controller, which fails the run. Tests that share one
thing stay on one worker (``xdist_group``): everything on the session's vLLM server (one server,
not one per worker) and everything on Ray (Ray keeps its current cluster's address in one file per
machine).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import settings

from prime_rl.dev.tiny_model import build_tiny_model

# hypothesis' deadline (200 ms an example) is wall time, which a loaded 2-core run stretches many
# times: no property test fails for it (the per-test settings keep their example counts)
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

ADMIN_TOKEN = "test-admin-token"
PR_SET_CHILD_SUBREAPER = 36
LEAK_GRACE_S = 10.0  # a process stopped by a test's last teardown may still be exiting


def pytest_configure(config):
    if sys.platform.startswith("linux"):
        from tests.support.cores import bind_worker_servers

        bind_worker_servers()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _own_helpers() -> set[int]:
    """multiprocessing's helper processes of this interpreter: they end with it, they are no leak."""
    pids = {
        getattr(multiprocessing.resource_tracker._resource_tracker, "_pid", None),
        getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None),
    }
    return {pid for pid in pids if pid}


def _reap_zombies() -> None:
    """Reap dead children nobody waits for (orphans re-parented to this subreaper)."""
    import psutil

    for p in psutil.Process().children():
        with contextlib.suppress(psutil.Error, ChildProcessError):
            if p.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(p.pid, os.WNOHANG)


def leftover_processes(exclude: set[int] = frozenset()) -> list:
    """This process's running descendants (psutil.Process), less its own helpers and ``exclude``."""
    import psutil

    _reap_zombies()
    skip = _own_helpers() | set(exclude)
    found = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if p.pid not in skip and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


def _describe(p) -> str:
    import psutil

    try:
        cmd = " ".join(p.cmdline())[:160]
        return f"pid {p.pid} {p.name()!r} (pgid {os.getpgid(p.pid)}, parent {p.ppid()}): {cmd}"
    except (psutil.Error, ProcessLookupError):
        return f"pid {p.pid} (gone)"


_WORKER_LEAKS: list[str] = []


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_testnodedown(node, error):
    """The controller: keep what a worker found still running when its session ended."""
    leaked = getattr(node, "workeroutput", {}).get("leaked_processes")
    if leaked:
        _WORKER_LEAKS.append(f"worker {node.gateway.id}: {leaked}")


@pytest.hookimpl(trylast=True)  # after pytest's own sessionfinish tore down what was still set up
def pytest_sessionfinish(session, exitstatus):
    if not sys.platform.startswith("linux"):
        return
    if _WORKER_LEAKS:
        _report_leaks(session, "\n".join(_WORKER_LEAKS))
    if session.config.pluginmanager.hasplugin("dsession"):
        return  # the controller: its children are the workers, which checked their own
    _close_torch_compile_workers()
    deadline = time.monotonic() + LEAK_GRACE_S
    while (left := leftover_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not left:
        return
    lines = [_describe(p) for p in left]
    for p in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, signal.SIGKILL)
    time.sleep(0.2)
    _reap_zombies()
    message = (
        f"{len(lines)} process(es) started by the tests outlived the session (killed now):\n  "
        + "\n  ".join(lines)
    )
    _report_leaks(session, message)


def _close_torch_compile_workers() -> None:
    """torch.compile's pool of compile workers (FlexAttention, ``model.compile``) belongs to torch,
    which closes it at interpreter exit, after this check: close it now, as torch would."""
    async_compile = sys.modules.get("torch._inductor.async_compile")
    if async_compile is not None:
        async_compile.shutdown_compile_workers()


def _report_leaks(session, message: str) -> None:
    """Fail the session naming the leaked processes; a worker hands them to the controller (xdist
    ignores a worker's own exit status)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["leaked_processes"] = message
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write("\n")
        reporter.write_sep("=", "leaked processes", red=True)
        reporter.write_line(message, red=True)
    else:
        sys.stderr.write(message + "\n")
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# a test needing one of these fixtures, or in one of these files, stays on one xdist worker with
# the others of its group (its id ends in @group)
_GROUP_BY_FIXTURE = {"inference_server": "vllm-session", "base_server": "vllm-session", "ray_cluster": "ray"}
_GROUP_BY_FILE = {"test_collect_ray.py": "ray", "test_collect_ray_faults.py": "ray", "test_ray.py": "ray"}


def _group(item) -> str | None:
    groups = {_GROUP_BY_FIXTURE[f] for f in getattr(item, "fixturenames", ()) if f in _GROUP_BY_FIXTURE}
    if item.path.name in _GROUP_BY_FILE:
        groups.add(_GROUP_BY_FILE[item.path.name])
    return "_".join(sorted(groups)) or None


def _place_in_groups(config, items) -> None:
    """On an xdist worker with ``--dist loadgroup``: a grouped test's id ends in ``@group``, which
    is how the controller keeps a group on one worker. xdist 3.8 writes that suffix into
    ``item._nodeid``, which pytest 9.2 no longer reads (ids live in ``item._id``), so it is written
    here, after xdist's own hook, into whichever the running pytest has."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        group = _group(item)
        if group is None or item.nodeid.endswith(f"@{group}"):
            continue
        nodeid = f"{item.nodeid}@{group}"
        if hasattr(item, "_id"):
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(nodeid)
        else:
            item._nodeid = nodeid


def pytest_collection_modifyitems(config, items):
    _place_in_groups(config, items)
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random Qwen2 model with its locally trained tokenizer (built once per session)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def server_fault_file(tmp_path_factory) -> Path:
    """The session server's fault file (``PRIME_RL_FAULT_FILE``): a test writes raise points into
    it to fail the server's next weight load at a chosen tensor (absent: no fault)."""
    return tmp_path_factory.mktemp("server-faults") / "faults"


@pytest.fixture(scope="session")
def inference_server(tiny_model, tmp_path_factory, server_fault_file):
    """One real vLLM inference server (CPU) on the tiny model for the whole test session."""
    from tests.support.servers import serving

    with serving(
        tiny_model, tmp_path_factory.mktemp("inference-run"), server_fault_file, ADMIN_TOKEN
    ) as server:
        yield server


@pytest.fixture
def base_server(inference_server, server_fault_file):
    """The session server for a test that swaps weights: disarmed and put back on its base
    weights after the test."""
    yield inference_server
    server_fault_file.unlink(missing_ok=True)
    r = httpx.post(
        f"{inference_server.base_url}/reload_weights",
        json={},
        headers=inference_server.admin_headers(),
        timeout=120,
    )
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def ray_cluster():
    """A local two-node Ray cluster shared by a test module (tests/support/ray_cluster.py), shut
    down with every raylet, GCS and worker after the module."""
    from tests.support.ray_cluster import two_node_cluster

    with two_node_cluster() as cluster:
        yield cluster
