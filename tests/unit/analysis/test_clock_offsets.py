"""A server log on a clock of its own (another time zone, a clock not synced) is named, and the
run's length is measured on the orchestrator's clock. Before, an inference log two hours ahead
made a checkpoint-bound run two hours longer: "no bottleneck found", and no warning."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

import polars as pl
import pytest
from tests.support.synthetic_logs import Shape, make_run

from prime_rl.analysis.clock_offsets import (
    CLIENT_SAMPLE,
    PROBE,
    ClockProbe,
    Sample,
    offsets_of,
    probe_lines,
    tid_hashes,
)
from prime_rl.tracing import format_tagged


def _shifted(lines: list[str], seconds: float) -> list[str]:
    """Log lines in loguru's file format with their times moved by ``seconds``."""
    out = []
    for line in lines:
        when = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f") + timedelta(seconds=seconds)
        out.append(when.strftime("%Y-%m-%d %H:%M:%S.%f")[:23] + line[23:])
    return out


@pytest.mark.parametrize("offset_s", [7200.0, -10800.0])
def test_an_inference_log_hours_off_is_named_and_the_run_measured_on_the_orchestrators_clock(
    tmp_path, analyze, offset_s
):
    expected, _ = analyze(
        make_run("checkpoint_io", steps=20).write(tmp_path / "same").values(), tmp_path / "a"
    )
    run = make_run("checkpoint_io", steps=20)
    run.inference = _shifted(run.inference, offset_s)
    files = run.write(tmp_path / "off")
    summary, md = analyze(files.values(), tmp_path / "b")
    assert expected["primary"]["kind"] == summary["primary"]["kind"] == "checkpoint_io"
    assert summary["run_seconds"] == pytest.approx(expected["run_seconds"], abs=0.01)
    ((log, got),) = summary["clock_offsets"].items()
    assert log == str(files["inference"]) and got["updates"] == 18
    assert got["seconds"] == pytest.approx(offset_s, abs=1.0)
    side = "ahead of" if offset_s > 0 else "behind"
    assert f"{files['inference']} is {abs(offset_s):.0f} s {side} it (measured on 18 update(s))" in md
    assert expected["clock_offsets"] == {}
    # joined on the orchestrator's clock: a server behind received every update "before" it was
    # sent and was paired with none; the send -> receipt gap is the network's again
    for key in ("server_rpc_ms", "send_to_recv_ms"):
        assert summary["stats"][key]["count"] == expected["stats"][key]["count"] == 18
    assert summary["stats"]["send_to_recv_ms"]["max"] == pytest.approx(
        expected["stats"]["send_to_recv_ms"]["max"]
    )


def test_clocks_a_few_seconds_apart_and_one_server_of_several_off(tmp_path, analyze):
    """NTP-level differences (here 2 s) are no offset; with four servers only the one whose clock
    is off is named, whichever log is read first."""
    run = make_run("healthy", steps=20, shape=Shape(servers=4))
    run.inference = _shifted(run.inference, 2.0)
    run.servers["inference_2"] = _shifted(run.servers["inference_2"], 3600.0)
    files = run.write(tmp_path / "logs")
    summary, _ = analyze(reversed(list(files.values())), tmp_path / "out")
    assert list(summary["clock_offsets"]) == [str(files["inference_2"])]
    assert summary["clock_offsets"][str(files["inference_2"])]["seconds"] == pytest.approx(3600.0, abs=1.0)


def _updates_log(root, servers: list[dict], n: int = 20, retry_after_s: float | None = None) -> list:
    """An orchestrator log of ``n`` weight updates, each sent to every server of ``servers`` (per
    server: ``queue`` and ``rpc`` seconds, ``off``: its clock's offset), and each server's log; with
    ``retry_after_s`` the first server's first attempt fails on connect and is sent again that much
    later."""
    start = datetime(2026, 1, 1, 12).timestamp()

    def line(wall: float, text: str) -> str:
        return datetime.fromtimestamp(wall).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + f" | INFO    | {text}"

    orchestrator, logs = [], [[] for _ in servers]
    for i in range(n):
        wall, lines = start + 60.0 * i, []
        lines.append(
            (wall - 1, orchestrator, format_tagged("ckpt", "wait.done", target_step=i, wait_ms=500.0))
        )
        for k, server in enumerate(servers):
            url, send, tid = f"http://h{k}:8000", wall, f"u{i:04d}"
            if retry_after_s is not None and k == 0:
                lines.append(
                    (send, orchestrator, format_tagged("weights", "client.send", tid, url=url, attempt=1))
                )
                send += retry_after_s
            lines.append(
                (send, orchestrator, format_tagged("weights", "client.send", tid, url=url, attempt=2))
            )
            recv = send + server["queue"]
            done = recv + server["rpc"]
            off = server.get("off", 0.0)
            lines.append(
                (recv + off, logs[k], format_tagged("weights", "server.recv", tid, path="/update_weights"))
            )
            rpc_ms = server["rpc"] * 1000.0
            lines.append((done + off, logs[k], format_tagged("weights", "rpc.done", tid, rpc_ms=rpc_ms)))
            wall_ms = (done - send) * 1000.0
            if "timeout" in server:  # the client gives up before the server is done
                error = format_tagged("weights", "client.error", tid, url=url, error="timeout")
                lines.append((send + server["timeout"], orchestrator, error))
                continue
            lines.append(
                (
                    done,
                    orchestrator,
                    format_tagged("weights", "client.done", tid, url=url, wall_ms=wall_ms, rpc_ms=rpc_ms),
                )
            )
        for when, log, text in sorted(lines, key=lambda x: x[0]):
            log.append(line(when, text))
    paths = [root / "orchestrator.log"] + [root / f"inference_{k}.log" for k in range(len(servers))]
    root.mkdir(parents=True, exist_ok=True)
    for path, lines in zip(paths, [orchestrator, *logs], strict=True):
        path.write_text("\n".join(lines) + "\n")
    return paths


def test_a_saturated_server_and_retried_updates_on_clocks_in_step_are_no_offset(tmp_path, analyze):
    """A server whose receipts come 30 s late (its queue) beside one that answers at once, and first
    attempts retried 12 s later: on clocks in step every update's bounds hold 0. Before, the median
    receipt gap against the first send and the client's wall_ms called the saturated server "30 s
    ahead" and the retried one "12 s ahead", and unpaired 7 of their updates."""
    servers = [dict(queue=0.005, rpc=0.2), dict(queue=30.0, rpc=0.2)]
    paths = _updates_log(tmp_path / "logs", servers, retry_after_s=12.0)
    summary, md = analyze(paths, tmp_path / "out")
    assert summary["clock_offsets"] == {} and "clock is off" not in md
    assert summary["stats"]["server_rpc_ms"]["count"] == 40
    # a client that times out at 60 s while the server finishes at 90 s: its client.error is no
    # bound on the server's finish (before: "30 s ahead", and its 20 updates unpaired)
    paths = _updates_log(
        tmp_path / "timeout", [dict(queue=0.005, rpc=0.2), dict(queue=0.005, rpc=90.0, timeout=60.0)]
    )
    summary, _ = analyze(paths, tmp_path / "out_timeout")
    assert summary["clock_offsets"] == {}
    paths = _updates_log(
        tmp_path / "off", [dict(queue=0.005, rpc=0.2), dict(queue=30.0, rpc=0.2, off=-900.0)]
    )
    summary, _ = analyze(paths, tmp_path / "out_off")
    assert list(summary["clock_offsets"]) == [str(paths[2])]
    # by the reply side: the receipts' side carries the 30 s queue (-870 s), which would hide it
    assert summary["clock_offsets"][str(paths[2])]["seconds"] == pytest.approx(-900.0, abs=0.01)
    assert summary["stats"]["send_to_recv_ms"]["max"] == pytest.approx(30000.0, abs=1.0)
    assert summary["stats"]["server_rpc_ms"]["count"] == 40


def test_the_rotated_parts_of_a_log_off_are_measured_and_moved_together(tmp_path, analyze):
    """The older part holds 18 of the 20 updates, the live part 2: both are moved (before, only the
    part with enough updates was, and the other kept the run two hours long)."""
    expected, _ = analyze(
        make_run("checkpoint_io", steps=20).write(tmp_path / "same").values(), tmp_path / "a"
    )
    run = make_run("checkpoint_io", steps=20)
    shifted = _shifted(run.inference, 7200.0)
    cut = len(shifted) - 6
    files = run.write(tmp_path / "off")
    (tmp_path / "off" / "inference.log.1").write_text("\n".join(shifted[:cut]) + "\n")
    files["inference"].write_text("\n".join(shifted[cut:]) + "\n")
    summary, _ = analyze([tmp_path / "off"], tmp_path / "b")
    assert summary["primary"]["kind"] == "checkpoint_io"
    assert summary["run_seconds"] == pytest.approx(expected["run_seconds"], abs=0.01)
    assert list(summary["clock_offsets"]) == [str(files["inference"].resolve())]


def test_a_queue_saturated_run_off_keeps_every_update_paired(tmp_path, analyze):
    """The offset is read from the reply side (rpc.done against the client's reply, milliseconds
    apart), not from the receipts, which carry the queue: moved by it, no receipt lands before its
    send (before, 8 of 18 updates lost their server part)."""
    expected, _ = analyze(
        make_run("frontend_queue_saturation", steps=20).write(tmp_path / "same").values(), tmp_path / "a"
    )
    run = make_run("frontend_queue_saturation", steps=20)
    run.inference = _shifted(run.inference, 7200.0)
    summary, _ = analyze(run.write(tmp_path / "off").values(), tmp_path / "b")
    assert summary["primary"]["kind"] == expected["primary"]["kind"] == "frontend_queue_saturation"
    ((_, got),) = summary["clock_offsets"].items()
    assert got["seconds"] == pytest.approx(7200.0, abs=1.0)
    for key in ("server_rpc_ms", "send_to_recv_ms"):
        assert summary["stats"][key]["count"] == expected["stats"][key]["count"]


def test_times_that_are_no_number_are_not_measured():
    """Events made by hand can carry NaN or inf times: those updates are not measured (before, the
    offset came out inf)."""
    sent = {"a": 0.0, "b": math.nan, "c": 0.0, "d": 0.0}
    replied = {"a": 1.0, "b": 1.0, "c": 1.0, "d": -math.inf}
    received = {"s.log": {"a": -100.0, "b": -100.0, "c": math.inf, "d": -100.0}}
    finished = {"s.log": {"a": -99.5, "b": -99.5, "c": -99.5, "d": math.nan}}
    assert offsets_of(sent, replied, received, finished) == {}  # 2 finite receipt gaps: too few to judge
    sent["e"], replied["e"], received["s.log"]["e"], finished["s.log"]["e"] = 0.0, 1.0, -100.0, -99.5
    assert offsets_of(sent, replied, received, finished) == {"s.log": (-100.5, 4)}  # 4 finite finish gaps


def test_a_server_log_that_starts_late_in_a_long_run_is_measured(tmp_path, analyze):
    """Two servers; the second's log holds only the updates of steps 1,100 and on (its older parts
    gone) and is an hour ahead. Before, the probe kept the client's first 1,024 trace ids, none of
    which that log received: it was not measured, and the run came out an hour long."""
    run = make_run("healthy", steps=1300, shape=Shape(servers=2))
    late = [x for x in run.servers["inference_1"] if int(x.split("[weights][t")[1][:4]) >= 1100]
    run.servers["inference_1"] = _shifted(late, 3600.0)
    files = run.write(tmp_path / "logs")
    summary, _ = analyze(files.values(), tmp_path / "b")
    got = summary["clock_offsets"][str(files["inference_1"])]
    assert got["updates"] == 200 and got["seconds"] == pytest.approx(3600.0, abs=1.0)
    assert summary["run_seconds"] < 3600


def test_the_trace_ids_sampled_are_the_head_and_those_the_hash_picks_in_any_order():
    """A :class:`Sample` keeps the first ``head`` ids, and of the others those whose hash is a
    multiple of the least power of two that keeps at most ``cap`` of them, each with the entry of
    its first line: in line order, and with the lines shuffled (the head then the shuffle's)."""
    rng = random.Random(3)
    lines = [(f"t{rng.randrange(3000)}", float(i)) for i in range(6000)]
    ids = sorted({t for t, _ in lines})
    hashes = dict(zip(ids, tid_hashes(pl.Series(ids)), strict=True))
    for order in (lines, rng.sample(lines, len(lines))):
        first: dict[str, float] = {}
        for tid, ts in order:
            first.setdefault(tid, ts)
        head = list(first)[:100]
        rest = [t for t in first if t not in set(head)]
        every = 1
        while sum(hashes[t] % every == 0 for t in rest) > 500:
            every *= 2
        expected = {t: [first[t]] for t in head + [t for t in rest if hashes[t] % every == 0]}
        sample = Sample(500, head=100)
        for tid, ts in order:
            sample.add(tid, hashes[tid], [ts])
        assert sample.every == every > 1 and sample.entries == expected


def _client_and_server(
    tids: list[str], server_tids: list[str], off: float
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The probe's frames: each update sent at i s and answered 0.5 s later; the server's receipts
    (0.1 s after the send) and rpc.done (0.4 s) on a clock ``off`` seconds ahead."""
    at = {t: float(i) for i, t in enumerate(tids)}
    client = pl.DataFrame(
        {
            "event": ["client.send", "client.done"] * len(tids),
            "tid": [t for t in tids for _ in range(2)],
            "ts": [at[t] + d for t in tids for d in (0.0, 0.5)],
        }
    )
    server = pl.DataFrame(
        {
            "event": ["server.recv", "rpc.done"] * len(server_tids),
            "tid": [t for t in server_tids for _ in range(2)],
            "ts": [at[t] + d + off for t in server_tids for d in (0.1, 0.4)],
            "source": ["/logs/inference_1.log"] * (2 * len(server_tids)),
        }
    )
    return client, server


@pytest.mark.parametrize("server_at", ["first 20", "last 2000"])
def test_a_short_early_log_and_a_long_late_one_are_measured_in_a_run_of_40000_updates(server_at):
    """40,000 updates, their client lines in batches of 4,096: the client keeps its first 1,024
    trace ids and a hash sample of the rest. A server log of the first 20 updates shares all of
    them; one of the last 2,000 shares the sample (about 2,000 / 16)."""
    tids = [f"u{i}" for i in range(40000)]
    server_tids = tids[:20] if server_at == "first 20" else tids[-2000:]
    client, server = _client_and_server(tids, server_tids, 3600.0)
    probe = ClockProbe()
    for start in range(0, client.height, 4096):
        probe.add(probe_lines(client.slice(start, 4096), None))
    probe.add(probe_lines(None, server))
    ((log, (off, n)),) = probe.offsets().items()
    assert log == "/logs/inference_1.log" and off == pytest.approx(3600.0 - 0.1, abs=1e-6)
    assert n == 20 if server_at == "first 20" else 60 <= n <= 250
    assert probe.sent.every > 1 and len(probe.sent.entries) <= CLIENT_SAMPLE + PROBE


@pytest.mark.parametrize("offset_s", [7200.0, -7200.0])
def test_logs_read_mid_batch_with_an_inference_log_off_are_no_stall(tmp_path, analyze, offset_s):
    """The stall rules read the logs' ends on the orchestrator's clock: an inference log two hours
    ahead made the logs end two hours after a batch that had just started ("generation of step 9
    never finished ... 7200 s to the end of the logs")."""
    run = make_run("healthy", steps=12, seed=4)
    start = next(x for x in run.orchestrator if "batch.start step=9" in x)
    cut = (datetime.strptime(start[:23], "%Y-%m-%d %H:%M:%S.%f") + timedelta(seconds=0.5)).strftime(
        "%Y-%m-%d %H:%M:%S.%f"
    )[:23]
    for name in ("orchestrator", "trainer", "inference"):
        setattr(run, name, [x for x in getattr(run, name) if x[:23] <= cut])
    run.inference = _shifted(run.inference, offset_s)
    summary, _ = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    assert summary["clock_offsets"], "the offset is measured"
    assert not any(f["kind"] == "stall" for f in summary["findings"]), summary["findings"]
