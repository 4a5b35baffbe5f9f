"""docs/config.md is generated from the config models and kept in step with them."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from prime_rl.launcher import config_docs
from prime_rl.launcher.config_docs import DOC_PATH, REGENERATE, SECTIONS, render


def test_docs_config_md_is_up_to_date():
    assert DOC_PATH.is_file(), f"{DOC_PATH} is missing: run `{REGENERATE}`"
    assert DOC_PATH.read_text(encoding="utf-8") == render(), (
        f"{DOC_PATH} is out of date with the config models: run `{REGENERATE}`"
    )


def leaf_fields(model: type[BaseModel], prefix: str = "") -> dict[str, FieldInfo]:
    """Every non-block field, by dotted key."""
    out: dict[str, FieldInfo] = {}
    for name, info in model.model_fields.items():
        sub = config_docs._block_model(info)
        out.update(leaf_fields(sub, f"{prefix}{name}.") if sub is not None else {f"{prefix}{name}": info})
    return out


def section_text(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("title", [s[0] for s in SECTIONS])
def test_every_key_of_every_section_has_a_row_with_type_default_and_docstring(title):
    _, _, model, parent = next(s for s in SECTIONS if s[0] == title)
    section = section_text(render(), title)
    rows = {
        line.split("|")[1].strip().strip("`"): line for line in section.splitlines() if line.startswith("| `")
    }
    skip = (
        set(parent.model_fields)
        if parent
        else ({"inference", "orchestrator", "trainer"} if title.startswith("rl") else set())
    )
    expected = {k: info for k, info in leaf_fields(model).items() if k.split(".")[0] not in skip}
    assert expected and sorted(rows) == sorted(expected)
    for key, info in expected.items():
        cells = [c.strip() for c in rows[key].split(" | ")]
        assert cells[1].strip("`") and cells[2].strip("`"), rows[key]  # type and default
        assert info.description, f"{title}: {key} has no docstring"
        assert config_docs._cell(config_docs._prose(info.description)) in rows[key]


def test_types_and_defaults_are_spelled_as_a_config_file_would():
    text = render()
    orchestrator = section_text(text, "orchestrator")
    assert "| `sampling.max_tokens` | `int` | `128` |" in orchestrator
    assert "| `sampling.seed` | `int \\| None` | `null` |" in orchestrator
    inference = section_text(text, "inference")
    assert "| `admin_token` | `secret \\| None` | `unset` |" in inference
    assert '| `inflight_on_update` | `{keep,abort,wait}` | `"keep"` |' in inference
    assert "| `model` | `str` | `required` |" in inference
    # an HTML-looking placeholder outside code is escaped, so Markdown renderers keep it
    assert "&lt;output_dir>/logs/inference.log" in inference


def test_check_mode_fails_on_a_stale_file_and_names_the_command(tmp_path, capsys):
    stale = tmp_path / "config.md"
    stale.write_text(render().replace("Peak learning rate.", "Old text."), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        config_docs.main(["--check", "--output", str(stale)])
    assert exit_info.value.code == 1
    assert REGENERATE in capsys.readouterr().err
    config_docs.main(["--output", str(stale)])
    config_docs.main(["--check", "--output", str(stale)])  # regenerated: passes
    assert stale.read_text(encoding="utf-8") == render()
