"""prime_rl.collect.merge: files from different task files are refused (the run that merges
shards into what an unsharded run writes is in test_runs.py)."""

from __future__ import annotations

import json

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
