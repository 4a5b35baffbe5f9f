"""An offline collector's samples on the timeline: timeline.png's rows, timeline.txt's lines.

Each ``[collect]`` line with a ``dur_ms`` is a sample, from the line's time less its ``dur_ms`` to
the line. A collector log holds millions of them (one a line), many in flight at once, so they
cost what the trio's spans cost and no more:

- timeline.png draws a row per server (:func:`~prime_rl.analysis.bars.sample_row`): a batch's
  samples of a server are merged where they overlap before they join the row's
  :class:`~prime_rl.analysis.bars.Bars` (linear in the batch: the lines come as their samples end,
  :func:`~prime_rl.analysis.bars.merge_overlapping`), a few bars a batch;
- timeline.txt lists the first and last ``SAMPLES_KEPT`` samples as spans "sample", the trio's rule:
  a batch's columns wait as they are and become a frame only when their samples are kept (the
  first batches, and the last ones at the end), the batches in between only counted.

A deferred verify pass's verifications (``[collect] verify.done``, from the line's time less its
``dur_ms`` to the line) are drawn and listed the same way, as spans "verification" of a row of
their own (:data:`VERIFICATION`; they name no server), the first and last ``SAMPLES_KEPT`` listed.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

import numpy as np
import polars as pl

from prime_rl.analysis.bars import merge_overlapping, sample_row

if TYPE_CHECKING:
    from collections.abc import Callable

    from prime_rl.analysis.bars import Bars

SAMPLE = "sample"
"""The kind of a collector's sample spans."""
INFO = ("url", "status", "queue_ms", "gen_ms", "verify_ms", "event")
"""What timeline.txt and the trace say of each sample, besides its trace id (the trace marks a sample
of a ``rollout.failed`` line failed by its ``event``: a malformed answer fails with status 200)."""
VERIFICATION = "verification"
"""The kind of a deferred verify pass's verification spans, and the key of their row of
timeline.png in :attr:`~prime_rl.analysis.stats.Collected.bars`."""
COLLECTOR_KINDS = frozenset((SAMPLE, VERIFICATION))
"""The kinds of span of a collector's log (timeline.txt's header and note say which logs they are)."""


class _SpanStore(Protocol):
    """What the collection's spans give (:class:`~prime_rl.analysis.stats._Spans`)."""

    dropped: dict[str, int]

    def bars_of(self, kind: str) -> Bars: ...

    def add_frame(
        self, kind: str, label: str, frame: pl.DataFrame, info: tuple[str, ...], arg: str, barred: bool
    ) -> None: ...


class SampleSpans:
    """The collector's samples, batch by batch (:meth:`add`), then :meth:`finish` once."""

    def __init__(
        self,
        spans: _SpanStore,
        kept: int,
        kind: str = SAMPLE,
        info: tuple[str, ...] = INFO,
        row: Callable[[str | None], str] = sample_row,
    ) -> None:
        self._spans = spans
        self._kept = kept
        """How many of the first and of the last samples are kept (``stats.SAMPLES_KEPT``)."""
        self._kind, self._info, self._row_of = kind, info, row
        """The spans' kind (labelled "kind {trace id}"), what timeline.txt says of each and the key
        of the row of their server (``url`` in ``info``; without it, one row: ``row(None)``)."""
        self._head = 0
        """Samples given to the spans so far (they keep the first ``kept`` of them)."""
        self._waiting: deque[tuple[dict[str, pl.Series], np.ndarray, int]] = deque()
        """Batches past the head whose samples may be among the last ``kept``: columns, rows, count."""
        self._waiting_rows = 0

    def add(self, ts: pl.Series, dur: pl.Series, tid: pl.Series, info: dict[str, pl.Series]) -> None:
        """A batch's [collect] lines: their time, ``dur_ms`` (null: no sample), trace id and
        :data:`INFO` columns."""
        end = ts.to_numpy()
        start = (ts - dur.clip(lower_bound=0.0) / 1000.0).to_numpy()
        with np.errstate(invalid="ignore"):
            timed = np.isfinite(start) & np.isfinite(end)
        rows = np.flatnonzero(timed)
        if not len(rows):
            return
        self._bars(start, end, info.get("url"), rows)
        columns = {"start": pl.Series(start), "end": ts, "tid": tid, **info}
        if self._head < self._kept:  # among the first samples: kept now
            self._give(columns, rows)
            return
        self._waiting.append((columns, rows, len(rows)))
        self._waiting_rows += len(rows)
        # the oldest batch waiting, with as many samples after it as are kept, has none of the last
        while self._waiting and self._waiting_rows - self._waiting[0][2] >= self._kept:
            _, _, n = self._waiting.popleft()
            self._waiting_rows -= n
            self._spans.dropped[self._kind] = self._spans.dropped.get(self._kind, 0) + n

    def finish(self) -> None:
        """The last batches' samples to the spans (call once, after the last batch)."""
        while self._waiting:
            columns, rows, _ = self._waiting.popleft()
            self._give(columns, rows)
        self._waiting_rows = 0

    def _give(self, columns: dict[str, pl.Series], rows: np.ndarray) -> None:
        """The samples of ``rows`` to the spans, as a frame of the rows they keep (``kept``, the
        spans' number): the first ones while fewer than ``kept`` were given, and the batch's last
        ``kept``; the rows between are counted as dropped here, as the spans would count them
        (``rows_kept``), not gathered (all of a batch of 84,000 lines took 2.6 ms, its 4,000 kept 0.2)."""
        given = len(rows)
        head = min(max(self._kept - self._head, 0), given)
        tail = min(given - head, self._kept)
        if cut := given - head - tail:
            self._spans.dropped[self._kind] = self._spans.dropped.get(self._kind, 0) + cut
            rows = np.concatenate([rows[:head], rows[given - tail :]])
        self._head += given
        frame = pl.DataFrame(columns)[rows]
        self._spans.add_frame(self._kind, self._kind + " {}", frame, self._info, "tid", True)

    def _bars(self, start: np.ndarray, end: np.ndarray, url: pl.Series | None, rows: np.ndarray) -> None:
        """Each server's samples (the lines ``rows``, in line order: by end), merged where they
        overlap, to its row. The servers are told apart by the whole column's codes as categories,
        read at ``rows``: gathering the URLs of ``rows`` as text first took 0.8 ms of an 84,000-line
        batch, as much as the cast."""
        if url is None:  # spans of no server: one row
            self._row(None, start[rows], end[rows])
            return
        codes = url.fill_null("").cast(pl.Categorical).to_physical().to_numpy()[rows]
        if codes.min() == codes.max():  # one server (or none named)
            self._row(url[int(rows[0])], start[rows], end[rows])
            return
        order = np.argsort(codes, kind="stable")  # each server's samples stay in line order
        cuts = np.flatnonzero(np.diff(codes[order])) + 1
        for at in np.split(rows[order], cuts):
            self._row(url[int(at[0])], start[at], end[at])

    def _row(self, url: str | None, start: np.ndarray, end: np.ndarray) -> None:
        merged_start, merged_end = merge_overlapping(start, end)
        self._spans.bars_of(self._row_of(url)).add(merged_start, merged_end)
