"""The weights a server serves, held against pruning: hard links under ``<weights root>/.serving/``.

A swap that fails half-way is undone by loading the previous weights again, so their files must
still exist then. The trainer prunes old ``weights/step_N`` dirs (``weights_keep``) without
knowing which step each server serves (a server that recovers late may still serve an old one).
Instead of a lease the trainer would have to honour, each server hard-links the shards it loads
into a private dir, ``.serving/<host>-<pid>/<n>/``, before loading them: pruning then removes
only the trainer's names, the bytes stay until the server lets go. A server holds at most two
sets (the one it serves and the one it is loading) and releases the older as soon as a swap
settles. The dir carries no ``STABLE`` marker, so it can never be requested as a weight dir.

Where hard links are impossible (another filesystem, a filesystem without them) the server
loads the trainer's files directly and says once that a rollback then depends on them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from prime_rl.tracing import one_line

SERVING_DIR = ".serving"


def _holder_key() -> str:
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class HeldWeights:
    """Hard-linked copies of the shards one server process serves (see the module docstring)."""

    root: Path
    key: str = field(default_factory=_holder_key)
    serving: Path | None = None
    """The held dir of the weights now served (None: the base model, which is never pruned)."""
    _count: int = 0
    _warned: bool = False

    @property
    def home(self) -> Path:
        return self.root / SERVING_DIR / self.key

    def hold(self, files: list[Path]) -> tuple[list[Path], Path | None]:
        """Link ``files`` into a fresh held dir: (the paths to load, that dir or None when linking
        was impossible and the originals must be loaded)."""
        self._count += 1
        dest = self.home / str(self._count)
        try:
            dest.mkdir(parents=True)
            held = []
            for f in files:
                os.link(f, dest / f.name)
                held.append(dest / f.name)
        except OSError as e:
            shutil.rmtree(dest, ignore_errors=True)
            if not self._warned:
                self._warned = True
                logger.warning(
                    f"cannot hard-link weight files under {self.home}: {one_line(str(e))}; loading the "
                    "trainer's files directly, so a rollback needs them not to be pruned meanwhile"
                )
            return list(files), None
        return held, dest

    def settle(self, loaded: Path | None, *, served: bool) -> None:
        """After a swap: ``served`` says whether ``loaded`` is now served. ``loaded`` is the held
        dir, or None when nothing was held (the base weights, or links were impossible).
        Served: it replaces the previous one. Not served: it is dropped, the previous one stays."""
        if served:
            previous, self.serving = self.serving, loaded
            if previous is not None and previous != self.serving:
                shutil.rmtree(previous, ignore_errors=True)
        elif loaded is not None and loaded != self.serving:
            shutil.rmtree(loaded, ignore_errors=True)

    def release(self) -> None:
        """Let go of everything this server holds (at shutdown)."""
        shutil.rmtree(self.home, ignore_errors=True)
        self.serving = None

    def sweep(self) -> list[Path]:
        """Remove held dirs of dead server processes of this host (killed before they released)."""
        removed = []
        host = self.key.rsplit("-", 1)[0]
        parent = self.root / SERVING_DIR
        if not parent.is_dir():
            return removed
        for d in parent.iterdir():
            owner, _, pid = d.name.rpartition("-")
            if owner == host and pid.isdigit() and d.name != self.key and not _pid_alive(int(pid)):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when empty
        return removed
