"""The chunk scan in C (``prime_rl.analysis._scan``) against the same scan in Python: the parse falls
back to the Python one where the C module is not built, so the two must find the same."""

from __future__ import annotations

import importlib.metadata
import shutil

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prime_rl.analysis import parser
from prime_rl.analysis.parser import ParseStats, parse_files, scan_files
from prime_rl.analysis.tagged import SCHEMA

built = pytest.mark.skipif(
    parser._scan is None, reason="the C scan is not built (no install, or no C compiler)"
)

PREFIX = "2026-01-01 12:00:00.000 | INFO    | "
# a tagged line from its parts: every variant the C scan must take apart as the Python scan does,
# or leave to it (bad digits, a console prefix, odd spacing, long trace ids, non-ASCII, controls)
PREFIXES = [
    PREFIX,
    "2026-01-01 23:59:60.999 | WARNING | ",
    "2026-01-01 25:61:61.123 | INFO    | ",
    "2026-13-45 12:00:00.123 | INFO    | ",
    "2026-01-01 12:00:00.1x3 | INFO    | ",
    "2026-01-01T12:00:00.123 | INFO    | ",
    "2026-01-01 12:00:00.123 | INFÖ   | ",
    "2026-01-01 12:00:00.000 | INFO | ok ",  # the marker at byte 36, but inside a message
    "2026-01-01 12:00:00.000 ~~~~~~~~~~~~~",
    "2026-01-01 12:00:00.000 | info    | ",
    "12:00:01.500 | INFO    | ",
    "free text ",
    "",
]
HEADS = ["[gen]", "[weights][t1]", "[weights][" + "a" * 64 + "]", "[weights][" + "a" * 65 + "]", "[gen][]"]
HEADS += ["[gen][t1][x]", "[gen]x", "[zzz]", "[ckpt][t.1-_]", "[hang]"]
FIRSTS = ["batch.done", "9bad", "k=1", "=3", "é", "", "rpc.done"]
RESTS = [
    "",
    " ",
    " step=1 dur_ms=2.5",
    "  a=1",
    " a=1\tb=2",
    " x=é",
    " a=1 | [zz] e=1",
    " a=\x0c1",
    " [gen] y",
]
RESTS += [" wait_ms=inf step=+1", " \x1c"]
LINE = st.one_of(
    st.builds(
        lambda *parts: "".join(parts),
        st.sampled_from(PREFIXES),
        st.sampled_from(HEADS),
        st.sampled_from([" ", "  ", "\t", ""]),
        st.sampled_from(FIRSTS),
        st.sampled_from(RESTS),
    ),
    st.text(alphabet=st.sampled_from(list("ab [|]\r\x00=\x85é")), max_size=20),
)


def _parsed(log, scan) -> tuple:
    """Every event of ``log`` and the parse's counts, by ``scan`` (the C module, or None: Python)."""
    old = parser._scan
    parser._scan = scan
    try:
        stats = ParseStats()
        events = [
            (e.line, e.ts, e.tag, e.tid, e.event, tuple(e.fields.items()))
            for e in parse_files([("orchestrator", log)], stats)
        ]
    finally:
        parser._scan = old
    parser._scan = scan
    try:  # and the lines' columns as read (the fields part as the Python scan writes it)
        frames = [b.frame.select(list(SCHEMA)) for b in scan_files([("orchestrator", log)], ParseStats())]
    finally:
        parser._scan = old
    return (
        events,
        [row for frame in frames for row in frame.iter_rows()],
        stats.lines,
        stats.tagged,
        stats.malformed,
        stats.malformed_examples,
        stats.cut_lines,
        dict(stats.unknown_tags),
        dict(stats.unknown_tag_lines),
    )


@built
@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(LINE, min_size=1, max_size=12),
    end=st.sampled_from(["\n", "\r\n"]),
    small=st.booleans(),
    whole=st.booleans(),
)
@example(
    lines=[PREFIX + "[gen] 9bad s=1", "x", PREFIX + "[ckpt] =3", "[zzz] e k=1"],
    end="\n",
    small=False,
    whole=True,
)
@example(
    lines=["2026-01-01 12:00:00.000 | INFO | ok [gen] batch.done step=3"] * 3,
    end="\n",
    small=False,
    whole=True,
)
# a "T" between date and time: split on any whitespace too (no space before the fields part)
@example(
    lines=[PREFIX + "[gen] batch.done", "2026-01-01T12:00:00.123 | INFO    | [gen] batch.done  a=1"],
    end="\n",
    small=False,
    whole=True,
)
# a level that is not A-Z: split on any whitespace (a \x1c after the event is no fields part)
@example(
    lines=[PREFIX + "[gen] batch.done", PREFIX.replace("INFO", "info") + "[gen] batch.done \x1c"],
    end="\n",
    small=False,
    whole=True,
)
@example(
    lines=[PREFIX + "[gen] k=1", PREFIX + "[gen] batch.done", PREFIX + "[ckpt] t=1 x=2"],
    end="\n",
    small=False,
    whole=True,
)
def test_the_c_scan_parses_any_log_as_the_python_scan_does(lines, end, small, whole, tmp_path_factory):
    """The same events (line, time, tag, trace id, event, fields), line and tagged counts, malformed
    lines with their examples in the same order, cut last lines, and unknown tags; in one chunk or
    in many; a log whose last line has no newline (``whole`` false) too."""
    log = tmp_path_factory.mktemp("c") / "o.log"
    log.write_bytes(end.join(lines).encode("utf-8", "surrogatepass") + (end.encode() if whole else b""))
    with pytest.MonkeyPatch.context() as mp:
        if small:
            mp.setattr(parser, "CHUNK", 64)
        assert _parsed(log, parser._scan) == _parsed(log, None)


@built
def test_the_c_scan_parses_a_mixed_log_as_the_python_scan_does(tmp_path):
    """A real-looking log of 20,000 lines (tagged lines one in ten, vLLM noise between) and one with
    every line tagged: the same events, read from the same lines."""
    from tests.support.synthetic_logs import make_run

    run = make_run("healthy", steps=200)
    noise = PREFIX + "(vllm.engine) Avg prompt throughput: 1234.5 tokens/s, Running: 256 reqs"
    tagged = sorted(run.orchestrator + run.trainer)
    for name, lines in (
        ("mixed", [x for line in tagged for x in [noise] * 9 + [line]][:20_000]),
        ("tagged", tagged),
    ):
        log = tmp_path / f"{name}.log"
        log.write_text("\n".join(lines) + "\n")
        c = _parsed(log, parser._scan)
        assert c == _parsed(log, None)
        assert c[2] == len(lines) and len(c[0]) > 1500 and not c[4]
        assert all(f"[{tag}]" in lines[n - 1] for n, _, tag, *_ in c[0])  # numbered from 1


KEYS = ("t", "tt", "a.b", "x-y", "step")
TOKEN = st.one_of(
    st.builds(
        lambda key, value: f"{key}={value}",
        st.sampled_from([*KEYS, "z", "T", "xt"]),
        st.text(alphabet=st.sampled_from(list("ab=.-_1")), max_size=4),
    ),
    st.sampled_from(["", "tt=", "a.b=1=2", "t=\t1", "step=é"]),
    st.sampled_from(["noeq", "=v", "t"]),  # no key=value: the line is malformed (no fields read)
)
FIELD_LINE = st.builds(
    lambda tag, first, tokens, rest: PREFIX + f"[{tag}] {first}" + (" " + " ".join(tokens) if rest else ""),
    st.sampled_from(["gen", "ckpt", "weights][t1"]),
    st.sampled_from(["batch.done", "t=5", "step=2", "x", "k="]),
    st.lists(TOKEN, max_size=6),
    st.booleans(),
)


@built
@settings(max_examples=300, deadline=None)
@given(lines=st.lists(FIELD_LINE, min_size=1, max_size=12))
@example(
    lines=[
        PREFIX + "[gen] batch.done t=1 tt=2 t=3 xt=4",
        PREFIX + "[gen] t=5 a.b=",
        PREFIX + "[ckpt] x step=é",
    ]
)
def test_fields_read_by_the_c_scan_are_what_the_regexes_read(lines, tmp_path_factory):
    """Each tag's fields, read by the C scan as it takes a line apart (the last ``key=`` token,
    from the first word on in an event-less line), are what the key-by-key regexes read from the
    line's rest, and so are those of the lines it leaves to the Python parse (a tab, text that is
    not ASCII); the batches carry none of the scan's own columns."""
    from prime_rl.analysis.tagged import fields_by_key

    log = tmp_path_factory.mktemp("f") / "o.log"
    log.write_bytes(("\n".join(lines) + "\n").encode())
    batches = list(
        parser.scan_files(
            [("orchestrator", log)], ParseStats(), {t: KEYS for t in ("gen", "ckpt", "weights")}
        )
    )
    assert all(not c.startswith("_") for b in batches for c in b.frame.columns)
    for b in batches:
        for _, part in b.by_tag():
            want = fields_by_key(part.frame.get_column("rest"), KEYS)
            part.fields(*KEYS)  # read by the scan already, or (no line the scan took apart) read now
            assert {k: part.text(k) for k in KEYS} == {k: want.get_column(k).to_list() for k in KEYS}


@built
def test_the_fields_of_lines_the_c_scan_took_apart_come_read(tmp_path):
    """Every line in format_tagged's shape: each tag's fields are read before the collection asks
    (the regexes never run for them); the read values are each line's."""
    log = tmp_path / "o.log"
    log.write_text(PREFIX + "[gen] batch.done step=3 t=1 t=2\n" + PREFIX + "[ckpt] write.done x-y=9\n")
    (b,) = parser.scan_files([("orchestrator", log)], ParseStats(), {"gen": KEYS, "ckpt": ("x-y",)})
    parts = dict(b.by_tag())
    assert set(parts["gen"]._raws) == set(KEYS) and set(parts["ckpt"]._raws) == {"x-y"}
    assert parts["gen"].text("t") == ["2"] and parts["gen"].text("step") == ["3"]
    assert parts["gen"].text("a.b") == [None] and parts["ckpt"].text("x-y") == ["9"]


@built
def test_the_c_scan_refuses_a_size_past_its_buffer_and_heads_that_are_not_bytes():
    with pytest.raises(ValueError, match="size"):
        parser._scan.scan(b"[gen] x\n", 9, parser._MARKER_HEADS, True)
    with pytest.raises(ValueError, match="size"):
        parser._scan.scan(b"[gen] x\n", -1, parser._MARKER_HEADS, True)
    with pytest.raises(TypeError, match="heads"):
        parser._scan.scan(b"[gen] x\n", 8, ("[gen]",), True)
    assert parser._scan.scan(b"[gen] x\n", 8, (), True)[0] == 1  # no heads: lines counted, nothing kept
    with pytest.raises(ValueError, match="one tuple of keys per head"):
        parser._scan.scan(b"[gen] x\n", 8, (b"[gen]",), True, ())
    with pytest.raises(ValueError, match="at most 16 keys"):
        parser._scan.scan(b"[gen] x\n", 8, (b"[gen]",), True, (tuple(b"k%d" % i for i in range(17)),))
    with pytest.raises(TypeError, match="non-empty bytes"):
        parser._scan.scan(b"[gen] x\n", 8, (b"[gen]",), True, ((b"",),))


def test_an_installed_package_has_the_c_scan_where_a_compiler_is():
    """``make install`` builds the C scan (setup.py); a build that silently failed would leave every
    analysis on the slower Python scan. A source tree run from PYTHONPATH is not installed: skipped."""
    try:
        importlib.metadata.distribution("prime-rl")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("prime-rl is not installed (a source tree on PYTHONPATH)")
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the install skips the optional C scan")
    assert parser._scan is not None, "the C scan was not built: reinstall with make install"


def test_a_build_of_another_version_is_not_used():
    """A build left in the source tree by an older checkout (its scan takes other arguments) is
    set aside with a warning, and the Python scan runs."""
    import types

    stale = types.SimpleNamespace(__file__="src/prime_rl/analysis/_scan.so", VERSION=parser._SCAN_VERSION - 1)
    with pytest.warns(RuntimeWarning, match="another version of the C scan"):
        assert parser._usable(stale) is None
    with pytest.warns(RuntimeWarning):
        assert parser._usable(types.SimpleNamespace(__file__="x.so")) is None  # no VERSION at all
    current = types.SimpleNamespace(__file__="x.so", VERSION=parser._SCAN_VERSION)
    assert parser._usable(current) is current and parser._usable(None) is None


@built
def test_a_column_of_the_c_scan_is_taken_once():
    b = (PREFIX + "[gen] batch.done step=1\n").encode()
    column = parser._ArrowColumn(parser._scan.scan(b, len(b), parser._MARKER_HEADS, True)[4][5])
    import polars as pl

    assert pl.Series(column).to_list() == ["batch.done"]
    with pytest.raises(RuntimeError, match="taken once"):
        pl.Series(column)


def test_malformed_lines_waiting_to_be_counted_are_bounded(tmp_path):
    """A file of malformed lines with no batch to flush keeps only the first few of them (by line)
    until it ends: all are counted, the first named in line order."""
    from prime_rl.analysis.clock import Clock
    from prime_rl.analysis.tagged import EXAMPLES

    stats = ParseStats()
    pending = parser._Pending(tmp_path / "o.log", Clock(), stats, set())
    for start in range(1000, 0, -100):  # later lines first: what is kept is the smallest lines
        pending.add_other(["[gen] 9bad" + "x" * 300] * 100, list(range(start, start + 100)))
        assert len(pending.bad) <= 4 * EXAMPLES
    pending.count_bad()
    assert stats.malformed == 1000 and len(stats.malformed_examples) == EXAMPLES
    assert [e.split(":")[1] for e in stats.malformed_examples] == [str(n) for n in range(100, 100 + EXAMPLES)]
    assert all(len(e.split(": ", 1)[1]) == 200 for e in stats.malformed_examples)


NUMBER_TEXT = st.one_of(
    st.sampled_from(
        ["0", "-0", "-0.0", "007", "1.5", "-2.25", "1.", ".5", "+1", "1e3", "inf", "nan", "-", ""]
    ),
    st.sampled_from(
        ["123456789012345", "1234567890123456", "0.1", "99999999", "123456789", "3.14159265358979"]
    ),
    st.text(alphabet="0123456789.-+eE", max_size=18),
)


@built
@settings(max_examples=300, deadline=None)
@given(values=st.lists(NUMBER_TEXT, min_size=1, max_size=8))
@example(values=["0.1", "-0", "1234567890123456", "1e3"])
def test_numbers_and_steps_read_by_the_c_scan_are_what_polars_casts(values, tmp_path_factory):
    """The C scan's numbers (a plain decimal of at most 15 digits; null elsewhere) are polars' casts
    of the same text to the bit (-0.0 included), its steps those of ``step_numbers``; and a batch's
    numbers, steps and bad values come out the same whether the scan read the numbers or not."""
    import polars as pl

    from prime_rl.analysis import stats as collection
    from prime_rl.analysis.tagged import step_numbers

    log = tmp_path_factory.mktemp("n") / "o.log"
    lines = [f"{PREFIX}[gen] batch.done step={v} dur_ms={v} completions={v}" for v in values]
    log.write_bytes(("\n".join(lines) + "\n").encode())
    text = pl.Series(values, dtype=pl.String)
    head = (b"[gen]",)
    chunk = log.read_bytes()
    clean = parser._scan.scan(chunk, len(chunk), head, True, ((b"step", b"dur_ms"),), (bytes([2, 1]),))[4]
    number = pl.Series(parser._ArrowColumn(clean[8][1]))
    step = pl.Series(parser._ArrowColumn(clean[9][0]))
    assert clean[8][0] is None and clean[9][1] is None  # only what the kinds ask for
    cast = text.cast(pl.Float64, strict=False)
    read = number.is_not_null()
    assert (cast.filter(read).to_numpy().view("u8") == number.filter(read).to_numpy().view("u8")).all()
    plain = text.str.contains(r"^-?[0-9]+(\.[0-9]+)?$") & (
        text.str.replace_all(r"[-.]", "").str.len_bytes() <= 15
    )
    assert (
        read.to_list() == plain.to_list()
    )  # read wherever the text is a plain decimal, else left to the cast
    assert step.to_list() == step_numbers(text).to_list()

    def numbers(kinds):
        stats = ParseStats()
        out = []
        for batch in collection.prepared(
            parser.scan_files([("orchestrator", log)], stats, collection.FIELDS, kinds)
        ):
            for _, part in batch.by_tag():
                out.append(
                    (
                        part.num_series("dur_ms", ("batch.done",)).to_numpy().view("u8").tolist(),
                        part.num_series("completions", ("batch.done",)).to_list(),
                        part.step_numbers("step").to_list(),
                    )
                )
        return out, stats.bad_values, stats.bad_value_examples

    assert numbers(collection.FIELD_KINDS) == numbers(None)


@built
def test_the_c_scan_refuses_kinds_that_do_not_fit_its_fields():
    head, keys = (b"[gen]",), ((b"step", b"dur_ms"),)
    with pytest.raises(ValueError, match="one bytes per head, with fields"):
        parser._scan.scan(b"[gen] x\n", 8, head, True, keys, ())
    with pytest.raises(TypeError, match="one a key"):
        parser._scan.scan(b"[gen] x\n", 8, head, True, keys, (b"\x01",))
    with pytest.raises(ValueError, match="0-3"):
        parser._scan.scan(b"[gen] x\n", 8, head, True, keys, (b"\x01\x04",))
