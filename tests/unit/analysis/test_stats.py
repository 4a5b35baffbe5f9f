"""Collection: events into series, counts and spans; weight updates joined by trace id; statistics."""

from __future__ import annotations

import statistics
from array import array

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.synthetic_logs import make_run

from prime_rl.analysis.parser import Event, ParseStats
from prime_rl.analysis.stats import collect, describe


def ev(tag, event, tid=None, ts=None, **fields):
    return Event(tag, event, tid, {k: str(v) for k, v in fields.items()}, ts, "orchestrator")


def test_describe_empty_and_single():
    assert describe([]) == {"count": 0}
    assert describe([float("nan")]) == {"count": 0}
    one = describe([3.0])
    assert one["count"] == 1 and one["stddev"] == 0.0 and one["p50"] == one["p99"] == one["max"] == 3.0


def test_events_fill_series_counts_and_spans():
    events = [
        ev("ckpt", "wait.start", ts=100.0, target_step=1),
        ev("ckpt", "wait.done", ts=102.0, target_step=1, wait_ms=2000),
        ev("ckpt", "write.done", ts=101.5, step=1, write_ms=500),
        ev("gen", "batch.start", ts=102.0, step=2),
        ev("gen", "request.retry", ts=102.5, status=429, wait_ms=300),
        ev("gen", "batch.done", ts=104.0, step=2, completions=8, dur_ms=2000),
        ev("verify", "batch.done", ts=104.1, dur_ms=40),
        ev("rollout", "", ts=104.2, trunc_pct=5, staleness=1),
        ev("train", "step.done", ts=105.0, wait_ms=10, train_ms=900),
        ev("collect", "rollout.done", "c1", ts=106.0, dur_ms=70, queue_ms=5, gen_ms=50, verify_ms=15),
        ev("collect", "rollout.retry", "c2", ts=107.0, status=429, dur_ms=20),  # an older collector's 429
        ev("collect", "request.retry", "c3", ts=107.5, status="conn", wait_ms=100),
    ]
    d = collect(iter(events), ParseStats(), async_level=1)
    s = {k: list(v) for k, v in d.series.items()}
    assert s["ckpt_wait_ms"] == [2000.0] and s["write_ms"] == [500.0] and s["gen_dur_ms"] == [2000.0]
    assert s["verify_dur_ms"] == [40.0] and s["trunc_pct"] == [5.0] and s["staleness"] == [1.0]
    assert s["train_wait_ms"] == [10.0] and s["train_ms"] == [900.0]
    assert (
        s["collect_ms"] == [70.0, 20.0] and s["collect_gen_ms"] == [50.0] and s["collect_verify_ms"] == [15.0]
    )
    assert s["retry_wait_ms"] == [300.0, 100.0]
    assert d.counts["completions"] == 9 and d.counts["retry.429"] == 2 and d.counts["retry.conn"] == 1
    assert d.counts["gen.batch.done"] == 1 and d.counts["rollout.-"] == 1
    assert [(sp.kind, sp.start, sp.end) for sp in d.spans] == [
        ("ckpt_wait", 100.0, 102.0),
        ("ckpt_write", 101.0, 101.5),
        ("gen", 102.0, 104.0),
        ("train_wait", pytest.approx(104.09), pytest.approx(104.1)),  # the step's line ends its compute
        ("train", pytest.approx(104.1), 105.0),
        # a collector's samples, each line with a dur_ms (what keeps a slot busy: collect_ms)
        ("sample", pytest.approx(105.93), 106.0),
        ("sample", pytest.approx(106.98), 107.0),
    ]
    assert d.run_seconds == 7.5 and d.run_ms == 7500.0 and d.async_level == 1 and not d.updates
    assert d.stat("gen_dur_ms", "p50") == 2000.0 and d.stat("queue_ms", "p50") is None
    assert d.total("collect_ms") == 90.0


def test_client_and_server_lines_join_into_one_update():
    events = [
        ev("weights", "client.send", "t1", ts=10.0, path="/update_weights", url="http://h", t=1.0),
        ev("weights", "server.recv", "t1", ts=10.5, path="/update_weights", t=1.5),
        ev("weights", "rpc.start", "t1", ts=10.5, target="step_1"),
        ev("weights", "rpc.done", "t1", ts=10.7, rpc_ms=200),
        ev("weights", "client.done", "t1", ts=10.7, wall_ms=700, rpc_ms=200),
        ev("weights", "client.send", "t2", ts=20.0, path="/pause"),  # not a weight update
    ]
    d = collect(iter(events), ParseStats())
    (u,) = d.updates
    assert (u.tid, u.queue_ms, u.server_rpc_ms, u.target, u.failed) == ("t1", 500.0, 200.0, "step_1", False)
    assert u.send_to_recv_ms == 500.0 and u.start == 10.0 and u.end == 10.7
    assert list(d.series["queue_ms"]) == [500.0] and list(d.series["send_to_recv_ms"]) == [500.0]
    assert [sp.kind for sp in d.spans] == ["update"]


def test_statistics_match_an_independent_computation(tmp_path, analyze):
    run = make_run("healthy", steps=40, seed=3)
    files = run.write(tmp_path / "logs")
    summary, _ = analyze(files.values(), tmp_path / "out")
    for key in ("queue_ms", "rpc_ms", "ckpt_wait_ms", "gen_dur_ms", "write_ms", "verify_dur_ms", "staleness"):
        vals = run.values[key]
        st = summary["stats"][key]
        assert st["count"] == len(vals), key
        assert st["mean"] == pytest.approx(statistics.fmean(vals), abs=1e-6), key
        assert st["stddev"] == pytest.approx(statistics.stdev(vals), abs=1e-6), key
        assert st["min"] == min(vals) and st["max"] == max(vals)
        for q in (50, 95, 99):
            assert st[f"p{q}"] == pytest.approx(float(np.percentile(vals, q)), abs=1e-6), (key, q)
    text = (tmp_path / "out" / "queue_ms_stats.txt").read_text()
    assert f"count:   {len(run.values['queue_ms'])}" in text and "p99:" in text


def test_trace_ids_repeated_across_appended_runs_are_joined_per_run(tmp_path, analyze):
    """Logs appended over two runs reuse trace ids: each client.send pairs with its own server lines."""
    first = make_run("frontend_queue_saturation", steps=6, seed=8)
    second = make_run("healthy", steps=6, seed=9, start_offset_s=3600.0)
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("orchestrator", "inference"):
        lines = getattr(first, name) + getattr(second, name)
        (logs / f"{name}.log").write_text("\n".join(lines) + "\n")
    summary, _ = analyze([logs / "orchestrator.log", logs / "inference.log"], tmp_path / "out")
    updates = summary["updates"]
    assert len(updates) == len(first.values["queue_ms"]) + len(second.values["queue_ms"])
    gaps = [u["send_to_recv_ms"] for u in updates]
    assert all(g is not None and 0 <= g < 60_000 for g in gaps), (
        gaps
    )  # never across the hour between the runs


def test_the_trainers_start_up_wait_is_not_counted_as_waiting_for_rollouts():
    # step 0 waits while the servers start and the first batch is made: nothing could overlap it
    events = [
        ev("train", "step.done", ts=40.0, step=0, wait_ms=35000, train_ms=1500),
        ev("train", "step.done", ts=42.0, step=1, wait_ms=0, train_ms=1600),
        ev("train", "step.done", ts=44.0, step=2, wait_ms=20, train_ms=1600),
    ]
    d = collect(iter(events), ParseStats(), async_level=1)
    assert list(d.series["train_wait_ms"]) == [0.0, 20.0] and list(d.series["train_ms"]) == [
        1500.0,
        1600.0,
        1600.0,
    ]
    assert d.counts["train_startup_wait_ms"] == 35000


def test_episode_lines_from_the_orchestrators_formatter_become_environment_series(tmp_path):
    from prime_rl.analysis.analyze import analyze
    from prime_rl.analysis.parser import ParseStats, parse_files
    from prime_rl.analysis.thresholds import Thresholds
    from prime_rl.tracing import format_tagged

    lines = []
    for i in range(6):  # tools take 4x the generation time of each episode
        fields = dict(step=1, task=i, turns=3, outcome="done" if i else "max_turns", reward=0.5)
        line = format_tagged(
            "env",
            "episode.done",
            **fields,
            env_ms=800.0,
            tool_ms=700.0,
            gen_ms=200.0,
            tokens=90,
            tool_errors=i % 2,
        )
        lines.append(f"2026-11-23 10:00:{i:02d}.000 | INFO    | {line}")
    log = tmp_path / "orchestrator.log"
    log.write_text("\n".join(lines) + "\n")
    parse = ParseStats()
    result = analyze(parse_files([("orchestrator", log)], parse), parse, Thresholds())
    d = result.data
    assert list(d.series["env_ms"]) == [800.0] * 6 and list(d.series["episode_turns"]) == [3.0] * 6
    assert d.counts["episode.done"] == 5 and d.counts["episode.max_turns"] == 1
    assert d.counts["episode.tool_errors"] == 3
    kinds = [f.kind for f in result.findings]
    assert "environment_bound" in kinds
    env = next(f for f in result.findings if f.kind == "environment_bound")
    assert "4.0x" in env.evidence and "3 failed tool calls" in env.evidence


def _analyze_lines(tmp_path, lines: list[str], async_level=None):
    from prime_rl.analysis.analyze import analyze
    from prime_rl.analysis.parser import ParseStats, parse_files
    from prime_rl.analysis.thresholds import Thresholds

    log = tmp_path / "orchestrator.log"
    log.write_text(
        "".join(f"2026-11-23 10:00:{i % 60:02d}.000 | INFO    | {x}\n" for i, x in enumerate(lines))
    )
    parse = ParseStats()
    return analyze(parse_files([("orchestrator", log)], parse), parse, Thresholds(), async_level)


def test_staleness_per_step_and_every_step_above_async_level_are_reported(tmp_path):
    from prime_rl.analysis.report import summary_md, to_json
    from prime_rl.tracing import format_tagged

    staleness = [0, 1, 1, 2, 1, 3, 1, 1]
    lines = [
        format_tagged("rollout", None, trunc_pct=0.0, current_step=step, ckpt_step=step - s, staleness=s)
        for step, s in enumerate(staleness)
    ]
    a = _analyze_lines(tmp_path, lines, async_level=1)
    assert a.data.staleness_histogram() == {0: 1, 1: 5, 2: 1, 3: 1}
    assert a.data.staleness_violations() == [(3, 2), (5, 3)]
    assert any("at 2 step(s): 3 (2), 5 (3)" in w for w in a.warnings)
    out = to_json(a)["staleness"]
    assert out["violations"] == [{"step": 3, "staleness": 2}, {"step": 5, "staleness": 3}]
    md = summary_md(a, has_png=False)
    assert "| 1 | 5 |" in md and "Above async_level: steps 3, 5." in md


def test_a_step_that_is_not_read_is_no_step_in_any_per_step_figure(tmp_path):
    """A [rollout] line whose current_step is no step number (``x``, 123456789012, ``-1``, ``1.5``)
    has that value refused (a bad value, named) and its other values kept at no step number, as
    the warning says. Before, ``x`` was left out of the staleness histogram but 123456789012, -1 and
    1.5 (read as a number) were steps there: "Above async_level: steps 123456789012", step 1's
    staleness overwritten by 1.5's line, the histogram 11 steps for 8; and in the per-step series
    all four were steps by name. Now none is a step anywhere: 8 steps, no violation at a step; their
    trunc_pct and staleness are kept, each once, as values at no step (a staleness above
    async_level there is warned of without a step, as on a line with no current_step)."""
    from prime_rl.analysis.report import summary_md, to_json
    from prime_rl.tracing import format_tagged

    lines = [
        format_tagged("rollout", None, trunc_pct=2.0, current_step=step, ckpt_step=step - s, staleness=s)
        for step, s in enumerate([0, 1, 1, 1, 1, 1, 1, 1])
    ]
    refused = ["x", "123456789012", "-1", "1.5"]
    for k, step in enumerate(refused):
        lines.insert(2 + 2 * k, f"[rollout] trunc_pct=90 current_step={step} ckpt_step=1 staleness=3")
    a = _analyze_lines(tmp_path, lines, async_level=1)
    assert a.data.staleness_histogram() == {0: 1, 1: 7}
    assert a.data.staleness_violations() == []
    assert a.data.parse.bad_values == 4
    assert [e.split(": ", 1)[1].split(" ")[0] for e in a.data.parse.bad_value_examples] == [
        f"current_step={step}" for step in refused
    ]
    for key, value in (("trunc_pct", 90.0), ("staleness", 3.0)):
        values = sorted(a.data.series[key])
        assert len(values) == 12 and values[-4:] == [value] * 4  # 8 steps, and 4 values at no step
    assert to_json(a)["staleness"]["violations"] == []
    # a staleness above async_level at no step is named as such, at no step (and so in the section)
    assert (
        "staleness above async_level 1 at no step: 4 [rollout] line(s) at no step number (current_step none "
        "or no step number), staleness up to 3"
    ) in a.warnings
    assert not any("step(s)" in w and "async_level" in w for w in a.warnings)
    md = summary_md(a, has_png=False)
    assert "Above async_level" not in md and "| 1 | 7 |" in md
    assert "None above async_level at a step. At no step number" in md


def test_a_collector_run_is_not_told_its_weight_lines_are_missing(tmp_path):
    from prime_rl.tracing import format_tagged

    lines = [
        format_tagged(
            "collect",
            "rollout.done",
            f"t{i}",
            task=i,
            repeat=0,
            status=200,
            dur_ms=50.0,
            queue_ms=1.0,
            gen_ms=45.0,
            verify_ms=2.0,
            out_tokens=5,
            attempts=1,
        )
        for i in range(5)
    ]
    a = _analyze_lines(tmp_path, lines)
    assert a.data.counts["collect.rollout.done"] == 5
    assert not any("[weights]" in w for w in a.warnings), a.warnings
    trio = _analyze_lines(
        tmp_path, [format_tagged("gen", "batch.done", step=0, completions=4, dur_ms=10.0, inflight=0)]
    )
    assert any("no [weights] lines" in w for w in trio.warnings)


def test_per_step_values_keep_the_last_of_each_step_in_step_order():
    from prime_rl.analysis.stats import _PerStep

    p = _PerStep()
    steps = ["3", "1", "3", "warmup", "warmup", None, "2", "2"]
    values = [1.0, 2.0, 5.0, 7.0, 8.0, 6.0, None, 4.0]
    # 3 was set again in the same run (segment): not redone; the values without a step are handed
    # back, those of a step that is no step number (warmup: a bad value) among them, each; a step
    # without a value sets nothing
    assert p.set_many(steps, values) == (0, [7.0, 8.0, 6.0])
    # 1 again in a later segment (a restart): redone; a step far beyond the others: by name; 9 digits:
    # no step number, no step
    assert p.set_many(["1", "99999999", "999999999"], [3.0, 9.0, 10.0], segments=np.array([1, 1, 1])) == (
        1,
        [10.0],
    )
    # each step redone once in each later segment: 99999999 in 2, and 1 in 2 (its two lines there once)
    assert p.set_many(["99999999", "1", "1"], [8.0, 3.0, 3.0], segments=np.array([2, 2, 2])) == (2, [])
    out = array("d")
    p.extend_into(out)
    assert out.tolist() == [3.0, 4.0, 5.0, 8.0]
    # the values a later segment replaced, each step's last in its segment: 1's 2.0 (segment 0),
    # 99999999's 9.0 (1), 1's 3.0 (1); time the earlier runs spent, which the stages count
    assert sorted(p.replaced) == [2.0, 3.0, 9.0]


def test_a_long_run_keeps_the_first_and_last_spans_of_each_kind_and_counts_the_rest(monkeypatch, tmp_path):
    import json

    from prime_rl.analysis import stats
    from prime_rl.analysis.analyze import rank_findings
    from prime_rl.analysis.report import timeline, write_report
    from prime_rl.analysis.thresholds import Thresholds

    monkeypatch.setattr(stats, "SPANS_KEPT", 3)
    events = []
    for step in range(10):
        events += [
            ev("gen", "batch.start", ts=10.0 * step, step=step),
            ev("gen", "batch.done", ts=10.0 * step + 5, step=step, dur_ms=5000, completions=1),
        ]
    d = collect(iter(events), ParseStats())
    assert [s.label for s in d.spans] == [f"generate step {i}" for i in (0, 1, 2, 7, 8, 9)]
    assert d.spans_dropped == {"gen": 4} and len(d.series["gen_dur_ms"]) == 10  # statistics: every step
    assert "first and last 3 spans of each kind are shown; between them 4 gen spans are left out" in timeline(
        d
    )
    out = write_report(rank_findings(d, Thresholds()), tmp_path / "a")
    assert json.loads((out / "summary.json").read_text())["spans_dropped"] == {"gen": 4}
    assert (  # the picture is not cut: it draws the bars of every span
        "(the picture draws every span of the run; in timeline.txt: a long run: the first and last 3 spans"
        in (out / "SUMMARY.md").read_text()
    )
    assert d.bars["gen"].spans == 10


def test_summary_json_lists_at_most_its_limit_of_updates_and_counts_them_all(monkeypatch, tmp_path):
    import json

    from prime_rl.analysis import report
    from prime_rl.analysis.analyze import rank_findings
    from prime_rl.analysis.thresholds import Thresholds

    monkeypatch.setattr(report, "JSON_UPDATES", 2)
    events = [
        ev("weights", event, f"t{i}", ts=float(i) + dt, url="http://h", **extra)
        for i in range(5)
        for event, dt, extra in (
            ("client.send", 0.0, {}),
            ("client.done", 0.5, {"wall_ms": 500, "rpc_ms": 400}),
        )
    ]
    out = report.write_report(
        rank_findings(collect(iter(events), ParseStats()), Thresholds()), tmp_path / "a"
    )
    summary = json.loads((out / "summary.json").read_text())
    assert [u["tid"] for u in summary["updates"]] == ["t0", "t1"] and summary["updates_total"] == 5


def test_background_writes_split_publishing_into_the_write_and_what_the_step_paid():
    """A trainer that writes weights in the background (``[ckpt] write.done ... background=true``):
    the write overlaps the next step, so the stages show it apart from what the steps still paid
    (``[train] step.done write_ms``); a synchronous trainer keeps the one publish row."""
    from prime_rl.analysis.stages import stages

    def run(background: bool):
        flag = {"background": "true"} if background else {}
        events = [
            ev("train", "step.done", ts=10.0, step=0, wait_ms=0, train_ms=900, write_ms=40),
            ev("ckpt", "write.done", ts=10.6, step=1, write_ms=600, **flag),
            ev("train", "step.done", ts=11.0, step=1, wait_ms=0, train_ms=900, write_ms=60),
            ev("ckpt", "write.done", ts=11.6, step=2, write_ms=600, **flag),
        ]
        d = collect(iter(events), ParseStats(), async_level=1)
        return d, {s.name: s.total_ms for s in stages(d) if s.process == "trainer"}

    d, rows = run(background=True)
    assert list(d.series["publish_ms"]) == [40.0, 60.0] and list(d.series["write_ms"]) == [600.0, 600.0]
    assert d.counts["write.background"] == 2
    assert rows["publish: background write"] == 1200.0 and rows["publish: in the step"] == 100.0
    assert "publish (weight write)" not in rows
    d, rows = run(background=False)
    assert rows["publish (weight write)"] == 1200.0 and not any(k.startswith("publish:") for k in rows)


@settings(max_examples=200, deadline=None)
@given(
    blocks=st.lists(
        st.tuples(st.sampled_from(["gen", "update"]), st.integers(0, 9), st.booleans(), st.booleans()),
        max_size=12,
    ),
    kept=st.integers(1, 6),
)
def test_spans_made_in_blocks_keep_the_first_and_last_of_each_kind(blocks, kept):
    """Spans come in blocks of columns and become objects only when kept: the first and last
    ``SPANS_KEPT`` of each kind, the rest counted, the same as one span at a time would keep; a
    block cut first to the rows it would keep (``rows_kept``, what the updates' block does) too."""
    from prime_rl.analysis import stats

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stats, "SPANS_KEPT", kept)
        _check_blocks(stats, blocks, kept)


def _check_blocks(stats, blocks, kept):
    store = stats._Spans()
    made: dict[str, list[stats.Span]] = {}
    t = 0.0
    for kind, n, with_info, framed in blocks:
        rows = list(range(n))
        starts = [t + i for i in rows]
        kept_starts, kept_rows = starts, rows
        if framed:  # as columns, cut to the rows kept before they become lists
            frame = pl.DataFrame(
                {"start": starts, "arg": rows}, schema={"start": pl.Float64, "arg": pl.Int64}
            )
            frame = store.rows_kept(kind, frame)
            kept_starts, kept_rows = frame["start"].to_list(), frame["arg"].to_list()
        info = {"ms": [float(i) for i in kept_rows]} if with_info else None
        store.extend(kind, kept_starts, [s + 0.5 for s in kept_starts], kind + " {}", kept_rows, info)
        made.setdefault(kind, []).extend(
            stats.Span(kind, s, s + 0.5, f"{kind} {i}", {"ms": float(i)} if with_info else {})
            for i, s in zip(rows, starts, strict=True)
        )
        t += n
    want = [
        s
        for spans in made.values()
        for s in (spans if len(spans) <= 2 * kept else spans[:kept] + spans[-kept:])
    ]
    kept_spans, ordered = store.kept(), sorted(want, key=lambda s: s.start)
    # read alone (before the whole list is made): the first few, and each kind's, as the list holds them
    first = kept_spans.columns(3)
    assert list(zip(first.kind, first.start.tolist(), first.label, strict=True)) == [
        (s.kind, s.start, s.label) for s in ordered[:3]
    ]
    assert len(kept_spans) == len(ordered)
    for k in ("gen", "update"):
        assert kept_spans.columns(None, k).label == [s.label for s in ordered if s.kind == k]
    assert list(kept_spans) == ordered
    assert store.dropped == {k: len(v) - 2 * kept for k, v in made.items() if len(v) > 2 * kept}


class _PerStepOracle:
    """_PerStep's rules one value at a time: a step is one when it is 1-8 ASCII digits (else the
    value has no step), numbered (by its integer) below the numbered steps seen before the call plus
    100,000, else kept by name; it is redone where a later segment than the last that set it sets it."""

    def __init__(self) -> None:
        self.numbered: dict[int, float] = {}
        self.size = 0
        self.other: dict[str, float] = {}
        self.segment: dict[int | str, int] = {}
        self.replaced: list[float] = []
        """The values a later segment replaced."""

    def set_many(self, steps, values, segments):
        import re

        limit, again, loose = self.size + 100_000, 0, []
        for step, value, segment in zip(steps, values, segments, strict=True):
            if value is None:
                continue
            if step is None or not re.fullmatch(r"[0-9]{1,8}", step):
                loose.append(value)
                continue
            if int(step) < limit:
                key, kept = int(step), self.numbered
                self.size = max(self.size, int(step) + 1)
            else:
                key, kept = step, self.other
            if self.segment.get(key, segment) < segment:
                again += 1
                self.replaced.append(kept[key])
            kept[key], self.segment[key] = value, segment
        return again, loose

    def values(self):
        return [self.numbered[k] for k in sorted(self.numbered)] + list(self.other.values())


_STEP_TEXT = st.one_of(
    st.none(),
    st.integers(0, 40).map(str),
    st.integers(0, 40).map(lambda i: f"{i:03d}"),  # leading zeros: the same step as without
    st.sampled_from(
        ["+5", "-0", "-3", " 5", "5 ", "1_0", "0x1", "٣", "5.0", "1e3", "", "123456789", "99999999"]
    ),
    st.integers(100_000, 10**8).map(str),  # far beyond the others: by name
    st.text(max_size=4),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(_STEP_TEXT, st.one_of(st.none(), st.floats(-1e6, 1e6)), st.integers(0, 1)), max_size=30
        ),
        max_size=4,
    )
)
def test_per_step_values_column_wise_equal_one_at_a_time(calls):
    """The column-wise set_many (an integer cast and sign checks for "1-8 digits", a sorted-steps fast
    path for the last value of each, the steps redone by (step, segment) pairs) against the rules
    applied one value at a time; each line's segment is the one before it or the next (a restart)."""
    from prime_rl.analysis.stats import _PerStep

    p, oracle, segment = _PerStep(), _PerStepOracle(), 0
    for rows in calls:
        steps, values = [s for s, _, _ in rows], [v for _, v, _ in rows]
        segments = segment + np.cumsum([restart for _, _, restart in rows], dtype=np.int64)
        segment = int(segments[-1]) if len(segments) else segment
        assert p.set_many(steps, values, segments=segments) == oracle.set_many(
            steps, values, segments.tolist()
        )
    out = array("d", [-1.0])
    p.extend_into(out)  # appended after what the series holds
    assert out.tolist() == [-1.0, *oracle.values()]
    assert sorted(p.replaced) == sorted(oracle.replaced)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.integers(0, 12), max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=3),
    known=st.lists(st.integers(-1, 3), max_size=8),
    top=st.tuples(st.integers(0, 3), st.integers(-1, 12)),
)
def test_a_step_set_again_in_its_segment_is_found_as_a_line_by_line_walk_finds_it(steps, cuts, known, top):
    """stats._repeated (which lines log a step again in the segment that set it, at the segment's
    highest step so far) against a walk over the lines one by one, for any steps, segments (never
    falling: a restart between the lines) and steps set before them."""
    from prime_rl.analysis.stats import _repeated

    segment = np.zeros(len(steps), dtype=np.int64)
    for cut in cuts:  # each cut starts a later segment from there on
        segment[cut:] += 1
    segment += top[0]
    # set before these lines: in a segment no later than theirs (the segments never fall)
    known = [min(k, top[0]) for k in known]
    segment_of = np.array(known, dtype=np.int64)
    got, got_top = _repeated(np.array(steps, dtype=np.int64), segment, segment_of, top)
    want, seen = [], {}
    top_segment, top_step = top
    for step, g in zip(steps, segment.tolist(), strict=True):
        highest = top_step if g == top_segment else -1
        set_here = seen.get(step, known[step] if step < len(known) else -1) == g
        want.append(set_here and step >= highest)
        seen[step] = g
        top_segment, top_step = g, max(highest, step)
    assert got.tolist() == want
    if steps:
        assert got_top == (top_segment, top_step)
