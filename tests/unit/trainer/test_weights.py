"""prime_rl.trainer.weights: the shard plan respects the byte budget."""

from __future__ import annotations

import torch

from prime_rl.trainer.weights import plan_shards


def test_shard_plan_respects_the_byte_budget():
    sd = {"a": torch.zeros(10), "b": torch.zeros(10), "c": torch.zeros(100), "d": torch.zeros(1)}
    assert plan_shards(sd, max_shard_bytes=80) == [["a", "b"], ["c"], ["d"]]
    assert plan_shards(sd, max_shard_bytes=10**6) == [["a", "b", "c", "d"]]
