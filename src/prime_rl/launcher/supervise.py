"""Start inference, trainer and orchestrator and supervise them until the run ends.

The run directory is locked first (:func:`~prime_rl.launcher.rundir.lock_run_dir`) and the
inference port checked free. Each child runs in its own session (process group) with its output
in a log file; step lines and errors are echoed to the console. A child's group is stopped as a
whole (:func:`prime_rl.lifecycle.stop_group`: SIGTERM, SIGKILL after a grace period), also when
its leader has exited already, so vLLM's engine processes go with it. Each child watches the
launcher (:func:`prime_rl.lifecycle.watch_launcher`) and takes its group down when the launcher
dies, SIGKILL included. When one child dies (or cannot be started) the others are stopped and
:func:`launch` returns 1 naming it, the error its log ends with, and the end of its log; Ctrl-C or
SIGTERM stops everything (130); a finished run returns 0. Before it stops the others for a child's
exit, and before it stops everything when interrupted, it logs one tagged line
(``[launcher] child.exit process= code= up_s=``, ``[launcher] interrupted up_s=``; docs/design.md):
the others ran up to it (the child that exited, up to one poll of 0.5 s before it), which the
analyzer takes as the end of a run that crashed (:func:`prime_rl.analysis.hangs.down_after_hangs`).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from loguru import logger

from prime_rl.config import BaseConfig, ConfigError
from prime_rl.launcher import progress
from prime_rl.launcher.config import RLConfig, check_models
from prime_rl.launcher.rundir import RunComplete, check_unfinished, lock_run_dir, prepare_run_dir
from prime_rl.launcher.watchdog import Hang, Watchdog
from prime_rl.lifecycle import dump_stacks, launcher_env, stop_group
from prime_rl.logging import log_tagged
from prime_rl.paths import RunPaths, atomic_write_json
from prime_rl.trainer.main import command as trainer_command

C = TypeVar("C", bound=BaseConfig)

_ECHO = re.compile(r"\| (WARNING|ERROR|CRITICAL)|\| step \d+ \||Traceback")
# the line that says why a process died: an exception (``OSError: [Errno 98] ...``) or an error log line
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)")
_ERROR_LINE = re.compile(r"\| (?:ERROR|CRITICAL)\s*\|")


class StartError(RuntimeError):
    """A child could not be started."""


def _console(text: str, stream: Any = None) -> None:
    """Write to the console; a console that is gone (closed pipe) must not stop a log pump."""
    stream = stream or sys.stdout
    with contextlib.suppress(OSError, ValueError):
        progress.write(text, stream)  # above the live progress bar, when one is shown


class Child:
    """One supervised process; its output goes to a log file, step lines and errors to the console."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        env: dict[str, str],
        pass_fds: tuple[int, ...] = (),
    ):
        """Start ``argv`` in a session of its own; ``env`` gains the launcher's PID, which the child
        watches (:func:`prime_rl.lifecycle.watch_launcher`). ``pass_fds`` are inherited (the run
        directory's lock). Raises :class:`StartError` when the process cannot be started."""
        self.name, self.log_path = name, log_path
        self.quiet = False  # set while stopping: shutdown noise goes to the log file only
        self.log_error: OSError | None = None  # why the log file could not be written, if it could not
        self.watch: Callable[[str, str], None] | None = None  # sees every line (the hang watchdog)
        self._recent: collections.deque[str] = collections.deque(maxlen=200)  # for tail() without a log
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self.proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**env, **launcher_env()},
                start_new_session=True,
                pass_fds=pass_fds,
                text=True,
                errors="replace",
            )
        except OSError as e:
            raise StartError(f"cannot start {name} ({argv[0]}): {e}") from e
        self._pump = threading.Thread(target=self._copy, daemon=True)
        self._pump.start()

    def _copy(self) -> None:
        """Copy the child's output to its log file, echoing step lines and errors to the console.

        The pipe is drained to the end whatever happens, so the child never blocks on a full pipe:
        if the log file cannot be written (a full disk), that is reported once on the console, the
        file is given up, and the echo goes on; :meth:`tail` then shows the lines kept in memory.
        """
        assert self.proc.stdout is not None
        f = None
        try:
            f = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 (closed in the finally below, errors kept)
        except OSError as e:
            self._log_failed(e)
        try:
            for line in self.proc.stdout:
                self._recent.append(line)
                if self.watch is not None:
                    self.watch(self.name, line)
                if f is not None:
                    try:
                        f.write(line)
                        f.flush()
                    except OSError as e:
                        self._log_failed(e)
                        with contextlib.suppress(OSError):
                            f.close()
                        f = None
                if not self.quiet and _ECHO.search(line):
                    _console(f"[{self.name}] {line}")
        finally:
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()

    def _log_failed(self, e: OSError) -> None:
        self.log_error = e
        what = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else type(e).__name__
        _console(
            f"[rl] cannot write {self.name}'s log {self.log_path} ({what}: {e.strerror or e}); "
            "its output is no longer saved, errors are still shown here\n",
            stream=sys.stderr,
        )

    def tail(self, n: int = 25) -> str:
        self._pump.join(timeout=2)
        if self.log_error is None:
            try:
                return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
            except OSError:
                pass
        lines = list(self._recent)[-n:]
        return "".join(lines).rstrip("\n") if lines else "<no output>"

    def reason(self) -> str | None:
        """The last line of the output that says why the process died: an exception or an error."""
        self._pump.join(timeout=2)
        found = [
            line.strip()
            for line in self._recent
            if _EXCEPTION.search(line.strip()) or _ERROR_LINE.search(line)
        ]
        return found[-1][:300] if found else None

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the child's whole process group (SIGTERM, SIGKILL after ``timeout_s``) and reap it.

        Also when the child itself has exited: the processes it started (vLLM's engine and
        workers) are in its group and would otherwise run on.
        """
        self.quiet = True
        stop_group(self.proc.pid, timeout_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def with_resume(c: C, step: int) -> C:
    """A copy of a child's config that resumes at ``step``, validated as the child will load it.

    Not ``model_copy(update=...)``: that validates nothing, so a dict given for the ``resume`` model
    field stayed a dict and pydantic warned ("Expected `ResumeConfig`") on every dump.
    """
    return type(c).model_validate({**c.model_dump(), "resume": {"enabled": True, "step": step}})


def _dump_for_child(c: BaseConfig) -> dict[str, Any]:
    data = c.model_dump(mode="json")
    for key in ("admin_token", "api_key"):  # secrets travel by env var, never in a file
        data.pop(key, None)
    if isinstance(data.get("client"), dict):
        data["client"].pop("api_key", None)
        if isinstance(data["client"].get("admin"), dict):
            data["client"]["admin"].pop("token", None)
    return data


def _child_env(cfg: RLConfig) -> dict[str, str]:
    """The children's environment: ours, unbuffered output, and the secrets the files leave out."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    secrets = {
        "PRIME_ADMIN_TOKEN": cfg.inference.admin_token,  # the server and the orchestrator's admin client
        "PRIME_CLIENT__API_KEY": cfg.orchestrator.client.api_key,
    }
    env.update({name: s.get_secret_value() for name, s in secrets.items() if s is not None})
    return env


def check_port_free(host: str, port: int) -> None:
    """Refuse (:class:`ConfigError`) when the inference server could not bind ``host:port``.

    Bound as vLLM binds it (``SO_REUSEADDR``), so a port that only has connections in TIME_WAIT
    counts as free; one that something listens on (an earlier run's server still running) does not.
    """
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return  # the server will say what is wrong with the host
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            raise ConfigError(
                f"inference cannot start: port {port} on {host or '0.0.0.0'} is in use ({e.strerror}); "
                "is an earlier run's server still running? Stop it or set --inference.port"
            ) from None


def _report_hang(hang: Hang, children: list[Child], stacks: bool) -> None:
    """One ``[hang] detected`` line, the story on the console, and every child's stacks in its log."""
    log_tagged(
        "hang",
        "detected",
        silent_s=round(hang.silent_s, 1),
        threshold_s=round(hang.threshold_s, 1),
        median_step_s=round(hang.median_step_s, 3) if hang.median_step_s is not None else "unknown",
        waits=",".join(w.code for w in hang.waits) or "none",
    )
    logger.warning(f"the run seems to hang: {hang.describe(time.monotonic())}")
    if stacks:
        dumped = [(c, dump_stacks(c.proc.pid)) for c in children if c.proc.poll() is None]
        where = "; ".join(
            f"{c.name} (pid {', '.join(map(str, pids))}) into {c.log_path}" for c, pids in dumped if pids
        )
        logger.warning(f"Python stacks dumped: {where or 'no process could dump its stacks'}")


TRAINER_FINISH_S = 600.0
"""How long the trainer may take to exit after the orchestrator finished its last step (its last
weight write, its checkpoint) before the run counts as failed and it is stopped."""


def _up_s(started: float) -> float:
    """Seconds since the launcher started its children (``started``: ``time.monotonic()`` then)."""
    return round(time.monotonic() - started, 3)


def launch(cfg: RLConfig, lock_fd: int | None = None) -> int:
    """Lock and prepare the run directory, write the three configs, start the processes and
    supervise them. ``lock_fd``: the run directory's lock when the caller holds it already."""
    check_models(cfg)
    if lock_fd is None:
        with lock_run_dir(cfg.output_dir) as fd:
            return _launch(cfg, fd)
    return _launch(cfg, lock_fd)


def _launch(cfg: RLConfig, lock_fd: int) -> int:
    paths = RunPaths(cfg.output_dir)
    try:
        check_unfinished(cfg)
        check_port_free(cfg.inference.host, cfg.inference.port)  # before the run directory is changed
        resume_step = prepare_run_dir(cfg)
    except RunComplete as done:
        logger.info(str(done))
        return 0
    configs: dict[str, BaseConfig] = {
        "inference": cfg.inference,
        "orchestrator": cfg.orchestrator,
        "trainer": cfg.trainer,
    }
    if resume_step is not None:
        for name in ("orchestrator", "trainer"):
            configs[name] = with_resume(configs[name], resume_step)
        logger.info(f"resuming at step {resume_step}")
    cfg.write_resolved(paths.config_file("rl"))
    for name, c in configs.items():
        atomic_write_json(paths.configs_dir / f"rl_{name}_input.json", _dump_for_child(c))
    env = _child_env(cfg)

    def module(name: str) -> list[str]:
        config_file = str(paths.configs_dir / f"rl_{name}_input.json")
        return [sys.executable, "-m", f"prime_rl.{name}.main", "--config", config_file]

    trainer_argv = trainer_command(
        cfg.trainer_nproc, ["--config", str(paths.configs_dir / "rl_trainer_input.json")]
    )
    children: list[Child] = []
    bar: progress.Progress | None = None  # the progress line, once the processes run
    dog = (
        Watchdog(cfg.watchdog, paths, first_step=resume_step or 0, async_level=cfg.orchestrator.async_level)
        if cfg.watchdog.enabled
        else None
    )
    stopping = threading.Event()

    def on_signal(signum, _frame):
        stopping.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    fds = (lock_fd,)  # the children hold the run directory's lock too: it lasts as long as any of them
    started = time.monotonic()  # the children's start: ``up_s`` of the [launcher] lines
    try:
        try:
            children.append(
                Child("inference", module("inference"), paths.logs_dir / "inference.stdout.log", env, fds)
            )
            children.append(
                Child("trainer", trainer_argv, paths.logs_dir / "trainer" / "stdout.log", env, fds)
            )
            children.append(
                Child(
                    "orchestrator",
                    module("orchestrator"),
                    paths.logs_dir / "orchestrator.stdout.log",
                    env,
                    fds,
                )
            )
        except StartError as e:
            logger.error(f"{e}; stopping the others")
            return 1
        by_name = {c.name: c for c in children}
        for c in children:
            c.watch = dog.feed if dog is not None else None
        logger.info(
            f"started inference, trainer ({cfg.trainer_nproc} process(es)) and orchestrator; logs in {paths.logs_dir}"
        )
        bar = progress.Progress(paths.metrics_file, cfg.max_steps, resume_step or 0, stream=sys.stdout)
        while not stopping.is_set():
            time.sleep(0.5)
            bar.poll()
            hang = dog.check() if dog is not None else None
            if hang is not None:
                _report_hang(hang, children, cfg.watchdog.dump_stacks)
            for c in children:
                code = c.proc.poll()
                if code is None:
                    continue
                if c.name == "orchestrator" and code == 0:
                    trainer = by_name["trainer"]
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        trainer.proc.wait(timeout=TRAINER_FINISH_S)
                    if trainer.proc.returncode == 0:
                        logger.info(f"run complete: {cfg.max_steps} steps; metrics in {paths.metrics_file}")
                        return 0
                    c = trainer
                    code = trainer.proc.returncode
                elif c.name == "trainer" and code == 0:
                    continue  # done training; the orchestrator finishes its last step
                # code None: the trainer had not exited TRAINER_FINISH_S after the orchestrator finished (no code=)
                exited = {"code": code} if code is not None else {}
                log_tagged("launcher", "child.exit", process=c.name, **exited, up_s=_up_s(started))
                why = c.reason()
                how = (
                    f"exited with code {code}"
                    if code is not None
                    else f"did not exit {TRAINER_FINISH_S:g} s after the orchestrator finished"
                )
                logger.error(
                    f"{c.name} {how}{f': {why}' if why else ''}; stopping the others. "
                    f"Last lines of {c.log_path}:\n{c.tail()}"
                )
                return 1
        log_tagged("launcher", "interrupted", up_s=_up_s(started))
        logger.warning("interrupted: stopping every process")
        return 130
    finally:
        if bar is not None:
            bar.poll()
            bar.close()
        for c in children:
            c.quiet = True
        for c in reversed(children):
            c.stop()
        for s, h in old.items():
            signal.signal(s, h)
