"""``truncated_reward``: a completion cut off at max_tokens earns that reward, not its score."""

from __future__ import annotations

import json

import pytest
from tests.support.orchestrator_run import MAX_STEPS, run
from tests.support.policy_server import PolicyServer


def orchestrator_rows(tmp_path) -> list[dict]:
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["process"] == "orchestrator"]


@pytest.mark.parametrize("truncated_reward", [None, -1.0])
def test_truncated_completions_earn_the_truncated_reward(tmp_path, truncated_reward):
    # the fake answers "xxxx": the toy env scores it 0 (no vowels); half of them are truncated
    with PolicyServer() as server:
        server.truncate_odd = True
        run(tmp_path, [server], truncated_reward=truncated_reward)
    rows = orchestrator_rows(tmp_path)
    assert len(rows) == MAX_STEPS
    for row in rows:
        assert row["trunc_pct"] == 50.0
        expected = 0.0 if truncated_reward is None else truncated_reward / 2
        assert row["reward_mean"] == pytest.approx(expected)
