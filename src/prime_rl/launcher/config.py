"""The ``rl`` config: the keys the three processes share, set once, and one typed block per process.

``[inference]``, ``[orchestrator]`` and ``[trainer]`` are the processes' own configs
(:class:`InferenceConfig`, :class:`OrchestratorConfig`, :class:`TrainerConfig`), so an unknown or bad
key fails at load, named ``orchestrator.<key>``, and ``rl --help`` lists every block key. A block may
be partial: before the blocks are validated, the top-level keys fill them (:data:`SHARED`), and so
do a few values derived from another block (the orchestrator's server URL and served model name,
its checkpoint interval). A block key that contradicts the top-level key it repeats is an error
naming both; so are the cross-process disagreements the launcher cannot resolve.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, model_validator

from prime_rl.config import BaseConfig, ConfigError, OutputDir
from prime_rl.inference.config import InferenceConfig
from prime_rl.launcher.watchdog import WatchdogConfig
from prime_rl.monitor import MonitorConfig
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.paths import RunPaths
from prime_rl.trainer.config import TrainerConfig

BLOCKS = ("inference", "orchestrator", "trainer")

# top-level key -> the block keys it sets; a block that sets one too must agree with it
SHARED: dict[str, tuple[str, ...]] = {
    "output_dir": ("inference.output_dir", "orchestrator.output_dir", "trainer.output_dir"),
    "max_steps": ("orchestrator.max_steps", "trainer.max_steps"),
    "async_level": ("orchestrator.async_level", "trainer.async_level"),
    "seq_len": ("orchestrator.seq_len",),
    "trainer_nproc": ("orchestrator.trainer_world_size",),
    "startup_timeout_s": ("orchestrator.startup_timeout_s",),
    "monitor": ("orchestrator.monitor", "trainer.monitor"),
}

# top-level key -> block keys it only defaults: the server and the trainer may name the same
# weights differently (a hub name and a local copy), and the server's context may be longer
DEFAULTS: dict[str, tuple[str, ...]] = {
    "model": ("inference.model", "trainer.model.name"),
    "seq_len": ("inference.max_model_len",),
}


def _get(obj: Any, dotted: str, default: Any = None) -> Any:
    """The value at a dotted path in nested models or dicts (``default`` where there is none)."""
    for part in dotted.split("."):
        obj = obj.get(part, default) if isinstance(obj, dict) else getattr(obj, part, default)
    return obj


def _setdefault(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data[a][b]...`` unless it is set, copying the dicts on the way (they are the sources')."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = data.get(part, {})
        if not isinstance(child, dict):
            return  # not a mapping: validation says so
        data[part] = data = dict(child)
    data.setdefault(leaf, value)


class RLConfig(BaseConfig):
    """Run inference, orchestrator and trainer together on one machine.

    The top-level keys are set once for the three processes. Each block holds its process's own
    keys (inference --help, orchestrator --help, trainer --help). A block key that repeats a
    top-level one (output_dir, max_steps, async_level, seq_len, trainer_nproc, startup_timeout_s,
    monitor)
    takes its value and may only agree with it; model only fills inference.model and
    trainer.model.name, which may name the same weights by other paths.
    """

    process: ClassVar[str] = "rl"

    model: str = "models/tiny"
    """HF model directory or hub name: served, trained and requested by all three."""

    output_dir: OutputDir = Path("outputs/rl")
    """The shared run directory."""

    max_steps: int = Field(default=20, ge=1)
    """Training steps."""

    async_level: int = Field(default=1, ge=0)
    """Max policy lag of rollouts (0 = on-policy)."""

    seq_len: int = Field(default=2048, ge=2)
    """Max prompt + completion tokens (the server's max_model_len)."""

    trainer_nproc: int = Field(default=1, ge=1)
    """Trainer processes (torchrun --nproc-per-node) on this machine."""

    clean: bool = False
    """Delete an earlier run's rollouts, weights, checkpoints and metrics in output_dir first."""

    resume: bool = False
    """Resume from the latest checkpoint that both trainer and orchestrator completed."""

    startup_timeout_s: float = Field(default=900.0, gt=0)
    """How long the orchestrator waits for the inference server to come up."""

    monitor: MonitorConfig = MonitorConfig()
    """Per-step metrics of trainer and orchestrator to Weights & Biases and TensorBoard besides
    metrics.jsonl (both off by default); set here once for both."""

    watchdog: WatchdogConfig = WatchdogConfig()
    """The hang watchdog: when no process makes progress for a multiple of the median step time, one
    [hang] line naming who waits on whom, and every child's Python stacks in its log."""

    print_commands: bool = False
    """Print the three commands the launcher would run (inference, trainer, orchestrator, with every
    resolved key that differs from its default as a flag) and exit, starting nothing: to run the
    processes separately, e.g. one terminal each (docs/deploy.md)."""

    # no defaults: _fill_blocks always builds them (a default would be merged into the block as if set)
    inference: InferenceConfig
    """The inference server (inference --help)."""

    orchestrator: OrchestratorConfig
    """The orchestrator (orchestrator --help)."""

    trainer: TrainerConfig
    """The trainer (trainer --help)."""

    @model_validator(mode="before")
    @classmethod
    def _fill_blocks(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = {**data, **{name: data.get(name) or {} for name in BLOCKS}}
        root = {key: data.get(key, cls.model_fields[key].default) for key in {*SHARED, *DEFAULTS}}
        for table in (SHARED, DEFAULTS):
            for key, targets in table.items():
                for target in targets:
                    _setdefault(data, target, root[key])
        host = _get(data, "inference.host", InferenceConfig.model_fields["host"].default)
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        port = _get(data, "inference.port", InferenceConfig.model_fields["port"].default)
        _setdefault(data, "orchestrator.client.base_urls", [f"http://{host}:{port}"])
        served = _get(data, "inference.served_model_name") or _get(data, "inference.model")
        _setdefault(data, "orchestrator.model", served)
        if _get(data, "trainer.ckpt.interval") is not None:
            _setdefault(data, "orchestrator.ckpt_interval", _get(data, "trainer.ckpt.interval"))
        return data

    @model_validator(mode="after")
    def _resume_or_clean(self) -> RLConfig:
        if self.resume and self.clean:
            raise ValueError(
                "--resume and --clean contradict each other: --resume continues the run, --clean deletes it"
            )
        if self.print_commands and (self.resume or self.clean):
            raise ValueError(
                "--print-commands prints the commands of a fresh run; --resume and --clean prepare the "
                "run directory, which only a launching rl does (run rl with them, or start each process "
                "with --resume yourself)"
            )
        return self

    @model_validator(mode="after")
    def _check_agreement(self) -> RLConfig:
        inference, orchestrator, trainer = self.inference, self.orchestrator, self.trainer
        problems = [
            f"{target} = {_get(self, target)} contradicts {key} = {getattr(self, key)}: set {key} once, at the top level"
            for key, targets in SHARED.items()
            for target in targets
            if _get(self, target) != getattr(self, key)
        ]
        if orchestrator.ckpt_interval != trainer.ckpt.interval:
            problems.append(
                f"checkpoint interval: orchestrator has {orchestrator.ckpt_interval}, trainer has {trainer.ckpt.interval}"
            )
        for arg in inference.vllm_args:
            flag = arg.split("=", 1)[0]
            # argparse also takes unambiguous abbreviations (--ho, --por)
            hit = [f for f in ("--host", "--port") if len(flag) >= 4 and f.startswith(flag)]
            if hit:
                problems.append(
                    f"inference.vllm_args sets {hit[0]} ({arg!r}): set inference.{hit[0][2:]} instead "
                    "(the launcher checks that port and points the orchestrator at that address)"
                )
        served = inference.served_model_name or inference.model
        if orchestrator.model != served:
            problems.append(
                f"orchestrator.model {orchestrator.model!r} is not the served model name {served!r}"
            )
        if inference.max_model_len and inference.max_model_len < orchestrator.seq_len:
            problems.append(
                f"inference.max_model_len {inference.max_model_len} < seq_len {orchestrator.seq_len}"
            )
        weights_root = RunPaths(trainer.output_dir).weights_root
        if inference.resolved_weights_root.resolve() != weights_root.resolve():
            problems.append(
                f"inference.weights_root {inference.resolved_weights_root} is not the trainer's {weights_root}"
            )
        if problems:
            raise ValueError("inconsistent rl config:\n    " + "\n    ".join(problems))
        return self


# a hub repo id: org/name, each part letters, digits, '-', '_', '.' (not first), no '..' or '--'
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def model_path_problem(name: str) -> str | None:
    """Why ``name`` cannot be loaded as a model, or None when it may be.

    An existing path must be a readable directory holding a readable ``config.json``. A missing one
    is an error unless it has the shape of a hub name, ``org/name``, which the loaders take from the
    hub cache (or download). A missing name looks local, and is an error, when it starts with ``.``,
    ``/`` or ``~``, has no ``/`` or more than one, or its first part is an existing directory
    (``models/tny`` where ``models/`` exists).
    """
    try:
        path = Path(name).expanduser()
        exists = path.exists()
    except (OSError, RuntimeError) as e:  # a path too long, a parent we may not search, ~nobody
        return f"model directory {name}: {getattr(e, 'strerror', None) or e}"
    if exists:
        if not path.is_dir():
            return f"model {name}: not a directory"
        if not os.access(path, os.R_OK | os.X_OK):
            return f"model directory {name}: not readable"
        config = path / "config.json"
        if not config.is_file():
            return f"model directory {name}: no config.json (not a Hugging Face model directory)"
        if not os.access(config, os.R_OK):
            return f"model directory {name}: {config.name} not readable"
        return None
    hub_shaped = (
        _HUB_ID.match(name) is not None
        and ".." not in name
        and "--" not in name
        and not os.path.isdir(name.split("/")[0])
    )
    if hub_shaped:
        return None
    return f"model directory {name}: not found (a hub model is named org/name)"


def check_models(cfg: RLConfig) -> None:
    """Refuse, before anything starts, a model the server or the trainer cannot load (one line)."""
    for key, name in (
        ("inference.model", cfg.inference.model),
        ("trainer.model.name", cfg.trainer.model.name),
    ):
        if problem := model_path_problem(name):
            where = "" if name == cfg.model else f" ({key})"
            raise ConfigError(problem + where)
