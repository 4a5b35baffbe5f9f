"""Outputs a probe found mishandled, each test failing before: a file that is not an output of ours
given as ``--output`` (its last line was cut, or the whole file taken over), an output path that is
a directory or under a file (a traceback), an output resumed with another task file (two data sets
mixed), a base URL that is no URL (every request failed)."""

from __future__ import annotations

import asyncio
import json

import pytest
from loguru import logger
from tests.support.collect import collect_config, keys, write_tasks
from tests.support.http_server import LocalTestServer
from tests.support.samples import rec

from prime_rl.collect import main as collect_main
from prime_rl.collect.config import CollectConfig
from prime_rl.collect.runner import CollectError, collect
from prime_rl.collect.store import OutputError, scan_output
from prime_rl.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b'{"learning_rate": 0.001, "important": true}', 1),  # a whole JSON line, no record
        (b"my important notes", 1),
        (json.dumps(rec(0, 0, 1.0)).encode() + b"\nsecond line without newline", 2),
    ],
)
def test_a_file_that_is_not_an_output_is_refused_as_it_was(tmp_path, content, line):
    out = tmp_path / "settings.json"
    out.write_bytes(content)
    with pytest.raises(OutputError, match=rf"settings.json:{line}: not a rollout record"):
        scan_output(out)
    assert out.read_bytes() == content and not (tmp_path / "settings_torn.log").exists()


def test_a_torn_first_record_is_still_cut(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"task_index": 0, "repe')  # killed while writing its first record
    state = scan_output(out)
    assert state.records == 0 and state.repaired_bytes > 0 and out.read_bytes() == b""


def test_nul_bytes_a_power_loss_left_at_the_end_are_cut_as_a_torn_write(tmp_path):
    out = tmp_path / "out.jsonl"
    good = json.dumps(rec(0, 0, 1.0)).encode() + b"\n"
    out.write_bytes(good + b"\x00" * 64)
    assert scan_output(out).done == {(0, 0)} and out.read_bytes() == good


def test_a_whole_last_record_without_its_newline_is_counted(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps(rec(0, 0, 1.0)) + "\n" + json.dumps(rec(1, 0, 0.5)))
    state = scan_output(out)
    assert state.done == {(0, 0), (1, 0)} and state.records == 2 and out.read_text().endswith("}\n")


def _cli(argv: list[str], monkeypatch) -> tuple[int, list[str]]:
    errors: list[str] = []
    sink = logger.add(lambda m: errors.append(m.record["message"]), level="ERROR")
    monkeypatch.setattr(collect_main, "setup_collect_logging", lambda *a, **k: None)  # keep the test's sinks
    try:
        with pytest.raises(SystemExit) as exit_:
            collect_main.main(argv)
    finally:
        logger.remove(sink)
    return exit_.value.code, errors


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_an_output_that_cannot_be_a_file_is_a_clear_error(tmp_path, monkeypatch, where):
    write_tasks(tmp_path / "tasks.jsonl", 2)
    if where == "a directory":
        out = tmp_path / "odir.jsonl"
        out.mkdir()
    else:
        (tmp_path / "afile").write_text("x\n")
        out = tmp_path / "afile" / "out.jsonl"
    argv = ["--input", str(tmp_path / "tasks.jsonl"), "--output", str(out), "--env", "toy", "--model", "m"]
    code, errors = _cli([*argv, "--base_urls", "http://127.0.0.1:9", "--no-progress"], monkeypatch)
    assert code == 2 and len(errors) == 1 and str(tmp_path) in errors[0], errors
    assert (tmp_path / "afile").read_text() == "x\n" if where == "under a file" else out.is_dir()


def test_an_output_resumed_with_another_task_file_is_refused(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 3)
    with LocalTestServer() as server:
        asyncio.run(collect(collect_config(server.base_url, tmp_path)))
        before = (tmp_path / "out.jsonl").read_bytes()
        rejects = tmp_path / "out_rejects.jsonl"  # the first run's rejected lines: not the other file's
        rejects.write_text('{"line": 9, "problem": "blank line", "text": ""}\n')
        other = tmp_path / "other.jsonl"
        other.write_text(
            "".join(json.dumps({"id": f"q{i}", "prompt": f"Say q {i}."}) + "\n" for i in range(5))
        )
        with pytest.raises(
            CollectError, match=r"holds records of another task file.*line 1 of .*other.jsonl"
        ):
            asyncio.run(collect(collect_config(server.base_url, tmp_path, tasks=other)))
        assert (tmp_path / "out.jsonl").read_bytes() == before and rejects.read_text().startswith(
            '{"line": 9'
        )
        empty = tmp_path / "one.jsonl"  # the first record's line is past the file's end
        empty.write_text(json.dumps({"id": "q", "prompt": "Say q."}) + "\n")
        write_tasks(tmp_path / "tasks.jsonl", 3)
        first, *rest = before.splitlines(keepends=True)
        moved = json.loads(first) | {"task_index": 7}  # the first record, of line 8
        (tmp_path / "out.jsonl").write_bytes(json.dumps(moved).encode() + b"\n" + b"".join(rest))
        with pytest.raises(CollectError, match=r"task_index 7, and line 8 of .*one.jsonl is past its end"):
            asyncio.run(collect(collect_config(server.base_url, tmp_path, tasks=empty)))
        (tmp_path / "out.jsonl").write_bytes(before)
        # the task file it was collected from resumes as before
        asyncio.run(collect(collect_config(server.base_url, tmp_path, "--num_repeats", "2")))
    assert set(keys(tmp_path / "out.jsonl")) == {(t, r) for t in range(3) for r in range(2)}


@pytest.mark.parametrize("url", ["notaurl", "ftp://x", "http://", "http://h:port"])
def test_a_base_url_that_is_no_http_url_is_refused_at_load(tmp_path, url):
    with pytest.raises(ConfigError, match=r"base_urls.0.*is not an http\(s\) URL"):
        load_config(CollectConfig, ["--input", "t.jsonl", "--output", "o.jsonl", "--base_urls", url])
