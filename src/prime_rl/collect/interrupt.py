"""SIGTERM ends a collector run the way Ctrl-C does: exit 130, every finished sample kept, resumable.

A signal handler that raises ``KeyboardInterrupt`` can lose the signal: Python runs the handler
wherever the main thread happens to be, and where that is a weakref callback or a ``__del__`` the
exception is printed ("Exception ignored in ...") and dropped, so the run goes on as if never
signalled (a CI run hung so, for 60 s, in ``_weakrefset._remove``). Inside an event loop the
handler therefore only cancels the run's main task, as asyncio does for Ctrl-C (``asyncio.Runner``),
and :func:`run_async` turns that cancellation into ``KeyboardInterrupt`` once the loop has
finished. Outside one (``merge``) it raises ``KeyboardInterrupt`` as before, and remembers the
signal: the work checks it between records (:func:`check`) and raises it again if it was dropped. A
second SIGTERM while the first one's cancellation is under way raises ``KeyboardInterrupt`` too.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_main: asyncio.Task | None = None  # the main task of the running run_async, which SIGTERM cancels
_terminating = False  # a SIGTERM has cancelled it
_signalled = False  # a SIGTERM outside any event loop: check() raises it again if it was dropped


def on_sigterm(signum: int, frame: object) -> None:
    """The collector's SIGTERM handler (installed by :func:`handle_sigterm`)."""
    global _terminating, _signalled
    task = _main
    if task is None or task.done() or _terminating:
        _signalled = True
        raise KeyboardInterrupt
    _terminating = True
    task.cancel()
    task.get_loop().call_soon_threadsafe(lambda: None)  # wake a loop waiting in select


def handle_sigterm() -> None:
    """Make SIGTERM (kill, a scheduler's preemption) end this process's run like Ctrl-C."""
    signal.signal(signal.SIGTERM, on_sigterm)


def check() -> None:
    """Raise ``KeyboardInterrupt`` if SIGTERM came while no event loop ran: the handler raised it
    already, but where that was a weakref callback or a ``__del__`` Python dropped it. Synchronous
    work (``merge``) calls this between records; the entry point once more when the work is done."""
    if _signalled:
        raise KeyboardInterrupt


def clear() -> None:
    """Forget a SIGTERM once its run has ended (exit 130 or not): a later run in the same process
    (a test's) starts unsignalled."""
    global _signalled
    _signalled = False


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``; a SIGTERM meanwhile cancels ``coro`` (which writes what it finished on
    the way out) and then raises ``KeyboardInterrupt`` here."""
    global _main, _terminating

    async def main() -> T:
        global _main
        _main = asyncio.current_task()
        return await coro

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if _terminating:
            raise KeyboardInterrupt from None
        raise
    finally:
        _main, _terminating = None, False
