"""A SIGTERM raised where Python drops what its handler raises: inside a weakref callback ("Exception
ignored in ..."). A handler that raises there is lost and the program goes on (a collector run hung
so in CI, in ``_weakrefset._remove``). For child processes of the tests (the handler is process-wide)."""

from __future__ import annotations

import signal
import weakref


class _Thing:
    pass


def sigterm_inside_a_weakref_callback() -> weakref.ref:
    """Send this process SIGTERM from a weakref callback (its handler runs there, at once); returns
    the dead reference."""
    thing = _Thing()
    ref = weakref.ref(thing, lambda _: signal.raise_signal(signal.SIGTERM))
    del thing
    return ref
