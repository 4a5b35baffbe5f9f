"""``rl --print-commands``: the three command lines ``rl`` would run, as flags, for separate terminals.

Each command is the process's console script (``inference``, ``trainer`` (under ``torchrun`` when
``trainer_nproc > 1``), ``orchestrator``) followed by one flag per key of its resolved block that
differs from that process's own default: ``--output_dir DIR``, ``--sampling.max_tokens 12``,
``--flag`` / ``--no-flag``, lists and mappings as JSON, ``none`` for null. Loading those flags
gives back the block ``rl`` resolved (a test checks it). Secrets never appear: a configured admin
token or API key is named by the environment variable the processes read instead.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from pydantic import BaseModel, SecretStr

from prime_rl.config import BaseConfig
from prime_rl.launcher.config import RLConfig

# the environment variable each process reads a secret from, by dotted key of its config
SECRET_ENV = {
    "inference": {"admin_token": "PRIME_ADMIN_TOKEN"},
    "orchestrator": {"client.admin.token": "PRIME_ADMIN_TOKEN", "client.api_key": "PRIME_CLIENT__API_KEY"},
    "trainer": {},
}


def _flag_value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list | dict | tuple):
        return json.dumps(value)
    return str(value)


def _plain_list(value: Any) -> bool:
    """Whether the command-line parser reads ``value`` back from a JSON list unchanged.

    Its list parsing splits the text itself: it keeps JSON escapes (``"\\n"`` stays two characters)
    and trims whitespace, so a list holding such strings travels inside its block's JSON instead.
    """
    return all(not isinstance(v, str) or _PLAIN.fullmatch(v) for v in value)


_PLAIN = re.compile(r"[^\s,\"'\\\[\]{}]+")


def config_flags(cfg: BaseConfig, skip: set[str] = frozenset()) -> list[str]:
    """Flags that rebuild ``cfg`` from its class's defaults (keys in ``skip``, dotted, left out)."""
    data = cfg.model_dump(mode="json", exclude_defaults=True)
    flags: list[str] = []

    def walk(node: dict[str, Any], model: Any, prefix: str) -> None:
        as_json: dict[str, Any] = {}  # lists the parser would change: given as the block's JSON
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if dotted in skip:
                continue
            sub = getattr(model, key, None)
            if isinstance(value, dict) and isinstance(sub, BaseModel):  # a block: its keys one by one
                walk(value, sub, f"{dotted}.")
            elif isinstance(value, bool):
                flags.append(f"--{dotted}" if value else f"--no-{dotted}")
            elif isinstance(value, list) and prefix and not _plain_list(value):
                as_json[key] = value
            else:
                flags.extend([f"--{dotted}", _flag_value(value)])
        if as_json:
            flags.extend([f"--{prefix.rstrip('.')}", json.dumps(as_json)])

    walk(data, cfg, "")
    return flags


def _secret_set(cfg: BaseConfig, dotted: str) -> bool:
    obj: Any = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return isinstance(obj, SecretStr)


def process_commands(cfg: RLConfig) -> dict[str, list[str]]:
    """argv of each process, by name, in start order (inference, trainer, orchestrator)."""
    out: dict[str, list[str]] = {}
    for name in ("inference", "trainer", "orchestrator"):
        block: BaseConfig = getattr(cfg, name)
        flags = config_flags(block, skip=set(SECRET_ENV[name]))
        if name == "trainer" and cfg.trainer_nproc > 1:
            head = [
                "torchrun",
                "--standalone",
                f"--nproc-per-node={cfg.trainer_nproc}",
                "-m",
                "prime_rl.trainer.main",
            ]
        else:
            head = [name]
        out[name] = head + flags
    return out


def secret_env_names(cfg: RLConfig) -> list[str]:
    """The environment variables the commands need because a secret is configured."""
    names = {
        env
        for name, keys in SECRET_ENV.items()
        for dotted, env in keys.items()
        if _secret_set(getattr(cfg, name), dotted)
    }
    return sorted(names)


def render_commands(cfg: RLConfig) -> str:
    """The text ``rl --print-commands`` prints: one shell line per process, in start order."""
    lines = [
        f"# {cfg.output_dir}: start each command in its own terminal (any order; the orchestrator waits",
        "# for the server, the trainer for rollouts). Logs: <output_dir>/logs/; stop with Ctrl-C in each.",
    ]
    for env in secret_env_names(cfg):
        lines.append(f"# a secret is configured: export {env}=... in the shell of inference and orchestrator")
    for argv in process_commands(cfg).values():
        lines.append(shlex.join(argv))
    return "\n".join(lines) + "\n"
