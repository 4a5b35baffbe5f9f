"""prime_rl.collect.tasks: bad input lines by line number, required fields, limit then shard."""

from __future__ import annotations

import json

import pytest

from prime_rl.collect.tasks import InputError, Pairs, iter_tasks, scan_tasks
from prime_rl.envs.registry import load_env


def write_tasks(path, n: int, bad: dict[int, str] | None = None):
    lines = []
    for i in range(n):
        lines.append((bad or {}).get(i) or json.dumps({"id": i, "prompt": f"task {i}", "answer": str(i)}))
    path.write_text("\n".join(lines) + "\n")


def test_bad_task_lines_are_reported_with_line_numbers(tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, 6, {1: "{oops", 3: json.dumps({"id": 3}), 4: "[1, 2]"})
    sel = scan_tasks(path, None)
    assert [(i.line, i.problem.split(" (")[0].split(":")[0]) for i in sel.issues] == [
        (2, "not valid JSON"),
        (4, "no prompt"),
        (5, "expected a JSON object, got list"),
    ]
    assert list(sel.selected) == [0, 2, 5] and sel.valid_total == 3
    with pytest.raises(InputError, match=r"tasks.jsonl:2: not valid JSON.*--strict"):
        scan_tasks(path, None, strict=True)


def test_a_task_with_nan_or_infinity_is_a_bad_line(tmp_path):
    """Python's json takes NaN and Infinity, and reads 1e400 as inf; echoed into the rollouts they
    made lines that jq and other JSON readers refuse. Such a task line is rejected, named by line."""
    path = tmp_path / "tasks.jsonl"
    bad = {
        1: '{"prompt": "p", "answer": NaN}',
        2: '{"prompt": "p", "w": -Infinity}',
        3: '{"prompt": "p", "w": -1e400}',
    }
    write_tasks(path, 5, bad)
    sel = scan_tasks(path, None)
    assert [(i.line, i.problem) for i in sel.issues] == [
        (2, "not valid JSON (NaN is not a JSON number)"),
        (3, "not valid JSON (-Infinity is not a JSON number)"),
        (4, "not valid JSON (-1e400 is too large for a number here)"),
    ]
    assert list(sel.selected) == [0, 4]


def test_env_required_fields_are_checked(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        json.dumps({"question": "1+1?", "answer": "2"}) + "\n" + json.dumps({"question": "2+2?"}) + "\n"
    )
    sel = scan_tasks(path, load_env("math"))
    assert list(sel.selected) == [0]
    assert sel.issues[0].line == 2 and "missing field 'answer'" in sel.issues[0].problem
    ((_, _, messages),) = list(iter_tasks(path, {0}, load_env("math")))
    assert messages[0]["role"] == "system" and messages[-1] == {"role": "user", "content": "1+1?"}


def test_limit_then_shard_is_deterministic(tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, 10, {2: "{bad"})
    full = list(scan_tasks(path, None, limit=6).selected)
    assert full == [0, 1, 3, 4, 5, 6]
    shards = [list(scan_tasks(path, None, limit=6, shard=(i, 3)).selected) for i in range(3)]
    assert sorted(sum(shards, [])) == full
    assert all(t % 3 == i for i, s in enumerate(shards) for t in s)
    assert scan_tasks(path, None, shard=(1, 3)).shard_total == 3  # 1, 4, 7


def test_pairs_hold_what_is_left_to_do_per_task_and_feed_iter_tasks(tmp_path):
    todo = Pairs(repeats=3)
    for task, repeat in [(5, 0), (5, 2), (2, 1), (5, 2)]:
        todo.add(task, repeat)
    assert (todo.count, len(todo), todo.last) == (3, 2, 5)
    assert todo.repeats_of(5) == [0, 2] and todo.repeats_of(2) == [1] and todo.repeats_of(9) == []
    assert 5 in todo and 2 in todo and 3 not in todo and 99 not in todo and -1 not in todo
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, 8)
    assert [t for t, _, _ in iter_tasks(path, todo, None)] == [2, 5]
