"""The joined weight updates kept as columns, one row an update, read as records on demand.

A long run has hundreds of thousands of updates: as :class:`~prime_rl.analysis.update_parts.Update`
records (a float object per number) they cost about 470 bytes each, as columns about 100. The join
(:class:`~prime_rl.analysis.updates.UpdateJoin`) gives an :class:`UpdateTable`; the rules read its
columns (:func:`~prime_rl.analysis.updates.update_frame`), the few places that want records (the
slowest updates, the first ones in summary.json, the trace) make them a slice at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from typing import overload

import polars as pl

from prime_rl.analysis.update_parts import Update

_TEXT = frozenset(("tid", "target"))
_WORDS = frozenset(("path", "url", "server"))
"""Text columns with a few values among all updates: categories (4 bytes a row, each word kept once);
the trace id and the target are one per update and stay text."""
_FLAGS = frozenset(("failed", "background"))
"""Boolean columns (``failed`` False where a frame lacks it, ``background`` null: not said)."""
UPDATE_SCHEMA: dict[str, pl.DataType] = {
    f.name: pl.String()
    if f.name in _TEXT
    else pl.Categorical()
    if f.name in _WORDS
    else pl.Boolean()
    if f.name in _FLAGS
    else pl.Float64()
    for f in fields(Update)
}
"""A table's columns: :class:`Update`'s fields, in their order."""

_SLICE = 1 << 16
"""Rows made into records at a time: the columns' Python lists of one slice at a time, not of all."""

_SHARED = frozenset(("path", "url", "server"))
"""Fields with a few values among all updates: each value one string object, not one per update
(about 200 bytes an update)."""


def conform(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame``'s columns named as :class:`Update`'s fields, in :data:`UPDATE_SCHEMA` (a missing
    one: its default; other columns left out)."""
    return frame.select(
        pl.col(name).cast(dtype)
        if name in frame.columns
        else pl.lit(False if name == "failed" else None, dtype).alias(name)
        for name, dtype in UPDATE_SCHEMA.items()
    )


def _records(frame: pl.DataFrame) -> list[Update]:
    """A table's rows (:data:`UPDATE_SCHEMA`) as updates."""
    shared = {name: {} for name in _SHARED}  # one string object per value over every slice
    out: list[Update] = []
    for part in frame.iter_slices(_SLICE):
        columns = [_column(part.get_column(name), shared.get(name)) for name in UPDATE_SCHEMA]
        out.extend(map(Update, *columns))
    return out


def _column(values: pl.Series, shared: dict | None) -> list:
    out = values.to_list()
    if shared is None:
        return out
    for v in values.unique().to_list():
        shared.setdefault(v, v)
    return list(map(shared.__getitem__, out))


def frame_of(updates: Iterable[Update]) -> pl.DataFrame:
    """Records as a table's columns."""
    updates = list(updates)
    return pl.DataFrame(
        {name: [getattr(u, name) for u in updates] for name in UPDATE_SCHEMA}, schema=UPDATE_SCHEMA
    )


class UpdateTable(Sequence[Update]):
    """The updates in order, as columns (:data:`UPDATE_SCHEMA`); indexing and iteration make records
    (a new one each time: changing one changes nothing here)."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = conform(frame)

    def __len__(self) -> int:
        return self.frame.height

    @overload
    def __getitem__(self, i: int) -> Update: ...
    @overload
    def __getitem__(self, i: slice) -> list[Update]: ...
    def __getitem__(self, i: int | slice) -> Update | list[Update]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return [self[k] for k in range(start, stop, step)]
            return _records(self.frame.slice(start, max(stop - start, 0)))
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"update {i} of {n}")
        return _records(self.frame.slice(i % n, 1))[0]

    def __iter__(self) -> Iterator[Update]:
        for part in self.frame.iter_slices(_SLICE):
            yield from _records(part)

    def __repr__(self) -> str:
        return f"UpdateTable({len(self)} updates)"
