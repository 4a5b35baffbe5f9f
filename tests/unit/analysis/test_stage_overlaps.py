"""Stages that overlap in time are counted as wall time, and the verdicts that read them name who
waits on whom: episodes that run side by side (their summed env_ms was taken as wall time: 317% of
a run), the waits after a 429 inside the batches (added beside generation: the orchestrator's rows
made 129%), summed scoring that proves parallel workers (taken as wall time when their number is
not logged), and a healthy run's limit (named from the trainer's compute share alone)."""

from __future__ import annotations

import pytest
from tests.support.synthetic_logs import make_run


def test_rate_limit_waits_are_a_part_of_generation_so_the_orchestrator_s_rows_add_up(tmp_path, analyze):
    # 10 requests of each ~1.5 s batch wait 500 ms after a 429, inside the batch: 10.0 s of a 34.8 s run,
    # listed beside generation's 86.7%: the orchestrator's rows made 128.8%
    summary, md = analyze(
        make_run("rate_limited", steps=20).write(tmp_path / "logs").values(), tmp_path / "out"
    )
    rows = [s for s in summary["stages"] if s["process"] == "orchestrator"]
    names = [s["name"] for s in rows]
    assert names[:2] == ["generation", "rate-limit waits (429)"], names
    assert rows[1]["within"] == "generation" and rows[1]["total_ms"] == pytest.approx(10000.0)
    assert [s["name"] for s in rows if s["within"]] == ["rate-limit waits (429)"]
    assert sum(s["share"] for s in rows if not s["within"]) == pytest.approx(1.0, abs=0.01)
    assert "| orchestrator | (within generation) rate-limit waits (429) | 10.0 | 28.8% |" in md
    assert 'A row marked "(within generation)" is a part of generation\'s time, not added to it.' in md
