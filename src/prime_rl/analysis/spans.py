"""Spans: things that took time, made by the collection in blocks of columns, read by the
reports as columns (:class:`SpanColumns`) or, where one asks for them, as :class:`Span` objects.

A long run keeps the first and last spans of each kind (``stats.SPANS_KEPT``, 20,000: 240,000
spans for a run with every kind). timeline.txt shows the first 50,000 in time order and looks
up the generation batches, both as columns; only ``--trace`` makes every span an object.
:class:`KeptSpans` holds the kept rows as parts of their blocks: making every object took 0.2-0.3 s
of the collection's main thread (with the GIL) on every long run, the first 50,000 0.05 s.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
import polars as pl


@dataclass(slots=True)
class Span:
    """Something that took time: a generation batch, a checkpoint wait or write, a weight update, a
    trainer step's compute and its wait for rollouts."""

    kind: str
    start: float
    end: float
    label: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SpanBlock:
    """Spans of one kind made together, as columns (lists, or polars columns turned into lists when
    the first span is made): span ``i`` is made only when it is kept."""

    start: Sequence[float]
    end: Sequence[float]
    label: str
    """A format with one ``{}``, filled with ``args[i]``."""
    args: Sequence
    info: dict[str, Sequence] | None = None
    """Each info key's values, one per span."""
    first: int = 0
    """Rows before this one are no longer kept (the tail moved past them)."""

    def __len__(self) -> int:
        return len(self.start) - self.first

    def lists(self) -> None:
        """Make the block's columns lists, once (a block made from a frame holds polars columns)."""
        if isinstance(self.start, pl.Series):
            self.start, self.end, self.args = self.start.to_list(), self.end.to_list(), self.args.to_list()
            if self.info:
                self.info = {key: values.to_list() for key, values in self.info.items()}

    def spans(self, kind: str, rows: Sequence[int]) -> list[Span]:
        """The spans of ``rows`` as objects, in that order."""
        self.lists()
        label = self.label.format
        start, end, args = self.start, self.end, self.args
        if not self.info:
            return [Span(kind, start[i], end[i], label(args[i]), {}) for i in rows]
        info = tuple(self.info.items())
        return [
            Span(kind, start[i], end[i], label(args[i]), {key: values[i] for key, values in info})
            for i in rows
        ]


@dataclass
class SpanColumns:
    """Spans as columns, in start order: what a report reads of many spans (timeline.txt's 50,000)
    without an object each."""

    kind: list[str]
    start: np.ndarray
    end: np.ndarray
    label: list[str]
    info: dict[str, list]
    """Each info key some span has: its value in every span (None where a span has none)."""

    @classmethod
    def of(cls, spans: Sequence[Span]) -> SpanColumns:
        keys = dict.fromkeys(key for s in spans for key in s.info)
        return cls(
            [s.kind for s in spans],
            np.array([s.start for s in spans], dtype=np.float64),
            np.array([s.end for s in spans], dtype=np.float64),
            [s.label for s in spans],
            {key: [s.info.get(key) for s in spans] for key in keys},
        )


Part = tuple[str, SpanBlock, int, int]
"""Rows ``lo:hi`` of a block of one kind: ``(kind, block, lo, hi)``."""


class KeptSpans(Sequence[Span]):
    """The kept spans in start order (a stable sort of the parts' rows, in the order of ``parts``),
    made into objects when asked (indexing, iteration: ``--trace``), or read as columns: the first
    ``n``, or one kind's (:meth:`columns`)."""

    def __init__(self, parts: list[Part]) -> None:
        self._parts = [p for p in parts if p[3] > p[2]]
        self._sizes = np.array([hi - lo for _, _, lo, hi in self._parts], dtype=np.int64)
        self._ends = np.cumsum(self._sizes)
        self._order: np.ndarray | None = None
        self._all: list[Span] | None = None

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __bool__(self) -> bool:
        return bool(self._parts)

    @overload
    def __getitem__(self, i: int) -> Span: ...
    @overload
    def __getitem__(self, i: slice) -> list[Span]: ...
    def __getitem__(self, i: int | slice) -> Span | list[Span]:
        return self._every()[i]

    def __iter__(self) -> Iterator[Span]:
        return iter(self._every())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable-like: equal to a list of the same spans

    def columns(self, n: int | None = None, kind: str | None = None) -> SpanColumns:
        """The first ``n`` (all: None) of the spans of ``kind`` (all: None) in start order, as columns."""
        if self._all is not None:  # every object made already: read from them
            return span_columns(self._all, n, kind)
        if kind is not None:
            return KeptSpans([p for p in self._parts if p[0] == kind]).columns(n)
        rows = self._sorted()[:n]
        m = len(rows)
        out = SpanColumns([""] * m, np.empty(m), np.empty(m), [""] * m, {})
        for at, p, local in self._by_part(rows):
            kind_p, block, _, _ = self._parts[p]
            block.lists()
            out.start[at] = np.asarray(block.start, dtype=np.float64)[local]
            out.end[at] = np.asarray(block.end, dtype=np.float64)[local]
            label, args = block.label.format, block.args
            ks, ls = at.tolist(), local.tolist()
            for k, i in zip(ks, ls, strict=True):
                out.kind[k] = kind_p
                out.label[k] = label(args[i])
            for key, values in (block.info or {}).items():
                column = out.info.setdefault(key, [None] * m)
                for k, i in zip(ks, ls, strict=True):
                    column[k] = values[i]
        return out

    def _by_part(self, rows: np.ndarray) -> Iterator[tuple[np.ndarray, int, np.ndarray]]:
        """``rows`` (numbered through the parts in turn) grouped by part: where each group's rows
        are in ``rows``, its part, and their rows in that part's block."""
        part = np.searchsorted(self._ends, rows, side="right")
        by_part = np.argsort(part, kind="stable")
        cuts = np.flatnonzero(np.diff(part[by_part])) + 1
        for at in np.split(by_part, cuts) if len(rows) else ():
            p = int(part[at[0]])
            first = int(self._ends[p] - self._sizes[p])
            yield at, p, rows[at] - first + self._parts[p][2]

    def _every(self) -> list[Span]:
        if self._all is None:
            self._all = self._make(self._sorted())
        return self._all

    def _sorted(self) -> np.ndarray:
        """Every row (numbered through the parts in turn) in start order."""
        if self._order is None:
            starts = [np.asarray(b.start[lo:hi], dtype=np.float64) for _, b, lo, hi in self._parts]
            self._order = (
                np.argsort(np.concatenate(starts), kind="stable") if starts else np.empty(0, np.int64)
            )
        return self._order

    def _make(self, rows: np.ndarray) -> list[Span]:
        """The spans of ``rows`` (numbered through the parts in turn), in that order: each part's
        rows made together."""
        out: list[Any] = [None] * len(rows)
        for at, p, local in self._by_part(rows):
            kind, block, _, _ = self._parts[p]
            for k, span in zip(at.tolist(), block.spans(kind, local.tolist()), strict=True):
                out[k] = span
        return out


def span_columns(spans: Sequence[Span], n: int | None = None, kind: str | None = None) -> SpanColumns:
    """The first ``n`` (all: None) of the spans of ``kind`` (all: None) among spans in start order,
    as columns (:class:`KeptSpans` makes no object for them)."""
    if isinstance(spans, KeptSpans):
        return spans.columns(n, kind)
    return SpanColumns.of([s for s in spans if kind is None or s.kind == kind][:n])
