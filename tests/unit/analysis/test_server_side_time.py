"""The time the orchestrator waits for weight updates, in parts that add up to it: the queue in front
of the server, the server's lock wait, validation and rpc (its whole handling, ``server_ms``), each
update at its slowest server; the findings' shares are of that critical path, never summed over
servers that work side by side; the servers' own queue from their /metrics, inside generation."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from tests.support.synthetic_logs import Shape, SyntheticRun, make_run

from prime_rl.tracing import format_tagged

_FIELD = re.compile(r"(\w+)=(\S+)")
_WEIGHTS = re.compile(r"^\[weights\]\[(\w+)\] (client\.done|rpc\.done) (.*)$")

Split = Callable[[float], tuple[float, float, float]]
"""A server's whole handling of an update (ms) -> (lock wait, validation, rpc) ms."""


def _server_parts(run: SyntheticRun, split: Split, server_ms: bool = True, validate_ms: bool = True) -> None:
    """Rewrite the run's updates as today's server and client log them: the synthetic update's server
    time split into lock wait, validation and rpc; rpc.done says lock_wait_ms (and validate_ms),
    client.done rpc_ms and server_ms, queue_ms = wall_ms - server_ms. ``server_ms=False``: a client
    from before the field (queue_ms = wall_ms - rpc_ms, so the lock wait and validation are in it);
    ``validate_ms=False``: a server from before that field."""
    for lines in (run.orchestrator, run.inference, *run.servers.values()):
        for i, line in enumerate(lines):
            prefix, _, message = line.partition(" | INFO    | ")
            m = _WEIGHTS.match(message)
            if not m:
                continue
            tid, event, rest = m.groups()
            fields = dict(_FIELD.findall(rest))
            total = float(fields["rpc_ms"])
            lock, validate, rpc = split(total)
            if event == "rpc.done":
                new = format_tagged(
                    "weights",
                    "rpc.done",
                    tid,
                    op="update_weights",
                    t=float(fields["t"]),
                    rpc_ms=rpc,
                    lock_wait_ms=lock,
                    validate_ms=validate if validate_ms else None,
                )
            else:
                wall = float(fields["wall_ms"])
                new = format_tagged(
                    "weights",
                    "client.done",
                    tid,
                    url=fields["url"],
                    path="/update_weights",
                    wall_ms=wall,
                    rpc_ms=rpc,
                    server_ms=total if server_ms else None,
                    queue_ms=wall - (total if server_ms else rpc),
                    attempts=1,
                )
            lines[i] = f"{prefix} | INFO    | {new}"


def _updates(run: SyntheticRun) -> list[dict[str, dict[str, float]]]:
    """Each update's client.done fields per URL, as the log has them."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for line in run.orchestrator:
        m = _WEIGHTS.match(line.partition(" | INFO    | ")[2])
        if m and m.group(2) == "client.done":
            fields = dict(_FIELD.findall(m.group(3)))
            url = fields.pop("url")
            fields.pop("path", None)
            out.setdefault(m.group(1), {})[url] = {k: float(v) for k, v in fields.items()}
    return list(out.values())


def _analyze(tmp_path, analyze, run: SyntheticRun):
    files = run.write(tmp_path / "logs")
    summary, md = analyze(files.values(), tmp_path / "out", "--async_level", "1")
    return summary, md, {s["name"]: s for s in summary["stages"]}


def _update_rows(stages: dict) -> float:
    return sum(s["total_ms"] for name, s in stages.items() if name.startswith("weight update: "))


def test_the_servers_lock_wait_and_validation_are_update_time_and_cross_update_share(tmp_path, analyze):
    # each update ~1.3 s at the server: lock wait 8%, validation 77%, rpc 15%; ~1.3 s of 3 s per step
    run = make_run("healthy", steps=20, seed=3, shape=Shape(rpc_ms=1300.0))
    _server_parts(run, lambda s: (0.08 * s, 0.77 * s, 0.15 * s))
    updates = _updates(run)
    assert len(updates) == 18
    wall = sum(u["http://h:8000"]["wall_ms"] for u in updates)
    server = sum(u["http://h:8000"]["server_ms"] for u in updates)
    summary, md, stages = _analyze(tmp_path, analyze, run)
    run_ms = summary["run_seconds"] * 1000.0
    assert 0.4 < wall / run_ms < 0.45  # 43% of the run waits for updates
    # the weight-update rows add up to the updates' wall time, the server's handling split as it said
    assert _update_rows(stages) == pytest.approx(wall, abs=2.0)
    assert stages["weight update: server validation"]["total_ms"] == pytest.approx(0.77 * server, abs=2.0)
    assert stages["weight update: server lock wait"]["total_ms"] == pytest.approx(0.08 * server, abs=2.0)
    assert stages["weight update: rpc"]["total_ms"] == pytest.approx(0.15 * server, abs=2.0)
    assert stages["weight update: queue"]["total_ms"] == pytest.approx(wall - server, abs=2.0)
    assert not any(s["process"] == "inference" for s in summary["stages"])  # no row summed over servers
    # slow_reload fires by update_share on the server's whole handling, named by its largest part
    primary = summary["primary"]
    assert primary["kind"] == "slow_reload" and primary["thresholds"] == ["update_share"]
    assert primary["share"] == pytest.approx(server / run_ms, abs=1e-3)
    assert "validating the weight dir" in primary["title"]
    assert (
        f"validation {0.77 * server / 1000:.1f} s, rpc {0.15 * server / 1000:.1f} s;" in primary["evidence"]
    )
    assert "Queue delay per weight update (client queue_ms: wall_ms - server_ms" in md
    assert "server rpc_ms)" not in md
    assert "| Server handling per weight update (client server_ms: lock wait + validation + rpc) | 18 |" in md


def test_without_the_servers_log_server_ms_less_rpc_ms_is_lock_wait_and_validation(tmp_path, analyze):
    run = make_run("healthy", steps=20, seed=3, shape=Shape(rpc_ms=1300.0))
    _server_parts(run, lambda s: (0.08 * s, 0.77 * s, 0.15 * s))
    run.inference.clear()  # the orchestrator's and the trainer's logs only
    updates = [u["http://h:8000"] for u in _updates(run)]
    server, rpc = sum(u["server_ms"] for u in updates), sum(u["rpc_ms"] for u in updates)
    files = run.write(tmp_path / "logs")
    summary, _ = analyze([files["orchestrator"], files["trainer"]], tmp_path / "out", "--async_level", "1")
    stages = {s["name"]: s for s in summary["stages"]}
    both = stages["weight update: server lock wait and validation"]
    assert both["total_ms"] == pytest.approx(server - rpc, abs=2.0)
    assert _update_rows(stages) == pytest.approx(sum(u["wall_ms"] for u in updates), abs=2.0)
    assert (
        summary["primary"]["kind"] == "slow_reload"
        and "lock wait and validation" in summary["primary"]["title"]
    )


def test_a_log_without_server_ms_keeps_rpc_ms_for_it_and_takes_the_servers_lock_wait_out_of_the_queue(
    tmp_path, analyze
):
    # an older client (queue_ms = wall_ms - rpc_ms) and server (no validate_ms): the lock wait the
    # server logs lay in the client's queue_ms, and so did its validation: the queue is the time until
    # the server received the request (client.send -> server.recv), the rest of queue_ms the server's.
    # The validation stayed in the queue, and the queue (validation in it) outweighed the server's time:
    # no slow reload, a front-end queue at 1.2 s an update
    run = make_run("healthy", steps=20, seed=3, shape=Shape(rpc_ms=1300.0))
    _server_parts(run, lambda s: (0.08 * s, 0.77 * s, 0.15 * s), server_ms=False, validate_ms=False)
    updates = [u["http://h:8000"] for u in _updates(run)]
    assert all("server_ms" not in u for u in updates)
    wall = sum(u["wall_ms"] for u in updates)
    rpc = sum(u["rpc_ms"] for u in updates)
    lock = rpc / 0.15 * 0.08
    summary, _, stages = _analyze(tmp_path, analyze, run)
    assert _update_rows(stages) == pytest.approx(wall, abs=2.0)
    assert stages["weight update: rpc"]["total_ms"] == pytest.approx(rpc, abs=2.0)
    assert stages["weight update: server lock wait"]["total_ms"] == pytest.approx(lock, abs=2.0)
    gaps = sum(u["send_to_recv_ms"] for u in summary["updates"])
    assert stages["weight update: queue"]["total_ms"] == pytest.approx(gaps, abs=2.0) and gaps < 0.01 * wall
    assert "weight update: server validation" not in stages
    both = stages["weight update: server lock wait and validation"]["total_ms"]
    assert both == pytest.approx(wall - rpc - lock - gaps, abs=2.0)
    assert (
        summary["primary"]["kind"] == "slow_reload"
        and "lock wait and validation" in summary["primary"]["title"]
    )
    assert "frontend_queue_saturation" not in {f["kind"] for f in summary["findings"]}


def test_the_lock_wait_counts_once_per_update_at_the_server_the_orchestrator_waited_for(tmp_path, analyze):
    # four servers, every update waits 150 ms for the swap lock at each of them, side by side
    run = make_run("healthy", steps=20, seed=3, shape=Shape(rpc_ms=1000.0, servers=4))
    _server_parts(run, lambda s: (150.0, 0.0, s - 150.0))
    updates = _updates(run)
    slowest = [max(u.values(), key=lambda x: x["wall_ms"]) for u in updates]
    summary, _, stages = _analyze(tmp_path, analyze, run)
    assert stages["weight update: server lock wait"]["total_ms"] == pytest.approx(18 * 150.0, abs=1.0)
    assert stages["weight update: server lock wait"]["process"] == "orchestrator"
    assert "server-side queueing (swap lock)" not in stages  # was 4 x 18 x 150 ms, summed over servers
    assert _update_rows(stages) == pytest.approx(sum(u["wall_ms"] for u in slowest), abs=2.0)


@pytest.mark.parametrize(
    ("shape", "primary"),
    [
        # s16: four servers queue ~30 s side by side at every update; was share 3.75 (375% of the run)
        (Shape(servers=4), "frontend_queue_saturation"),
        # s17: generation ~80 s per step, the trainer waits 80% of it: generation-bound comes first
        (Shape(servers=4, gen_ms=80000.0, train_wait_frac=0.8), "generation_bound"),
    ],
    ids=["queue-only", "generation-first"],
)
def test_the_front_end_queue_s_share_is_the_queue_the_orchestrator_waited_for(
    tmp_path, analyze, shape, primary
):
    run = make_run("frontend_queue_saturation", steps=20, seed=3, shape=shape)
    summary, _, stages = _analyze(tmp_path, analyze, run)
    # the synthetic client logs no server_ms: the queue in front of the server is the time until the
    # server received each update (client.send -> server.recv), at the slowest server of each
    slowest: dict[str, dict] = {}
    for u in summary["updates"]:
        if u["tid"] not in slowest or u["wall_ms"] > slowest[u["tid"]]["wall_ms"]:
            slowest[u["tid"]] = u
    waited = sum(u["send_to_recv_ms"] for u in slowest.values())
    run_ms = summary["run_seconds"] * 1000.0
    queue = next(f for f in summary["findings"] if f["kind"] == "frontend_queue_saturation")
    assert queue["share"] == pytest.approx(waited / run_ms, abs=1e-3)
    assert (
        queue["share"] == pytest.approx(stages["weight update: queue"]["share"], abs=1e-9)
        and queue["share"] < 1
    )
    assert summary["primary"]["kind"] == primary


def _waiting_share(run: SyntheticRun) -> tuple[float, float, float]:
    """From the run's ``[server] metrics`` lines (scrapes 5 s apart, no pause): the requests waiting
    over those waiting or running, each scrape's gauges standing for the interval before it; the
    preemptions and the minutes scraped, all servers together."""
    by_url: dict[str, list[tuple[float, float, float, float]]] = {}
    for line in run.orchestrator:
        stamp, _, message = line.partition(" | INFO    | ")
        if message.startswith("[server] metrics "):
            f = dict(_FIELD.findall(message))
            at = float(stamp[-6:])  # seconds of the minute: intervals come from differences
            by_url.setdefault(f["url"], []).append(
                (at, float(f["waiting"]), float(f["running"]), float(f["preemptions"]))
            )
    waiting = busy = preempted = seconds = 0.0
    for scrapes in by_url.values():
        for (t0, _, _, p0), (t1, w, r, p1) in zip(scrapes, scrapes[1:], strict=False):
            dt = (t1 - t0) % 60.0
            waiting, busy = waiting + w * dt, busy + (w + r) * dt
            preempted, seconds = preempted + p1 - p0, seconds + dt
    return waiting / busy, preempted, seconds / 60.0


def test_the_servers_queue_from_their_metrics_is_a_part_of_generation(tmp_path, analyze):
    run = make_run("kv_cache_pressure", steps=20, seed=3, shape=Shape(servers=2))
    share, preempted, minutes = _waiting_share(run)
    assert 0.2 < share < 0.6
    summary, md, stages = _analyze(tmp_path, analyze, run)
    row = stages["server-side queue (requests waiting to be scheduled)"]
    assert row["process"] == "inference"
    assert row["total_ms"] == pytest.approx(share * stages["generation"]["total_ms"], rel=1e-3)
    assert f"{100 * share:.0f}% of the requests' time at the servers" in row["how"]
    # inside generation, not beside it: the orchestrator's own rows still add up to at most the run
    assert sum(s["share"] for s in summary["stages"] if s["process"] == "orchestrator") < 1.001
    assert "The inference rows are the servers' view (from /metrics) of time inside generation" in md
    assert f"The servers preempted {preempted:.0f} requests in {minutes:.1f} min scraped" in md
    assert "/metrics gives no time for them" in md


def test_a_server_that_never_queues_has_a_queue_row_of_nothing(tmp_path, analyze):
    run = make_run("healthy", steps=20, seed=3, shape=Shape(server_metrics=True))
    summary, md, stages = _analyze(tmp_path, analyze, run)
    assert stages["server-side queue (requests waiting to be scheduled)"]["total_ms"] == 0.0
    assert "preempted" not in md.split("## Where the time goes")[1].split("##")[0]


def test_an_old_client_s_queue_ms_that_the_server_spent_validating_is_no_front_end_queue(tmp_path, analyze):
    """A client from before server_ms (queue_ms = wall_ms - rpc_ms): 18 updates of ~3 s, each received
    by the server within ~4 ms and validated there for 85% of it (rpc.done validate_ms; lock wait 5%,
    rpc 10%). Its queue_ms (mean ~2.8 s against rpc_ms ~0.3 s, 9x) made a secondary finding "Front-end
    queue saturation ... so the wait happens before the server sees the request" beside the slow
    validation. The queue in front of the server is what the server's lines leave of queue_ms (its lock
    wait and validation out, at most the time to its server.recv): ~4 ms, no such finding. Without
    the server's log nothing splits queue_ms: the finding says so instead of calling it a front-end queue."""
    run = make_run("healthy", steps=20, seed=3, shape=Shape(rpc_ms=3000.0))
    _server_parts(run, lambda s: (0.05 * s, 0.85 * s, 0.10 * s), server_ms=False)
    queue = [u["http://h:8000"]["queue_ms"] for u in _updates(run)]
    assert min(queue) > 2000 and len(queue) == 18
    summary, md, stages = _analyze(tmp_path, analyze, run)
    assert summary["primary"]["kind"] == "slow_reload" and "validating" in summary["primary"]["title"]
    assert "frontend_queue_saturation" not in {f["kind"] for f in summary["findings"]}
    assert stages["weight update: queue"]["total_ms"] < 200.0
    # the orchestrator's log alone: the same queue_ms, nothing to split it
    files = run.write(tmp_path / "alone")
    summary, md = analyze(
        [files["orchestrator"], files["trainer"]], tmp_path / "out_alone", "--async_level", "1"
    )
    (found,) = [f for f in summary["findings"] if f["kind"] == "frontend_queue_saturation"]
    assert found["title"].startswith(
        "Weight updates wait before the engine's reload: in front of the server, or"
    )
    assert "18 update(s) logged no server_ms" in found["evidence"]
    assert "before the server sees the request" not in found["evidence"]
    assert found["next"][0].startswith("Give the analyzer the inference servers' logs")
