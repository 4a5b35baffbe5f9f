"""prime_rl.orchestrator.batch: samples balanced over ranks by tokens, one complete file per rank."""

from __future__ import annotations

import pytest

from prime_rl.orchestrator.batch import Rollout, assign_to_ranks, write_step_batches
from prime_rl.transport.rollouts import read_rollout_batch


def rollout(n_prompt: int, n_completion: int, adv: float = 0.0) -> Rollout:
    return Rollout(
        list(range(1, n_prompt + 1)), [7] * n_completion, [-1.0] * n_completion, "x", False, advantage=adv
    )


def test_rank_assignment_balances_tokens():
    rs = [rollout(2, n) for n in (10, 9, 8, 2, 2, 1)]
    ranks = assign_to_ranks(rs, 2)
    loads = [sum(r.num_tokens for r in rank) for rank in ranks]
    assert loads == [23, 21]  # greedy longest-first: 12,4,4,3 vs 11,10
    assert sorted(id(r) for rank in ranks for r in rank) == sorted(id(r) for r in rs)


def test_step_batches_are_complete_files_per_rank(tmp_path):
    rs = [rollout(3, 4, adv=0.5), rollout(2, 5, adv=-0.5), rollout(4, 1, adv=0.0)]
    paths = write_step_batches(tmp_path / "step_0", 0, rs, world_size=2, temperature=0.7)
    assert [p.name for p in paths] == ["rank_0.safetensors", "rank_1.safetensors"]
    batches = [read_rollout_batch(p, vocab_size=100) for p in paths]
    assert sum(b.num_samples for b in batches) == 3 and all(b.temperature == 0.7 for b in batches)
    assert sum(b.num_loss_tokens for b in batches) == 10
    with pytest.raises(ValueError, match="cannot feed 4 trainer ranks"):
        write_step_batches(tmp_path / "step_1", 1, rs, world_size=4, temperature=1.0)
