"""The streaming parser: tagged lines in, events out; bad, cut and gzipped input never crashes it."""

from __future__ import annotations

import gzip
import itertools
import os
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest
from tests.support.synthetic_logs import make_run

from prime_rl.analysis.log_files import discover, label_for, open_log
from prime_rl.analysis.parser import ParseStats, parse_files


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
    """A last line without a newline was cut as it was written (loguru ends every line with one):
    ``dur_ms=5`` may be 5 s cut short. It is a malformed line, named, none of its values read; in a
    gzipped log and a plain one, and in a rotated part alike; a last line that is no tagged line is
    only counted as a line."""
    log = tmp_path / "orchestrator.log.gz"
    with gzip.open(log, "wb") as f:
        f.write(b"[gen] batch.start step=0\n[gen] batch.done step=0 dur_ms=5")
    events, stats = parse(log)
    assert [e.event for e in events] == ["batch.start"] and (stats.lines, stats.malformed) == (2, 1)
    assert stats.cut_lines == [f"{log}:2: [gen] batch.done step=0 dur_ms=5"] and not stats.malformed_examples
    part = tmp_path / "orchestrator.log.1"  # a rotated part cut as it was copied
    part.write_bytes(
        b"[gen] batch.start step=0\n2026-01-01 12:00:00.000 | INFO    | [gen] batch.done step=0 compl"
    )
    events, stats = parse(part)
    assert [e.event for e in events] == ["batch.start"] and stats.cut_lines == [
        f"{part}:2: 2026-01-01 12:00:00.000 | INFO    | [gen] batch.done step=0 compl"
    ]
    for tail in (
        b"vLLM: Avg prompt throughput",
        b"2026-01-01 12:00:00.000 | WARNING | [weights][t1] retry 1 in",
    ):
        part.write_bytes(b"[gen] batch.start step=0\n" + tail)  # no tagged line, a free-form warning
        events, stats = parse(part)
        assert len(events) == 1 and (stats.lines, stats.malformed, stats.cut_lines) == (2, 0, [])


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
        ("rl", "rl.log"),  # the launcher's own: its watchdog's [hang] lines
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
    # the cut last line (no newline: cut as it was written) gives nothing, and is named
    assert not any(u["tid"] == "t9999" for u in summary["updates"])
    assert summary["parse"]["cut_lines"] == [
        f"{garbage}:6: 2026-01-01 12:00:00.000 | INFO    | [weights][t9999] client.done wall_ms=12"
    ]
    assert "1 tagged line(s) cut short skipped" in md and f"{garbage}:6" in md

    summary, md = analyze([empty], tmp_path / "out2")
    assert summary["primary"] is None and "Nothing to analyse" in md  # not a healthy run's report


# --- a value can never become a line of its own -----------------------------------------------

import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from hypothesis import assume, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from prime_rl.analysis.parser import TAGS  # noqa: E402
from prime_rl.tracing import format_tagged, one_line  # noqa: E402

PREFIX = "2026-01-01 12:00:00.000 | INFO    | "
HOSTILE = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(list("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029\x00\x1b =[]")),
    )
)
FORGED = "x\n[weights][abc] rpc.done op=update_weights t=1 rpc_ms=99999\r[ckpt] write.done step=9 write_ms=1"


def parse_text(text: str):
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "inference.log"
        log.write_text(text, encoding="utf-8")
        return parse(log)


@settings(max_examples=150, deadline=None)
@given(
    tag=st.sampled_from([t.decode() for t in TAGS]),
    event=st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,10}", fullmatch=True),
    values=st.lists(HOSTILE, min_size=1, max_size=4),
)
def test_a_formatted_line_is_one_event_whatever_its_values(tag, event, values):
    fields = {f"k{i}": v for i, v in enumerate(values)}
    line = format_tagged(tag, event, "ab12", **fields)
    events, stats = parse_text(f"{PREFIX}{line}\n{PREFIX}[gen] batch.done step=1\n")
    assert [(e.tag, e.event, e.tid) for e in events] == [(tag, event, "ab12"), ("gen", "batch.done", None)]
    assert list(events[0].fields) == list(fields) and stats.malformed == 0 and stats.lines == 2


def test_a_forged_weight_dir_stays_inside_its_line(tmp_path):
    tagged = format_tagged("weights", "rpc.start", "t1", op="update_weights", t=1.0, target=FORGED)
    # a free-form warning quotes what the client sent through one_line (inference/admin.py)
    warning = f"[weights][t1] update_weights refused (403): weight_dir {one_line(repr(FORGED))}"
    warn = PREFIX.replace("INFO   ", "WARNING")  # admin.py logs it as a warning
    raw = f"{PREFIX}{tagged}\n{warn}{one_line(warning)}\n{PREFIX}{one_line(FORGED)}\n"
    events, stats = parse_text(raw)
    assert stats.lines == 3
    # the warning (free-form text: not key=value) is no event, and not counted as malformed
    assert [(e.tag, e.event) for e in events] == [("weights", "rpc.start")] and stats.malformed == 0
    assert not any(e.event in ("rpc.done", "write.done") for e in events)


def test_log_tagged_through_the_file_sink_is_one_event(tmp_path):
    """End to end: ``logging.log_tagged`` with the processes' own file format, read by the analyzer."""
    from loguru import logger

    from prime_rl.logging import LOG_FORMAT, log_tagged

    log = tmp_path / "inference.log"
    sink = logger.add(log, format=LOG_FORMAT, level="INFO", encoding="utf-8")
    try:
        log_tagged("weights", "rpc.start", "t1", op="update_weights", t=2.0, target=FORGED + "\x1b[2J\ud800")
        logger.warning(f"[weights][t1] update_weights refused (403): {one_line(FORGED)}")
        logger.info(f"loading {one_line(FORGED)}")  # no tagged head: a marker later in it is text
    finally:
        logger.remove(sink)
    events, stats = parse(log)
    assert stats.lines == 3 and stats.malformed == 0  # the warning: free-form, no event, not malformed
    assert [(e.tag, e.event, e.tid) for e in events] == [("weights", "rpc.start", "t1")]
    assert (
        events[0].fields["target"].startswith("x_[weights][abc]_rpc.done")
        and "\\x1b" in events[0].fields["target"]
    )


def test_a_malformed_line_is_named_by_file_and_line(tmp_path, monkeypatch):
    from prime_rl.analysis import parser as parser_mod

    monkeypatch.setattr(parser_mod, "CHUNK", 64)  # several chunks: the line number spans them
    log = tmp_path / "orchestrator.log"
    good = "2026-11-23 10:00:00.000 | INFO    | [gen] batch.done step=1 completions=4 dur_ms=10.0 inflight=0"
    log.write_text("\n".join([good] * 7 + ["2026-11-23 10:00:01.000 | INFO    | [gen] !!!"] + [good]) + "\n")
    stats = parser_mod.ParseStats()
    events = list(parser_mod.parse_files([("orchestrator", log)], stats))
    assert len(events) == 8 and stats.malformed == 1 and stats.lines == 9
    assert stats.malformed_examples == [f"{log}:8: 2026-11-23 10:00:01.000 | INFO    | [gen] !!!"]


def test_fields_and_timestamps_take_the_fast_paths_with_the_slow_paths_meaning(tmp_path):
    """The parser's shortcuts (fields split on "=", loguru's prefix read from its bytes, event names
    remembered) give what the general rules give: odd tokens, other prefixes, unknown tags."""
    log = tmp_path / "orchestrator.log"
    log.write_text(
        "[gen] x a=b=c k= z=1 z=2\n"  # no prefix: no timestamp
        "2026-01-01 12:00:00.250 | INFO    | [gen] y s=1\n"  # loguru's file prefix
        "2026-01-01 12:00:00.250 | WARNING | [gen] y s=2\n"  # the same second again: cached
        "2026-01-01 12:00:01,5 [gen] y s=3\n"  # another format: the general clock
        "12:00:02.000 | INFO     | [gen] y s=4\n"  # the console's prefix, no date
        "2026-01-01 12:00:03.000 | INFO    | [ckpt] =3\n"  # neither an event nor a field: malformed
        "2026-01-01 12:00:03.000 | INFO    | [gen] 9bad s=1\n"  # no event name: malformed
        "2026-01-01 12:00:03.000 | INFO    | [gen] y s=1 =v\n"  # a token with no key: malformed
        "[gen] y s=1 bare\n"  # a token that is no key=value: malformed
        "[zzz] odd k=1\n2026-01-01 12:00:04.000 | INFO    | [yyy] other k=1\n"
    )
    stats = ParseStats()
    evs = list(parse_files([("orchestrator", log)], stats))
    assert evs[0].fields == {"a": "b=c", "k": "", "z": "2"} and evs[0].ts is None
    base = datetime(2026, 1, 1, 12).timestamp()
    assert [e.ts - base for e in evs[1:]] == [0.25, 0.25, 1.5, 2.0]
    assert [e.fields["s"] for e in evs[1:]] == ["1", "2", "3", "4"]
    assert stats.malformed == 4 and dict(stats.unknown_tags) == {"zzz": 1, "yyy": 1}


# --- the two ways a chunk is split into lines agree -------------------------------------------

LINE = st.one_of(
    st.builds(
        lambda head, rest: PREFIX + head + rest,
        st.sampled_from(["[gen] ", "[weights][t1] ", "[ckpt]", "[train][] ", "[rollout] ", "[unknown] "]),
        HOSTILE,
    ),
    st.builds(lambda rest: "12:00:01.500 | INFO    | [gen] batch.done " + rest, HOSTILE),  # a console capture
    st.builds(lambda text: PREFIX + "free text " + text + " [gen] batch.done step=1", HOSTILE),
    # unknown tags where a line starts and after "| ", beside known ones
    st.builds(
        lambda head, text: PREFIX + head + text, st.sampled_from(["[gen] x | [zz] e=1 ", "[zz] e "]), HOSTILE
    ),
    st.sampled_from(["[zz] e=1", "[zz][t1] e", "free | [zz] e k=1 | [yy] f", "[gen] x | [gen] y"]),
    HOSTILE,
    st.just(""),
)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(LINE, min_size=1, max_size=15), end=st.sampled_from(["\n", "\r\n"]), bom=st.booleans())
@example(lines=[PREFIX + "[gen] batch.done a=1\x00x b=2", PREFIX + "[gen] x"], end="\n", bom=False)
@example(lines=[PREFIX + "[gen] batch.done a=1", PREFIX + "[gen] x=2"], end="\r\n", bom=False)
@example(lines=[PREFIX + "[gen] batch.done a=1"], end="\n", bom=True)
@example(lines=["2026-01-01 12:00:00.123 | INFÖ   | [gen] batch.done"], end="\n", bom=False)
@example(lines=[PREFIX + "[gen] 9bad", "2026-01-01T12:00:00.123 | INFO    | [gen] 9bad"], end="\n", bom=False)
def test_a_dense_chunk_read_by_polars_parses_as_the_bytes_path_does(lines, end, bom):
    """A chunk dense with tagged lines is split into lines by polars' reader, a sparse one from its
    markers' positions in the bytes; both give the same events, line numbers and counts (the
    malformed lines named in line order), whatever the lines hold (NUL, CR, CRLF endings, a
    byte-order mark, invalid text, a level that is not ASCII)."""
    from prime_rl.analysis import parser

    raw = (b"\xef\xbb\xbf" if bom else b"") + end.join(lines).encode("utf-8", "surrogatepass") + end.encode()

    def run(log: Path, dense: int):
        old, scan = parser._DENSE, parser._scan
        parser._DENSE, parser._scan = dense, None  # the Python scan's two ways (the C scan has one)
        try:
            events, stats = parse(log)
        finally:
            parser._DENSE, parser._scan = old, scan
        rows = [(e.line, e.ts, e.tag, e.tid, e.event, e.fields) for e in events]
        counts = (stats.lines, stats.tagged, stats.malformed, stats.malformed_examples)
        return rows, counts, dict(stats.unknown_tags)

    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "o.log"
        log.write_bytes(raw)
        # every chunk dense (polars' reader) == every chunk sparse (lines found from the bytes)
        assert run(log, 10**9) == run(log, 0)


HEAD = st.sampled_from(
    ["[gen]", "[weights][t1]", "[zzz]", "[zzz][t1]", "[gen][t1]", "[", "]", "| ", "| [yy] e ", "\n"]
)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.one_of(HEAD, HOSTILE), max_size=12))
@example(pieces=["[zzz] e=1\n[gen] x\n| [yy] e \n"])
def test_markers_and_unknown_tags_found_from_the_brackets_are_what_the_regexes_find(pieces):
    """A sparse chunk's markers and unknown tags, found in one pass over its "[" (``bytes.find``),
    are where the marker regex finds markers and what the unknown-tag regex counts, in any bytes;
    what the kept read buffer holds after the chunk is not looked at."""
    from collections import Counter

    from prime_rl.analysis import parser

    chunk = "".join(pieces).encode("utf-8", "surrogatepass")
    unknown: Counter = Counter()
    buffer = bytearray(chunk + b"[gen] x=1\n[zz] e \n| [yy] e=1\n")  # an earlier chunk's bytes after it
    marks = parser._brackets(buffer, len(chunk), unknown)
    assert marks == [m.start() for m in parser._MARKERS.finditer(chunk)]
    # the regex over the whole chunk (a line start before it), as the parse counted them before
    whole = re.compile(parser._UNKNOWN_S.pattern.encode())
    assert unknown == Counter(m.group(1).decode() for m in whole.finditer(b"\n" + chunk))


@settings(max_examples=150, deadline=None)
@given(
    data=st.binary(max_size=300).map(lambda b: b.replace(b"\r", b"\n"))
    | st.sampled_from([b"", b"\n", b"x" * 50]),
    size=st.integers(1, 40),
    gz=st.booleans(),
    buffers=st.sampled_from([1, 3]),
)
def test_chunks_are_whole_lines_of_the_file_in_order_whatever_the_buffer_size(data, size, gz, buffers):
    """The file comes back whole, in order, cut only after newlines (a final line without one is
    handed back apart, torn); a chunk is at most the buffer's size, which grows (doubles) only to hold a line longer
    than it; the last non-empty line is the one of the whole file, its trailing whitespace stripped.
    With several buffers, used in turn, a chunk stays as it was until that many more are read."""
    from prime_rl.analysis import parser

    assume(gz or not data.startswith(b"\x1f\x8b"))  # a plain file with gzip's magic is read as gzip
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "o.log"
        log.write_bytes(gzip.compress(data) if gz else data)
        old = parser.CHUNK
        parser.CHUNK = size
        try:
            cut: list[str] = []
            torn: list[bytes] = []
            chunks, lasts, held = [], [], []
            for buffer, n in parser._chunks(log, cut, buffers, torn):  # valid until `buffers` more are read
                chunks.append(bytes(buffer[:n]))
                lasts.append(parser._last_line_of(buffer, n))
                held = [*held, (buffer, n, chunks[-1])][-buffers:]
                assert all(bytes(b[:k]) == was for b, k, was in held)
        finally:
            parser.CHUNK = old
    whole, _, tail = data.rpartition(b"\n") if b"\n" in data else (b"", b"", data)
    whole += b"\n" if b"\n" in data else b""
    assert b"".join(chunks) == whole and torn == ([tail] if tail else []) and not cut
    longest = max((len(line) + 1 for line in data.split(b"\n")), default=1)
    assert all(c.endswith(b"\n") and len(c) <= max(size, 2 * longest) for c in chunks)
    last = b"".join(chunks).rstrip().rsplit(b"\n", 1)[-1]
    found = b""
    for line in lasts:
        found = line or found
    assert found == last


# --- chunks scanned side by side ----------------------------------------------------------------


def _mixed_log(n: int, seed: int) -> bytes:
    """Tagged lines of every kind the scan tells apart, between untagged ones of any length."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        lines.append(
            rng.choice(
                [
                    f"{PREFIX}[gen] batch.done step={i} dur_ms={rng.random():.3f}",
                    f"{PREFIX}[weights][t{i}] rpc.done rpc_ms={i}",
                    "INFO vllm noise " + "x" * rng.randrange(300),
                    "INFO a long line " + "y" * 1500,  # longer than the tests' chunks: a buffer grows
                    f"12:00:0{i % 10}.500 | INFO    | [ckpt] wait.done target_step={i}",  # a console capture
                    f"{PREFIX}[zz] e=1",  # an unknown tag
                    f"[train] step.done step={i} train_ms=1",
                    f"{PREFIX}[verify]",  # malformed
                ]
            )
        )
    return ("\n".join(lines) + "\n").encode()


def _parsed(log: Path):
    stats = ParseStats()
    events = list(parse_files([("orchestrator", log)], stats))
    rows = [(e.line, e.ts, e.tag, e.tid, e.event, e.fields) for e in events]
    return (
        rows,
        (stats.lines, stats.tagged, stats.malformed, stats.malformed_examples),
        (
            dict(stats.unknown_tags),
            stats.last_lines,
        ),
    )


@pytest.mark.parametrize("dense", [0, 10**9, None], ids=["sparse", "dense", "c"])
def test_chunks_scanned_side_by_side_parse_as_one_chunk_does(tmp_path, monkeypatch, dense):
    """A log read in many small chunks, scanned two at a time by scans that take their time, gives
    the events, line numbers, counts and last line that one chunk of the whole log gives; no chunk's
    bytes change under its scan (its buffer is refilled only once the scan is done)."""
    from prime_rl.analysis import parser

    log = tmp_path / "orchestrator.log"
    if dense is None:  # the C scan (one way for every chunk)
        if parser._scan is None:
            pytest.skip("the C scan is not built")
    else:  # the Python scan, each of its two ways
        monkeypatch.setattr(parser, "_scan", None)
        monkeypatch.setattr(parser, "_DENSE", dense)
    log.write_bytes(_mixed_log(400, seed=dense if dense is not None else 7))
    whole = _parsed(log)
    assert whole[1][0] == 400 and whole[1][1] > 100 and whole[2][0]  # every kind is there
    text = log.read_bytes().split(b"\n")
    assert all(f"[{tag}]".encode() in text[line - 1] for line, _, tag, *_ in whole[0])  # numbered from 1

    real, rng, scans = parser._scan_chunk, random.Random(0), []

    def slow(chunk, size, *keys):
        before = bytes(chunk[:size])
        time.sleep(rng.random() * 0.003)  # the reader runs ahead meanwhile, as far as it may
        found = real(chunk, size, *keys)
        assert bytes(chunk[:size]) == before, "a chunk's buffer was refilled while it was scanned"
        scans.append(size)
        return found

    monkeypatch.setattr(parser, "_scan_chunk", slow)
    monkeypatch.setattr(parser, "CHUNK", 512)
    assert _parsed(log) == whole and len(scans) > 50


def _scans_running() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("analyzer-scan")]


def _open(path: Path) -> bool:
    fds = Path("/proc/self/fd")
    return any(os.path.realpath(fd) == str(path.resolve()) for fd in fds.iterdir()) if fds.is_dir() else False


def test_a_parse_stopped_early_or_failing_leaves_no_scan_running_and_the_file_closed(tmp_path, monkeypatch):
    """The caller stops after the first batch: the scans are done and the file is closed. A scan
    that fails raises its error to the caller, the same way."""
    from prime_rl.analysis import parser

    log = tmp_path / "orchestrator.log"
    log.write_bytes(_mixed_log(2000, seed=1))
    monkeypatch.setattr(parser, "CHUNK", 1024)
    monkeypatch.setattr(parser, "BATCH_ROWS", 10)
    lines = parser.scan_files([("orchestrator", log)], ParseStats())
    assert len(next(lines)) and _open(log)
    lines.close()
    assert not _scans_running() and not _open(log)

    real, done = parser._scan_chunk, []

    def slow(chunk, size, *keys):
        time.sleep(0.02)
        done.append(size)
        return real(chunk, size, *keys)

    monkeypatch.setattr(parser, "_scan_chunk", slow)
    with ThreadPoolExecutor(2) as pool:  # a pool that outlives the scan: _scanned waits for its own scans
        scans = parser._scanned(parser._chunks(log, [], parser.BUFFERS), pool)
        next(scans)
        scans.close()
        finished = len(done)
        time.sleep(0.2)
        assert len(done) == finished, "a scan ran on after the caller stopped"

    real, calls = real, itertools.count()

    def failing(chunk, size, *keys):
        if next(calls) == 5:
            raise RuntimeError("the sixth scan failed")
        return real(chunk, size, *keys)

    monkeypatch.setattr(parser, "_scan_chunk", failing)
    with pytest.raises(RuntimeError, match="the sixth scan failed"):
        list(parser.scan_files([("orchestrator", log)], ParseStats()))
    assert not _scans_running() and not _open(log)


def test_a_small_file_gets_buffers_of_its_size_and_lines_written_while_it_is_read_are_read(
    tmp_path, monkeypatch
):
    """A file smaller than a chunk is read into buffers of its size (zeroing three 8 MB buffers
    was a quarter of a short log's analysis), never less than MIN_BUFFER; one that grows after it
    was opened is read on, whole lines in order, in reads that double up to a chunk."""
    from prime_rl.analysis import parser

    line = b"2026-01-01 12:00:00.250 | INFO    | [gen] batch.done dur_ms=5\n"
    small = tmp_path / "small.log"
    small.write_bytes(line * 3)
    with open(small, "rb") as f:
        assert parser._buffer_size(f) == parser.MIN_BUFFER
    big = tmp_path / "big.log"
    big.write_bytes(line * (2 * parser.MIN_BUFFER // len(line)))
    with open(big, "rb") as f:
        assert parser._buffer_size(f) == big.stat().st_size + 1
    monkeypatch.setattr(parser, "CHUNK", 4096)
    with open(big, "rb") as f:
        assert parser._buffer_size(f) == 4096
    gz = tmp_path / "small.log.gz"
    gz.write_bytes(gzip.compress(line))
    with open_log(gz) as f:
        assert parser._buffer_size(f) == 4096  # its size on disk says nothing of what it holds
    read, write = os.pipe()  # a pipe (<(zcat log)) has no size either
    with open(read, "rb") as f, open(write, "wb"):
        assert parser._buffer_size(f) == 4096

    monkeypatch.setattr(parser, "MIN_BUFFER", 256)
    growing = tmp_path / "growing.log"
    growing.write_bytes(line)
    sized = parser._buffer_size

    def then_written(f) -> int:  # the log grows once its size was taken
        n = sized(f)
        with open(growing, "ab") as more:
            more.write(b"".join(line.replace(b"dur_ms=5", f"dur_ms={k}".encode()) for k in range(400)))
        return n

    monkeypatch.setattr(parser, "_buffer_size", then_written)
    got, sizes = [], []
    for buf, size in parser._chunks(growing, [], parser.BUFFERS):
        got.append(bytes(buf[:size]))
        sizes.append(len(buf))
    assert b"".join(got) == growing.read_bytes() and growing.stat().st_size > 400 * len(line)
    # every read that fills its buffer makes the next one twice as big, up to a chunk (4096 bytes)
    assert sizes[:7] == [256, 512, 1024, 2048, 4096, 4096, 4096] and max(sizes) == 4096
