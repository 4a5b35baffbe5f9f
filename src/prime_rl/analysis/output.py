"""How the analysis's files are written: UTF-8 whatever the locale, and JSON that JSON readers take.

A log file's name (bytes that are not UTF-8 come back from the file system as surrogates) or a
line's text lands in the report; ``Path.write_text`` with the locale's strict encoder failed on
either, leaving SUMMARY.md empty. A duration of 1e200 ms is a finite number, but its variance is
not: json writes ``Infinity``/``NaN`` then, which jq, browsers and Perfetto refuse.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TextIO

import numpy as np


def open_text(path: Path) -> TextIO:
    """``path`` opened to write text as UTF-8; what cannot be encoded (a surrogate) is written as its
    escape."""
    return open(path, "w", encoding="utf-8", errors="backslashreplace")


def write_text(path: Path, text: str) -> None:
    """``text`` into ``path`` (:func:`open_text`)."""
    with open_text(path) as f:
        f.write(text)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(9), *range(11, 32), 127)}


def md_text(text: str) -> str:
    """A Markdown file's ``text`` with the control characters a log line may bring written as escapes
    (a NUL made grep call SUMMARY.md binary); tabs and newlines stay."""
    return text.translate(_CONTROL)


def md_cell(text: str) -> str:
    """``text`` for a Markdown table's cell: a ``|`` in it (``url=http://h|x``) would start a column."""
    return text.replace("|", "\\|")


class RawJSON(str):
    """Text that is JSON already (made by polars from columns): written as it is."""


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps(obj, default=str)`` with every float that is not finite written as ``null``.
    (The usual object has none: it is dumped as it is, and walked only when the dump refuses it.)"""
    try:
        return json.dumps(obj, default=str, allow_nan=False, **kwargs)
    except ValueError:
        return json.dumps(_finite(obj), default=str, allow_nan=False, **kwargs)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.generic):  # a numpy scalar
        return _finite(obj.item())
    return obj
