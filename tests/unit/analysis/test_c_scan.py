"""The sparse chunk scan in C (``prime_rl.analysis._scan``) against the same scan in Python: the parse
falls back to the Python one where the C module is not built, so the two must find the same."""

from __future__ import annotations

import importlib.metadata
import shutil

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prime_rl.analysis import parser

built = pytest.mark.skipif(
    parser._scan is None, reason="the C scan is not built (no install, or no C compiler)"
)

PREFIX = "2026-01-01 12:00:00.000 | INFO    | "
PIECE = st.one_of(
    st.sampled_from(
        [
            PREFIX + "[gen] batch.done step=1 dur_ms=2.5",
            PREFIX + "[weights][t1] rpc.done op=x",
            PREFIX + "[zzz] e k=1",  # an unknown tag where the message starts
            "12:00:01.500 | INFO    | [gen] x",  # a console capture
            PREFIX + "step 1 | reward 0.5 | text [with brackets] | [gen] y",
            "[gen]",
            "[gen][t1]",
            "[zzz][t1] e",
            "[",
            "]",
            "| ",
            "| [yy] e ",
            "\n",
            "\n\n",
            "é\udcff",  # non-ASCII, and bytes that are no UTF-8
            "[weights]",
            "[ckpt",
        ]
    ),
    st.text(alphabet=st.sampled_from(list("ab [|]\n\r\x00=")), max_size=12),
)


def _found(chunk: bytes, garbage: bytes, scan) -> tuple:
    """Everything the sparse scan of ``chunk`` finds (with ``garbage`` in the buffer after it),
    by ``scan`` (the C module, or None for the Python scan)."""
    buffer = bytearray(chunk + garbage)
    old = parser._scan
    parser._scan = scan
    try:
        f = parser._scan_sparse(buffer, len(chunk), parser._Found(parser._last_line_of(buffer, len(chunk))))
    finally:
        parser._scan = old
    loguru = None if f.loguru is None else (f.loguru.to_list(), f.numbers.tolist())
    return f.lines, f.last, dict(f.unknown), loguru, f.texts, list(f.text_numbers)


@built
@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(PIECE, max_size=16),
    garbage=st.sampled_from([b"", b"[gen] x\n", b"\n[zz] e \n| [yy] e=1\n"]),
)
@example(pieces=[PREFIX + "[gen] a | [zz] e=1 [gen] b", "\n", "[zz] e", "\n"], garbage=b"")
@example(pieces=["[gen]"], garbage=b"[gen] x\n")
def test_the_c_scan_finds_what_the_python_scan_finds(pieces, garbage):
    """Any chunk (lines end with a newline, as the reader cuts them): the same line count, last line,
    unknown tags, loguru lines with their numbers and other lines with theirs; the bytes after the
    chunk in its buffer are not looked at."""
    chunk = "".join(pieces).encode("utf-8", "surrogatepass")
    if not chunk.endswith(b"\n"):
        chunk += b"\n"
    assert _found(chunk, garbage, parser._scan) == _found(chunk, garbage, None)


@built
def test_the_c_scan_counts_a_mixed_log_as_the_python_scan_does(tmp_path):
    """A real-looking log of 20,000 lines (tagged lines one in ten, vLLM noise between), read in its
    chunks: every chunk found alike, and the found lines are tagged lines at the right numbers."""
    from tests.support.synthetic_logs import make_run

    run = make_run("healthy", steps=200)
    noise = PREFIX + "(vllm.engine) Avg prompt throughput: 1234.5 tokens/s, Running: 256 reqs"
    lines = [x for line in sorted(run.orchestrator + run.trainer) for x in [noise] * 9 + [line]][:20_000]
    log = tmp_path / "orchestrator.log"
    log.write_text("\n".join(lines) + "\n")
    total, numbers = 0, []
    for buffer, size in parser._chunks(log, [], 1):
        chunk = bytes(buffer[:size])
        c = _found(chunk, b"", parser._scan)
        assert c == _found(chunk, b"", None)
        numbers += [n + total for n in c[3][1]]
        total += c[0]
    tagged = [i for i, line in enumerate(lines) if parser._MARKERS_S.match(line, len(PREFIX))]
    assert total == len(lines) and numbers == tagged and len(tagged) > 1500


@built
def test_the_c_scan_refuses_a_size_past_its_buffer_and_heads_that_are_not_bytes():
    with pytest.raises(ValueError, match="size"):
        parser._scan.sparse(b"[gen] x\n", 9, parser._MARKER_HEADS)
    with pytest.raises(ValueError, match="size"):
        parser._scan.sparse(b"[gen] x\n", -1, parser._MARKER_HEADS)
    with pytest.raises(TypeError, match="heads"):
        parser._scan.sparse(b"[gen] x\n", 8, ("[gen]",))
    assert parser._scan.sparse(b"[gen] x\n", 8, ())[0] == 1  # no heads: lines counted, nothing kept


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
