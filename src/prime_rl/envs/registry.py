"""Environments by name: the built-ins, and any ``module:Class`` or ``path/to/file.py:Class``.

The built-in table maps a name to an import path, so this module imports no environment until
one is asked for (reasoning_gym and math_verify are slow to import), and the environments
import only :mod:`prime_rl.envs.base`: there is no import cycle. Verifier worker processes
rebuild an environment from the same name and JSON options (see :mod:`prime_rl.envs.verify`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prime_rl.envs.base import EnvError, Environment

BUILTIN: dict[str, str] = {
    "toy": "prime_rl.envs.toy:VowelEnv",
    "guess": "prime_rl.envs.guess:GuessEnv",
    "math": "prime_rl.envs.math_qa:MathQAEnv",
    "math_tool": "prime_rl.envs.tool_env:MathToolEnv",
    "reasoning_gym": "prime_rl.envs.reasoning_gym_env:ReasoningGymEnv",
    # a verifiers (0.4.x) taskset/env; needs the optional verifiers package
    "verifiers": "prime_rl.envs.verifiers_adapter:VerifiersEnv",
}
"""Registered names and the ``module:Class`` each one builds."""


def available() -> list[str]:
    """The registered environment names."""
    return sorted(BUILTIN)


def check_name(name: str) -> str:
    """``name`` when it is a registered name or an import path (``module:Class``, ``file.py:Class``,
    resolved only when built); :class:`EnvError` listing the registered names otherwise."""
    if ":" not in name and name not in BUILTIN:
        raise EnvError(
            f"unknown environment {name!r}; available: {', '.join(available())} "
            "(or module:Class, or path/to/file.py:Class)"
        )
    return name


def _import_factory(spec: str) -> Callable[..., Environment]:
    """The object ``module:attr`` or ``file.py:attr`` names; :class:`EnvError` when it cannot be had."""
    target, _, attr = spec.rpartition(":")
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            if not path.is_file():
                raise ImportError(f"no file {path}")
            module_name = f"prime_rl_user_env_{abs(hash(str(path)))}"
            module = sys.modules.get(module_name)
            if module is None:
                file_spec = importlib.util.spec_from_file_location(module_name, path)
                assert file_spec is not None and file_spec.loader is not None
                module = importlib.util.module_from_spec(file_spec)
                sys.modules[module_name] = module
                file_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
        return getattr(module, attr)
    except (ImportError, AttributeError, SyntaxError) as e:
        raise EnvError(f"environment {spec!r}: cannot import: {e}") from e


def load_env(name: str, options: dict[str, Any] | None = None) -> Environment:
    """Build an environment from a registered name, an import path ``package.module:Class`` or a
    file ``path/to/env.py:Class``, with its options (errors name both)."""
    check_name(name)
    factory = _import_factory(name if ":" in name else BUILTIN[name])
    try:
        env = factory(**(options or {}))
    except EnvError as e:  # the environment's own error (a task file's line) says what is wrong
        raise EnvError(f"environment {name!r}: {e}") from e
    except (TypeError, ValueError) as e:
        raise EnvError(f"environment {name!r}: bad options {options}: {e}") from e
    env.name = name
    return env
