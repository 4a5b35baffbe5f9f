"""The streaming parser: tagged lines in, events out; bad, cut and gzipped input never crashes it."""

from __future__ import annotations

import gzip
from datetime import datetime

from tests.support.synthetic_logs import make_run

from prime_rl.analysis.parser import ParseStats, discover, label_for, parse_files


def parse(path):
    stats = ParseStats()
    return list(parse_files([("orchestrator", path)], stats)), stats


def test_tagged_lines_become_events_with_timestamps(tmp_path):
    log = tmp_path / "orchestrator.log"
    log.write_text(
        "2026-01-01 12:00:00.250 | INFO    | [weights][t1] client.send url=http://h path=/update_weights t=5.5\n"
        "2026-01-01 12:00:01 [rollout] trunc_pct=2.0 staleness=1\n"
        "no tag here [not a tag]\n"
        "[gen] batch.done step=3 dur_ms=12.5\n"
    )
    events, stats = parse(log)
    assert [(e.tag, e.event, e.tid) for e in events] == [
        ("weights", "client.send", "t1"),
        ("rollout", "", None),
        ("gen", "batch.done", None),
    ]
    base = datetime(2026, 1, 1, 12, 0, 0).timestamp()
    assert events[0].ts == base + 0.25 and events[1].ts == base + 1.0 and events[2].ts is None
    assert events[0].num("t") == 5.5 and events[0].fields["path"] == "/update_weights"
    assert events[1].num("staleness") == 1.0 and events[2].num("missing") is None
    assert (stats.lines, stats.tagged, stats.malformed) == (4, 3, 0)


def test_malformed_lines_are_counted_and_skipped(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(b"[gen]\n[ckpt] =3\n[verify] 9bad key=1\n[train] step.done wait_ms=abc\n")
    events, stats = parse(log)
    assert stats.malformed == 3 and len(stats.malformed_examples) == 3
    assert [e.event for e in events] == ["step.done"] and events[0].num("wait_ms") is None


def test_gzip_and_a_last_line_without_newline(tmp_path):
    log = tmp_path / "orchestrator.log.gz"
    with gzip.open(log, "wb") as f:
        f.write(b"[gen] batch.start step=0\n[gen] batch.done step=0 dur_ms=5")
    events, stats = parse(log)
    assert [e.event for e in events] == ["batch.start", "batch.done"] and events[1].num("dur_ms") == 5.0


def test_discover_labels_and_skips_console_copies(tmp_path):
    logs = tmp_path / "run" / "logs"
    (logs / "trainer").mkdir(parents=True)
    for name in (
        "orchestrator.log",
        "inference.log",
        "trainer/rank_0.log",
        "orchestrator_stdout.log",
        "rl.log",
    ):
        (logs / name).write_text("")
    found = {(label, p.name) for label, p in discover([tmp_path / "run"])}
    assert found == {
        ("orchestrator", "orchestrator.log"),
        ("inference", "inference.log"),
        ("trainer", "rank_0.log"),
    }
    assert label_for(tmp_path / "out_collect.log") == "collect"


def test_empty_garbage_cut_and_gzip_logs_never_crash(tmp_path, analyze):
    run = make_run("frontend_queue_saturation", seed=4)
    logs = tmp_path / "logs"
    files = run.write(logs, gz=True)
    garbage = logs / "garbage.log"
    garbage.write_bytes(
        b"\x00\xff random bytes\n[weights][abc def] client.done wall_ms=\n[gen]\n[ckpt] =3\nno tags here\n"
        b"2026-01-01 12:00:00.000 | INFO    | [weights][t9999] client.done wall_ms=12"
    )  # cut mid-line, no newline
    empty = logs / "empty.log"
    empty.write_text("")
    summary, md = analyze([*files.values(), garbage, empty], tmp_path / "out")
    assert summary["primary"]["kind"] == "frontend_queue_saturation"
    assert summary["parse"]["malformed"] >= 3 and "malformed" in md
    assert any(u["tid"] == "t9999" for u in summary["updates"])  # the cut line still gave what it had

    summary, md = analyze([empty], tmp_path / "out2")
    assert summary["primary"] is None and "no [weights] lines" in md
