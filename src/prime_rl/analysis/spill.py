"""Frames kept on disk instead of in memory while a long log is read.

A long run's ``[weights]`` lines wait for the join at the end of the reading (a server's file may
come after the orchestrator's); on the all-tagged benchmark they cost about 20 MB per million log
lines. Past a bound they are written to Arrow IPC files (LZ4) in a temporary directory of their own
and read back, one part at a time, by the join. The directory is made at the first write, under
the directory given (``analyze-logs``: the output directory, or ``--tmp-dir``; else ``TMPDIR`` or
the system's temporary directory), and removed when the store is closed or collected, or when the
process exits (a SIGKILLed analysis leaves it behind).

Disk trouble never stops an analysis: when a write fails (a full disk, no temporary directory),
the store says why once (:attr:`Spill.failed`) and keeps every frame in memory from then on, as
without a store.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import polars as pl

PREFIX = "prime-rl-analysis-"
"""The temporary directory's name starts with this."""


class Spill:
    """A temporary directory of frames: :meth:`write` one, :meth:`read` it back once (the file is
    removed then)."""

    def __init__(self, parent: str | Path | None = None) -> None:
        self._parent = parent
        """Where the temporary directory goes (None: the system's temporary directory)."""
        self._dir: Path | None = None
        self._finalizer: weakref.finalize | None = None
        self._next = 0
        self.failed: str | None = None
        """Why frames stopped going to disk (None: they still do)."""
        self.written = 0
        """Bytes written so far (the files read back included)."""

    @property
    def directory(self) -> Path | None:
        """The temporary directory (None: nothing was written yet)."""
        return self._dir

    def write(self, frame: pl.DataFrame) -> Path | None:
        """``frame`` written to a file of its own; None when it could not be (it stays the caller's
        to keep: see :attr:`failed`)."""
        if self.failed is not None:
            return None
        path = None
        try:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=self._parent))
                self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
            path = self._dir / f"{self._next:06d}.arrow"
            self._next += 1
            frame.write_ipc(path, compression="lz4")
            self.written += path.stat().st_size
        except OSError as e:  # what polars raises for a full disk too
            self._give_up(path, e)
            return None
        return path

    def read(self, path: Path) -> pl.DataFrame:
        """The frame written to ``path``, read whole into memory; the file is removed."""
        frame = pl.read_ipc(path)
        path.unlink(missing_ok=True)
        return frame

    def close(self) -> None:
        """Remove the directory and every file left in it."""
        if self._finalizer is not None:
            self._finalizer()

    def _give_up(self, path: Path | None, error: OSError) -> None:
        self.failed = f"writing in {self._dir or self._parent or tempfile.gettempdir()} failed: {error}"
        if path is not None:
            path.unlink(missing_ok=True)
