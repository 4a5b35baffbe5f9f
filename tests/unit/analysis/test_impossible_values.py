"""Values no run can have, repeated step lines and unknown tags, each inserted alone into a healthy
run's orchestrator.log: counted and named by file:line, never silently kept (the rev_v reviewer's
D5, D7, D8). Each test failed on the code before its fix."""

from __future__ import annotations

from pathlib import Path

from tests.support.synthetic_logs import make_run

AT = 16
"""Lines are inserted after this line of the healthy run's orchestrator.log (step 2's batch.done),
with its timestamp: the new lines are lines AT + 1, AT + 2, ..."""


def _run_with(tmp_path: Path, *lines: str, at: int = AT) -> tuple[Path, Path]:
    """The healthy run's logs with ``lines`` (tagged parts) inserted after line ``at`` of
    orchestrator.log; (the logs' directory, orchestrator.log)."""
    logs = tmp_path / "logs"
    log = make_run("healthy", seed=1).write(logs)["orchestrator"]
    text = log.read_text().split("\n")
    stamp = text[at - 1][:23]
    text[at:at] = [f"{stamp} | INFO    | {line}" for line in lines]
    log.write_text("\n".join(text))
    return logs, log


def test_an_unknown_tag_is_named_by_its_first_line_and_an_overlong_one_is_counted(tmp_path, analyze):
    long_tag = "z" * 5000
    logs, log = _run_with(
        tmp_path, "[frobnicate] thing.done x=1", f"[{long_tag}] thing.done x=1", "[frobnicate] thing.done x=2"
    )
    summary, md = analyze([logs], tmp_path / "out")
    long_name = "z" * 40 + "... (5000 characters)"
    assert summary["unknown_tags"] == {"frobnicate": 2, long_name: 1}
    assert summary["unknown_tag_lines"] == {"frobnicate": f"{log}:{AT + 1}", long_name: f"{log}:{AT + 2}"}
    assert f"[frobnicate] x2 (first at {log}:{AT + 1})" in md
    assert f"[{long_name}] x1 (first at {log}:{AT + 2})" in md
    assert "3 line(s) with a tag the analyzer does not read" in md
