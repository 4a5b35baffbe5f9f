"""Spans: things that took time, made by the collection in blocks of columns and turned into
:class:`Span` objects only where a report asks for them.

A long run keeps the first and last spans of each kind (``stats.SPANS_KEPT``, 20,000: 240,000
objects for a run with every kind). timeline.txt shows the first 50,000 in time order and looks
up the generation batches; only ``--trace`` writes them all. :class:`KeptSpans` holds the kept rows
as parts of their blocks and makes the objects each of those asks for: making all of them took
0.2-0.3 s of the collection's main thread (with the GIL) on every long run.
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

    def spans(self, kind: str, rows: Sequence[int]) -> list[Span]:
        """The spans of ``rows`` as objects, in that order."""
        if isinstance(self.start, pl.Series):  # a block of columns: their lists, made once
            self.start, self.end, self.args = self.start.to_list(), self.end.to_list(), self.args.to_list()
            if self.info:
                self.info = {key: values.to_list() for key, values in self.info.items()}
        label = self.label.format
        start, end, args = self.start, self.end, self.args
        if not self.info:
            return [Span(kind, start[i], end[i], label(args[i]), {}) for i in rows]
        info = tuple(self.info.items())
        return [
            Span(kind, start[i], end[i], label(args[i]), {key: values[i] for key, values in info})
            for i in rows
        ]


Part = tuple[str, SpanBlock, int, int]
"""Rows ``lo:hi`` of a block of one kind: ``(kind, block, lo, hi)``."""


class KeptSpans(Sequence[Span]):
    """The kept spans in start order (a stable sort of the parts' rows, in the order of ``parts``),
    made into objects when asked: all of them (indexing, iteration: ``--trace``), the first ``n``
    (:meth:`first`) or one kind's (:meth:`of_kind`)."""

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

    def first(self, n: int) -> list[Span]:
        """The first ``n`` in start order (what ``self[:n]`` holds), made alone."""
        if self._all is not None:
            return self._all[:n]
        return self._make(self._sorted()[:n])

    def of_kind(self, kind: str) -> list[Span]:
        """The spans of ``kind``, in start order (what filtering ``self`` by kind gives)."""
        if self._all is not None:
            return [s for s in self._all if s.kind == kind]
        parts = [p for p in self._parts if p[0] == kind]
        kept = KeptSpans(parts)
        return kept._make(kept._sorted())

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
        part = np.searchsorted(self._ends, rows, side="right")
        by_part = np.argsort(part, kind="stable")
        cuts = np.flatnonzero(np.diff(part[by_part])) + 1
        for at in np.split(by_part, cuts) if len(rows) else ():
            p = int(part[at[0]])
            kind, block, lo, _ = self._parts[p]
            first = int(self._ends[p] - self._sizes[p])
            local = (rows[at] - first + lo).tolist()
            for k, span in zip(at.tolist(), block.spans(kind, local), strict=True):
                out[k] = span
        return out


def first_spans(spans: Sequence[Span], n: int) -> list[Span]:
    """The first ``n`` of spans in start order (:class:`KeptSpans` makes only those)."""
    return spans.first(n) if isinstance(spans, KeptSpans) else list(spans[:n])


def spans_of_kind(spans: Sequence[Span], kind: str) -> list[Span]:
    """The spans of ``kind`` among spans in start order (:class:`KeptSpans` makes only those)."""
    return spans.of_kind(kind) if isinstance(spans, KeptSpans) else [s for s in spans if s.kind == kind]
