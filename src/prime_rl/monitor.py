"""Per-step metrics: ``metrics.jsonl``, and optionally Weights & Biases and TensorBoard.

The trainer and the orchestrator each hand one row per step to :func:`record_metrics` (a dict with
``process`` and ``step``; the orchestrator's reward, advantage and truncation stats, staleness,
tokens/s and step time; the trainer's loss, entropy, mismatch KL, clip fraction, grad norm, tokens/s).
The row is appended to ``<output_dir>/metrics.jsonl`` as before, and its numeric values go, keyed
``<process>/<name>`` at ``step``, to the backends the process config's ``monitor`` block enables:

- **W&B** (``monitor.wandb``; the optional extra ``wandb``): one run per process
  (``<name>-trainer``, ``<name>-orchestrator``, job type = the process) in one group, so the two
  show side by side; the process's resolved config (secrets masked) is the run's config.
  ``WANDB_MODE``/``WANDB_DIR`` and the other ``WANDB_*`` variables apply where the block leaves a
  value unset; ``mode = "offline"`` keeps the run on disk (``wandb sync`` uploads it later).
- **TensorBoard** (``monitor.tensorboard``; the extra ``tensorboard``): event files under
  ``<log_dir>/<process>/`` (default ``<output_dir>/tensorboard``); ``tensorboard --logdir`` shows both.

Both are off by default. A backend that is enabled without its package fails at config load (the
process, or ``rl``, exits 2 naming the block and the install command). A backend that fails to
start (W&B without credentials in online mode) raises :class:`MonitorError` naming it; one that
fails later is logged once and dropped, so a metrics service never stops training.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Any, Literal, Protocol

from loguru import logger
from pydantic import model_validator

from prime_rl.config import StrictModel
from prime_rl.paths import RunPaths


class MonitorError(RuntimeError):
    """A metrics backend could not be started."""


def _require(package: str, block: str, extra: str) -> None:
    if importlib.util.find_spec(package) is None:
        raise ValueError(
            f"{block} is enabled but the {package} package is not installed: "
            f"pip install 'prime-rl[{extra}]' (or uv sync --extra {extra}), or disable {block}"
        )


class WandbConfig(StrictModel):
    """Weights & Biases: one run per process, grouped, each step's metrics logged at that step."""

    enabled: bool = False
    """Log every step's metrics to W&B (needs the optional extra: pip install 'prime-rl[wandb]')."""

    project: str = "prime-rl"
    """W&B project."""

    entity: str | None = None
    """W&B entity (user or team); default: W&B's (WANDB_ENTITY, else your default entity)."""

    name: str | None = None
    """Run name prefix; each process's run is <name>-<process>. Default: the output_dir's name."""

    group: str | None = None
    """W&B group that holds the trainer's and the orchestrator's runs. Default: the run name prefix."""

    mode: Literal["online", "offline", "disabled"] | None = None
    """online: upload as it runs; offline: write to disk only (upload later with `wandb sync`);
    disabled: log nothing. Default: W&B's (WANDB_MODE, else online)."""

    tags: list[str] = []
    """Tags of both runs."""

    dir: Path | None = None
    """Directory W&B writes its files under (a wandb/ folder is made in it). Default: WANDB_DIR
    when set, else the output_dir."""

    @model_validator(mode="after")
    def _installed(self) -> WandbConfig:
        if self.enabled:
            _require("wandb", "monitor.wandb", "wandb")
        return self


class TensorBoardConfig(StrictModel):
    """TensorBoard event files, one folder per process."""

    enabled: bool = False
    """Write every step's metrics as TensorBoard scalars (needs the optional extra: pip install
    'prime-rl[tensorboard]')."""

    log_dir: Path | None = None
    """Where the event files go, in <log_dir>/<process>/. Default: <output_dir>/tensorboard."""

    @model_validator(mode="after")
    def _installed(self) -> TensorBoardConfig:
        if self.enabled:
            _require("tensorboard", "monitor.tensorboard", "tensorboard")
        return self


class MonitorConfig(StrictModel):
    """Where per-step metrics go besides <output_dir>/metrics.jsonl (always written)."""

    wandb: WandbConfig = WandbConfig()
    """Weights & Biases (off by default)."""

    tensorboard: TensorBoardConfig = TensorBoardConfig()
    """TensorBoard (off by default)."""


class ProcessConfig(Protocol):
    """What :func:`record_metrics` reads of a process config (the trainer's, the orchestrator's)."""

    output_dir: Path
    monitor: MonitorConfig

    def model_dump(self, *, mode: str = ...) -> dict[str, Any]: ...


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The row's numeric values (booleans as 0/1), keyed ``<process>/<name>``; ``step`` and
    ``process`` left out, and so are None and non-numbers."""
    process = row.get("process", "metrics")
    out: dict[str, float] = {}
    for key, value in row.items():
        if key in ("process", "step") or value is None or isinstance(value, str):
            continue
        if isinstance(value, bool | int | float):
            out[f"{process}/{key}"] = float(value)
    return out


class Monitor:
    """One process's metrics sinks: metrics.jsonl plus the enabled backends."""

    def __init__(
        self, cfg: MonitorConfig, output_dir: Path, process: str, config: dict[str, Any] | None = None
    ):
        self.cfg, self.process = cfg, process
        self.paths = RunPaths(output_dir)
        self.paths.metrics_file.parent.mkdir(parents=True, exist_ok=True)
        self._wandb: Any = None
        self._tb: Any = None
        if cfg.wandb.enabled:
            self._wandb = self._start_wandb(Path(output_dir), config or {})
        if cfg.tensorboard.enabled:
            self._tb = self._start_tensorboard(Path(output_dir))

    def _start_wandb(self, output_dir: Path, config: dict[str, Any]) -> Any:
        import wandb

        w = self.cfg.wandb
        base = w.name or output_dir.resolve().name
        run_dir = w.dir if w.dir is not None else (None if os.environ.get("WANDB_DIR") else output_dir)
        if run_dir is not None:
            Path(run_dir).mkdir(parents=True, exist_ok=True)
        try:
            return wandb.init(
                project=w.project,
                entity=w.entity,
                name=f"{base}-{self.process}",
                group=w.group or base,
                job_type=self.process,
                tags=list(w.tags) or None,
                mode=w.mode,
                dir=str(run_dir) if run_dir is not None else None,
                config=config,
                reinit="create_new",
                # the processes' output goes to their logs already; W&B keeps its hands off the streams
                settings=wandb.Settings(console="off"),
            )
        except Exception as e:  # wandb raises its own errors (no credentials, network, bad entity)
            raise MonitorError(
                f"monitor.wandb: cannot start a W&B run (project {w.project!r}): {e}; "
                "log in (wandb login / WANDB_API_KEY) or set monitor.wandb.mode = 'offline'"
            ) from e

    def _start_tensorboard(self, output_dir: Path) -> Any:
        from torch.utils.tensorboard import SummaryWriter

        root = self.cfg.tensorboard.log_dir or output_dir / "tensorboard"
        try:
            return SummaryWriter(log_dir=str(Path(root) / self.process))
        except Exception as e:
            raise MonitorError(f"monitor.tensorboard: cannot write event files under {root}: {e}") from e

    def log(self, row: dict[str, Any]) -> None:
        """Append ``row`` to metrics.jsonl and send its numbers to the enabled backends at ``row['step']``."""
        with open(self.paths.metrics_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        values = scalars(row)
        step = int(row["step"])
        if self._wandb is not None:
            try:
                self._wandb.log(values, step=step)
            except Exception as e:
                logger.warning(f"monitor.wandb: logging step {step} failed ({e}); W&B logging stops here")
                self._wandb = None
        if self._tb is not None:
            try:
                for key, value in values.items():
                    if math.isfinite(value):
                        self._tb.add_scalar(key, value, step)
                self._tb.flush()
            except Exception as e:
                logger.warning(
                    f"monitor.tensorboard: writing step {step} failed ({e}); TensorBoard logging stops here"
                )
                self._tb = None

    def close(self) -> None:
        """Finish the W&B run and close the event files (idempotent)."""
        if self._wandb is not None:
            with contextlib.suppress(Exception):
                self._wandb.finish()
            self._wandb = None
        if self._tb is not None:
            with contextlib.suppress(Exception):
                self._tb.close()
            self._tb = None


_OPEN: dict[tuple[Path, str], Monitor] = {}


def record_metrics(cfg: ProcessConfig, row: dict[str, Any]) -> None:
    """Record one step's ``row`` (it names its ``process`` and ``step``) for the process configured
    by ``cfg``. The process's :class:`Monitor` is opened at its first row and closed at exit."""
    key = (Path(cfg.output_dir).resolve(), str(row["process"]))
    monitor = _OPEN.get(key)
    if monitor is None:
        monitor = Monitor(cfg.monitor, cfg.output_dir, key[1], config=cfg.model_dump(mode="json"))
        if not _OPEN:
            atexit.register(close_all)
        _OPEN[key] = monitor
    monitor.log(row)


def close_all() -> None:
    """Close every monitor :func:`record_metrics` opened (registered with ``atexit``)."""
    while _OPEN:
        _OPEN.popitem()[1].close()
