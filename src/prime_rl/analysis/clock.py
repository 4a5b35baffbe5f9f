"""Log timestamps to epoch seconds, with or without a date.

The processes' log files carry ``YYYY-MM-DD HH:MM:SS.mmm`` (loguru's file format); their console
(``CONSOLE_FORMAT``, what ``tee`` captures as the deployment guide collects logs) carries only
``HH:MM:SS.mmm``. A log whose times have no date is placed on the date that fits it
(:func:`place_undated`): the date in its file name (the guide names a capture
``inference_$(date +%Y%m%d_%H%M%S).log``), else the one date on which its times overlap those of
the dated logs, else (several dates fit, or none) the first of them, or the earliest date of the
logs (:func:`reference_date`), with a note that it is a guess; with no dated log at all, a fixed
day, so client and server lines still line up whichever of them was captured from the console.
Within a file (and the rotated parts of one log), a time that jumps back by more than 12 hours
starts the next day.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

_TS = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?")
_TS_BYTES = re.compile(rb"(\d{4}-\d{2}-\d{2})[ T]\d{2}:\d{2}:\d{2}")
_TIME_ONLY = re.compile(r"\s*(?:\x1b\[[0-9;]*m)*(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?")
FALLBACK_DATE = "2000-01-01"
"""The reference date when no log line carries a date at all."""
_HALF_DAY = 43200.0
_DAY = 86400.0
_TOD_BYTES = re.compile(rb"(?m)^(?:\x1b\[[0-9;]*m)*(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?")
"""A time without a date where a line starts (the console's prefix, maybe coloured)."""
_NAME_DATE = re.compile(r"(?<!\d)(\d{4})-?(\d{2})-?(\d{2})(?:[_T-]?(\d{2})[:-]?(\d{2})[:-]?(\d{2}))?(?!\d)")
"""A date in a file name, ``20260103`` or ``2026-01-03``, and maybe the time after it
(``20260103_115959``, what ``$(date +%Y%m%d_%H%M%S)`` writes)."""
OVERLAP_SLACK_S = 3600.0
"""A log without dates overlaps a dated log when their times come within this much of each other
(a server loads for minutes before the orchestrator's first line)."""


class Placed(NamedTuple):
    """The date a log whose times have no date is placed on, and how it was found: ``name`` (in its
    file name), ``overlap`` (the one date on which its times overlap the dated logs'), ``several``
    (several dates do: ``fits``, and it is placed on the first), ``none`` (none does: placed on the
    earliest date of the logs) or ``alone`` (no log has a date)."""

    date: str
    how: str
    fits: tuple[str, ...] = ()


def reference_date(heads: Iterable[bytes]) -> str:
    """The earliest date among the logs' first bytes (``heads``): of each, the first
    ``YYYY-MM-DD HH:MM:SS`` whose date is one (2026-99-99 is none); else :data:`FALLBACK_DATE`."""
    dates = []
    for head in heads:
        for m in _TS_BYTES.finditer(head):
            date = m.group(1).decode()
            if local_midnight(date) is not None:
                dates.append(date)
                break
    return min(dates) if dates else FALLBACK_DATE


def name_date(name: str) -> tuple[str, float | None] | None:
    """The date in a log's file name (its last one that is a date) and the time of day after it in
    seconds (None: none), e.g. ``inference_20260103_115959.log``: ``("2026-01-03", 43199.0)``."""
    for m in reversed(list(_NAME_DATE.finditer(name))):
        date = f"{m.group(1)}-{m.group(2)}-{m.group(3)}"
        if local_midnight(date) is None:
            continue
        h, mi, sec = m.group(4), m.group(5), m.group(6)
        if h is not None and int(h) <= 23 and int(mi) <= 59 and int(sec) <= 60:
            return date, int(h) * 3600.0 + int(mi) * 60 + int(sec)
        return date, None
    return None


def dated_span(*texts: bytes) -> tuple[float, float] | None:
    """The first and last ``YYYY-MM-DD HH:MM:SS`` (one that is a time) in ``texts`` (a log's head,
    then its tail), as epoch seconds; None: none."""
    found = []
    for text in texts:  # of each, the first time and the last, searched from each end
        first = next((t for t in map(_stamp, _TS_BYTES.finditer(text)) if t is not None), None)
        if first is None:
            continue
        found.append(first)
        end, window = len(text), 4096
        while True:  # the first time is found at the latest when the window reaches the start
            lo = max(0, end - window)
            stamps = reversed(list(_TS_BYTES.finditer(text, lo, end)))
            last = next((t for t in map(_stamp, stamps) if t is not None), None)
            if last is not None or not lo:
                found.append(first if last is None else last)
                break
            end, window = lo + 64, window * 2  # a stamp across the window's start is in the next
    return (min(found), max(found)) if found else None


def _stamp(match: re.Match[bytes]) -> float | None:
    text = match.group(0).decode()
    midnight = local_midnight(text[:10])
    h, mi, sec = int(text[11:13]), int(text[14:16]), int(text[17:19])
    if midnight is None or h > 23 or mi > 59 or sec > 60:
        return None
    return midnight + h * 3600 + mi * 60 + sec


def times_of_day(*texts: bytes) -> list[float]:
    """The times without a date where lines of ``texts`` start, in seconds after midnight."""
    out = []
    for text in texts:
        for m in _TOD_BYTES.finditer(text):
            h, mi, sec = (int(x) for x in m.group(1, 2, 3))
            if h <= 23 and mi <= 59 and sec <= 60:
                out.append(h * 3600.0 + mi * 60 + sec)
    return out


def place_undated(
    name: str, tods: Sequence[float], spans: Sequence[tuple[float, float]], earliest: str
) -> tuple[Placed, float | None]:
    """The date of a log whose times have no date (:class:`Placed`), and the time of day its
    capture began (from its name; None: not known). ``name``: its file name; ``tods``: its times of
    day in line order (its first lines, and its last where they could be read); ``spans``: the first
    and last time of each dated log; ``earliest``: the earliest date of the logs. Its first time
    is on the date, the times after it on that day or the next ones (:class:`Clock`)."""
    named = name_date(name)
    if named is not None:
        return Placed(named[0], "name"), named[1]
    if not spans:
        return Placed(earliest, "alone"), None
    if not tods:
        return Placed(earliest, "none"), None
    start = tods[0]
    length = max(0.0, max((t if t >= start - _HALF_DAY else t + _DAY) for t in tods) - start)
    fits: list[str] = []
    low, high = min(a for a, _ in spans), max(b for _, b in spans)
    day = datetime.fromtimestamp(low - length - OVERLAP_SLACK_S - _DAY).date()
    last = datetime.fromtimestamp(high + OVERLAP_SLACK_S + _DAY).date()
    while day <= last:
        text = day.isoformat()
        midnight = local_midnight(text)
        if midnight is not None:
            a, b = midnight + start, midnight + start + length
            if any(a <= z + OVERLAP_SLACK_S and b >= y - OVERLAP_SLACK_S for y, z in spans):
                fits.append(text)
        day += timedelta(days=1)
    if len(fits) == 1:
        return Placed(fits[0], "overlap"), None
    if fits:
        return Placed(fits[0], "several", tuple(fits)), None
    return Placed(earliest, "none"), None


def local_midnight(date: str) -> float | None:
    """Epoch seconds of local midnight of ``YYYY-MM-DD``, None if it is no date."""
    try:
        return datetime.strptime(date, "%Y-%m-%d").timestamp()
    except ValueError:
        return None


class Clock:
    """Log timestamp -> epoch seconds, parsing each distinct second once. Call :meth:`new_file`
    before each file (the date of its date-less times, and their day count)."""

    def __init__(self, ref_date: str = FALLBACK_DATE) -> None:
        self._cache: dict[str, float] = {}
        self._ref = datetime.strptime(ref_date, "%Y-%m-%d").timestamp()
        self._midnight = self._ref
        self._last_tod: float | None = None
        self._days = 0
        self.undated = 0
        """Times without a date placed since :meth:`new_file`."""

    def midnight(self, date: str) -> float | None:
        """Epoch seconds of local midnight of ``YYYY-MM-DD`` (cached), None if it is no date."""
        value = self._cache.get(date)
        if value is None:
            value = local_midnight(date)
            if value is not None:
                self._cache[date] = value
        return value

    def new_file(
        self, date: str | None = None, start_tod: float | None = None, same_log: bool = False
    ) -> None:
        """The next file: its times without a date are on ``date`` (None: the reference date), the
        first of them a day later when it is 12 hours or more before ``start_tod`` (when its
        capture began, if known). ``same_log``: a later part of the log read before (its rotated
        parts, oldest first): its times go on from that part's."""
        self.undated = 0
        if same_log:
            return
        midnight = local_midnight(date) if date is not None else None
        self._midnight = self._ref if midnight is None else midnight
        self._last_tod, self._days = start_tod, 0

    def __call__(self, prefix: str) -> float | None:
        if len(prefix) >= 23 and prefix[4] == "-" and prefix[10] == " " and prefix[19] == ".":
            base = self._cache.get(prefix[:19])  # loguru's file prefix, seen before: no regex
            if base is not None and prefix[20:23].isdigit():
                return base + int(prefix[20:23]) / 1000.0
        m = _TS.search(prefix)
        if not m:
            return self._time_only(prefix)
        key = f"{m.group(1)} {m.group(2)}"
        base = self._cache.get(key)
        if base is None:
            midnight = self.midnight(m.group(1))
            h, mi, sec = (int(x) for x in m.group(2).split(":"))
            if midnight is None or h > 23 or mi > 59 or sec > 60:
                return None
            # seconds after local midnight (a DST change inside the day is not corrected for)
            base = self._cache[key] = midnight + h * 3600 + mi * 60 + sec
        frac = m.group(3)
        return base + (int(frac) / 10 ** len(frac) if frac else 0.0)

    def _time_only(self, prefix: str) -> float | None:
        m = _TIME_ONLY.match(prefix)
        if not m:
            return None
        h, mi, s, frac = m.groups()
        if int(h) > 23 or int(mi) > 59 or int(s) > 60:
            return None
        tod = int(h) * 3600 + int(mi) * 60 + int(s) + (int(frac) / 10 ** len(frac) if frac else 0.0)
        if self._last_tod is not None and tod < self._last_tod - _HALF_DAY:
            self._days += 1
        self._last_tod = tod
        self.undated += 1
        return self._midnight + self._days * 86400.0 + tod


def local_time(ts: float | None, fmt: str = "%H:%M:%S") -> str:
    """``ts`` as a local time in ``fmt``; ``?`` for none, and for one no date holds (a log's
    ``9999-12-31 23:59:60`` is a second into the year 10000)."""
    if ts is None:
        return "?"
    try:
        return datetime.fromtimestamp(ts).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return "?"
