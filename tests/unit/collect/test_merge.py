"""prime_rl.collect.merge: files from different task files are refused (the run that merges
shards into what an unsharded run writes is in test_runs.py)."""

from __future__ import annotations

import json
import os

import pytest

from prime_rl.collect.config import MergeConfig
from prime_rl.collect.merge import merge
from prime_rl.config import load_config


def test_merge_refuses_files_from_different_task_files(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps({"task_index": 0, "repeat_index": 0, "task": {"q": 1}}) + "\n")
    b.write_text(json.dumps({"task_index": 0, "repeat_index": 0, "task": {"q": 2}}) + "\n")
    cfg, _ = load_config(MergeConfig, ["--output", str(tmp_path / "m.jsonl"), str(a), str(b)])
    with pytest.raises(ValueError, match=r"b.jsonl:1: task 0 repeat 0 is a different task"):
        merge(cfg)
    assert not (tmp_path / "m.jsonl").exists()


@pytest.mark.parametrize("held", ["input", "output", "output via a symlink"])
def test_merge_takes_the_collectors_lock_of_its_inputs_and_output(tmp_path, held):
    """A shard still being written, or an output a run is writing, is never merged over."""
    from prime_rl.collect.store import OutputError, exclusive

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for i, path in enumerate((a, b)):
        path.write_text(json.dumps({"task_index": i, "repeat_index": 0, "task": {"q": i}}) + "\n")
    out = tmp_path / "m.jsonl"
    out.write_text("")
    (tmp_path / "alias.jsonl").symlink_to(out)
    target = {"input": b, "output": out, "output via a symlink": tmp_path / "alias.jsonl"}[held]
    cfg, _ = load_config(MergeConfig, ["--output", str(target if held != "input" else out), str(a), str(b)])
    with (
        exclusive(b if held == "input" else out),
        pytest.raises(OutputError, match="being written by another"),
    ):
        merge(cfg)
    assert out.read_text() == ""  # untouched
    result = merge(cfg)  # the lock released: it merges
    assert result.records == 2 and out.read_text().count("\n") == 2


def test_a_glob_that_picks_up_failures_and_rejects_files_merges_only_the_rollouts(tmp_path):
    """Old code merged rollouts_0_failures.jsonl's lines (they carry task_index and repeat_index)
    as if they were rollouts."""
    shard = tmp_path / "rollouts_0.jsonl"
    shard.write_text(
        json.dumps({"task_index": 0, "repeat_index": 0, "task": {"q": 0}, "response": {}}) + "\n"
    )
    failures = tmp_path / "rollouts_0_failures.jsonl"
    failures.write_text(json.dumps({"task_index": 1, "repeat_index": 0, "error": "HTTP 500"}) + "\n")
    rejects = tmp_path / "rollouts_0_rejects.jsonl"
    rejects.write_text(json.dumps({"line": 3, "reason": "blank line", "raw": ""}) + "\n")
    out = tmp_path / "all.jsonl"
    cfg, _ = load_config(
        MergeConfig, ["--output", str(out), *map(str, sorted(tmp_path.glob("rollouts_*.jsonl")))]
    )
    result = merge(cfg)
    assert result.records == 1 and [
        json.loads(line)["task_index"] for line in out.read_text().splitlines()
    ] == [0]
    cfg, _ = load_config(MergeConfig, ["--output", str(out), str(failures)])
    with pytest.raises(ValueError, match="every input is a failures or rejects file"):
        merge(cfg)


@pytest.mark.parametrize(
    ("existing", "line"),
    [
        ('{"prompt": "what is 2+2?", "answer": "4"}\n', 1),  # a task file given as --output by mistake
        ("model = 'x'\n", 1),  # a TOML config
        ("\n\n[1, 2]\n", 3),  # JSON, no record, after blank lines
        ("[" * 100_000 + "\n", 1),  # nested past the parser's recursion limit
    ],
)
def test_merge_refuses_to_replace_a_file_that_holds_no_rollouts(tmp_path, existing, line):
    """The merge replaced whatever --output named: a task file given by mistake was lost. A file
    whose first line is no rollout record is refused with its name and left as it is; an earlier
    merge's output (or an empty file) is replaced."""
    from prime_rl.collect.store import OutputError

    shard = tmp_path / "rollouts_0.jsonl"
    shard.write_text(json.dumps({"task_index": 0, "repeat_index": 0, "task": {"q": 0}}) + "\n")
    out = tmp_path / "tasks.jsonl"
    out.write_text(existing)
    cfg, _ = load_config(MergeConfig, ["--output", str(out), str(shard)])
    with pytest.raises(
        OutputError, match=rf"tasks.jsonl:{line}: the merge output exists and holds no rollout record"
    ):
        merge(cfg)
    assert out.read_text() == existing
    out.write_text(
        json.dumps({"task_index": 7, "repeat_index": 0, "task": {"q": 7}}) + "\n"
    )  # an earlier merge
    assert merge(cfg).records == 1 and json.loads(out.read_text())["task_index"] == 0
    (tmp_path / "dir.jsonl").mkdir()
    cfg, _ = load_config(MergeConfig, ["--output", str(tmp_path / "dir.jsonl"), str(shard)])
    with pytest.raises(OutputError, match="is a directory"):
        merge(cfg)
    os.mkfifo(tmp_path / "fifo.jsonl")  # opening it to read would wait for a writer forever
    cfg, _ = load_config(MergeConfig, ["--output", str(tmp_path / "fifo.jsonl"), str(shard)])
    with pytest.raises(OutputError, match="is not a regular file"):
        merge(cfg)
