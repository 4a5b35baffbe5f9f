"""Logging: loguru with a console sink and file sinks under ``<output_dir>/logs/``.

Every process calls :func:`setup_logging` once at start. Tagged timing lines (docs/design.md) go
through :func:`log_tagged`, so the grammar lives in one place (:mod:`prime_rl.tracing`).
Standard-library logging (vLLM, uvicorn, httpx) is routed into the same sinks.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from loguru import logger

from prime_rl.tracing import format_tagged

LOG_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {message}"
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai")
CONSOLE_FORMAT = "<green>{time:HH:mm:ss.SSS}</green> | <level>{level: <7}</level> | {message}"


class _InterceptHandler(logging.Handler):
    """Send standard-library log records to loguru, keeping the level and the logger name."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        message = record.getMessage()
        if record.name and not record.name.startswith("prime_rl"):
            message = f"({record.name}) {message}"
        logger.opt(exception=record.exc_info, depth=0).log(level, message)


def setup_logging(
    log_file: Path | None,
    level: str = "INFO",
    console: bool = True,
    intercept: tuple[str, ...] = ("", "vllm", "uvicorn", "uvicorn.access", "uvicorn.error"),
) -> None:
    """Configure loguru: a console sink (stderr) and, when ``log_file`` is given, a file sink.

    The file sink appends, so a resumed process keeps its earlier lines. ``intercept`` names the
    standard-library loggers whose records are routed into loguru.
    """
    logger.remove()
    if console:
        logger.add(sys.stderr, level=level, format=CONSOLE_FORMAT, colorize=sys.stderr.isatty())
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        logger.add(log_file, level=level, format=LOG_FORMAT, enqueue=False, encoding="utf-8")
    intercept_stdlib(intercept, level)
    for noisy in QUIET_LOGGERS:  # one INFO line per HTTP request drowns the tagged lines
        logging.getLogger(noisy).setLevel(logging.WARNING)


def intercept_stdlib(names: tuple[str, ...], level: str = "INFO") -> None:
    """Route the named standard-library loggers into loguru ('' is the root logger).

    Call again after importing a library that installs its own handlers (vLLM does).
    """
    handler = _InterceptHandler()
    for name in names:
        std = logging.getLogger(name)
        std.handlers = [handler]
        std.setLevel(logging.getLevelName(level) if name == "" else logging.NOTSET)
        std.propagate = name == ""


def log_tagged(tag: str, event: str | None, trace_id: str | None = None, **fields: object) -> str:
    """Emit one tagged line at INFO (see :func:`prime_rl.tracing.format_tagged`) and return it."""
    line = format_tagged(tag, event, trace_id, **fields)
    logger.info(line)
    return line
