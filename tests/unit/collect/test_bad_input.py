"""Bad lines of a task file, in real runs against the fake server: blank lines and empty prompts
are rejected (task indices stay line numbers), every rejected line is written to
``<stem>_rejects.jsonl`` with its line number and reason (rewritten by each run, removed once the
input is clean), and ``--max_bad_lines`` stops a run whose input is mostly broken before any
request is sent (exit code 2 from the CLI)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from loguru import logger
from tests.support.collect import collect_config, keys, write_tasks
from tests.support.http_server import LocalTestServer

from prime_rl.collect import main as collect_main
from prime_rl.collect.runner import collect
from prime_rl.collect.tasks import InputError, scan_tasks
from prime_rl.envs.registry import load_env


def task(i: int) -> str:
    return json.dumps({"id": f"t{i}", "prompt": f"Say vowels, number {i}."})


MIXED: list[bytes] = [
    task(0).encode(),  # 1
    b"",  # 2: blank
    b"   \t",  # 3: whitespace only
    task(3).encode(),  # 4
    b'{"id": "t4", "prompt": ',  # 5: not JSON
    b"[1, 2]",  # 6: not an object
    json.dumps({"id": "t6"}).encode(),  # 7: no prompt
    json.dumps({"id": "t7", "prompt": ""}).encode(),  # 8: empty prompt
    json.dumps({"id": "t8", "prompt": "   \n "}).encode(),  # 9: blank prompt
    json.dumps({"id": "t9", "messages": []}).encode(),  # 10: no messages
    json.dumps(  # 11: only a system message has content
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " "}]}
    ).encode(),
    task(11).encode(),  # 12
    b"\xff\xfe not utf-8",  # 13
    json.dumps({"id": "t13", "messages": [{"role": "user", "content": "Say a."}]}).encode(),  # 14
]
VALID = [0, 3, 11, 13]
REJECTED = {
    2: "blank line",
    3: "blank line",
    5: "not valid JSON",
    6: "expected a JSON object, got list",
    7: "no prompt",
    8: "empty prompt: field 'prompt' is blank",
    9: "empty prompt: field 'prompt' is blank",
    10: "field 'messages' must be a string or a non-empty list",
    11: "empty prompt: no message of field 'messages' has content",
    13: "not valid JSON",
}


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def rejects_of(tmp: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp / "out_rejects.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def warnings():
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(m.record["message"]), level="WARNING")
    yield seen
    logger.remove(sink)


def test_every_bad_line_is_rejected_with_its_line_number_and_reason(tmp_path, warnings):
    write_lines(tmp_path / "tasks.jsonl", MIXED)
    with LocalTestServer() as server:
        result = asyncio.run(collect(collect_config(server.base_url, tmp_path)))
        sent = server.state.requests
    # only the valid lines were asked for, under their zero-based line numbers
    assert sorted(k[0] for k in keys(tmp_path / "out.jsonl")) == VALID and sent == len(VALID)
    rejects = rejects_of(tmp_path)
    assert [r["line"] for r in rejects] == sorted(REJECTED)
    for r in rejects:
        assert r["reason"].startswith(REJECTED[r["line"]]), r
        assert set(r) == {"line", "reason", "raw"}
    assert rejects[0]["raw"] == "" and rejects[1]["raw"] == "   \t"
    assert rejects[2]["raw"] == '{"id": "t4", "prompt": '
    assert rejects[-1]["raw"] == "\ufffd\ufffd not utf-8"
    assert result.bad_lines == len(REJECTED) == 10
    assert "10 bad input lines (in out_rejects.jsonl)" in result.summary()
    assert any("the 10 rejected lines with their reasons are in" in w for w in warnings)
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_clean_input_leaves_no_rejects_file_and_a_final_empty_line_is_a_blank_line(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 3)  # ends with a newline: that is not a blank line
    with LocalTestServer() as server:
        clean = asyncio.run(collect(collect_config(server.base_url, tmp_path)))
        assert clean.bad_lines == 0 and not (tmp_path / "out_rejects.jsonl").exists()
        assert "bad input lines (in" not in clean.summary()
        with open(tmp_path / "tasks.jsonl", "a") as f:
            f.write("\n")  # an empty fourth line
        again = asyncio.run(collect(collect_config(server.base_url, tmp_path)))
    assert again.bad_lines == 1 and again.already_done == 3 and again.written == 0
    assert rejects_of(tmp_path) == [{"line": 4, "reason": "blank line", "raw": ""}]


def test_more_than_twenty_bad_lines_are_all_in_the_rejects_file(tmp_path, warnings):
    lines = [task(i).encode() if i % 7 == 0 else b"{bad %d" % i for i in range(35)]  # 5 valid, 30 bad
    lines[1] = b"{" + "\u00e9".encode() * 3000  # a long line is quoted by its first 500 characters
    write_lines(tmp_path / "tasks.jsonl", lines)
    with LocalTestServer() as server:
        result = asyncio.run(collect(collect_config(server.base_url, tmp_path)))
    bad = [i + 1 for i in range(35) if i % 7]
    assert [r["line"] for r in rejects_of(tmp_path)] == bad and result.bad_lines == 30
    assert all(r["reason"].startswith("not valid JSON") for r in rejects_of(tmp_path))
    assert rejects_of(tmp_path)[0]["raw"] == "{" + "\u00e9" * 499
    assert sorted(k[0] for k in keys(tmp_path / "out.jsonl")) == [0, 7, 14, 21, 28]
    listed = [w for w in warnings if "tasks.jsonl:" in w]
    assert [int(w.split("tasks.jsonl:")[1].split(":")[0]) for w in listed] == bad[:20]
    (more,) = [w for w in warnings if w.startswith("... and")]
    assert more == (
        f"... and 10 more; all 30 rejected lines with their reasons are in {tmp_path / 'out_rejects.jsonl'}"
    )


def test_too_many_bad_lines_stop_the_run_before_any_request_and_leave_the_output_alone(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 4)
    with LocalTestServer() as earlier:
        asyncio.run(collect(collect_config(earlier.base_url, tmp_path)))
    out = tmp_path / "out.jsonl"
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("out")}
    lines = [task(i).encode() for i in range(4)] + [b"not json"] * 3 + [b""] * 3  # 6 bad lines
    write_lines(tmp_path / "tasks.jsonl", lines)
    with LocalTestServer() as server:
        with pytest.raises(InputError) as err:
            asyncio.run(collect(collect_config(server.base_url, tmp_path, "--max_bad_lines", "5")))
        assert server.state.requests == 0
        msg = str(err.value)
        assert str(tmp_path / "tasks.jsonl") in msg and "6 bad lines" in msg and "--max_bad_lines 5" in msg
        assert str(tmp_path / "out_rejects.jsonl") in msg
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name in before} == before
        assert [r["line"] for r in rejects_of(tmp_path)] == [5, 6, 7, 8, 9, 10]
        # at the limit (and with none) it runs: the valid tasks are all there already
        at_limit = asyncio.run(collect(collect_config(server.base_url, tmp_path, "--max_bad_lines", "6")))
        unlimited = asyncio.run(collect(collect_config(server.base_url, tmp_path, "--max_bad_lines", "none")))
        assert server.state.requests == 0
    assert at_limit.bad_lines == unlimited.bad_lines == 6 and at_limit.already_done == 4
    assert out.read_bytes() == before["out.jsonl"]


def test_a_resume_after_fixing_the_input_removes_the_stale_rejects_file(tmp_path):
    lines = [task(i).encode() for i in range(5)]
    lines[1], lines[3] = b"", json.dumps({"id": "t3", "prompt": ""}).encode()
    write_lines(tmp_path / "tasks.jsonl", lines)
    with LocalTestServer() as server:
        first = asyncio.run(collect(collect_config(server.base_url, tmp_path)))
        assert [r["line"] for r in rejects_of(tmp_path)] == [2, 4] and first.written == 3
        write_tasks(tmp_path / "tasks.jsonl", 5)  # fixed in place: every index is kept
        fixed = asyncio.run(collect(collect_config(server.base_url, tmp_path)))
        sent = server.state.requests
    assert not (tmp_path / "out_rejects.jsonl").exists() and fixed.bad_lines == 0
    assert fixed.already_done == 3 and fixed.written == 2 and sent == 5
    assert sorted(k[0] for k in keys(tmp_path / "out.jsonl")) == [0, 1, 2, 3, 4]


def test_strict_stops_at_a_blank_line_and_records_it(tmp_path):
    write_lines(tmp_path / "tasks.jsonl", [task(0).encode(), b" ", task(2).encode()])
    with LocalTestServer() as server:
        with pytest.raises(InputError, match=r"tasks.jsonl:2: blank line \(--strict\)"):
            asyncio.run(collect(collect_config(server.base_url, tmp_path, "--strict")))
        assert server.state.requests == 0
    assert rejects_of(tmp_path) == [{"line": 2, "reason": "blank line", "raw": " "}]
    assert not (tmp_path / "out.jsonl").exists()


def test_the_cli_exits_2_naming_the_limit_and_the_rejects_file(tmp_path, monkeypatch):
    errors: list[str] = []
    sink = logger.add(lambda m: errors.append(m.record["message"]), level="ERROR")
    monkeypatch.setattr(collect_main, "setup_collect_logging", lambda *a, **k: None)  # keep the test's sinks
    write_lines(tmp_path / "tasks.jsonl", [task(0).encode(), b"{", b"[]", b"", task(4).encode()])
    with LocalTestServer() as server:
        argv = [
            "--input",
            str(tmp_path / "tasks.jsonl"),
            "--output",
            str(tmp_path / "out.jsonl"),
            "--base_urls",
            server.base_url,
            "--model",
            "m",
            "--no-progress",
            "--max-bad-lines",
            "2",
        ]
        try:
            with pytest.raises(SystemExit) as exit_:
                collect_main.main(argv)
        finally:
            logger.remove(sink)
        assert server.state.requests == 0
    assert exit_.value.code == 2
    (msg,) = errors
    assert "3 bad lines, more than --max_bad_lines 2" in msg and "out_rejects.jsonl" in msg
    assert [r["line"] for r in rejects_of(tmp_path)] == [2, 3, 4]
    assert not (tmp_path / "out.jsonl").exists()


def test_empty_prompts_are_rejected_whatever_field_or_env_builds_them(tmp_path):
    rows = [
        {"question": "", "answer": "1"},  # math adds a system prompt: the question is still empty
        {"question": "1+1?", "answer": "2"},
        {"responses_create_params": {"input": "  "}, "answer": "1"},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}], "answer": "1"},
        {
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "answer": "1",
        },
        {"messages": [{"role": "system", "content": "Solve."}], "answer": "1"},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sel = scan_tasks(path, load_env("math"), rejects=tmp_path / "rejects.jsonl")
    assert list(sel.selected) == [1, 4] and sel.rejects == tmp_path / "rejects.jsonl"
    assert [(i.line, i.problem) for i in sel.issues] == [
        (1, "empty prompt: field 'question' is blank"),
        (3, "empty prompt: field 'responses_create_params.input' is blank"),
        (4, "empty prompt: no message of field 'messages' has content (system messages aside)"),
        (6, "empty prompt: no message of field 'messages' has content (system messages aside)"),
    ]
    written = (tmp_path / "rejects.jsonl").read_text().splitlines()
    assert [json.loads(x)["line"] for x in written] == [1, 3, 4, 6]
