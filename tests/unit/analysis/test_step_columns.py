"""The [gen], [ckpt] and [train] lines folded column-wise (start and done lines paired by
:func:`~prime_rl.analysis.pairing.pair`) against the line-by-line fold they replaced (kept here as
the oracle): the same series, counts, spans (kept and dropped), bars, open wait and open batch, for
any mix of events, steps (missing, empty, repeated, not numbers), values and lines without a
timestamp, cut into batches anywhere (what is open carries over)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from prime_rl.analysis import stats
from prime_rl.analysis.parser import ParseStats, parse_files, scan_files
from prime_rl.analysis.stats import FIELDS, Collected, TaggedLines, _Collector, collect


class _Rows:
    """The spans one handler call made, one tuple each (the old code's, kept for the oracle)."""

    def __init__(self, *info: str) -> None:
        self.rows: list[tuple] = []
        self.add = self.rows.append
        self.info = info

    def to(self, spans, kind: str, label: str) -> None:
        if not self.rows:
            return
        start, end, args, *info = zip(*self.rows, strict=True)
        spans.extend(kind, start, end, label, args, dict(zip(self.info, info, strict=True)) or None)


class _TrainSpans:
    def __init__(self) -> None:
        self.train, self.fwd_bwd, self.optim, self.wait = _Rows("train_ms"), _Rows(), _Rows(), _Rows()

    def to(self, spans) -> None:
        self.train.to(spans, "train", "train step {}")
        self.fwd_bwd.to(spans, "train_fwd_bwd", "forward/backward {}")
        self.optim.to(spans, "train_optim", "optimizer {}")
        self.wait.to(spans, "train_wait", "wait for rollouts {}")


def reference_ckpt(self, seq: int, b: TaggedLines) -> None:
    b.fields(*FIELDS["ckpt"])
    events, ts, number = b.column("event"), b.column("ts"), b.column("line")
    target_s, step_s = b.text_series("target_step"), b.text_series("step")
    wait_s, write_s = b.num_series("wait_ms", ("wait.done",)), b.num_series("write_ms", ("write.done",))
    # every wait in line order, but a resume's load of weights (start-up, counted apart); the
    # orchestrator's kept where a restart a later batch finds may take them for its load
    loads = set(self.resume_loads.tolist())
    is_load = [e == "wait.done" and n in loads for e, n in zip(events, number, strict=True)]
    if any(is_load):
        loaded = wait_s.to_list()
        self.counts["ckpt_startup_wait_ms"] += round(
            math.fsum(w or 0.0 for w, x in zip(loaded, is_load, strict=True) if x)
        )
    for n, w, x in zip(number, wait_s.to_list(), is_load, strict=True):
        if w is not None and not x:
            if b.source == "orchestrator":
                self.recent_waits[n] = (w, len(self.series["ckpt_wait_ms"]))
            self._extend("ckpt_wait_ms", [w])
    b.step_numbers("target_step")
    self._per_step("write_ms", b, "step", write_s)
    target, step, wait_ms, write_ms = (
        target_s.to_list(),
        step_s.to_list(),
        wait_s.to_list(),
        write_s.to_list(),
    )
    background = b.text("background")
    waits, writes = _Rows("wait_ms"), _Rows()
    add_wait, add_write, open_wait = waits.add, writes.add, self.open_wait
    last_wait = last_write = -1  # the last wait.start or wait.done row; the last write.done with write_ms
    in_background = 0
    rows = zip(events, ts, target, step, wait_ms, write_ms, background, strict=True)
    for i, (e, t, tgt, st, wait, write, bg) in enumerate(rows):
        if e == "wait.start":
            if t is not None:
                open_wait[tgt or "?"] = t
            last_wait = i
        elif e == "wait.done":
            last_wait = i
            if wait is not None:
                end = t or 0.0
                add_wait((open_wait.pop(tgt or "?", end - wait / 1000.0), end, tgt, wait))
        elif e == "write.done" and write is not None:
            last_write = i
            in_background += bg == "true"  # written beside the next step, off its critical path
            if t is not None:
                add_write((t - write / 1000.0, t, st))
    if last_wait >= 0:  # an open wait is the last wait.start with no wait.done after it
        i = last_wait
        self.last_wait = ((seq, number[i]), b, i, target[i] or "?") if events[i] == "wait.start" else None
    if last_write >= 0:
        self.last_write = (b, last_write)
    if in_background:
        self.counts["write.background"] += in_background
    waits.to(self.spans, "ckpt_wait", "wait for weights step {}")
    writes.to(self.spans, "ckpt_write", "write weights step {}")


def reference_gen(self, seq: int, b: TaggedLines) -> None:
    b.fields(*FIELDS["gen"])
    events, ts, number = b.column("event"), b.column("ts"), b.column("line")
    step_s, dur_s = b.text_series("step"), b.num_series("dur_ms", ("batch.done",))
    self._per_step("gen_dur_ms", b, "step", dur_s)
    step, dur, completions = step_s.to_list(), dur_s.to_list(), b.text("completions")
    done_completions = b.num("completions", ("batch.done",))
    retries, drops = [], []
    spans = _Rows("completions", "dur_ms")
    add, open_gen, started = spans.add, self.open_gen, self.batches_started
    last = -1  # the last batch.start or batch.done row
    completed, dones = 0, False
    rows = zip(events, ts, step, dur, completions, done_completions, strict=True)
    for i, (e, t, st, ms, n, done_n) in enumerate(rows):
        if e == "batch.start":
            started += 1
            last = i
            if t is not None:  # no step= on the line: batches are paired by their count
                open_gen[str(started) if st is None else st] = t
        elif e == "batch.done":
            last = i
            if ms is not None:
                end = t or 0.0
                start = open_gen.pop(str(started) if st is None else st, end - ms / 1000.0)
                add((start, end, st or "?", n, ms))
            completed += int(done_n or 0)
            dones = True
        elif e == "request.retry":
            retries.append(i)
        elif e == "group.drop":
            drops.append(i)
    self.batches_started = started
    if dones:
        self.counts["completions"] += completed
    if last >= 0:  # an open batch is the last batch.start with no batch.done after it
        self.last_start = ((seq, number[last]), b, last) if events[last] == "batch.start" else None
    spans.to(self.spans, "gen", "generate step {}")
    if drops:
        reason = b.text("reason")  # the column once, not once per dropped group
        for i in drops:
            self.counts[f"drop.{reason[i] or '?'}"] += 1
    if retries:
        self._retry(b, retries)


def reference_train_spans(self, b: TaggedLines, step_s, wait_s, train_s, write_s) -> None:
    """The [train] handler's span loop (its per-step values were and are column-wise)."""
    events, ts, step = b.column("event"), b.column("ts"), step_s.to_list()
    wait, train, write = wait_s.to_list(), train_s.to_list(), write_s.to_list()
    fwd, opt = b.num("fwd_bwd_ms", ("compute.done",)), b.num("optim_ms", ("compute.done",))
    spans = _TrainSpans()
    add_train, add_fwd, add_opt, add_wait = (
        spans.train.add,
        spans.fwd_bwd.add,
        spans.optim.add,
        spans.wait.add,
    )
    compute_start = self.compute_start
    for e, t, st, w, tr, wr, f, o in zip(events, ts, step, wait, train, write, fwd, opt, strict=True):
        if e == "step.done":
            if st == "0":
                self.counts["train_startup_wait_ms"] = int(w or 0)
            if t is None or tr is None:
                continue
            # the step's wait for rollouts (before its compute) and, from a trainer that writes
            # no compute.done line, the compute itself: it ended write_ms before this line
            key = str(st)
            start = compute_start.pop(key, None)
            if start is None:
                end = t - (wr or 0.0) / 1000.0
                start = end - tr / 1000.0
                add_train((start, end, key, tr))
            if w:
                add_wait((start - w / 1000.0, start, key))
        elif e == "compute.done" and t is not None and tr is not None:
            # the line ends the compute: forward/backward, then the optimizer
            key = st or "?"
            start = t - tr / 1000.0
            add_train((start, t, key, tr))
            if f:
                add_fwd((start, start + f / 1000.0, key))
            if o:
                add_opt((t - o / 1000.0, t, key))
            compute_start[key] = start
    spans.to(self.spans)


STEPS = hs.one_of(hs.none(), hs.sampled_from(["0", "1", "2", "3", "", "x", "007"]))
VALUES = hs.one_of(hs.none(), hs.sampled_from(["0", "12.5", "-3", "abc", "inf", "1e3", "1500", ""]))
EVENTS = {
    "gen": ["batch.start", "batch.done", "request.retry", "group.drop", "other", None],
    "ckpt": ["wait.start", "wait.done", "write.done", "other"],
    "train": ["step.done", "compute.done", "other"],
}
KEYS = {
    "gen": ["dur_ms", "completions", "reason", "wait_ms", "status"],
    "ckpt": ["wait_ms", "write_ms", "background"],
    "train": ["wait_ms", "train_ms", "write_ms", "fwd_bwd_ms", "optim_ms"],
}


@hs.composite
def step_line(draw) -> str:
    tag = draw(hs.sampled_from(sorted(EVENTS)))
    event = draw(hs.sampled_from(EVENTS[tag]))
    fields = {"step": draw(STEPS)}
    if tag == "ckpt":
        fields["target_step"] = draw(STEPS)
    for key in KEYS[tag]:
        if key == "background":
            fields[key] = draw(hs.one_of(hs.none(), hs.sampled_from(["true", "false"])))
        elif key in ("reason", "status"):
            fields[key] = draw(hs.one_of(hs.none(), hs.sampled_from(["empty", "429", ""])))
        else:
            fields[key] = draw(VALUES)
    pairs = [f"{k}={v}" for k, v in fields.items() if v is not None]
    message = " ".join([f"[{tag}]", *([event] if event else []), *pairs]) or f"[{tag}] x=1"
    if not draw(hs.booleans()) and draw(hs.booleans()):
        return message  # no timestamp: ts is None
    second, ms = draw(hs.integers(0, 59)), draw(hs.integers(0, 999))
    return f"2026-01-01 12:00:{second:02d}.{ms:03d} | INFO    | {message}"


def _view(d: Collected) -> dict:
    return {
        "series": {k: list(v) for k, v in d.series.items()},
        "counts": list(d.counts.items()),
        "spans": [(s.kind, s.start, s.end, s.label, s.info) for s in d.spans],
        "dropped": d.spans_dropped,
        "bars": {k: tuple(a.tolist() for a in v.bars()) for k, v in d.bars.items()},
        "open_wait": d.open_wait and (d.open_wait[0], d.open_wait[1], d.open_wait[2].line),
        "open_batch": d.open_batch and d.open_batch.line,
        "last_write": d.last_write and d.last_write.line,
        "bad": (d.parse.bad_values, sorted(d.parse.bad_value_examples)),
    }


def _event_batches(path: Path, cuts: list[int]):
    """The file's events cut into batches at ``cuts`` (a start here, its done in a later batch)."""

    def read(stats: ParseStats) -> list[TaggedLines]:
        events = list(parse_files([("orchestrator", path)], stats))
        edges = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
        return [
            TaggedLines.from_events(events[a:b], stats)
            for a, b in zip(edges, edges[1:], strict=False)
            if b > a
        ]

    return read


def _both(read, monkeypatch) -> tuple[dict, dict]:
    stats = ParseStats()
    columns = _view(collect(read(stats), stats))
    with monkeypatch.context() as m:
        for name, fn in (
            ("ckpt", reference_ckpt),
            ("gen", reference_gen),
            ("_train_spans", reference_train_spans),
        ):
            m.setattr(_Collector, name, fn)
        stats = ParseStats()
        lines = _view(collect(read(stats), stats))
    return columns, lines


@pytest.mark.parametrize("kept", [2, stats.SPANS_KEPT])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    messages=hs.lists(step_line(), min_size=1, max_size=40),
    cuts=hs.lists(hs.integers(0, 40), max_size=4),
)
def test_step_lines_fold_column_wise_as_line_by_line(tmp_path_factory, monkeypatch, kept, messages, cuts):
    monkeypatch.setattr(stats, "SPANS_KEPT", kept)  # 2: the head and tail of every kind's spans cut
    path = tmp_path_factory.mktemp("steps") / "orchestrator.log"
    path.write_text("".join(m + "\n" for m in messages))
    columns, lines = _both(_event_batches(path, cuts), monkeypatch)
    assert columns == lines
    columns, lines = _both(lambda s: scan_files([("orchestrator", path)], s), monkeypatch)
    assert columns == lines


def test_what_is_open_at_the_end_of_a_batch_is_closed_in_the_next(tmp_path, monkeypatch):
    """A wait, a generation batch (one with no step=: paired by its count) and a compute begun in one
    batch end in the next: each span starts at its start line, not at its done line's ms before."""
    messages = [
        "12:00:01.000 [ckpt] wait.start target_step=4",
        "12:00:01.500 [gen] batch.start",
        "12:00:02.000 [train] compute.done step=4 train_ms=500 fwd_bwd_ms=300 optim_ms=100",
        # the next batch
        "12:00:05.000 [ckpt] wait.done target_step=4 wait_ms=1",
        "12:00:06.000 [gen] batch.done dur_ms=1 completions=8",
        "12:00:07.000 [train] step.done step=4 wait_ms=250 train_ms=500 write_ms=0",
    ]
    path = tmp_path / "orchestrator.log"
    path.write_text("".join(f"2026-01-01 {m[:12]} | INFO    | {m[13:]}\n" for m in messages))
    columns, lines = _both(_event_batches(path, [3]), monkeypatch)
    assert columns == lines
    spans = {kind: (start % 60, end % 60, label) for kind, start, end, label, _ in columns["spans"]}
    assert spans["ckpt_wait"] == (1.0, 5.0, "wait for weights step 4")
    assert spans["gen"] == (1.5, 6.0, "generate step ?")
    assert spans["train"] == pytest.approx((1.5, 2.0, "train step 4"))
    assert spans["train_wait"] == pytest.approx((1.25, 1.5, "wait for rollouts 4"))
    assert columns["open_wait"] is None and columns["open_batch"] is None
    assert dict(columns["counts"])["completions"] == 8


# steps (sorted as integers); integers written several ways ("7", "007", "+7": one number, three keys);
# keys that are no integers (sorted as text)
KEY_SETS = [
    ["0", "1", "2", "10", "123456789012"],
    ["7", "007", "+7", "-7", "0", "00"],
    ["a", "7", " 7", "7.0", "", "?"],
]


@pytest.mark.parametrize("names", KEY_SETS, ids=["steps", "integers", "text"])
@given(data=hs.data())
def test_pair_pops_what_a_dict_of_open_starts_would(names, data):
    from prime_rl.analysis.pairing import pair

    key = hs.sampled_from(names)
    ops = data.draw(hs.lists(hs.tuples(hs.booleans(), key, hs.floats(-10, 10)), max_size=30))
    carried = data.draw(hs.dictionaries(key, hs.floats(-10, 10), max_size=3))

    expected, state = [], dict(carried)
    for opens, key, value in ops:
        if opens:
            state[key] = value
        else:
            expected.append(state.pop(key, None))
    keys = pl.Series([k for _, k, _ in ops], dtype=pl.String)
    opens = pl.Series([o for o, _, _ in ops], dtype=pl.Boolean)
    values = np.array([v for _, _, v in ops], dtype=np.float64)
    rows, found, took = pair(keys, opens, ~opens, values, carried)
    assert rows.tolist() == [i for i, (o, _, _) in enumerate(ops) if not o]
    assert [v if f else None for f, v in zip(found.tolist(), took.tolist(), strict=True)] == expected
    assert carried == state
