"""prime_rl.trainer.data: whole samples packed into micro-batches within the token budget."""

from __future__ import annotations

import torch
from tests.support.samples import SAMPLES

from prime_rl.trainer.data import micro_batches
from prime_rl.transport.rollouts import (
    RolloutBatch,
)


def test_micro_batches_pack_whole_samples_within_budget():
    batch = RolloutBatch.from_samples(SAMPLES)  # lengths 5, 3, 4
    mbs = micro_batches(batch, token_budget=8)
    assert [mb.input_ids.numel() for mb in mbs] == [8, 4]
    assert mbs[0].sample_ids.tolist() == [0, 0, 0, 0, 0, 1, 1, 1] and mbs[0].num_samples == 2
    assert torch.equal(torch.cat([mb.input_ids for mb in mbs]), batch.input_ids)
    # a sample longer than the budget gets a micro-batch of its own
    assert [mb.input_ids.numel() for mb in micro_batches(batch, token_budget=2)] == [5, 3, 4]
