"""Typed configuration: pydantic-settings models loaded from a file, env vars and the command line.

Each component defines one :class:`BaseConfig` subclass beside its code (``inference/config.py``,
...), with a docstring under every field (it becomes the ``--help`` text). Values come from, in
increasing priority:

1. field defaults,
2. ``--config FILE`` (YAML ``.yaml``/``.yml``, TOML ``.toml`` or JSON; several files merge in order),
3. environment variables ``PRIME_<FIELD>`` (nested: ``PRIME_SAMPLING__MAX_TOKENS``),
4. command-line flags: ``--output_dir DIR``, ``--sampling.max_tokens 512``, ``--flag`` /
   ``--no-flag`` for booleans, ``--key=value``; dashes and underscores are interchangeable.

Unknown keys and bad values fail at load, naming the key and the reason (:class:`ConfigError`).

The command line is pydantic-settings' :class:`CliSettingsSource` (an argparse parser it builds
from the model: dotted nested keys, ``--flag/--no-flag``, lists as ``a,b`` or JSON, ``null``, a
block as JSON, :attr:`BaseConfig.cli_aliases` as its ``cli_shortcuts``); pydantic-settings merges
its values over the env vars and the config files (one source per file). Kept here is what it lacks:

- :func:`_canonical_argv` respells tokens its parser would reject: ``--max_steps`` (it knows the
  kebab-case ``--max-steps``), ``--flag false``/``--flag=false`` (its ``--flag/--no-flag`` takes no
  value), a bare ``--<block>``/``--no-<block>`` (its block flag wants JSON): the block's
  ``enabled`` switch, or true/false for the block's validator;
- :func:`_parse_known`, the source's ``parse_args_method``, reads ``--config``, takes ``none`` for
  ``null`` and ``""`` for an empty list, and sorts argparse's leftovers: passed through
  (:attr:`BaseConfig.passthrough_unknown_flags`), positional (:attr:`BaseConfig.positional_field`),
  or an error with our wording (did-you-mean hint); ``--`` and ``--help`` are handled before;
- :func:`render_help` lists every flag with its type, default and docstring, one per line;
- :func:`read_config_file`: the library's file sources skip a missing file and raise the parsers'
  own errors; ours name the file and the problem.
"""

from __future__ import annotations

import difflib
import inspect
import json
import os
import re
import sys
import tomllib
import types
import typing
from argparse import SUPPRESS, ArgumentParser, BooleanOptionalAction, Namespace
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from prime_rl.paths import atomic_write_json

C = TypeVar("C", bound="BaseConfig")


def _no_file_in_the_way(path: Path) -> Path:
    """An output directory may not exist yet, but it must not be a file or lie under one."""
    for part in (path, *path.parents):
        try:
            there = part.exists()
        except OSError as e:  # a directory on the way that may not be read (EACCES)
            raise ValueError(f"{part}: {e.strerror or e}") from None
        if there:
            if not part.is_dir():
                raise ValueError(
                    f"{part} is a file, not a directory" + ("" if part == path else f" (in {path})")
                )
            break
    return path


OutputDir = Annotated[Path, AfterValidator(_no_file_in_the_way)]
"""A run or output directory, checked at load: not a file, not under one (it is made later)."""


def _http_url(url: str) -> str:
    """A server's base URL: ``http(s)://host[:port][/path]``."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is no number)
    except ValueError as e:
        raise ValueError(f"{url!r} is not an http(s) URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL (like http://127.0.0.1:8000)")
    return url


BaseUrl = Annotated[str, AfterValidator(_http_url)]
"""A server's base URL, checked at load (a typo failed every request of a run instead)."""


class ConfigError(ValueError):
    """A configuration could not be loaded: unknown key, bad value, unreadable file."""


class HelpRequested(Exception):
    """``--help`` was given; the message is the help text."""


class StrictModel(BaseModel):
    """Base for nested config blocks: unknown keys are errors, field docstrings are descriptions."""

    # no config value is infinite or NaN: `--pass_threshold nan` was taken, and no sample passed
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_assignment=True, allow_inf_nan=False
    )


class ResumeConfig(StrictModel):
    """Resuming from a full checkpoint. ``--resume`` takes the latest; ``--resume.step N`` that step."""

    enabled: bool = False
    """Resume from a checkpoint under <output_dir>/checkpoints."""

    step: int | None = Field(default=None, ge=0)
    """Resume from this step (default: the latest complete checkpoint)."""

    @model_validator(mode="before")
    @classmethod
    def _from_flag(cls, data: Any) -> Any:
        if isinstance(data, bool | str) and str(data).lower() in ("true", "false", "1", "0"):
            return {"enabled": str(data).lower() in ("true", "1")}
        if isinstance(data, dict) and data.get("step") is not None:
            data = {**data, "enabled": True}
        return data


# the class load_config is loading and its config files' contents, in order
_LOADING: ContextVar[tuple[type, list[dict[str, Any]]] | None] = ContextVar("_LOADING", default=None)


class BaseConfig(BaseSettings):
    """Base of every process config. Subclasses set ``process`` (names the resolved-config file)."""

    model_config = SettingsConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        use_attribute_docstrings=True,
        env_prefix="PRIME_",
        env_nested_delimiter="__",
        nested_model_default_partial_update=True,
        validate_default=True,
        cli_implicit_flags=True,
        cli_kebab_case=True,
        cli_exit_on_error=False,
    )

    process: ClassVar[str] = "process"
    """Name of the process; the resolved config is written to ``configs/<process>.json``."""

    passthrough_unknown_flags: ClassVar[bool] = False
    """Whether unknown command-line flags are collected (for another program) instead of rejected."""

    cli_aliases: ClassVar[dict[str, str]] = {}
    """Short command-line names for dotted keys (``{"input": "input_jsonl_fpath"}``)."""

    positional_field: ClassVar[str | None] = None
    """A list field that collects bare (non ``--``) command-line arguments, if any."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # (command line, put first by pydantic-settings) > init kwargs > environment > config files,
        # the last file first; a config nested in another one (the rl blocks) reads no files
        loading = _LOADING.get()
        files = loading[1] if loading is not None and loading[0] is settings_cls else []
        return (init_settings, env_settings, *(InitSettingsSource(settings_cls, d) for d in reversed(files)))

    def write_resolved(self, path: Path) -> None:
        """Write the resolved config as JSON (secrets masked) atomically to ``path``."""
        atomic_write_json(path, self.model_dump(mode="json"))


# --------------------------------------------------------------------------- files


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML, TOML or JSON config file into a dict; errors name the file and the problem."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path}: not found")
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8")
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            raise ConfigError(
                f"config file {path}: unknown format {suffix!r} (use .yaml, .yml, .toml or .json)"
            )
    except (tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path}: cannot parse: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping, got {type(data).__name__}")
    return _normalise_keys(data)


def _normalise_keys(data: Any) -> Any:
    if isinstance(data, dict):
        return {str(k).replace("-", "_"): _normalise_keys(v) for k, v in data.items()}
    return data


# --------------------------------------------------------------------------- command line

_BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _is_block(action: Any) -> bool:
    return action is not None and action.const == "{}"  # the library's `--block [JSON]` flag


def _is_optional(action: Any) -> bool:
    return "null" in str(action.metavar).strip("{}").split(",")  # the library's metavar: {int,null}


def _canonical_argv(parser: ArgumentParser, args: list[str]) -> list[str]:
    """Respell the tokens the library's parser would reject (see the module docstring)."""
    known = parser._option_string_actions
    out, i = [], 0
    while i < len(args):
        token = args[i]
        following = args[i + 1] if i + 1 < len(args) else None
        i += 1
        name, eq, value = token.partition("=")
        flag = name.replace("_", "-") if name.startswith("--") else name
        action = known.get(flag)
        if action is None and flag.startswith("--no-") and _is_block(known.get("--" + flag[5:])):
            out.append(f"{flag}.enabled" if f"{flag}.enabled" in known else f"--{flag[5:]}=false")
        elif isinstance(action, BooleanOptionalAction) and not flag.startswith("--no-"):
            if not eq and following is not None and following.lower() in _BOOL_WORDS:
                value, eq, i = following, "=", i + 1
            on = _BOOL_WORDS.get(value.lower()) if eq else True
            out.append(token if on is None else flag if on else f"--no-{flag[2:]}")
        elif _is_block(action) and not eq and (following is None or following.startswith("--")):
            out.append(f"{flag}.enabled" if f"{flag}.enabled" in known else f"{flag}=true")
        else:
            out.append(token if action is None else flag + eq + value)
    return out


def _parse_known(model: type[BaseConfig], found: dict[str, Any]):
    """The CLI source's ``parse_args_method``: argparse's known args, then the leftovers sorted."""

    def parse(parser: ArgumentParser, args: list[str]) -> Namespace:
        ns, extras = parser.parse_known_args(args)
        found["config_files"] = [Path(p) for p in vars(ns).pop("config", [])]
        found["passthrough"], positional, takes_value = [], [], False
        for arg in extras:  # in command-line order; an unknown flag may take the next bare word
            if arg.startswith("--") and model.passthrough_unknown_flags:
                found["passthrough"].append(arg)
                takes_value = "=" not in arg
            elif arg.startswith("--"):
                name = arg.partition("=")[0]
                dests = [a.dest for a in parser._actions if a.option_strings and a.dest != "help"]
                close = difflib.get_close_matches(name[2:].replace("-", "_"), dests, n=3)
                hint = f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""
                raise ConfigError(f"unknown option {name}{hint}; see --help")
            elif takes_value:
                found["passthrough"].append(arg)
                takes_value = False
            elif model.positional_field is not None:
                positional.append(arg)
            else:
                raise ConfigError(f"unexpected argument {arg!r} (options look like --key value)")
        if positional:
            field = model.positional_field
            setattr(ns, field, [*getattr(ns, field, []), json.dumps(positional)])
        actions = {a.dest: a for a in parser._actions}
        for dest, value in vars(ns).items():
            if value == [""]:  # `--tags ""`: an empty list
                setattr(ns, dest, ["[]"])
            if isinstance(value, str) and value.lower() in ("none", "null") and _is_optional(actions[dest]):
                setattr(ns, dest, "null")
        return ns

    return parse


def _command_line(model: type[C], argv: Sequence[str]) -> tuple[CliSettingsSource, dict[str, Any]]:
    """The CLI settings source for ``model`` with ``argv`` parsed; ``found`` has files and pass-through."""
    args = list(argv)
    tail: list[str] = []
    if "--" in args:
        if not model.passthrough_unknown_flags:
            raise ConfigError("'--' given, but this command takes no pass-through arguments")
        args, tail = args[: args.index("--")], args[args.index("--") + 1 :]
    if "-h" in args or "--help" in args:
        raise HelpRequested(render_help(model))
    shortcuts: dict[str, list[str]] = {}
    for alias, key in model.cli_aliases.items():
        shortcuts.setdefault(key.replace("_", "-"), []).append(alias)
    found: dict[str, Any] = {}
    source = CliSettingsSource(model, cli_shortcuts=shortcuts, parse_args_method=_parse_known(model, found))
    parser = source.root_parser
    parser.add_argument("--config", action="append", default=SUPPRESS)
    try:
        source(args=_canonical_argv(parser, args))
    except SettingsError as e:
        message = str(e).removeprefix("error parsing CLI: ")
        missing = re.fullmatch(r"argument (-[^\s/]+)\S*: expected one argument", message)
        if missing:
            action = parser._option_string_actions.get(missing[1])
            message = f"--{action.dest if action else missing[1].lstrip('-')} needs a value"
        raise ConfigError(message) from None
    found["passthrough"] += tail
    return source, found


# --------------------------------------------------------------------------- loading


def _format_validation_error(
    model: type[BaseConfig],
    error: ValidationError,
    argv: Sequence[str] = (),
    files: Sequence[tuple[Path, dict[str, Any]]] = (),
) -> str:
    """Every bad key with its reason and where its value came from: the command line, a ``PRIME_``
    environment variable or a config file (several files merge, so the file is named)."""
    lines = [f"invalid {model.process} config:"]
    for err in error.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + _alias_hint(model, err["loc"])
        given = err.get("input")
        shown = (
            ""
            if err["type"] in ("missing", "extra_forbidden") or isinstance(given, dict)
            else f" (got {given!r})"
        )
        where = "" if err["type"] == "missing" else _origin(model, err["loc"], argv, files)
        lines.append(f"  {loc}: {msg}{shown}{where}")
    return "\n".join(lines)


def _alias_hint(model: type[BaseConfig], loc: tuple) -> str:
    """For a config file's key that is a command-line short name (``input``): its key there."""
    key = ".".join(str(p) for p in loc)
    full = model.cli_aliases.get(key)
    return f" ({key} is the command line's short name: in a config file write {full})" if full else ""


def _origin(
    model: type[BaseConfig], loc: tuple, argv: Sequence[str], files: Sequence[tuple[Path, dict]]
) -> str:
    """`` [from ...]``: where the value at ``loc`` came from, in the order they take precedence
    (the command line, the environment, the files from the last one); empty when not found."""
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if not parts:
        return ""
    prefixes = [".".join(parts[: n + 1]) for n in range(len(parts))]  # a block flag's JSON sets it too
    flags = {f"--{key}" for key in prefixes} | {f"--{key.replace('_', '-')}" for key in prefixes}
    flags |= {f"--{a}" for a, k in model.cli_aliases.items() if k in prefixes}
    if any(arg.partition("=")[0] in flags for arg in argv):
        return " [from the command line]"
    env = "PRIME_" + "__".join(parts).upper()
    if env in os.environ:
        return f" [from the environment variable {env}]"
    for path, data in reversed(files):
        node: Any = data
        for part in parts:
            node = node.get(part, _NOT_THERE) if isinstance(node, dict) else _NOT_THERE
        if node is not _NOT_THERE:
            return f" [from {path}]"
    return ""


_NOT_THERE = object()


def load_config(model: type[C], argv: Sequence[str] | None = None) -> tuple[C, list[str]]:
    """Load ``model`` from config files, env and ``argv``; return it and any pass-through args.

    Raises :class:`ConfigError` with every bad key and its reason.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    cli, found = _command_line(model, argv)
    files = [(p, read_config_file(p)) for p in found["config_files"]]
    loading = _LOADING.set((model, [data for _, data in files]))
    try:
        config = model(_cli_settings_source=cli)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(model, e, argv, files)) from None
    except SettingsError as e:  # a flag's JSON that does not parse
        raise ConfigError(f"{e}: {e.__cause__}" if e.__cause__ else str(e)) from None
    finally:
        _LOADING.reset(loading)
    return config, found["passthrough"]


def parse_config(model: type[C], argv: Sequence[str] | None = None) -> tuple[C, list[str]]:
    """:func:`load_config` for entry points: prints help or the error and exits (0 or 2)."""
    try:
        return load_config(model, argv)
    except HelpRequested as h:
        try:
            print(h, flush=True)
        except BrokenPipeError:  # `rl --help | head`: the reader left
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


# --------------------------------------------------------------------------- help


def _unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _model_of(annotation: Any) -> type[BaseModel] | None:
    inner = _unwrap_optional(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _type_name(annotation: Any) -> str:
    inner = _unwrap_optional(annotation)
    if typing.get_origin(inner) is typing.Literal:
        return "{" + ",".join(str(a) for a in typing.get_args(inner)) + "}"
    if inner is SecretStr:
        return "SECRET"
    name = getattr(inner, "__name__", None) or str(inner)
    return name.upper() if name in ("int", "float", "str") else name


def render_help(model: type[BaseConfig]) -> str:
    """``--help`` text: usage, sources, and every flag with its type, default and docstring."""
    doc = inspect.cleandoc(model.__doc__ or "")
    positional = f" [{model.positional_field.upper()} ...]" if model.positional_field else ""
    lines = [f"usage: {model.process} [--config FILE ...] [--key value ...]{positional}", ""]
    if doc:
        lines += [doc, ""]
    lines += [
        "Values come from field defaults < --config files (YAML/TOML/JSON) < env PRIME_<KEY> (nested: __)",
        "< command-line flags. Nested keys use dots (--sampling.max_tokens 512); booleans take",
        "--flag / --no-flag. Dashes and underscores in names are interchangeable.",
    ]
    if model.passthrough_unknown_flags:
        lines.append("Unknown flags (and everything after '--') are passed through unchanged.")
    if model.cli_aliases:
        pairs = ", ".join(f"--{a} = --{k}" for a, k in model.cli_aliases.items())
        lines.append(f"Short names: {pairs}.")
    lines.append("")
    lines.append("options:")

    def walk(m: type[BaseModel], prefix: str) -> None:
        fields = list(m.model_fields.items())
        if not prefix:  # required options first (a block is no option)
            fields.sort(
                key=lambda item: not item[1].is_required() or _model_of(item[1].annotation) is not None
            )
        for name, info in fields:
            sub = _model_of(info.annotation)
            if sub is not None:
                lines.append(f"  [{prefix}{name}] {(info.description or '').strip()}")
                walk(sub, f"{prefix}{name}.")
                continue
            default = (
                "required"
                if info.is_required()
                else f"default: {info.get_default(call_default_factory=True)!r}"
            )
            if _unwrap_optional(info.annotation) is SecretStr:
                default = "default: unset" if not info.is_required() else "required"
            kind = "" if _unwrap_optional(info.annotation) is bool else f" {_type_name(info.annotation)}"
            lines.append(f"  --{prefix}{name}{kind}  ({default})")
            for dl in (info.description or "").strip().splitlines():
                lines.append(f"      {dl.strip()}")

    walk(model, "")
    return "\n".join(lines)
