"""The progress bar and console logging that does not break it."""

from __future__ import annotations

import sys

from loguru import logger
from tqdm import tqdm

from prime_rl.logging import LOG_FORMAT, intercept_stdlib


def setup_collect_logging(log_file, level: str = "INFO") -> None:
    """Console: messages only, printed above the bar; tagged ``[collect]`` lines go only to
    ``log_file`` (one per rollout would drown the console)."""
    logger.remove()
    logger.add(
        lambda msg: tqdm.write(msg, end="", file=sys.stderr),
        level=level,
        format="{message}",
        filter=lambda r: not r["message"].startswith("[collect]"),
    )
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        logger.add(log_file, level=level, format=LOG_FORMAT, encoding="utf-8")
    intercept_stdlib(("",), level)


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
