"""Frames kept on disk instead of in memory while a long log is read.

A long run's ``[weights]`` lines wait for the join at the end of the reading (a server's file may
come after the orchestrator's); on the all-tagged benchmark they cost about 20 MB per million log
lines. Past a bound they are written to Arrow IPC files (LZ4) in a temporary directory of their own
and read back, one part at a time, by the join. The directory is made at the first write, under
the directory given (``analyze-logs``: the output directory, or ``--tmp-dir``; else ``TMPDIR`` or
the system's temporary directory), and removed when the store is closed or collected, or when the
process exits (a SIGKILLed analysis leaves it behind).

Disk trouble never stops an analysis: when a write fails (a full disk, no temporary directory),
the store says why once (:attr:`Spill.failed`), keeps the frames whose writes failed (reading one
gives it back) and takes no more (the caller keeps them in memory, as without a store).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import polars as pl

PREFIX = "prime-rl-analysis-"
"""The temporary directory's name starts with this."""


class Spill:
    """A temporary directory of frames: :meth:`write` one, :meth:`read` it back once (the file is
    removed then). Files are written by a thread of its own, in order, while the caller goes on
    (at most :data:`PENDING_BYTES` of frames wait for it); reading a file waits for its write, and a
    write that failed gives back its frame instead."""

    def __init__(self, parent: str | Path | None = None) -> None:
        self._parent = parent
        """Where the temporary directory goes (None: the system's temporary directory)."""
        self._dir: Path | None = None
        self._finalizer: weakref.finalize | None = None
        self._next = 0
        self._writer: ThreadPoolExecutor | None = None
        self._pending: dict[Path, tuple[Future, pl.DataFrame, int]] = {}
        """Files being written, oldest first: their write, frame and size in memory."""
        self._pending_bytes = 0
        self._kept: dict[Path, pl.DataFrame] = {}
        """Frames whose file could not be written."""
        self.failed: str | None = None
        """Why frames stopped going to disk (None: they still do)."""
        self.written = 0
        """Bytes of the files written so far (those read back and removed since included)."""
        self.files = 0
        """Files handed to the writer so far."""
        self._lock = threading.RLock()
        """Held while the bookkeeping changes: one thread may read while another writes."""

    @property
    def directory(self) -> Path | None:
        """The temporary directory (None: nothing was written yet)."""
        return self._dir

    def write(self, frame: pl.DataFrame) -> Path | None:
        """``frame`` to be written to a file of its own, whose path is returned at once; None when
        writing has failed before (the frame stays the caller's to keep: see :attr:`failed`)."""
        with self._lock:
            return self._write(frame)

    def _write(self, frame: pl.DataFrame) -> Path | None:
        self._settle(PENDING_BYTES)
        if self.failed is not None:
            return None
        try:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=self._parent))
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="analysis-spill")
                self._finalizer = weakref.finalize(self, _remove, self._dir, self._writer)
        except OSError as e:
            self._give_up(None, e)
            return None
        path = self._dir / f"{self._next:06d}.arrow"
        self._next += 1
        self.files += 1
        size = frame.estimated_size()
        assert self._writer is not None
        self._pending[path] = (self._writer.submit(_write, frame, path), frame, size)
        self._pending_bytes += size
        return path

    def read(self, path: Path, columns: list[str] | None = None, remove: bool = True) -> pl.DataFrame:
        """The frame written to ``path`` (only ``columns`` when given), read into memory once its
        write is done (the frame itself when the write failed); the file is removed unless not
        ``remove``."""
        with self._lock:  # its write done (not the later ones: they are written in order)
            self._settle(PENDING_BYTES, until=path)
            kept = self._kept.get(path)
            if kept is not None and remove:
                del self._kept[path]
        if kept is not None:
            return kept if columns is None else kept.select(columns)
        frame = pl.read_ipc(path, columns=columns)
        if remove:
            path.unlink(missing_ok=True)
        return frame

    def remove(self, path: Path) -> None:
        """Let go of ``path``'s file (or kept frame) without reading it."""
        with self._lock:
            self._settle(PENDING_BYTES, until=path)
            self._kept.pop(path, None)
        path.unlink(missing_ok=True)

    def wait(self) -> None:
        """Wait for every write handed over so far."""
        with self._lock:
            self._settle(-1)

    def close(self) -> None:
        """Wait for the writes, then remove the directory and every file left in it."""
        self.wait()
        self._kept.clear()
        if self._finalizer is not None:
            self._finalizer()

    def _settle(self, limit: int, until: Path | None = None) -> None:
        """Take the finished writes, oldest first, and wait for more until at most ``limit`` bytes
        of frames wait (and ``until``'s write, when given, is done; a ``limit`` of -1: every write)."""
        while self._pending:
            path, (future, frame, size) = next(iter(self._pending.items()))
            if (
                not future.done()
                and self._pending_bytes <= limit
                and (until is None or until not in self._pending)
            ):
                return
            del self._pending[path]
            self._pending_bytes -= size
            try:
                self.written += future.result()
            except OSError as e:  # what polars raises for a full disk too
                self._give_up(path, e)
                self._kept[path] = frame

    def _give_up(self, path: Path | None, error: OSError) -> None:
        if self.failed is None:
            self.failed = f"writing in {self._dir or self._parent or tempfile.gettempdir()} failed: {error}"
        if path is not None:
            path.unlink(missing_ok=True)


PENDING_BYTES = 64 << 20
"""Frames (bytes in memory) that may wait for the writer before :meth:`Spill.write` waits too."""


def _write(frame: pl.DataFrame, path: Path) -> int:
    frame.write_ipc(path, compression="lz4")
    return path.stat().st_size


def _remove(directory: Path, writer: ThreadPoolExecutor) -> None:
    writer.shutdown(wait=True, cancel_futures=True)
    shutil.rmtree(directory, ignore_errors=True)
