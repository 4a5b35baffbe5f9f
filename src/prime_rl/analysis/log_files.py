"""The log files of a run: which files are read, what each is, and the order they are read in.

:func:`discover` expands run directories and directories of logs into ``(label, file)`` pairs: each
file once, the launcher's console copies left out, rotated parts of one log oldest first by their
names (:func:`_in_order`, :func:`_rotation`); :func:`label_for` names the process a file is of, and
:func:`log_of` the log it is a part of. Before the lines are read
(:func:`~prime_rl.analysis.parser.scan_files`), the files that repeat another are left out
(:func:`_distinct`: a copy, a compressed twin, a ``gzip -c`` snapshot, a console copy beside its log), each process's files are put
in time order where their dated lines contradict the order given (:func:`_time_order`), and each log
without a dated line is given its date (:func:`_places`). These go by each file's head and tail
(:func:`_head`, :func:`_tail`), read here too, as is any log's opening (:func:`open_log`: gzip by its
magic bytes). Reading and taking apart the lines is :mod:`~prime_rl.analysis.parser`.
"""

from __future__ import annotations

import filecmp
import gzip
import math
import os
import re
import zlib
from functools import lru_cache
from pathlib import Path
from typing import IO

import numpy as np

from prime_rl.analysis.clock import Placed, dated_span, place_undated, times_of_day
from prime_rl.analysis.tagged import ParseStats

_HEAD_BYTES = 1 << 18
"""The reference date is looked for in each log's first this many bytes."""
_CUT = (EOFError, gzip.BadGzipFile, zlib.error)
"""What reading a compressed log that ends early or is corrupt raises."""


_LABELS = ("orchestrator", "inference", "trainer", "rank_", "collect")
_ROTATED = re.compile(r"(.*?)\.(\d+)((?:\.gz)?)$")
"""A numbered part's name: ``orchestrator.log.2`` or ``orchestrator.log.2.gz`` (logrotate's and
Python's RotatingFileHandler's numbering: the higher the number, the older the part)."""
_DATED = re.compile(r"(.*?\.log)-(\d{8,10})((?:\.gz)?)$")
"""A dated part's name (logrotate's ``dateext``): ``orchestrator.log-20260101``, older first by date."""


LAUNCHER = "rl"
"""The label of the ``rl`` launcher's own log (``rl.log`` and its rotated parts)."""


def label_for(path: Path) -> str:
    """'orchestrator', 'inference', 'trainer' (also ``rank_N``), 'collect' or 'rl' (the launcher's
    ``rl.log``) from the file's name,
    else from its nearest directory that names one (``logs/trainer/part.log``), else the file's
    stem. The name comes first: ``inference_debug/trainer.log`` is the trainer's."""
    path = Path(path)
    if path.name.startswith("rl.log"):
        return LAUNCHER
    for part in (path.name, *(p.name for p in path.parents)):
        part = part.lower()
        for label in _LABELS:
            if label in part:
                return "trainer" if label == "rank_" else label
    return path.stem


def _rotation(path: Path) -> tuple[Path, tuple[int, int]]:
    """The log a file is part of (by its directory's real path) and its place among the log's parts,
    oldest first: numbered parts by falling number, dated parts by date, then the live file."""
    where = path.resolve().parent
    if m := _ROTATED.fullmatch(path.name):
        return where / m.group(1), (0, -int(m.group(2)))
    if m := _DATED.fullmatch(path.name):
        return where / m.group(1), (0, int(m.group(2)))
    return where / path.name.removesuffix(".gz"), (1, 0)


@lru_cache(maxsize=1024)
def log_of(path: str) -> str:
    """The log a file (its path as text) is a part of: rotated parts of one log are one log (a
    name that is no path, itself)."""
    try:
        return str(_rotation(Path(path))[0])
    except (ValueError, OSError):  # a NUL byte, a loop of links
        return path


def log_or_source(path: Path | str | None, source: str) -> str:
    """The log (:func:`log_of`) of a batch's or an event's file, or its ``source`` label when it has
    none (a hand-built batch)."""
    return log_of(str(path)) if path is not None else source


def _in_order(files: list[Path]) -> list[Path]:
    """``files`` once each (the same file given twice, or in a directory given too, would count its
    lines twice and look like a restart), with the rotated parts of one log oldest first
    (``o.log.2``, ``o.log.1``, ``o.log``; ``o.log-20260101``, ``o.log-20260102``, ``o.log``: sorted
    by name the live part would come first, and its steps would seem to be redone by the older
    parts), where the log's first part was; of two files of one place (``o.log.gz`` and ``o.log``),
    the compressed one first."""
    seen: set[Path] = set()
    parts: dict[Path, list[tuple[tuple[int, int], Path]]] = {}
    for f in files:
        real = f.resolve()
        if real in seen:
            continue
        seen.add(real)
        log, place = _rotation(f)
        parts.setdefault(log, []).append((place, f))
    # of two files of one place, the compressed one first: logs compressed in place (gzip *.log) and
    # the new ones a resume wrote beside them, a gzip -c snapshot beside the live file
    order = lambda part: (part[0], not part[1].name.endswith(".gz"))  # noqa: E731
    return [f for group in parts.values() for _, f in sorted(group, key=order)]


def discover(inputs: list[Path]) -> list[tuple[str, Path]]:
    """Expand run directories (their logs/) and directories of logs into (label, file) pairs, each
    file once, rotated parts oldest first by their names (:func:`_in_order`;
    :func:`~prime_rl.analysis.parser.scan_files` reads each process's files in time order where their dated lines contradict this order:
    :func:`_time_order`); the console copies (``*stdout*``)
    are left out, the launcher's own log (``rl.log``, label ``rl``) is read for its ``[hang]`` lines."""
    out: list[Path] = []
    for p in inputs:
        p = Path(p)
        if p.is_dir():
            root = p / "logs" if (p / "logs").is_dir() else p
            files = sorted(
                f for f in root.rglob("*") if f.is_file() and (".log" in f.name or f.suffix == ".gz")
            )
            # the launcher's console copies (*stdout.log) repeat the processes' lines; its own log
            # (rl.log) is read: its watchdog's [hang] lines are there
            files = [f for f in files if "stdout" not in f.name]
            out.extend(files)
        elif p.is_file():
            out.append(p)
        elif p.exists():  # a pipe (<(zcat log)), a device: each log is opened more than once
            raise FileNotFoundError(
                f"{p}: not a regular file (a pipe or a device): give the log file itself (gzip is read as it is)"
            )
        else:
            raise FileNotFoundError(f"{p}: no such log file or directory")
    return [(label_for(f), f) for f in _in_order(out)]


def open_log(path: Path):
    """Binary file object; gzip by suffix or magic bytes."""
    path = Path(path)
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _read_upto(f, size: int) -> tuple[bytes, str | None]:
    """Up to ``size`` bytes of ``f`` (fewer at its end), read a step at a time (for a compressed file,
    one decompression step), so that of a compressed file cut short or corrupt it returns what it
    held up to the break, with the error."""
    pieces: list[bytes] = []
    got = 0
    try:
        while got < size and (piece := f.read1(size - got)):
            pieces.append(piece)
            got += len(piece)
    except _CUT as e:
        return b"".join(pieces), f"{type(e).__name__}: {e}"
    return b"".join(pieces), None


def _tail(path: Path) -> bytes:
    """An uncompressed log's last :data:`_HEAD_BYTES` from its first newline in them (b"": a
    compressed log, whose end cannot be read without the rest, or none)."""
    try:
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b":
                return b""
            size = f.seek(0, os.SEEK_END)
            if size <= _HEAD_BYTES:
                return b""  # the head holds it all
            f.seek(size - _HEAD_BYTES)
            tail = f.read(_HEAD_BYTES)
    except OSError:
        return b""
    return tail[tail.find(b"\n") + 1 :]


def _head(path: Path) -> bytes:
    """A log's first :data:`_HEAD_BYTES` (what it holds, if it is cut short or unreadable)."""
    try:
        with open_log(path) as f:
            return _read_upto(f, _HEAD_BYTES)[0]
    except OSError:
        return b""


def _distinct(paths: list[tuple[str, Path]], stats: ParseStats) -> list[tuple[str, Path]]:
    """``paths`` less the files that repeat another (their lines read twice would count every stage
    twice and look like a restart), each pair named in ``stats.duplicate_files``: a file with the same
    bytes as one before it (a log copied under another name and given beside it; only files of one
    size are compared, byte by byte); of two files of one part of a log (:func:`_rotation`), one of
    them compressed, compared as text: the same lines (``trainer.log.1.gz`` and the ``trainer.log.1``
    decompressed from it), or one a beginning of the other (a ``gzip -c`` snapshot of the live log),
    the longer kept. A plain copy taken while the log grew (a prefix of it), or edited, is not found;
    two files of one part with other lines (logs compressed in place, then a resume's new ones beside
    them) are both read. A console copy beside its process's log is left out too
    (:func:`_console_copy_of`)."""
    by_size: dict[int, list[Path]] = {}
    parts: dict[tuple[Path, tuple[int, int]], list[Path]] = {}
    out: list[tuple[str, Path]] = []
    for label, path in paths:
        if (real := _console_copy_of(label, path, paths)) is not None:
            stats.duplicate_files.append(
                f"{real} and {path}: the console copy of the log beside it (the same lines without their dates)"
            )
            continue
        try:
            log, place = _rotation(path)
            size = path.stat().st_size
            same = next((q for q in by_size.get(size, ()) if filecmp.cmp(path, q, shallow=False)), None)
            text = next(((q, r) for q in parts.get((log, place), ()) if (r := _text_relation(path, q))), None)
        except (OSError, ValueError):  # read as it is: the scan says what is wrong with it
            log, place, size, same, text = path, (1, 0), -1, None, None
        if same is not None and size > 0:
            stats.duplicate_files.append(f"{same} and {path}: the same bytes")
            continue
        if text is not None:
            kept, relation = text
            if relation == "same":
                stats.duplicate_files.append(f"{kept} and {path}: the same lines, one of them compressed")
                continue
            if relation == "beginning":  # this file is the beginning of one kept: a snapshot of it
                stats.duplicate_files.append(f"{path}: the beginning of {kept} (a snapshot of it), not read")
                continue
            # one kept is the beginning of this one: this one is read in its place
            stats.duplicate_files.append(f"{kept}: the beginning of {path} (a snapshot of it), not read")
            out = [(lab, path if p == kept else p) for lab, p in out]
            parts[(log, place)] = [path if p == kept else p for p in parts[(log, place)]]
            continue
        parts.setdefault((log, place), []).append(path)
        by_size.setdefault(size, []).append(path)
        out.append((label, path))
    return out


def _is_console_copy(path: Path) -> bool:
    """A launcher's console copy by its name (``orchestrator.stdout.log``, ``inference.stdout.log``,
    ``trainer/stdout.log``: the process's console output, the lines of its log with times of day
    only), as :func:`discover` leaves them out of a directory."""
    return "stdout" in path.name


def _console_copy_of(label: str, path: Path, paths: list[tuple[str, Path]]) -> Path | None:
    """The log ``path`` is the console copy of, when it is one (:func:`_is_console_copy`) given beside
    it: the first file of ``paths`` of its process (``label``) in its directory that is no console
    copy (the launcher writes each copy beside its process's log: ``logs/orchestrator.stdout.log`` by
    ``logs/orchestrator.log``, ``logs/trainer/stdout.log`` by ``logs/trainer/rank_0.log``); read
    beside it, every line would be read twice (a false restart, every stage twice). None: no such
    log is given (a console capture alone is the process's only log, read as it is) or ``path`` is no
    console copy."""
    if not _is_console_copy(path):
        return None
    try:
        where = path.parent.resolve()
        return next(
            (
                q
                for lab, q in paths
                if lab == label and not _is_console_copy(q) and q.parent.resolve() == where
            ),
            None,
        )
    except (OSError, RuntimeError, ValueError):  # a loop of links, a NUL byte: read as it is
        return None


def _text_relation(a: Path, b: Path) -> str | None:
    """How the text of ``a`` stands to that of ``b``, one of them gzip-compressed (by its name):
    ``same``, ``beginning`` (``a`` is the beginning of ``b``), ``continued`` (``b`` is the beginning of
    ``a``), or None (other text; both plain or both compressed: their bytes were compared). Read side
    by side up to the first difference."""
    if a.name.endswith(".gz") == b.name.endswith(".gz"):
        return None

    def reader(x: Path) -> IO[bytes]:
        return gzip.open(x, "rb") if x.name.endswith(".gz") else x.open("rb")

    try:
        with reader(a) as fa, reader(b) as fb:
            while True:
                ca, cb = fa.read(1 << 20), fb.read(1 << 20)
                if ca == cb:
                    if not ca:
                        return "same"
                    continue
                n = min(len(ca), len(cb))
                if ca[:n] != cb[:n]:
                    return None
                # one ended here: the other goes on
                if len(ca) < len(cb):
                    return "beginning" if not fa.read(1) else None
                return "continued" if not fb.read(1) else None
    except (OSError, EOFError, zlib.error):  # a compressed file cut short or corrupt: read as it is
        return None


def _places(
    paths: list[tuple[str, Path]], heads: list[bytes], tails: list[bytes], earliest: str
) -> dict[str, tuple[Placed, float | None]]:
    """The date of each log (:func:`log_of`) whose first part's head has no dated time
    (:func:`~prime_rl.analysis.clock.place_undated`: by its name, else by the times of the dated
    logs' heads and tails, ``tails``: :func:`_tail` of each), and when its capture began (None: not
    known)."""
    spans = [dated_span(head, tail) for head, tail in zip(heads, tails, strict=True)]
    dated = [span for span in spans if span is not None]
    out: dict[str, tuple[Placed, float | None]] = {}
    for (_, p), head, tail, span in zip(paths, heads, tails, spans, strict=True):
        log = log_of(str(p))
        if log in out or span is not None:
            continue
        out[log] = place_undated(Path(log).name, times_of_day(head, tail), dated, earliest)
    return out


def _time_order(
    paths: list[tuple[str, Path]], heads: list[bytes], tails: list[bytes], stats: ParseStats
) -> list[int]:
    """The order to read ``paths`` in (indices of them): each process's (label's) files in the places
    its files were given in, in time order where the order given contradicts their dated lines (the
    first in each file's head, the last in its tail), each such change named in ``stats.reordered``:
    read as given, a process's later lines before its earlier ones would read as a restart. First
    the parts of one log (:func:`log_of`: rotated parts, a log compressed in place and a resume's
    beside it), by their first dated line: one process wrote them one after another, so the part
    that begins earlier is the older, whatever its name says (``trainer.log.1`` a first attempt and
    ``trainer.log.2`` its resume, which logrotate's numbering reads newest first). Then the logs of
    one process, each with its parts together: a log given after another is read before it when it
    ended before the other began (``second_run/trainer.log first_run/trainer.log``); logs that overlap
    in time (a trainer's ranks, several servers) are read as given, as is one whose end is not known
    (a compressed log longer than its head: its end cannot be read without the rest). A file with
    no dated line in its head (a console capture) keeps its place."""
    firsts = [dated_span(head) for head in heads]
    ends = []
    for head, tail, first in zip(heads, tails, firsts, strict=True):
        # the whole file is in its head (it ended within it), else its end in its tail
        known = dated_span(tail) if tail else first if len(head) < _HEAD_BYTES else None
        ends.append(known[1] if known is not None else math.inf)
    slots: dict[str, list[int]] = {}
    for i, (label, _) in enumerate(paths):
        slots.setdefault(label, []).append(i)
    order = list(range(len(paths)))
    for label, where in slots.items():
        logs: dict[str, list[int]] = {}
        for i in where:
            logs.setdefault(log_of(str(paths[i][1])), []).append(i)
        parts = [[log[k] for k in _before_after([_point(firsts[i]) for i in log])] for log in logs.values()]
        spans_of = []
        for log in parts:
            dated = [i for i in log if firsts[i] is not None]
            spans_of.append(
                (min(firsts[i][0] for i in dated), max(ends[i] for i in dated)) if dated else None
            )
        read = [i for k in _before_after(spans_of) for i in parts[k]]
        if read != where:
            moved = [(a, b) for a, b in zip(where, read, strict=True) if a != b]
            stats.reordered.append(
                f"{label}: {', '.join(str(paths[b][1]) for _, b in moved)} "
                f"(given as {', '.join(str(paths[a][1]) for a, _ in moved)})"
            )
        for a, b in zip(where, read, strict=True):
            order[a] = b
    return order


def _point(span: tuple[float, float] | None) -> tuple[float, float] | None:
    """A part of a log as the instant of its first dated line (None: none)."""
    return None if span is None else (span[0], span[0])


def _before_after(spans: list[tuple[float, float] | None]) -> list[int]:
    """Indices of ``spans`` (each a first and last time; None: not known) in the order to read them:
    the undated where they are, the others in their places in the order given, except that one
    that ends before another begins comes before it (the first given of those nothing ends before)."""
    dated = [i for i, s in enumerate(spans) if s is not None]
    began = np.maximum.accumulate([spans[i][0] for i in dated]) if dated else []
    if all(began[k] <= spans[i][1] for k, i in enumerate(dated)):  # none ends before one given before it
        return list(range(len(spans)))
    left, picked = list(dated), []
    while left:
        low = min(spans[i][1] for i in left)
        k = next(k for k, i in enumerate(left) if spans[i][0] <= low)
        picked.append(left.pop(k))
    it = iter(picked)
    return [next(it) if s is not None else i for i, s in enumerate(spans)]
