"""The offline collector's [collect] lines folded column-wise against the line-by-line fold it
replaced (kept here as the oracle): the same values in the same order, the same counts and servers
in the order the lines first give them, the same bad values, for any mix of events, servers,
statuses and values, in files and in batches of events."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prime_rl.analysis.parser import ParseStats, parse_files, scan_files
from prime_rl.analysis.stats import (
    _COLLECT_EVENTS,
    FIELD_KINDS,
    FIELDS,
    SAMPLE_RETRY,
    Collected,
    TaggedLines,
    _Collector,
    collect,
    prepared,
)


def reference_collect(self: _Collector, seq: int, b: TaggedLines) -> None:
    """The line-by-line fold of [collect] lines (the handler before it was made column-wise)."""
    b.fields(*FIELDS["collect"])
    events, url, status = b.column("event"), b.text("url"), b.text("status")
    lines = [e for e in set(events) if e not in ("request.retry", "verify.done")]
    dur = b.num("dur_ms", lines)
    done = ("rollout.done",)
    queue, gen, verify = b.num("queue_ms", done), b.num("gen_ms", done), b.num("verify_ms", done)
    deferred = b.num("dur_ms", ("verify.done",))
    for key, part in (("queue_ms", queue), ("gen_ms", gen), ("verify_ms", verify)):
        longer = [p is not None and d is not None and p > d for p, d in zip(part, dur, strict=True)]
        b.refuse(key, pl.Series(longer))  # a part of a sample longer than the sample: a bad value
        part[:] = [None if x else p for p, x in zip(part, longer, strict=True)]
    retries = []
    for i, e in enumerate(events):
        if e == "request.retry":
            retries.append(i)
            continue
        if e == "verify.done":  # a deferred verification: a series of its own, no sample's
            self._add("collect_deferred_verify_ms", deferred[i])
            continue
        self._add("collect_ms", dur[i])
        if e == "rollout.done":
            self.counts["completions"] += 1
            self.counts["collector.completions"] += 1  # the collector's part, apart
            self._add("collect_done_ms", dur[i])
            self._add("collect_queue_ms", queue[i])
            self._add("collect_gen_ms", gen[i])
            self._add("collect_verify_ms", verify[i])
            if url[i] and gen[i] is not None:
                self.server_gen_ms.setdefault(url[i], []).append(gen[i])
        elif e == "rollout.failed" and url[i]:
            self.server_counts.setdefault(url[i], Counter())["failed"] += 1
        elif status[i] == "429" and e not in _COLLECT_EVENTS:  # an older collector's 429
            self.counts["retry.429"] += 1
            self.counts["collector.retry.429"] += 1
    if retries:
        self._retry(b, retries, by=SAMPLE_RETRY)


EVENTS = ["rollout.done", "rollout.failed", "request.retry", "rollout.start", "verify.done", None]
VALUES = st.one_of(st.none(), st.sampled_from(["0", "12.5", "-3", "abc", "inf", "nan", "1e3"]))


@st.composite
def collect_line(draw) -> str:
    event = draw(st.sampled_from(EVENTS))
    head = "[collect][c1]" + (f" {event}" if event else "")
    fields = {
        "url": draw(st.one_of(st.none(), st.sampled_from(["http://a:1", "http://b:2", "http://c:3"]))),
        "status": draw(st.one_of(st.none(), st.sampled_from(["200", "429", "500", "conn"]))),
        **{key: draw(VALUES) for key in ("dur_ms", "queue_ms", "gen_ms", "verify_ms", "wait_ms")},
    }
    pairs = [f"{k}={v}" for k, v in fields.items() if v is not None]
    if not event and not pairs:
        pairs = ["task=1"]
    return " ".join([head, *pairs])


def _view(d: Collected) -> dict:
    keys = (
        "collect_ms",
        "collect_done_ms",
        "collect_queue_ms",
        "collect_gen_ms",
        "collect_verify_ms",
        "collect_deferred_verify_ms",
        "retry_wait_ms",
    )
    return {
        "series": {k: list(d.series[k]) for k in keys},  # in order: no sorting
        "counts": list(d.counts.items()),
        "server_gen_ms": [(u, list(v)) for u, v in d.server_gen_ms.items()],
        "server_counts": [(u, list(c.items())) for u, c in d.server_counts.items()],
        "bad": (d.parse.bad_values, sorted(d.parse.bad_value_examples)),
    }


def _both(path: Path, read, monkeypatch) -> tuple[dict, dict]:
    stats = ParseStats()
    columns = _view(collect(read([("collector", path)], stats), stats))
    with monkeypatch.context() as m:
        m.setattr(_Collector, "collect", reference_collect)
        stats = ParseStats()
        lines = _view(collect(read([("collector", path)], stats), stats))
    return columns, lines


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(collect_line(), min_size=1, max_size=40))
def test_collect_lines_fold_column_wise_as_line_by_line(tmp_path_factory, monkeypatch, messages):
    path = tmp_path_factory.mktemp("collect") / "collector.log"
    prefix = "2026-01-01 12:00:{:02d}.250 | INFO    | "
    path.write_text("".join(prefix.format(i % 60) + m + "\n" for i, m in enumerate(messages)))
    views = []
    for read in (scan_files, parse_files, _as_the_cli_reads):  # batches of columns, of events, and the CLI's
        columns, lines = _both(path, read, monkeypatch)
        assert columns == lines
        views.append(columns)
    assert views[2] == views[0]  # the numbers the C scan read are the ones polars casts


def _as_the_cli_reads(files, stats: ParseStats):
    """Batches as ``analyze-logs`` reads them: the fields and numbers read by the C scan where it is
    built, the rest converted ahead."""
    return prepared(scan_files(files, stats, FIELDS, FIELD_KINDS))


def test_counts_and_servers_keep_the_order_the_lines_give_them(tmp_path, monkeypatch):
    # a 429 before the first completion, failures on two servers before completions on them
    messages = [
        "[collect][c1] rollout.retry status=429 dur_ms=5",  # an older collector's 429
        "[collect][c2] rollout.failed url=http://b:2 dur_ms=6",
        "[collect][c3] request.retry url=http://a:1 status=500 wait_ms=7",
        "[collect][c4] rollout.done url=http://a:1 dur_ms=8 gen_ms=4",
        "[collect][c5] rollout.done url=http://b:2 dur_ms=9 gen_ms=5",
    ]
    path = tmp_path / "collector.log"
    path.write_text("".join(f"2026-01-01 12:00:0{i}.250 | INFO    | {m}\n" for i, m in enumerate(messages)))
    columns, lines = _both(path, scan_files, monkeypatch)
    assert columns == lines
    assert [k for k, _ in columns["counts"] if k in ("retry.429", "completions")] == [
        "retry.429",
        "completions",
    ]
    assert [u for u, _ in columns["server_counts"]] == ["http://b:2", "http://a:1"]
    assert columns["server_gen_ms"] == [("http://a:1", [4.0]), ("http://b:2", [5.0])]
    # each tag.event count is made in the order the lines first give it (summary.json's order)
    lines_counted = [k for k, _ in columns["counts"] if k.startswith("collect.")]
    assert lines_counted == [
        "collect.rollout.retry",
        "collect.rollout.failed",
        "collect.request.retry",
        "collect.rollout.done",
    ]
