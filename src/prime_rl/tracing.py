"""Trace ids, monotonic timers and the tagged-line grammar of docs/design.md.

A tagged line is ``[<tag>]`` or ``[<tag>][<trace_id>]``, then an event name (optional: the
``[rollout]`` line has none), then ``key=value`` pairs. Values never contain whitespace; durations (keys ending in ``_ms``) carry one decimal and
``t=`` (``time.monotonic()`` seconds) six. These lines are a public interface: users grep them and
the analyzer parses them, so every module formats them through :func:`format_tagged` and nobody
builds them by hand.

Nothing a caller passes can start a second line or hide in the terminal: tag, trace id, event and
keys must match their patterns (else ``ValueError``), and every value is folded and escaped
(whitespace, line breaks included, becomes ``_``; any other character that is not printable
becomes a ``\\xNN``/``\\uNNNN`` escape). :func:`one_line` does the same for free-form messages
that quote a value someone else supplied.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field

TRACE_HEADER = "x-trace-id"
"""HTTP header that carries a trace id from a client to a server (admin and chat requests)."""

PROGRESS = frozenset(
    {
        ("gen", "batch.start"),
        ("gen", "batch.done"),
        ("verify", "batch.done"),
        ("ckpt", "wait.done"),
        ("ckpt", "write.done"),
        ("ckpt", "save.done"),
        ("weights", "client.done"),
        ("weights", "rpc.done"),
        ("train", "step.done"),
        ("train", "compute.done"),
        ("env", "episode.done"),
        ("env", "turn.done"),
    }
)
"""The tagged lines (tag, event) that count as progress of a run: the ``rl`` launcher's watchdog
waits for them, and the analyzer tells a hang the run went on after by them."""

_TAG_RE = r"[A-Za-z0-9_.-]+"
_TAG_FULL = re.compile(_TAG_RE)
_TRACE_FULL = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_NAME_FULL = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
"""Event names and keys (the analyzer's event pattern)."""
_LINE_RE = re.compile(
    rf"\[(?P<tag>{_TAG_RE})\](?:\[(?P<tid>{_TAG_RE})\])?\s+(?P<event>[^\s\[=]+(?=\s|$))?(?P<rest>.*)$"
)
_WS_RE = re.compile(r"\s+")


def _escape_char(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def _escape_unprintable(text: str) -> str:
    """Every character that is not printable as a backslash escape (``repr``'s rule; the ASCII space stays)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape_char(c) for c in text)


def one_line(text: object, limit: int | None = 500) -> str:
    """``text`` as one printable line for a log message or an error text.

    Line breaks (``\\n``, ``\\r``, U+2028, U+0085, ...), other control characters, format characters
    and lone surrogates become backslash escapes; spaces stay. With ``limit``, a longer text is
    cut to ``limit`` characters and its length is said. Quote anything a client or a file
    supplied with it before it goes into a free-form log line (a ``[weights][tid] ... refused``
    warning): the text can then neither start a forged tagged line nor drive the terminal.
    """
    text = _escape_unprintable(str(text))
    if limit is not None and len(text) > limit:
        return f"{text[:limit]}... ({len(text)} characters)"
    return text


def new_trace_id() -> str:
    """A short random trace id (12 hex chars) that joins client and server lines of one operation."""
    return secrets.token_hex(6)


def now() -> float:
    """Monotonic seconds: the clock every ``t=`` field and every duration is taken from."""
    return time.monotonic()


def ms_since(start: float) -> float:
    """Milliseconds elapsed since ``start`` (a :func:`now` value)."""
    return (time.monotonic() - start) * 1000.0


def _format_value(key: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if key == "t":
            return f"{value:.6f}"
        if key.endswith("_ms"):
            return f"{value:.1f}"
        return f"{value:.4g}" if abs(value) < 1e-3 and value != 0 else f"{value:.4f}".rstrip("0").rstrip(".")
    text = str(value)
    if not text:
        return '""'
    # Values have no whitespace by contract: fold it (line breaks included) into '_' rather than
    # break parsers, then escape whatever else is not printable (NUL, ESC, format characters).
    return _escape_unprintable(_WS_RE.sub("_", text))


def format_tagged(tag: str, event: str | None, trace_id: str | None = None, **fields: object) -> str:
    """Render one tagged line, e.g. ``[weights][ab12] rpc.done op=update_weights t=12.000001 rpc_ms=3.2``.

    ``event`` may be None for event-less lines (``[rollout] trunc_pct=...``). Fields keep their
    keyword order; ``None`` values are left out. The tag and trace id must match
    ``[A-Za-z0-9_.-]+`` (a trace id at most 64 characters), the event and every key
    ``[A-Za-z_][A-Za-z0-9_.]*``, else ``ValueError``; values are folded and escaped, so the line is
    one line of printable characters whatever they hold.
    """
    if not isinstance(tag, str) or not _TAG_FULL.fullmatch(tag):
        raise ValueError(f"invalid tag {one_line(repr(tag), 100)}")
    if trace_id is not None and (not isinstance(trace_id, str) or not _TRACE_FULL.fullmatch(trace_id)):
        raise ValueError(f"invalid trace id {one_line(repr(trace_id), 100)}")
    if event is not None and (not isinstance(event, str) or not _NAME_FULL.fullmatch(event)):
        raise ValueError(f"invalid event name {one_line(repr(event), 100)}")
    head = f"[{tag}][{trace_id}]" if trace_id else f"[{tag}]"
    parts = [head] if event is None else [head, event]
    for key, value in fields.items():
        if not _NAME_FULL.fullmatch(key):
            raise ValueError(f"invalid key {one_line(repr(key), 100)}")
        if value is None:
            continue
        parts.append(f"{key}={_format_value(key, value)}")
    return " ".join(parts)


@dataclass(frozen=True)
class TaggedLine:
    """One parsed tagged line. ``fields`` keeps values as strings; use :meth:`num` for numbers."""

    tag: str
    event: str
    """Event name; "" for event-less lines."""
    trace_id: str | None = None
    fields: dict[str, str] = field(default_factory=dict)

    def num(self, key: str, default: float | None = None) -> float | None:
        """The field as a float, or ``default`` when absent or not a number."""
        raw = self.fields.get(key)
        if raw is None:
            return default
        try:
            return float(raw)
        except ValueError:
            return default


def parse_tagged(text: str) -> TaggedLine | None:
    """Find and parse the tagged part of a log line (any prefix such as a timestamp is skipped).

    Returns ``None`` when the line holds no tagged part. Tokens without ``=`` after the event are
    ignored, so a truncated or decorated line still yields what it has.
    """
    start = text.find("[")
    while start != -1:
        match = _LINE_RE.match(text, start)
        if match and not match.group("event"):
            # an event-less line must start its fields at once ("[x] [gen] ..." is not tag x)
            first = match.group("rest").split(None, 1)
            if not first or "=" not in first[0] or first[0].startswith("["):
                match = None
        if match:
            fields: dict[str, str] = {}
            for token in match.group("rest").split():
                key, sep, value = token.partition("=")
                if sep and key:
                    fields[key] = value
            return TaggedLine(match.group("tag"), match.group("event") or "", match.group("tid"), fields)
        start = text.find("[", start + 1)
    return None


class Timer:
    """Context manager measuring wall time on the monotonic clock.

    >>> with Timer() as t:
    ...     pass
    >>> t.ms >= 0
    True
    """

    def __init__(self) -> None:
        self.start = 0.0
        self.end: float | None = None

    def __enter__(self) -> Timer:
        self.start = now()
        self.end = None
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = now()

    @property
    def ms(self) -> float:
        """Elapsed milliseconds (up to now while still running)."""
        end = self.end if self.end is not None else now()
        return (end - self.start) * 1000.0
