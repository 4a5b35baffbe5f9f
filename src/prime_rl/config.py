"""Typed configuration: pydantic-settings models loaded from a file, env vars and the command line.

Each component defines one :class:`BaseConfig` subclass beside its code (``inference/config.py``,
...), with a docstring under every field (it becomes the ``--help`` text). Values come from, in
increasing priority:

1. field defaults,
2. ``--config FILE`` (YAML ``.yaml``/``.yml`` or TOML ``.toml``; several files merge in order),
3. environment variables ``PRIME_<FIELD>`` (nested: ``PRIME_SAMPLING__MAX_TOKENS``),
4. command-line flags: ``--output_dir DIR``, ``--sampling.max_tokens 512``, ``--flag`` /
   ``--no-flag`` for booleans, ``--key=value``; dashes and underscores are interchangeable.

Unknown keys and bad values fail at load, naming the key and the reason (:class:`ConfigError`).
"""

from __future__ import annotations

import difflib
import json
import sys
import tomllib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from prime_rl.paths import atomic_write_json

C = TypeVar("C", bound="BaseConfig")


class ConfigError(ValueError):
    """A configuration could not be loaded: unknown key, bad value, unreadable file."""


class StrictModel(BaseModel):
    """Base for nested config blocks: unknown keys are errors, field docstrings are descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


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


class _DictSource(PydanticBaseSettingsSource):
    """A settings source holding an already-parsed nested dict (config files)."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]):
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


class BaseConfig(BaseSettings):
    """Base of every process config. Subclasses set ``process`` (names the resolved-config file)."""

    model_config = SettingsConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        env_prefix="PRIME_",
        env_nested_delimiter="__",
        nested_model_default_partial_update=True,
        validate_default=True,
    )

    process: ClassVar[str] = "process"
    """Name of the process; the resolved config is written to ``configs/<process>.json``."""

    passthrough_unknown_flags: ClassVar[bool] = False
    """Whether unknown command-line flags are collected (for another program) instead of rejected."""

    cli_aliases: ClassVar[dict[str, str]] = {}
    """Short command-line names for dotted keys (``{"input": "input_jsonl_fpath"}``)."""

    positional_field: ClassVar[str | None] = None
    """A list field that collects bare (non ``--``) command-line arguments, if any."""

    _file_data: ClassVar[dict[str, Any]] = {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # command line (passed as init kwargs) > environment > config files > defaults
        return (init_settings, env_settings, _DictSource(settings_cls, cls._file_data))

    def write_resolved(self, path: Path) -> None:
        """Write the resolved config as JSON (secrets masked) atomically to ``path``."""
        atomic_write_json(path, self.model_dump(mode="json"))


# --------------------------------------------------------------------------- files


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or TOML config file into a dict; errors name the file and the problem."""
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


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Merge ``override`` into a copy of ``base`` key by key (nested dicts merge, not replace)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- command line


def _unwrap_optional(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _model_of(annotation: Any) -> type[BaseModel] | None:
    inner = _unwrap_optional(annotation)
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return inner
    return None


def _is_bool(annotation: Any) -> bool:
    return _unwrap_optional(annotation) is bool


def _is_collection(annotation: Any) -> bool:
    origin = typing.get_origin(_unwrap_optional(annotation))
    return origin in (list, tuple, set, dict)


def _resolve_field(model: type[BaseModel], dotted: str) -> FieldInfo | None:
    """The field at a dotted path (``sampling.max_tokens``), or None when there is none."""
    current: type[BaseModel] | None = model
    info: FieldInfo | None = None
    for part in dotted.split("."):
        if current is None or part not in current.model_fields:
            return None
        info = current.model_fields[part]
        current = _model_of(info.annotation)
    return info


def _all_flags(model: type[BaseModel], prefix: str = "") -> list[str]:
    flags = []
    for name, info in model.model_fields.items():
        sub = _model_of(info.annotation)
        if sub is not None:
            flags.extend(_all_flags(sub, f"{prefix}{name}."))
        else:
            flags.append(f"{prefix}{name}")
    return flags


def _set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = target.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--{dotted}: conflicts with a value given for --{part}")
        target = node
    target[parts[-1]] = value


def _parse_value(info: FieldInfo, raw: str) -> Any:
    if _is_collection(info.annotation) or _model_of(info.annotation) is not None:
        stripped = raw.strip()
        if stripped.startswith(("[", "{")):
            try:
                return json.loads(stripped)
            except json.JSONDecodeError as e:
                raise ConfigError(f"value {raw!r} is not valid JSON: {e}") from e
        if (
            _is_collection(info.annotation)
            and typing.get_origin(_unwrap_optional(info.annotation)) is not dict
        ):
            return [item for item in stripped.split(",") if item] if stripped else []
    if raw.lower() in ("none", "null") and _unwrap_optional(info.annotation) is not info.annotation:
        return None
    return raw


class ParsedArgs(BaseModel):
    """What :func:`parse_cli` found on a command line."""

    config_files: list[Path] = []
    values: dict[str, Any] = {}
    passthrough: list[str] = []
    help: bool = False


def parse_cli(model: type[BaseConfig], argv: Sequence[str]) -> ParsedArgs:
    """Turn ``argv`` into nested override values for ``model`` (see the module docstring)."""
    out = ParsedArgs()
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token in ("-h", "--help"):
            out.help = True
            continue
        if token == "--":
            if not model.passthrough_unknown_flags:
                raise ConfigError("'--' given, but this command takes no pass-through arguments")
            out.passthrough.extend(args[i:])
            break
        if not token.startswith("--") or token == "--":
            if model.positional_field is not None:
                out.values.setdefault(model.positional_field, []).append(token)
                continue
            raise ConfigError(f"unexpected argument {token!r} (options look like --key value)")
        body = token[2:]
        key, has_eq, inline = body.partition("=")
        key = key.replace("-", "_")
        key = model.cli_aliases.get(key, key)
        value: str | None = inline if has_eq else None
        if key == "config":
            if value is None:
                if i >= len(args):
                    raise ConfigError("--config needs a file path")
                value = args[i]
                i += 1
            out.config_files.append(Path(value))
            continue
        info = _resolve_field(model, key)
        negated = False
        if info is None and key.startswith("no_"):
            alt = _resolve_field(model, key[3:])
            if alt is not None and (_is_bool(alt.annotation) or _model_of(alt.annotation) is not None):
                info, key, negated = alt, key[3:], True  # --no-flag, or --no-block (its validator decides)
        if info is None:
            if model.passthrough_unknown_flags:
                out.passthrough.append(token)
                if not has_eq and i < len(args) and not args[i].startswith("--"):
                    out.passthrough.append(args[i])
                    i += 1
                continue
            close = difflib.get_close_matches(key, _all_flags(model), n=3)
            hint = f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""
            raise ConfigError(f"unknown option --{key}{hint}; see --help")
        if negated and not _is_bool(info.annotation):
            if value is not None:
                raise ConfigError(f"--no-{key} takes no value")
            parsed = False
        elif _is_bool(info.annotation):
            if negated:
                if value is not None:
                    raise ConfigError(f"--no-{key} takes no value")
                parsed: Any = False
            elif value is not None:
                parsed = value
            elif i < len(args) and args[i].lower() in ("true", "false", "1", "0", "yes", "no"):
                parsed = args[i]
                i += 1
            else:
                parsed = True
        elif (
            value is None
            and _model_of(info.annotation) is not None
            and (i >= len(args) or args[i].startswith("--"))
        ):
            parsed = True  # a bare block flag (--resume): the block's own validator decides what it means
        else:
            if value is None:
                if i >= len(args) or (args[i].startswith("--") and len(args[i]) > 2):
                    raise ConfigError(f"--{key} needs a value")
                value = args[i]
                i += 1
            try:
                parsed = _parse_value(info, value)
            except ConfigError as e:
                raise ConfigError(f"--{key}: {e}") from e
        _set_path(out.values, key, parsed)
    return out


# --------------------------------------------------------------------------- loading


def _format_validation_error(process: str, error: ValidationError) -> str:
    lines = [f"invalid {process} config:"]
    for err in error.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        given = err.get("input")
        shown = (
            ""
            if err["type"] in ("missing", "extra_forbidden") or isinstance(given, dict)
            else f" (got {given!r})"
        )
        lines.append(f"  {loc}: {msg}{shown}")
    return "\n".join(lines)


def load_config(model: type[C], argv: Sequence[str] | None = None) -> tuple[C, list[str]]:
    """Load ``model`` from config files, env and ``argv``; return it and any pass-through args.

    Raises :class:`ConfigError` with every bad key and its reason.
    """
    parsed = parse_cli(model, sys.argv[1:] if argv is None else argv)
    if parsed.help:
        raise HelpRequested(render_help(model))
    file_data: dict[str, Any] = {}
    for path in parsed.config_files:
        file_data = deep_merge(file_data, read_config_file(path))
    previous = model._file_data
    model._file_data = file_data
    try:
        config = model(**parsed.values)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(model.process, e)) from None
    finally:
        model._file_data = previous
    return config, parsed.passthrough


class HelpRequested(Exception):
    """``--help`` was given; the message is the help text."""


def parse_config(model: type[C], argv: Sequence[str] | None = None) -> tuple[C, list[str]]:
    """:func:`load_config` for entry points: prints help or the error and exits (0 or 2)."""
    try:
        return load_config(model, argv)
    except HelpRequested as h:
        print(h)
        raise SystemExit(0) from None
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


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
    doc = (model.__doc__ or "").strip()
    positional = f" [{model.positional_field.upper()} ...]" if model.positional_field else ""
    lines = [f"usage: {model.process} [--config FILE ...] [--key value ...]{positional}", ""]
    if doc:
        lines += [doc, ""]
    lines += [
        "Values come from field defaults < --config files (YAML/TOML) < env PRIME_<KEY> (nested: __)",
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
        if not prefix:  # required options first
            fields.sort(key=lambda item: not item[1].is_required())
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
            flag = f"--{prefix}{name}"
            kind = "" if _is_bool(info.annotation) else f" {_type_name(info.annotation)}"
            lines.append(f"  {flag}{kind}  ({default})")
            desc = (info.description or "").strip()
            for dl in desc.splitlines():
                lines.append(f"      {dl.strip()}")

    walk(model, "")
    return "\n".join(lines)
