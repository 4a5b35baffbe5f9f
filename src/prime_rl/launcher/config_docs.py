"""docs/config.md, generated from the typed configs: every key with its type, default and docstring.

One section per command (``inference``, ``trainer``, ``orchestrator``, ``rl``, ``collect-rollouts``
and its subcommands), one table per block. The text comes from the pydantic models alone (field
annotations, defaults and the docstring under each field), so the reference cannot drift from the
code: ``tests/unit/launcher/test_config_docs.py`` fails when the file differs from what
:func:`render` gives. Regenerate with ``python scripts/gen_config_docs.py`` (or
``python -m prime_rl.launcher.config_docs``); ``--check`` only compares.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from prime_rl.collect.config import CollectConfig, DiagnoseConfig, MergeConfig, VerifyFileConfig
from prime_rl.config import BaseConfig
from prime_rl.inference.config import InferenceConfig
from prime_rl.launcher.config import BLOCKS, RLConfig
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.trainer.config import TrainerConfig

REPO = Path(__file__).resolve().parents[3]
DOC_PATH = REPO / "docs" / "config.md"
REGENERATE = "python scripts/gen_config_docs.py"

# (section title, command line, config class, class whose keys it only adds to)
SECTIONS: tuple[tuple[str, str, type[BaseConfig], type[BaseConfig] | None], ...] = (
    ("inference", "inference", InferenceConfig, None),
    ("trainer", "trainer", TrainerConfig, None),
    ("orchestrator", "orchestrator", OrchestratorConfig, None),
    ("rl (the launcher)", "rl", RLConfig, None),
    ("collect-rollouts", "collect-rollouts", CollectConfig, None),
    ("collect-rollouts merge", "collect-rollouts merge", MergeConfig, None),
    ("collect-rollouts verify (verify-rollouts)", "verify-rollouts", VerifyFileConfig, None),
    ("collect-rollouts diagnose", "collect-rollouts diagnose", DiagnoseConfig, CollectConfig),
)

HEADER = f"""# Configuration reference

<!-- Generated from the pydantic config models by `{REGENERATE}`; do not edit by hand.
     tests/unit/launcher/test_config_docs.py fails when this file is out of date. -->

Every command takes one typed config. Values come, in increasing priority, from the defaults
below, `--config FILE` (YAML, TOML or JSON; several files merge in order), environment variables
`PRIME_<KEY>` (nested keys joined by `__`: `PRIME_SAMPLING__MAX_TOKENS=512`) and command-line
flags (`--sampling.max_tokens 512`, `--flag` / `--no-flag`). Unknown keys and bad values fail at
load, naming the key and the reason. A nested block is a table in a config file
(`[sampling]` in TOML) and a dotted prefix on the command line (`--sampling.max_tokens`).
`<cmd> --help` prints the same list.

Sections: {{toc}}.
"""


def _anchor(title: str) -> str:
    keep = "".join(c for c in title.lower() if c.isalnum() or c in " -")
    return keep.replace(" ", "-")


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(args) < len(typing.get_args(annotation)):
            return args[0], True
    return annotation, False


def _block_model(info: FieldInfo) -> type[BaseModel] | None:
    inner, _ = _unwrap_optional(info.annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def type_name(annotation: Any) -> str:
    """A short readable spelling of a field's type: ``int | None``, ``list[str]``, ``{a,b}``."""
    if annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return "{" + ",".join(str(a) for a in typing.get_args(annotation)) + "}"
    if origin is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(annotation))
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{args}]" if args else name
    if annotation is SecretStr:
        return "secret"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def default_text(info: FieldInfo) -> str:
    """The default as a config file would spell it (JSON), ``required`` or ``unset`` (secrets)."""
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    inner, _ = _unwrap_optional(info.annotation)
    if inner is SecretStr:
        return "unset"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        value = str(value)
    return json.dumps(value, default=str)


def _prose(text: str) -> str:
    """Docstring text as one Markdown line: ``<name>`` outside code spans escaped (else an HTML tag)."""
    parts = re.split(r"(`+[^`]*`+)", " ".join(text.split()))
    return "".join(p if p.startswith("`") else p.replace("<", "&lt;") for p in parts)


def _cell(text: str) -> str:
    """One Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _table(model: type[BaseModel], prefix: str, skip: set[str], out: list[str], blocks: list) -> None:
    rows = []
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        sub = _block_model(info)
        if sub is not None:
            blocks.append((f"{prefix}{name}", sub, info))
            continue
        rows.append(
            f"| `{prefix}{name}` | `{_cell(type_name(info.annotation))}` | `{_cell(default_text(info))}` "
            f"| {_cell(_prose(info.description or ''))} |"
        )
    if rows:
        out += ["| key | type | default | description |", "|---|---|---|---|", *rows, ""]


def _walk(model: type[BaseModel], prefix: str, skip: set[str], out: list[str], level: int) -> None:
    blocks: list[tuple[str, type[BaseModel], FieldInfo]] = []
    _table(model, prefix, skip, out, blocks)
    for dotted, sub, info in blocks:
        out += [f"{'#' * level} `[{dotted}]`", ""]
        if info.description:
            out += [_prose(info.description), ""]
        if _unwrap_optional(info.annotation)[1]:
            out += ["Optional block (default: unset).", ""]
        _walk(sub, f"{dotted}.", set(), out, level + 1)


def render() -> str:
    """The whole of docs/config.md."""
    toc = ", ".join(f"[{title}](#{_anchor(title)})" for title, *_ in SECTIONS)
    out = [HEADER.format(toc=toc).rstrip("\n"), ""]
    for title, command, model, parent in SECTIONS:
        out += [f"## {title}", ""]
        doc = inspect.cleandoc(model.__doc__ or "")
        if doc:
            out += [_prose(doc), ""]
        skip: set[str] = set()
        if parent is not None:
            skip = set(parent.model_fields)
            out += [f"Takes every `{parent.process}` key (above), and these:", ""]
        if model is RLConfig:
            skip = set(BLOCKS)
            out += [
                "The blocks `[inference]`, `[orchestrator]` and `[trainer]` take the keys of those "
                "sections above (`--orchestrator.sampling.max_tokens 12`); the top-level keys below "
                "fill the block keys they repeat.",
                "",
            ]
        out += [f"`{command} --config FILE --key value ...`", ""]
        _walk(model, "", skip, out, 3)
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write docs/config.md from the config models.")
    parser.add_argument(
        "--output", type=Path, default=DOC_PATH, help="where to write (default docs/config.md)"
    )
    parser.add_argument(
        "--check", action="store_true", help="only compare; exit 1 when the file is out of date"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else None
        if current != text:
            print(f"{args.output} is out of date: run `{REGENERATE}`", file=sys.stderr)
            raise SystemExit(1)
        print(f"{args.output} is up to date")
        return
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
