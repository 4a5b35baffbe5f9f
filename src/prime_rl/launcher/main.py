"""``rl``: one config for inference + orchestrator + trainer, validated once, then supervised.

The shared blocks (``model``, ``output_dir``, ``max_steps``, ``async_level``, ``seq_len``) are
set once; ``[inference]``, ``[orchestrator]`` and ``[trainer]`` hold each process's own keys
(see ``inference --help`` etc.). The launcher builds the three configs, checks that they agree,
writes them to ``<output_dir>/configs/``, starts the processes (the trainer under torchrun when
``trainer_nproc > 1``), and supervises them. When one dies, the others are stopped, and it exits
non-zero naming the process and printing the end of its log. Ctrl-C stops everything.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from loguru import logger
from pydantic import Field, ValidationError

from prime_rl.config import BaseConfig, ConfigError, deep_merge, parse_config
from prime_rl.inference.config import InferenceConfig
from prime_rl.logging import setup_logging
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.paths import RunPaths, atomic_write_json, complete_checkpoint_steps, step_dirs
from prime_rl.trainer.config import TrainerConfig
from prime_rl.trainer.main import command as trainer_command

_ECHO = re.compile(r"\| (WARNING|ERROR|CRITICAL)|\| step \d+ \||Traceback")


class RLConfig(BaseConfig):
    """Run inference, orchestrator and trainer together on one machine."""

    process: ClassVar[str] = "rl"

    model: str = "models/tiny"
    """HF model directory or hub name: served, trained and requested by all three."""

    output_dir: Path = Path("outputs/rl")
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

    inference: dict[str, Any] = {}
    """Keys of the inference config (inference --help), e.g. {"port": 8000, "enforce_eager": true}."""

    orchestrator: dict[str, Any] = {}
    """Keys of the orchestrator config (orchestrator --help), e.g. {"batch_size": 64}."""

    trainer: dict[str, Any] = {}
    """Keys of the trainer config (trainer --help), e.g. {"optim": {"lr": 3e-3}}."""


@dataclass
class Plan:
    inference: InferenceConfig
    orchestrator: OrchestratorConfig
    trainer: TrainerConfig


def _build(cls: type[BaseConfig], block: str, values: dict[str, Any]) -> Any:
    try:
        return cls.model_validate(values)
    except ValidationError as e:
        lines = [f"[{block}] {'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()]
        raise ConfigError("invalid rl config:\n  " + "\n  ".join(lines)) from None


def plan(cfg: RLConfig) -> Plan:
    """Build the three configs from the root one and check that they agree."""
    out = str(cfg.output_dir)
    inference = _build(
        InferenceConfig,
        "inference",
        deep_merge({"model": cfg.model, "output_dir": out, "max_model_len": cfg.seq_len}, cfg.inference),
    )
    host = "127.0.0.1" if inference.host in ("0.0.0.0", "::", "") else inference.host
    served = inference.served_model_name or inference.model
    orchestrator = _build(
        OrchestratorConfig,
        "orchestrator",
        deep_merge(
            {
                "model": served,
                "output_dir": out,
                "max_steps": cfg.max_steps,
                "async_level": cfg.async_level,
                "seq_len": cfg.seq_len,
                "trainer_world_size": cfg.trainer_nproc,
                "startup_timeout_s": cfg.startup_timeout_s,
                "client": {"base_urls": [f"http://{host}:{inference.port}"]},
            },
            cfg.orchestrator,
        ),
    )
    trainer = _build(
        TrainerConfig,
        "trainer",
        deep_merge(
            {
                "model": {"name": cfg.model},
                "output_dir": out,
                "max_steps": cfg.max_steps,
                "async_level": cfg.async_level,
            },
            cfg.trainer,
        ),
    )
    if orchestrator.ckpt_interval is None and trainer.ckpt.interval is not None:
        orchestrator = orchestrator.model_copy(update={"ckpt_interval": trainer.ckpt.interval})
    problems = []
    pairs = [
        ("max_steps", orchestrator.max_steps, trainer.max_steps),
        ("async_level", orchestrator.async_level, trainer.async_level),
        ("output_dir", Path(orchestrator.output_dir), Path(trainer.output_dir)),
        ("checkpoint interval", orchestrator.ckpt_interval, trainer.ckpt.interval),
    ]
    for name, o, t in pairs:
        if o != t:
            problems.append(f"{name}: orchestrator has {o}, trainer has {t}")
    if orchestrator.model != served:
        problems.append(f"orchestrator.model {orchestrator.model!r} is not the served model name {served!r}")
    if orchestrator.trainer_world_size != cfg.trainer_nproc:
        problems.append(
            f"orchestrator.trainer_world_size {orchestrator.trainer_world_size} != trainer_nproc {cfg.trainer_nproc}"
        )
    if inference.max_model_len and inference.max_model_len < orchestrator.seq_len:
        problems.append(f"inference.max_model_len {inference.max_model_len} < seq_len {orchestrator.seq_len}")
    if inference.resolved_weights_root.resolve() != RunPaths(trainer.output_dir).weights_root.resolve():
        problems.append(
            f"inference.weights_root {inference.resolved_weights_root} is not the trainer's {RunPaths(trainer.output_dir).weights_root}"
        )
    if problems:
        raise ConfigError("inconsistent rl config:\n  " + "\n  ".join(problems))
    return Plan(inference, orchestrator, trainer)


class Child:
    """One supervised process; its output goes to a log file, step lines and errors to the console."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str]):
        self.name, self.log_path = name, log_path
        self.quiet = False  # set while stopping: shutdown noise goes to the log file only
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            text=True,
            errors="replace",
        )
        self._pump = threading.Thread(target=self._copy, daemon=True)
        self._pump.start()

    def _copy(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path, "a", encoding="utf-8") as f:
            for line in self.proc.stdout:
                f.write(line)
                f.flush()
                if not self.quiet and _ECHO.search(line):
                    sys.stdout.write(f"[{self.name}] {line}")
                    sys.stdout.flush()

    def tail(self, n: int = 25) -> str:
        self._pump.join(timeout=2)
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<no output>"

    def stop(self, timeout_s: float = 15.0) -> None:
        self.quiet = True
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def prepare_run_dir(cfg: RLConfig) -> int | None:
    """Check (and on --clean, wipe) the run directory; on --resume, return the step to resume at."""
    paths = RunPaths(cfg.output_dir)
    leftovers = [
        p
        for p in (paths.rollouts_root, paths.weights_root, paths.checkpoints_root)
        if p.is_dir() and any(p.iterdir())
    ]
    if cfg.resume:
        steps = complete_checkpoint_steps(paths.checkpoints_root, "trainer", "orchestrator")
        if not steps:
            raise ConfigError(
                f"--resume: no checkpoint under {paths.checkpoints_root} that both trainer and orchestrator completed"
            )
        step = steps[-1]
        # what the crashed run produced after that checkpoint is regenerated, never consumed
        for s, d in step_dirs(paths.rollouts_root).items():
            if s >= step:
                shutil.rmtree(d)
        for s, d in step_dirs(paths.weights_root).items():
            if s > step:
                shutil.rmtree(d)
        return step
    if leftovers and not cfg.clean:
        raise ConfigError(
            f"{cfg.output_dir} holds an earlier run ({', '.join(p.name for p in leftovers)}): "
            "pass --resume to continue it or --clean to start over"
        )
    if cfg.clean:
        for p in leftovers:
            shutil.rmtree(p)
        paths.metrics_file.unlink(missing_ok=True)
    return None


def launch(cfg: RLConfig, p: Plan) -> int:
    paths = RunPaths(cfg.output_dir)
    resume_step = prepare_run_dir(cfg)
    if resume_step is not None:
        p.orchestrator = p.orchestrator.model_copy(update={"resume": {"enabled": True, "step": resume_step}})
        p.trainer = p.trainer.model_copy(update={"resume": {"enabled": True, "step": resume_step}})
        logger.info(f"resuming at step {resume_step}")
    for name, c in (("inference", p.inference), ("orchestrator", p.orchestrator), ("trainer", p.trainer)):
        atomic_write_json(paths.configs_dir / f"rl_{name}_input.json", _dump_for_child(c))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if p.inference.admin_token is not None:  # the inference server and the admin client read it from here
        env["PRIME_ADMIN_TOKEN"] = p.inference.admin_token.get_secret_value()
    py = sys.executable
    trainer_argv = trainer_command(
        cfg.trainer_nproc, ["--config", str(paths.configs_dir / "rl_trainer_input.json")]
    )
    children: list[Child] = []
    stopping = threading.Event()

    def on_signal(signum, _frame):
        stopping.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        children.append(
            Child(
                "inference",
                [
                    py,
                    "-m",
                    "prime_rl.inference.main",
                    "--config",
                    str(paths.configs_dir / "rl_inference_input.json"),
                ],
                paths.logs_dir / "inference.stdout.log",
                env,
            )
        )
        children.append(Child("trainer", trainer_argv, paths.logs_dir / "trainer" / "stdout.log", env))
        children.append(
            Child(
                "orchestrator",
                [
                    py,
                    "-m",
                    "prime_rl.orchestrator.main",
                    "--config",
                    str(paths.configs_dir / "rl_orchestrator_input.json"),
                ],
                paths.logs_dir / "orchestrator.stdout.log",
                env,
            )
        )
        by_name = {c.name: c for c in children}
        logger.info(
            f"started inference, trainer ({cfg.trainer_nproc} process(es)) and orchestrator; logs in {paths.logs_dir}"
        )
        while not stopping.is_set():
            time.sleep(0.5)
            for c in children:
                code = c.proc.poll()
                if code is None:
                    continue
                if c.name == "orchestrator" and code == 0:
                    trainer = by_name["trainer"]
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        trainer.proc.wait(timeout=600)
                    if trainer.proc.returncode == 0:
                        logger.info(f"run complete: {cfg.max_steps} steps; metrics in {paths.metrics_file}")
                        return 0
                    c = trainer
                    code = trainer.proc.returncode
                elif c.name == "trainer" and code == 0:
                    continue  # done training; the orchestrator finishes its last step
                logger.error(
                    f"{c.name} exited with code {code}; stopping the others. Last lines of {c.log_path}:\n{c.tail()}"
                )
                return 1
        logger.warning("interrupted: stopping every process")
        return 130
    finally:
        for c in children:
            c.quiet = True
        for c in reversed(children):
            c.stop()
        for s, h in old.items():
            signal.signal(s, h)


def _dump_for_child(c: BaseConfig) -> dict[str, Any]:
    data = c.model_dump(mode="json")
    for key in ("admin_token", "api_key"):  # secrets travel by env var, never in a file
        data.pop(key, None)
    if isinstance(data.get("client"), dict):
        data["client"].pop("api_key", None)
        if isinstance(data["client"].get("admin"), dict):
            data["client"]["admin"].pop("token", None)
    return data


def main(argv: list[str] | None = None) -> None:
    cfg, _ = parse_config(RLConfig, argv)
    paths = RunPaths(cfg.output_dir)
    setup_logging(paths.log_file("rl"))
    try:
        p = plan(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    cfg.write_resolved(paths.config_file("rl"))
    try:
        code = launch(cfg, p)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code)


if __name__ == "__main__":
    main()
