"""The progress bar and console logging that does not break it."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from loguru import logger
from tqdm import tqdm

from prime_rl.logging import LOG_FORMAT, intercept_stdlib


def setup_collect_logging(log_file, level: str = "INFO") -> None:
    """Console: messages only, printed above the bar; tagged ``[collect]`` and ``[server]`` lines
    go only to ``log_file`` (one per rollout, or per scrape, would drown the console)."""
    logger.remove()
    logger.add(
        lambda msg: tqdm.write(msg, end="", file=sys.stderr),
        level=level,
        format="{message}",
        filter=lambda r: not r["message"].startswith(("[collect]", "[server]")),
    )
    if log_file is not None:
        logger.add(LogFile(log_file), level=level, format=LOG_FORMAT)
    intercept_stdlib(("",), level)


class LogFile:
    """A log file sink that survives a full disk: the first failed write is reported once on the
    console (naming the file and the error) and the file is given up; the run goes on, and its
    own error, if any, still reaches the console."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._f = None
        self._failed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (a sink open for the run)
        except OSError as e:
            self._give_up(e)

    def write(self, message: str) -> None:
        if self._f is None:
            return
        try:
            self._f.write(message)
            self._f.flush()
        except OSError as e:
            self._give_up(e)

    def _give_up(self, e: OSError) -> None:
        self.stop()
        if not self._failed:
            self._failed = True
            tqdm.write(
                f"cannot write the log file {self.path} ({e.strerror or e}); logging to the console only",
                file=sys.stderr,
            )

    def stop(self) -> None:
        """Close the file (loguru calls this when the sink is removed)."""
        if self._f is not None:
            with contextlib.suppress(OSError):
                self._f.close()
            self._f = None


class Progress:
    """``Collecting rollouts: 45%|████▌     | 450/1000 [02:15<02:45, 3.33it/s, reward=0.512 ...]``."""

    def __init__(self, enabled: bool, total: int, initial: int, desc: str = "Collecting rollouts"):
        self.enabled = enabled
        self._shown = initial
        self._bar = (
            tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
            if enabled
            else None
        )

    def refresh(self, done: int, postfix: str) -> None:
        if self._bar is None:
            return
        self._bar.set_postfix_str(postfix, refresh=False)
        self._bar.update(done - self._shown)  # redraws at most every mininterval
        self._shown = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
