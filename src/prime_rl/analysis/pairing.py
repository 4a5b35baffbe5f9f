"""Start and done lines paired column-wise, as a dict of open starts pairs them line by line.

A handler that pairs a ``batch.start`` with its ``batch.done`` (or a ``wait.start`` with its
``wait.done``, a ``compute.done`` with its ``step.done``) keeps a dict of what is open by key: an
opening line sets ``open[key] = value``, a closing line takes ``open.pop(key)`` (nothing when the key
is not open). :func:`pair` does the same for a whole batch at once: a closing line takes the value of
the line before it with the same key when that line opens, and the value carried over from the
batches before when it is its key's first line in the batch; ``carried`` is left as the dict would
be after the batch. No Python object per line: the keys are sorted as numbers (steps, or their rank),
and only the keys still open at the end of the batch, or closed while carried, are read.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def pair(
    keys: pl.Series, opens: pl.Series, closes: pl.Series, values: np.ndarray, carried: dict[str, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair the rows where ``opens`` (each opens ``keys[i]`` with ``values[i]``) with the rows where
    ``closes`` (each takes what is open under its key), in row order, starting from ``carried``
    (updated). ``opens`` and ``closes`` are boolean columns that are never both true; ``keys`` has a
    string on every such row. Returns the closing rows, whether each found its key open, and the
    value it took (NaN where it found none)."""
    rows = (opens | closes).arg_true().to_numpy()
    n = len(rows)
    if not n:
        return rows, np.zeros(0, dtype=bool), np.zeros(0)
    opening = opens.to_numpy()[rows]
    ops = keys.gather(rows)
    order, first = _by_key(ops)
    sorted_opening = opening[order]
    last = np.ones(n, dtype=bool)
    last[:-1] = first[1:]
    found = np.zeros(n, dtype=bool)
    took = np.full(n, np.nan)
    # a closing line right after an opening line of its key takes that line's value
    after_open = np.zeros(n, dtype=bool)
    after_open[1:] = sorted_opening[:-1]
    take = np.flatnonzero(~first & ~sorted_opening & after_open)
    found[order[take]] = True
    took[order[take]] = values[rows[order[take - 1]]]
    if carried:
        # a key's first line closing takes what the batches before left open under it
        lead = order[first & ~sorted_opening]
        for at, key in zip(lead.tolist(), ops.gather(lead).to_list(), strict=True):
            if key in carried:
                found[at], took[at] = True, carried.pop(key)
        # a key whose last line closes is no longer open (one that opened first replaced its value)
        closed = ops.gather(order[last & ~sorted_opening])
        for key in closed.filter(closed.is_in(list(carried))).to_list():
            del carried[key]
    still_open = order[last & sorted_opening]
    if len(still_open):
        carried.update(zip(ops.gather(still_open).to_list(), values[rows[still_open]].tolist(), strict=True))
    closing = ~opening
    return rows[closing], found[closing], took[closing]


def _by_key(keys: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """The rows ordered by key, each key's rows in row order, and where each key's rows begin
    (``first[i]``: row ``order[i]`` is its key's first). Keys that are all integers written the one
    way (steps, counts) are sorted as those; others by their rank (a sort of the strings)."""
    number = keys.cast(pl.Int64, strict=False)
    if number.null_count() == 0 and (number.cast(pl.String) == keys).all():
        codes = number.to_numpy()  # "7" and "007" are two keys: only one of them is written the one way
    else:
        codes = keys.rank("dense").to_numpy()
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return order, first


def or_zero(values: np.ndarray) -> np.ndarray:
    """``t or 0.0`` of each value (NaN: no value)."""
    return np.where(np.isnan(values) | (values == 0.0), 0.0, values)


def or_unknown(text: pl.Series) -> pl.Expr:
    """``text or "?"`` of each value, as an expression."""
    return pl.when(text.is_null() | (text == "")).then(pl.lit("?")).otherwise(text)
