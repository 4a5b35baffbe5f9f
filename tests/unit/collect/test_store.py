"""prime_rl.collect.store: torn tails, corrupt lines, failure counts, the one-writer lock."""

from __future__ import annotations

import json

import pytest
from tests.support.samples import rec

from prime_rl.collect.store import (
    AppendWriter,
    OutputError,
    read_failures,
    repair_torn_tail,
    scan_output,
)


def test_a_torn_last_line_is_cut_and_nothing_before_it_changes(tmp_path):
    out = tmp_path / "out.jsonl"
    with AppendWriter(out) as w:
        for i in range(3):
            w.write(rec(i, 0, 1.0, "x" * 50))
    good = out.read_bytes()
    with open(out, "ab") as f:
        f.write(b'{"task_index": 3, "repeat_index": 0, "task": {"q"')  # a write cut by SIGKILL
    state = scan_output(out)
    assert state.done == {(0, 0), (1, 0), (2, 0)} and state.repaired_bytes > 0
    assert out.read_bytes() == good
    assert b'"task_index": 3' in (tmp_path / "out_torn.log").read_bytes()
    assert repair_torn_tail(out) == 0  # idempotent


def test_a_complete_record_missing_only_its_newline_is_kept(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps(rec(0, 0, 1.0)) + "\n" + json.dumps(rec(1, 0, 0.5)))
    assert scan_output(out).done == {(0, 0), (1, 0)}
    assert out.read_text().endswith("}\n")


def test_a_corrupt_line_inside_the_output_is_named_and_nothing_is_touched(tmp_path):
    out = tmp_path / "out.jsonl"
    text = json.dumps(rec(0, 0, 1.0)) + "\nnot json\n" + json.dumps(rec(1, 0, 1.0)) + "\n"
    out.write_text(text)
    with pytest.raises(OutputError, match=r"out.jsonl:2: not a rollout record"):
        scan_output(out)
    assert out.read_text() == text


def test_failures_count_per_pair(tmp_path):
    path = tmp_path / "f.jsonl"
    with AppendWriter(path) as w:
        for _ in range(2):
            w.write({"task_index": 1, "repeat_index": 0, "error": "boom"})
        w.write({"task_index": 2, "repeat_index": 1, "error": "boom"})
    assert read_failures(path) == {(1, 0): 2, (2, 1): 1}
    assert read_failures(tmp_path / "none.jsonl") == {}


def test_a_second_writer_of_the_same_output_is_refused(tmp_path):
    from prime_rl.collect.store import exclusive

    out = tmp_path / "out.jsonl"
    with exclusive(out):
        second = exclusive(out)
        with pytest.raises(OutputError, match="being written by another process"):
            second.__enter__()
    with exclusive(out):  # released
        pass


def test_the_same_output_through_a_symlink_is_refused_too(tmp_path):
    """Old code locked by the name given: a second run via a symlink wrote the same file."""
    from prime_rl.collect.store import exclusive

    out = tmp_path / "real" / "out.jsonl"
    out.parent.mkdir()
    out.touch()
    (tmp_path / "alias.jsonl").symlink_to(out)
    (tmp_path / "dir_alias").symlink_to(out.parent)
    with exclusive(out):
        for other in (tmp_path / "alias.jsonl", tmp_path / "dir_alias" / "out.jsonl"):
            with pytest.raises(OutputError, match="being written by another process"):
                exclusive(other).__enter__()
