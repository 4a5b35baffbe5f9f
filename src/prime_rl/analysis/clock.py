"""Log timestamps to epoch seconds, with or without a date.

The processes' log files carry ``YYYY-MM-DD HH:MM:SS.mmm`` (loguru's file format); their console
(``CONSOLE_FORMAT``, what ``tee`` captures as the deployment guide collects logs) carries only
``HH:MM:SS.mmm``. A time without a date is placed on the run's *reference date*: the first date
found in any of the logs given (:func:`reference_date`), else a fixed day, so client and server
lines still line up whichever of them was captured from the console. Within a file, a time that
jumps back by more than 12 hours starts the next day.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

_TS = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?")
_TS_BYTES = re.compile(rb"(\d{4}-\d{2}-\d{2})[ T]\d{2}:\d{2}:\d{2}")
_TIME_ONLY = re.compile(r"\s*(?:\x1b\[[0-9;]*m)*(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?")
FALLBACK_DATE = "2000-01-01"
"""The reference date when no log line carries a date at all."""
_HALF_DAY = 43200.0


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


def local_midnight(date: str) -> float | None:
    """Epoch seconds of local midnight of ``YYYY-MM-DD``, None if it is no date."""
    try:
        return datetime.strptime(date, "%Y-%m-%d").timestamp()
    except ValueError:
        return None


class Clock:
    """Log timestamp -> epoch seconds, parsing each distinct second once. Call :meth:`new_file`
    before each file (the day count of date-less times is per file)."""

    def __init__(self, ref_date: str = FALLBACK_DATE) -> None:
        self._cache: dict[str, float] = {}
        self._midnight = datetime.strptime(ref_date, "%Y-%m-%d").timestamp()
        self._last_tod: float | None = None
        self._days = 0

    def midnight(self, date: str) -> float | None:
        """Epoch seconds of local midnight of ``YYYY-MM-DD`` (cached), None if it is no date."""
        value = self._cache.get(date)
        if value is None:
            value = local_midnight(date)
            if value is not None:
                self._cache[date] = value
        return value

    def new_file(self) -> None:
        self._last_tod, self._days = None, 0

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
