"""``analyze-logs --trace``: the run as a Chrome/Perfetto trace; the JSON is checked against the
trace-event format (what Perfetto's importer needs), and its spans against the generated run."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

from tests.support.synthetic_logs import Shape, make_run

PHASES = {"X", "M", "b", "e"}


def check_trace_format(doc: dict) -> list[dict]:
    """Fail unless ``doc`` is a valid trace: typed fields, named processes and rows, complete
    events of one row that nest or are disjoint (Perfetto cannot draw partial overlaps), and async
    slices (a collector's samples, which overlap) each a begin then an end of its own id, in a
    named process."""
    assert set(doc) <= {"traceEvents", "displayTimeUnit", "otherData"} and doc["displayTimeUnit"] == "ms"
    events = doc["traceEvents"]
    named_pids, named_rows = set(), set()
    slices = defaultdict(list)
    begun: dict[tuple[str, int], dict] = {}
    for e in events:
        assert e["ph"] in PHASES and isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] in ("b", "e"):
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0 and isinstance(e["id"], int)
            key = (e["cat"], e["id"])
            if e["ph"] == "b":
                assert key not in begun and isinstance(e["args"], dict)
                begun[key] = e
            else:
                b = begun.pop(key)
                assert (b["name"], b["pid"]) == (e["name"], e["pid"]) and b["ts"] <= e["ts"]
                assert b["pid"] in named_pids, b
            continue
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name")
            if e["name"] == "process_name":
                named_pids.add(e["pid"])
            if e["name"] == "thread_name":
                named_rows.add((e["pid"], e["tid"]))
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0 and isinstance(e["args"], dict)
        slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for (pid, tid), spans in slices.items():
        assert pid in named_pids and (pid, tid) in named_rows, (pid, tid)
        open_ends: list[float] = []  # a stack of the enclosing slices' ends
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start + 1e-6:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + 1e-6, f"partial overlap on {(pid, tid)} at {start}"
            open_ends.append(end)
    assert not begun, begun
    return events


def test_the_trace_holds_every_process_on_one_axis(tmp_path, analyze):
    run = make_run("healthy", steps=8, seed=4, shape=Shape(servers=2))
    files = run.write(tmp_path / "logs")
    summary, _ = analyze(files.values(), tmp_path / "out", "--trace")
    events = check_trace_format(json.loads((tmp_path / "out" / "trace.json").read_text()))
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(processes.values()) == [
        "inference http://h1:8000",
        "inference http://h:8000",
        "orchestrator",
        "trainer",
    ]
    kinds = Counter(e["cat"] for e in events if e["ph"] == "X")
    text = "\n".join(f.read_text() for f in files.values())
    assert kinds["gen"] == text.count("[gen] batch.done")
    assert kinds["train"] == text.count("[train] step.done")
    assert kinds["ckpt_write"] == text.count("[ckpt] write.done")
    # one client slice per update and server (plus its nested queue slice), one server rpc each
    tids = set(re.findall(r"\[weights\]\[(\w+)\] client\.send", text))
    assert kinds["rpc"] == len(summary["updates"]) == 2 * len(tids) > 0
    client = [e for e in events if e.get("cat") == "update" and e["name"].startswith("update ")]
    assert len(client) == len(summary["updates"])
    starts = [e["ts"] for e in events if e["ph"] == "X"]
    assert min(starts) == 0  # the run's first event


def test_the_flag_comes_anywhere_and_a_run_without_spans_gives_an_empty_trace(tmp_path, analyze):
    run = make_run("healthy", steps=4, seed=1)
    files = run.write(tmp_path / "logs")
    analyze(["--trace", *files.values()], tmp_path / "out")
    assert check_trace_format(json.loads((tmp_path / "out" / "trace.json").read_text()))
    empty = tmp_path / "empty.log"
    empty.write_text("nothing tagged here\n")
    analyze([empty], tmp_path / "out2", "--trace")
    assert json.loads((tmp_path / "out2" / "trace.json").read_text())["traceEvents"] == []


def test_a_long_runs_trace_holds_its_first_and_last_updates_and_spans_and_counts_the_rest(
    tmp_path, analyze, monkeypatch, capsys
):
    from prime_rl.analysis import stats

    monkeypatch.setattr(stats, "SPANS_KEPT", 3)
    run = make_run("healthy", steps=12, seed=2, shape=Shape(servers=2))
    summary, _ = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out", "--trace")
    doc = json.loads((tmp_path / "out" / "trace.json").read_text())
    events = check_trace_format(doc)
    updates = [u["tid"] for u in summary["updates"]]
    assert len(updates) == 20  # one per server (2) and step from step 2 on
    client = [e["name"] for e in events if e.get("cat") == "update" and e["name"].startswith("update ")]
    assert client == [f"update {tid}" for tid in updates[:3] + updates[-3:]]
    assert [e["name"] for e in events if e.get("cat") == "rpc"] == [
        f"rpc {t}" for t in updates[:3] + updates[-3:]
    ]
    gens = [e for e in events if e.get("cat") == "gen"]
    assert len(gens) == 6 and summary["spans_dropped"]["gen"] == 12 - 6
    left_out = doc["otherData"]["left_out"]
    assert left_out["update"] == 20 - 6 and left_out["gen"] == 12 - 6 and left_out["train"] == 12 - 6
    printed = capsys.readouterr().out
    assert "the trace holds the first and last 3 of each kind" in printed and "14 update" in printed
    # the processes are named after every server, kept updates or not
    names = sorted(e["args"]["name"] for e in events if e["name"] == "process_name")
    assert names == ["inference http://h1:8000", "inference http://h:8000", "orchestrator", "trainer"]


def test_trainer_steps_are_compute_with_forward_backward_and_optimizer_nested_and_the_wait_before():
    from prime_rl.analysis.parser import Event, ParseStats
    from prime_rl.analysis.stats import collect
    from prime_rl.analysis.trace import trace_events

    def ev(event, ts, **fields):
        return Event("train", event, None, {k: str(v) for k, v in fields.items()}, ts, "trainer")

    events = [
        ev("compute.done", 10.0, step=1, train_ms=1000.0, fwd_bwd_ms=700.0, optim_ms=200.0),
        ev("step.done", 12.0, step=1, wait_ms=500.0, train_ms=1000.0, write_ms=1500.0),
        ev("step.done", 20.0, step=2, wait_ms=0.0, train_ms=1000.0, write_ms=1500.0),  # no compute.done
    ]
    d = collect(iter(events), ParseStats())
    spans = sorted((s.kind, s.start, s.end) for s in d.spans)
    assert spans == [
        ("train", 9.0, 10.0),
        ("train", 17.5, 18.5),  # an older trainer: the compute ended write_ms before step.done
        ("train_fwd_bwd", 9.0, 9.7),
        ("train_optim", 9.8, 10.0),
        ("train_wait", 8.5, 9.0),
    ]
    doc = {"traceEvents": list(trace_events(d)), "displayTimeUnit": "ms"}
    slices = [e for e in check_trace_format(doc) if e["ph"] == "X"]
    rows = {(e["cat"], e["tid"]) for e in slices}
    assert rows == {("train", 1), ("train_fwd_bwd", 1), ("train_optim", 1), ("train_wait", 2)}
    assert min(e["ts"] for e in slices) == 0  # the wait, the first thing the trainer did


def _collector_log(path, samples) -> None:
    """A collect-rollouts log: each sample (event, its end in seconds after 12:00:00, dur_ms, status,
    url) as the collector writes it, when it ends."""
    from prime_rl.tracing import format_tagged

    lines = []
    for k, (event, end, dur, status, url) in enumerate(samples):
        tagged = format_tagged(
            "collect",
            event,
            f"s{k:03d}",
            task=k,
            repeat=0,
            status=status,
            dur_ms=dur,
            **({"url": url} if url else {}),
        )
        lines.append(f"2026-01-01 12:{int(end) // 60:02d}:{end % 60:06.3f} | INFO    | {tagged}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_a_collector_s_samples_are_a_track_per_server_the_failed_ones_apart(
    tmp_path, analyze, monkeypatch, capsys
):
    """A collector's trace held none of its samples (only the trio's spans were written). Each kept
    sample (the first and last SAMPLES_KEPT, as timeline.txt) is now an async slice of its server's
    process, from its line's time less its dur_ms to the line: a track "sample", and one "failed
    sample" for rollout.failed lines (status 200 too: a malformed answer); verify.done lines are a
    track "verification" of the offline collector; the samples left out are counted."""
    from prime_rl.analysis import stats
    from prime_rl.tracing import format_tagged

    monkeypatch.setattr(stats, "SAMPLES_KEPT", 3)
    a, b = "http://a:8000", "http://b:8000"
    samples = [
        ("rollout.done", 2.0, 2000.0, 200, a),  # s000: 0-2 s
        ("rollout.done", 3.0, 2500.0, 200, b),  # s001: 0.5-3 s
        ("rollout.failed", 3.5, 1000.0, "conn", a),  # s002: 2.5-3.5 s, overlaps nothing of a's
        ("rollout.done", 10.0, 1000.0, 200, a),  # s003, s004: left out
        ("rollout.done", 11.0, 1000.0, 200, b),
        ("rollout.failed", 20.0, 4000.0, 200, b),  # s005: 16-20 s, a malformed answer
        ("rollout.done", 21.0, 6000.0, 200, a),  # s006: 15-21 s
        ("rollout.done", 22.0, 3000.0, 200, None),  # s007: 19-22 s, no server named
    ]
    log = tmp_path / "collect.log"
    _collector_log(log, samples)
    verify = format_tagged("collect", "verify.done", None, task=1, repeat=0, dur_ms=1500.0)
    log.write_text(log.read_text() + f"2026-01-01 12:00:30.000 | INFO    | {verify}\n")
    summary, _ = analyze([log], tmp_path / "out", "--trace")
    doc = json.loads((tmp_path / "out" / "trace.json").read_text())
    events = check_trace_format(doc)
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    got = [
        (processes[e["pid"]], e["name"], e["args"]["label"], e["ts"] / 1e6, e["args"].get("status"))
        for e in events
        if e["ph"] == "b"
    ]
    ends = {(e["cat"], e["id"]): e["ts"] / 1e6 for e in events if e["ph"] == "e"}
    got_ends = [ends[(e["cat"], e["id"])] for e in events if e["ph"] == "b"]
    assert got == [
        ("inference http://a:8000", "sample", "sample s000", 0.0, "200"),
        ("inference http://b:8000", "sample", "sample s001", 0.5, "200"),
        ("inference http://a:8000", "failed sample", "sample s002", 2.5, "conn"),
        ("inference http://a:8000", "sample", "sample s006", 15.0, "200"),
        ("inference http://b:8000", "failed sample", "sample s005", 16.0, "200"),
        ("inference server", "sample", "sample s007", 19.0, "200"),
        ("offline collector", "verification", "verification task=1 repeat=0", 28.5, None),
    ]
    assert got_ends == [2.0, 3.0, 3.5, 21.0, 20.0, 22.0, 30.0]
    assert doc["otherData"]["left_out"] == summary["spans_dropped"] == {"sample": 2}
    assert "the trace holds the first and last 3 of each kind; 2 sample left out" in capsys.readouterr().out


def test_a_collector_s_samples_on_a_trio_s_server_join_its_process(tmp_path, analyze):
    """Analysed with a trio's logs, samples answered by one of its servers are a track of that
    server's process, beside its weight updates' rpc row; a server only the collector named gets a
    process of its own."""
    run = make_run("healthy", steps=4, seed=1)
    files = run.write(tmp_path / "trio")
    _collector_log(
        tmp_path / "collect.log",
        [
            ("rollout.done", 2.0, 1000.0, 200, "http://h:8000"),
            ("rollout.done", 3.0, 1000.0, 200, "http://z:1"),
        ],
    )
    analyze([*files.values(), tmp_path / "collect.log"], tmp_path / "out", "--trace")
    events = check_trace_format(json.loads((tmp_path / "out" / "trace.json").read_text()))
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    on = {e["args"]["label"]: processes[e["pid"]] for e in events if e["ph"] == "b"}
    assert on == {"sample s000": "inference http://h:8000", "sample s001": "inference http://z:1"}
    rpc = {processes[e["pid"]] for e in events if e.get("cat") == "rpc"}
    assert rpc == {"inference http://h:8000"}
    rows = {
        (processes[e["pid"]], e["args"]["name"])
        for e in events
        if e["name"] == "thread_name" and e["pid"] >= 10
    }
    assert rows == {("inference http://h:8000", "weight update rpc (server side)")}


def test_a_verify_pass_names_no_server_of_its_own(tmp_path, analyze):
    """A verify pass's verify.done lines name no server: they are the offline collector's track. Its
    verifications were counted among the servers too (a span without a URL is server "server"), so
    the trace named an empty process "inference server" beside the two servers its samples named;
    and a collector's trace named the trio's processes and rows, empty ("orchestrator", "trainer").
    Only processes with events are named now."""
    from prime_rl.tracing import format_tagged

    a, b = "http://a:8000", "http://b:8000"
    log = tmp_path / "collect.log"
    _collector_log(log, [("rollout.done", 2.0, 2000.0, 200, a), ("rollout.done", 3.0, 2500.0, 200, b)])
    verify = format_tagged("collect", "verify.done", None, task=1, repeat=0, dur_ms=1500.0)
    log.write_text(log.read_text() + f"2026-01-01 12:00:30.000 | INFO    | {verify}\n")
    analyze([log], tmp_path / "out", "--trace")
    events = check_trace_format(json.loads((tmp_path / "out" / "trace.json").read_text()))
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    used = {e["pid"] for e in events if e["ph"] != "M"}
    assert set(processes) == used
    assert set(processes.values()) == {
        "inference http://a:8000",
        "inference http://b:8000",
        "offline collector",
    }
    rows = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    assert rows <= {(e["pid"], e["tid"]) for e in events if e["ph"] != "M"}
