"""Issue 18 item 9: unknown tags and malformed lines are counted and reported, never a crash; a
value that fails to parse names its file and line. Collector runs are not asked for [weights] lines."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from prime_rl.analysis.analyze import analyze
from prime_rl.analysis.parser import ParseStats, parse_files
from prime_rl.analysis.report import write_report
from prime_rl.analysis.tagged import Event
from prime_rl.analysis.thresholds import Thresholds

PREFIX = "2026-01-01 12:00:{:02d}.000 | INFO    | "


def _analyze(path: Path, label: str = "orchestrator"):
    stats = ParseStats()
    return analyze(parse_files([(label, path)], stats), stats, Thresholds(), async_level=1)


def test_unknown_tags_are_counted_and_reported(tmp_path, analyze):
    log = tmp_path / "orchestrator.log"
    log.write_text(
        "[mystery] first.line k=1\n"
        + PREFIX.format(1)
        + "[mystery] thing.done k=1\n"
        + PREFIX.format(2)
        + "[other][ab12] x.y\n"
        + PREFIX.format(3)
        + "[gen] batch.done step=0 completions=4 dur_ms=10.0\n"
        + PREFIX.format(4)
        + "text that quotes [mystery] in the middle\n"
    )
    summary, md = analyze([log], tmp_path / "out")
    assert summary["unknown_tags"] == {"mystery": 2, "other": 1}
    assert any(
        "3 line(s) with a tag the analyzer does not read: "
        f"[mystery] x2 (first at {log}:1), [other] x1 (first at {log}:3)" in w
        for w in summary["warnings"]
    )
    assert "3 with unknown tags" in md


def test_a_log_whose_every_tagged_line_is_malformed_is_reported(tmp_path, analyze):
    """Every tag-like line of the file malformed: its batch had no line, and the analyzer crashed
    naming the file's last line (index -1 of nothing)."""
    log = tmp_path / "orchestrator.log"
    log.write_text(PREFIX.format(1) + "[gen]\n" + PREFIX.format(2) + "[ckpt]\nplain text\n")
    summary, md = analyze([log], tmp_path / "out")
    assert summary["parse"]["lines"] == 3 and summary["parse"]["malformed"] == 2
    assert "2 malformed" in md and f"{log}:1: " in md


def test_a_value_that_is_no_number_names_its_file_and_line(tmp_path):
    log = tmp_path / "trainer.log"
    log.write_text(
        PREFIX.format(0)
        + "[train] step.done step=1 wait_ms=5.0 train_ms=10.0\n"
        + "noise\n"
        + PREFIX.format(2)
        + "[train] step.done step=2 wait_ms=abc train_ms=nan\n"
        + PREFIX.format(3)
        + "[gen] batch.done step=2 completions=inf dur_ms=1e999\n"
    )
    a = _analyze(log, "trainer")
    p = a.data.parse
    assert p.bad_values == 4
    assert p.bad_value_examples[:2] == [
        f"{log}:3: wait_ms=abc ([train] step.done)",
        f"{log}:3: train_ms=nan ([train] step.done)",
    ]
    assert f"{log}:4: completions=inf ([gen] batch.done)" in p.bad_value_examples
    assert list(a.data.series["train_wait_ms"]) == [5.0] and list(a.data.series["gen_dur_ms"]) == []
    assert any("4 value(s) not read: no number" in w and f"{log}:3" in w for w in a.warnings)


def test_a_duration_below_zero_is_a_bad_value_named_by_its_file_and_line(tmp_path, analyze):
    """Every process writes durations (``*_ms``) of 0 or more (the client clamps its queue_ms at 0):
    one below 0 is a writer's bug. Before, it was read: a wait of -5 s took 5 s off the run's waits,
    and a batch ended before it started."""
    log = tmp_path / "orchestrator.log"
    log.write_text(
        PREFIX.format(0)
        + "[ckpt] wait.done target_step=1 wait_ms=-5000.0\n"
        + PREFIX.format(1)
        + "[ckpt] wait.done target_step=2 wait_ms=400.0\n"
        + PREFIX.format(2)
        + "[gen] batch.done step=2 completions=4 dur_ms=-3\n"
        + PREFIX.format(3)
        + "[gen] batch.done step=3 completions=4 dur_ms=-0.0\n"
    )
    summary, md = analyze([log], tmp_path / "out")
    assert summary["bad_values"] == {
        "count": 2,
        "examples": [
            f"{log}:1: wait_ms=-5000.0 ([ckpt] wait.done)",
            f"{log}:3: dur_ms=-3 ([gen] batch.done)",
        ],
    }
    assert summary["stats"]["ckpt_wait_ms"]["count"] == 1 and summary["stats"]["ckpt_wait_ms"]["min"] == 400.0
    assert summary["stats"]["gen_dur_ms"]["count"] == 1  # -0.0 is 0, and written as 0
    assert math.copysign(1.0, summary["stats"]["gen_dur_ms"]["min"]) == 1.0
    assert any("a duration (a field that ends in _ms) below 0" in w for w in summary["warnings"])


def test_an_event_reads_a_number_as_the_columns_do():
    """Event.num took what Python's float() takes: 1_000, digits other than ASCII, and -0 as -0.0;
    the columns (the C scan, polars' cast) count the first two as bad values and read -0 as 0."""
    stats = ParseStats()
    fields = {"wait_ms": "1_000", "rpc_ms": "\u0661\u0662", "dur_ms": "-0", "t": "-0"}
    ev = Event("ckpt", "wait.done", None, fields, 0.0, "orchestrator", Path("o.log"), 3, stats)
    assert ev.num("wait_ms") is None and ev.num("rpc_ms") is None and stats.bad_values == 2
    assert math.copysign(1.0, ev.num("dur_ms")) == 1.0 and math.copysign(1.0, ev.num("t")) == -1.0
    assert stats.bad_value_examples[0] == "o.log:3: wait_ms=1_000 ([ckpt] wait.done)"


EVENTS = {
    "weights": ["client.send", "client.done", "client.error", "server.recv", "rpc.start", "rpc.done"],
    "ckpt": ["wait.start", "wait.done", "write.done", "save.done"],
    "gen": ["batch.start", "batch.done", "request.retry", "group.drop"],
    "rollout": [""],
    "verify": ["batch.done"],
    "train": ["step.done"],
    "collect": ["rollout.done", "rollout.failed", "request.retry", "parallel.pause"],
    "env": ["episode.done"],
}
KEYS = [
    "step",
    "target_step",
    "wait_ms",
    "dur_ms",
    "rpc_ms",
    "wall_ms",
    "queue_ms",
    "completions",
    "staleness",
    "current_step",
    "trunc_pct",
    "t",
    "url",
    "status",
    "workers",
    "tail_ms",
    "turns",
    "tool_errors",
    "write_ms",
]
VALUES = st.one_of(
    st.sampled_from(
        ["0", "-1", "3", "1e400", "-inf", "nan", "inf", "abc", "", "9" * 400, "1.5", "http://h:1", "429"]
    ),
    st.text(alphabet="0123456789.-eE:/", max_size=8),
)
LINE = st.tuples(
    st.sampled_from(sorted(EVENTS)),
    st.sampled_from(["", "ab", "t1"]),
    st.integers(0, 3),
    st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=6),
    st.sampled_from([PREFIX.format(1), PREFIX.format(59), "12:00:03.000 | INFO    | ", "", "garbage "]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(LINE, min_size=1, max_size=30))
# a batch whose dur_ms puts its start before any date: timeline.txt's clock said "?", not OverflowError
@example([("ckpt", "", 0, [], PREFIX.format(1)), ("gen", "", 1, [("dur_ms", "1E22")], PREFIX.format(1))])
@example([("ckpt", "", 0, [], PREFIX.format(1)), ("gen", "", 1, [("dur_ms", "1E14")], PREFIX.format(1))])
def test_any_mix_of_known_events_with_hostile_values_never_crashes(lines):
    text = []
    for tag, tid, which, fields, prefix in lines:
        event = EVENTS[tag][which % len(EVENTS[tag])]
        head = f"[{tag}][{tid}]" if tid else f"[{tag}]"
        text.append(prefix + " ".join([head, *([event] if event else []), *(f"{k}={v}" for k, v in fields)]))
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "orchestrator.log"
        log.write_text("\n".join(text) + "\n")
        a = _analyze(log)
        write_report(a, Path(d) / "out")
        assert (Path(d) / "out" / "SUMMARY.md").is_file()
        assert a.data.parse.lines == len(lines)


def test_a_collector_run_without_successes_is_not_asked_for_weight_lines(tmp_path):
    from prime_rl.tracing import format_tagged

    lines = [
        format_tagged(
            "collect", "request.retry", "c1", status=429, wait_ms=500.0, attempt=1, retry_after=True
        ),
        format_tagged(
            "collect", "rollout.failed", "c1", task=0, repeat=0, status=429, dur_ms=900.0, kind="RateLimited"
        ),
        format_tagged("collect", "parallel.pause", None, wait_ms=1000.0, status=429),
    ]
    log = tmp_path / "collect.log"
    log.write_text("".join(PREFIX.format(i) + x + "\n" for i, x in enumerate(lines)))
    a = _analyze(log, "collect")
    assert a.data.is_collector_run
    assert not any("[weights]" in w for w in a.warnings), a.warnings
    assert a.primary is not None and a.primary.kind == "rate_limited"


def test_a_gzipped_log_cut_short_or_corrupt_is_read_up_to_where_it_breaks(tmp_path, analyze):
    """A compressed log copied while it was written (cut mid-stream) or damaged: the lines before
    the break are analysed, the file is named with where it broke, and nothing crashes."""
    import gzip

    lines = [
        PREFIX.format(i % 60) + f"[gen] batch.done step={i} completions=4 dur_ms=10.0" for i in range(20_000)
    ]
    whole = gzip.compress(("\n".join(lines) + "\n").encode())
    cut = tmp_path / "orchestrator.log.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    summary, md = analyze([cut], tmp_path / "out")
    read = summary["parse"]["lines"]
    assert 1_000 < read < 20_000  # the first half's lines, not none and not all
    assert summary["parse"]["tagged"] == read - 1 or summary["parse"]["tagged"] == read  # the last may be cut
    (note,) = summary["parse"]["cut_files"]
    assert note.startswith(f"{cut}: cannot be read past line {read}") and "EOFError" in note
    assert "compressed file(s) cut short or corrupt" in md

    damaged = tmp_path / "x" / "orchestrator.log.gz"
    damaged.parent.mkdir()
    middle = len(whole) // 2
    damaged.write_bytes(
        whole[:middle] + bytes(b ^ 0xFF for b in whole[middle : middle + 64]) + whole[middle + 64 :]
    )
    summary, md = analyze([damaged], tmp_path / "out2")
    assert 0 < summary["parse"]["lines"] < 20_000
    assert len(summary["parse"]["cut_files"]) == 1 and "compressed file(s) cut short or corrupt" in md


def test_a_log_that_starts_with_an_impossible_date_is_read(tmp_path, analyze):
    """The date given to time-only lines is the first real date of the logs: a line stamped
    2026-99-99 is read (without a time), not the end of the analysis."""
    log = tmp_path / "orchestrator.log"
    log.write_bytes(
        b"2026-99-99 99:99:99.999 | INFO    | [gen] batch.done step=1 completions=4 dur_ms=5\n"
        b"2026-01-02 12:00:00.000 | INFO    | [gen] batch.done step=2 completions=4 dur_ms=5\n"
        b"12:00:01.000 | INFO    | [gen] batch.done step=3 completions=4 dur_ms=5\n"
    )
    summary, md = analyze([log], tmp_path / "out")
    assert summary["parse"]["tagged"] == 3 and summary["parse"]["malformed"] == 0
    from prime_rl.analysis.clock import reference_date

    assert reference_date([log.read_bytes()]) == "2026-01-02"


def test_a_step_that_is_no_step_number_names_its_file_and_line(tmp_path):
    """A step field must be a step number (1-8 ASCII digits). ``step=abc``, ``-1``, ``1.5`` or a
    9-digit step was dropped from the step tables without a word; each is now a bad value, counted
    once per line and field (``current_step=abc`` is no number and no step: once), named by file and line."""
    log = tmp_path / "orchestrator.log"
    lines = [
        "[train] step.done step=1 wait_ms=5.0 train_ms=10.0",
        "[train] step.done step=abc wait_ms=5.0 train_ms=10.0",
        "[train] step.done step=-1 wait_ms=5.0 train_ms=10.0",
        "[gen] batch.done step=123456789 completions=4 dur_ms=10.0",
        "[ckpt] wait.done target_step=x wait_ms=3.0",
        "[verify] batch.done step=+2 completions=4 dur_ms=1.0",
        "[rollout] trunc_pct=0 current_step=1.5 ckpt_step=0 staleness=1",
        "[rollout] trunc_pct=0 current_step=abc ckpt_step=0 staleness=1",
        "[train] step.done step=00000002 wait_ms=5.0 train_ms=10.0",
    ]
    log.write_text("".join(PREFIX.format(i) + line + "\n" for i, line in enumerate(lines)))
    a = _analyze(log)
    p = a.data.parse
    assert p.bad_values == 7
    assert p.bad_value_examples == [
        f"{log}:2: step=abc ([train] step.done)",
        f"{log}:3: step=-1 ([train] step.done)",
        f"{log}:4: step=123456789 ([gen] batch.done)",
        f"{log}:5: target_step=x ([ckpt] wait.done)",
        f"{log}:6: step=+2 ([verify] batch.done)",
    ]
    assert any(
        "7 value(s) not read: no number, a duration (a field that ends in _ms) below 0, a trunc_pct outside 0-100, "
        "a staleness below 0, a collector sample's queue_ms, gen_ms or verify_ms longer than its dur_ms, or in a "
        "step field no step number"
        in w
        and f"{log}:2" in w
        for w in a.warnings
    )
    # the lines' other values are kept, at no numbered step
    assert sorted(a.data.series["train_ms"]) == [10.0, 10.0, 10.0, 10.0]


def test_a_last_line_cut_as_it_was_written_and_a_token_without_a_key_are_malformed(tmp_path, analyze):
    """A log copied while it was written: the orchestrator's last line is step 19's batch.done cut
    inside its duration (``dur_ms=15`` of ~1546 ms), with no newline after it. It was counted as a
    15 ms batch (mean 1537 -> 1460 ms); ``... step=19 compl`` as a batch.done without a duration.
    Now each is a malformed line, named by file and line, none of its values used: 19 batches,
    the mean of the 19 whole ones. A line with a token that is no key=value (``garbage``, ``=5``)
    is malformed too (it was read as if the token were not there)."""
    from tests.support.synthetic_logs import make_run

    run = make_run("healthy", steps=20, seed=0)
    done = [i for i, line in enumerate(run.orchestrator) if "[gen] batch.done step=19 " in line]
    (last,) = done
    whole = run.orchestrator[last]
    durations = [
        float(line.split("dur_ms=")[1].split()[0]) for line in run.orchestrator if "[gen] batch.done" in line
    ]
    mean19 = sum(durations[:19]) / 19
    for name, cut in (
        ("number", whole[: whole.index("dur_ms=") + 9]),
        ("key", whole[: whole.index("completions") + 5]),
    ):
        logs = tmp_path / name
        files = run.write(logs)
        orch = files["orchestrator"]
        lines = run.orchestrator[:last]
        orch.write_text("\n".join(lines) + "\n" + cut)  # no newline: cut as it was written
        summary, md = analyze(list(files.values()), tmp_path / f"out_{name}")
        gen = summary["stats"]["gen_dur_ms"]
        assert gen["count"] == 19 and math.isclose(gen["mean"], mean19, rel_tol=1e-9), gen
        assert summary["parse"]["malformed"] == 1
        assert summary["parse"]["cut_lines"] == [f"{orch}:{last + 1}: {cut}"]
        assert "1 tagged line(s) cut short skipped" in md and f"{orch}:{last + 1}" in md

    logs = tmp_path / "tokens"
    files = run.write(logs)
    orch = files["orchestrator"]
    lines = list(run.orchestrator)
    first = next(i for i, line in enumerate(lines) if "[gen] batch.done step=0 " in line)
    lines[first] += " garbage"
    second = next(i for i, line in enumerate(lines) if "[gen] batch.done step=1 " in line)
    lines[second] += " =5"
    orch.write_text("\n".join(lines) + "\n")
    summary, md = analyze(list(files.values()), tmp_path / "out_tokens")
    assert summary["stats"]["gen_dur_ms"]["count"] == 18 and summary["parse"]["malformed"] == 2
    assert summary["parse"]["cut_lines"] == []
    assert f"{orch}:{first + 1}: " in md and "garbage" in md
