"""The column-wise parse and collection against plain Python on the same lines.

The collector reads a batch's fields column-wise (a regex per key over the batch); a batch made of
events reads them from each event's dict. Both must give the same analysis. And the column-wise
split of a tagged line must give what the grammar of docs/design.md says, line by line, for any
spacing, repeated keys, event-less lines and text that is not ASCII.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.synthetic_logs import SCENARIOS, Shape, make_run

from prime_rl.analysis.parser import ParseStats, parse_files, scan_files
from prime_rl.analysis.stats import Collected, collect
from prime_rl.analysis.tagged import is_duration

PREFIX = "2026-01-01 12:00:{:02d}.250 | INFO    | "
ODD_LINES = [
    "[gen] batch.start step=1",
    "[gen]\tbatch.done  step=1   dur_ms=10.5\tcompletions=4",  # tabs and runs of spaces
    "[gen] batch.done step=1 dur_ms=11 dur_ms=12.5 completions=2",  # the last of a repeated key
    "[rollout] current_step=1 trunc_pct=3 staleness=0",  # event-less
    "[verify] batch.done step=1 dur_ms=5 note=ünïcødé",
    "[train] step.done step=1 wait_ms=abc train_ms=7\r",  # a bad value, a carriage return
    "[weights][t1] client.send url=http://h:1 path=/update_weights t=1.5",
    "[weights][t1] client.done url=http://h:1 wall_ms=9 rpc_ms=8",
    "[ckpt] =3",  # malformed: neither an event nor a key
    "[gen][bad id!] batch.start step=2",  # malformed: no space after the marker
    "[ckpt] 9lives x=1",  # malformed: no event name
    "[gen] batch.start  step=2",
]


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _both(paths: list[tuple[str, Path]]) -> tuple[Collected, Collected]:
    columns, events = ParseStats(), ParseStats()
    return collect(scan_files(paths, columns), columns), collect(parse_files(paths, events), events)


def _view(d: Collected) -> dict:
    """Everything a report is made of, comparable."""
    return {
        "series": {k: sorted(v) for k, v in d.series.items()},
        "counts": dict(d.counts),
        "updates": [u.to_dict() for u in d.updates],
        "spans": [(s.kind, s.start, s.end, s.label) for s in d.spans],
        "staleness": d.staleness_by_step.as_dict(),
        "restarts": d.restarts,
        "last": {k: (e.tag, e.event, e.where()) for k, e in d.last_events.items()},
        "open_wait": d.open_wait and d.open_wait[:2],
        "open_batch": d.open_batch and d.open_batch.where(),
        "parse": (d.parse.lines, d.parse.tagged, d.parse.malformed, d.parse.bad_values),
        "examples": (d.parse.malformed_examples, sorted(d.parse.bad_value_examples)),
        "run_s": d.run_seconds,
        "server_counts": d.server_counts,
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_columns_and_events_give_the_same_analysis_of_every_scenario(tmp_path, scenario):
    run = make_run(scenario, steps=25, seed=3, shape=Shape(servers=2))
    paths = []
    for name, lines in [
        ("orchestrator", run.orchestrator),
        ("inference", run.inference),
        ("trainer", run.trainer),
    ]:
        paths.append((name, _write(tmp_path, f"{name}.log", lines)))
    for name, lines in run.servers.items():
        paths.append(("inference", _write(tmp_path, f"{name}.log", lines)))
    columns, events = _both(paths)
    assert columns.updates and columns.spans  # something to compare
    assert _view(columns) == _view(events)


def test_columns_and_events_agree_on_odd_spacing_bad_values_and_malformed_lines(tmp_path):
    lines = [PREFIX.format(i) + text for i, text in enumerate(ODD_LINES)]
    lines.insert(3, "12:00:30.000 | INFO    | [gen] batch.done step=0 dur_ms=3")  # a console capture
    path = _write(tmp_path, "orchestrator.log", lines)
    columns, events = _both([("orchestrator", path)])
    assert _view(columns) == _view(events)
    p = columns.parse
    assert (p.tagged, p.malformed) == (10, 3)
    assert p.malformed_examples[0] == f"{path}:10: {PREFIX.format(8)}[ckpt] =3"
    assert p.bad_value_examples == [f"{path}:7: wait_ms=abc ([train] step.done)"]
    assert sorted(columns.series["gen_dur_ms"]) == [3.0, 12.5]  # step 1: its last line, its last dur_ms


def _reference(message: str) -> tuple | None:
    """The grammar, one line at a time (what the parser did before it worked column-wise)."""
    m = re.match(r"\[([a-z]+)\](?:\[([A-Za-z0-9_.-]{1,64})\])?(?:[ \t]+(.*))?", message)
    parts = m.group(3).split(None, 1) if m.group(3) else []
    if not parts:
        return None
    if "=" in parts[0]:
        event, tokens = "", " ".join(parts).split()
    elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", parts[0]):
        event, tokens = parts[0], parts[1].split() if len(parts) > 1 else []
    else:
        return None
    fields = {}
    for tok in tokens:
        k, sep, v = tok.partition("=")
        if not (sep and k):  # a token that is no key=value: the line does not follow the grammar
            return None
        fields[k] = v
    if not event and not fields:
        return None
    return m.group(1), m.group(2), event, fields


WORD = st.sampled_from(["step", "dur_ms", "url", "x", "t", "a.b", "ü", "=", "==", "k=", "=v", "9", "é=1"])
VALUE = st.sampled_from(["1", "2.5", "nan", "abc", "", "http://h:1/a?b=c", "ünï", "-3e2"])
TOKEN = st.one_of(st.builds(lambda k, v: f"{k}={v}", WORD, VALUE), WORD)
SPACE = st.sampled_from([" ", " ", " ", "  ", "\t", " \t "])
HEAD = st.sampled_from(["[gen]", "[weights][t1]", "[ckpt][a.b-c_9]", "[train][]", "[env][x y]", "[rollout]x"])
EVENT = st.sampled_from(["batch.done", "step.done", "", "9bad", "a=1", "episode.done"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(HEAD, SPACE, EVENT, st.lists(st.tuples(SPACE, TOKEN), max_size=5)), min_size=1, max_size=12
    )
)
def test_any_tagged_line_splits_as_the_grammar_says(tmp_path_factory, pieces):
    messages = [
        head + space + event + "".join(s + t for s, t in tokens) for head, space, event, tokens in pieces
    ]
    path = _write(
        tmp_path_factory.mktemp("log"), "o.log", [PREFIX.format(i % 60) + m for i, m in enumerate(messages)]
    )
    stats = ParseStats()
    got = [(e.tag, e.tid, e.event, e.fields) for e in parse_files([("orchestrator", path)], stats)]
    want = [r for r in map(_reference, messages) if r is not None]
    assert got == want
    assert stats.malformed == len(messages) - len(want)
    # the fields read column-wise are the ones the events' dicts hold
    batches = list(scan_files([("orchestrator", path)], ParseStats()))
    assert len(batches) == (1 if want else 0)  # no batch of no lines: every line was malformed
    if not want:
        return
    (lines,) = batches
    for key in ("step", "dur_ms", "url", "x", "t", "a.b"):
        odd = list(range(1, len(want), 2))  # some rows alone, read before the whole column is
        assert lines.rows_text(odd, key) == [want[i][3].get(key) for i in odd]
        assert lines.text(key) == [f.get(key) for *_, f in want]
        # a duration (``*_ms``) below 0 is a bad value
        nums = [
            float(f[key])
            if key in f and _finite(f[key]) and not (is_duration(key) and float(f[key]) < 0)
            else None
            for *_, f in want
        ]
        assert lines.num(key) == nums


def _finite(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def test_dropped_groups_are_counted_by_reason(tmp_path):
    lines = [
        "[gen] batch.start step=1",
        "[gen] group.drop step=1 reason=zero_advantage",
        "[gen] group.drop step=1 reason=too_long",
        "[gen] group.drop step=1 reason=zero_advantage",
        "[gen] group.drop step=1",
        "[gen] batch.done step=1 dur_ms=10 completions=4",
    ]
    path = _write(tmp_path, "orchestrator.log", [PREFIX.format(i) + ln for i, ln in enumerate(lines)])
    for d in _both([("orchestrator", path)]):
        drops = {k: n for k, n in d.counts.items() if k.startswith("drop.")}
        assert drops == {"drop.zero_advantage": 2, "drop.too_long": 1, "drop.?": 1}


def test_a_handler_that_raises_names_the_line_it_failed_on(tmp_path, monkeypatch):
    """A batch whose tag handler raises is counted, never a crash, and named by the line that made
    it raise (found again row by row), not by the batch's first line; both parse paths."""
    from prime_rl.analysis import stats as stats_mod

    plain = stats_mod._Collector.verify

    def verify(self, seq, b):
        if any(d == 66.0 for d in b.num("dur_ms", ("batch.done",))):
            raise ValueError("a value the collector cannot use")
        plain(self, seq, b)

    monkeypatch.setattr(stats_mod._Collector, "verify", verify)
    lines = [PREFIX.format(i) + f"[verify] batch.done step={i} dur_ms={60 + i}" for i in range(10)]
    path = _write(tmp_path, "orchestrator.log", lines)
    for d in _both([("orchestrator", path)]):
        assert d.parse.bad_values == 1
        (example,) = d.parse.bad_value_examples
        assert example.startswith(f"{path}:7: ValueError: a value the collector cannot use"), example
    # the batch's bad values are counted once: the search for the failing row ran its halves through a
    # scratch collector that counted them again
    lines[2] = PREFIX.format(2) + "[verify] batch.done step=abc dur_ms=62"
    lines[3] = PREFIX.format(3) + "[verify] batch.done step=3 dur_ms=x"
    path = _write(tmp_path, "orchestrator.log", lines)
    for d in _both([("orchestrator", path)]):
        # dur_ms=x and the error; the steps' handler was not reached
        assert d.parse.bad_values == 2, d.parse.bad_value_examples


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(
                "{:04d}-{:02d}-{:02d}{}{:02d}:{:02d}:{:02d}".format,
                st.integers(1970, 2100),
                st.integers(0, 13),
                st.integers(0, 32),
                st.sampled_from([" ", "T", "_"]),
                st.integers(0, 25),
                st.integers(0, 61),
                st.integers(0, 62),
            ),
            # the parse's fast path has checked the '-' after the year
            st.text(alphabet="0123456789-: Tx", min_size=19, max_size=19).map(lambda t: t[:4] + "-" + t[5:]),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_loguru_seconds_column_wise_are_what_the_clock_gives_each(seconds):
    """The parse reads loguru's ``YYYY-MM-DD HH:MM:SS`` column-wise; each value, valid or not (hour
    24, day 32, 30 February, a letter), is what the line-by-line clock gives it."""
    import polars as pl

    from prime_rl.analysis.clock import Clock
    from prime_rl.analysis.parser import _loguru_lines

    clock = Clock("2026-01-01")
    expected = [Clock("2026-01-01")(s) for s in seconds]
    lines = pl.Series([f"{s}.000 | INFO    | [gen] batch.start step=1" for s in seconds])
    frame, malformed = _loguru_lines(lines, pl.Series(range(len(seconds))), clock, set())
    assert malformed == []
    assert frame.get_column("ts").to_list() == expected
