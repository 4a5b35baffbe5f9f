"""prime_rl.transport.rollouts: the rollout batch file, its validation and the wait for it."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from tests.support.samples import SAMPLES

from prime_rl.transport.rollouts import (
    FORMAT,
    RolloutBatch,
    RolloutFormatError,
    RolloutTimeoutError,
    read_rollout_batch,
    wait_for_rollouts,
    write_rollout_batch,
)


def test_batch_round_trip(tmp_path):
    batch = RolloutBatch.from_samples(SAMPLES, temperature=0.8, step=4, rank=1)
    assert batch.num_tokens == 12 and batch.num_samples == 3 and batch.num_loss_tokens == 6
    assert batch.position_ids.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3]
    path = tmp_path / "rank_1.safetensors"
    write_rollout_batch(path, batch)
    back = read_rollout_batch(path, vocab_size=13)
    assert back.temperature == 0.8 and back.step == 4 and back.rank == 1
    for name, t in batch.tensors().items():
        assert torch.equal(getattr(back, name), t), name
    assert [p.name for p in tmp_path.iterdir()] == ["rank_1.safetensors"]  # no temp file left


def write_raw(path, tensors, meta=None):
    meta = {"format": FORMAT, "step": 0, "temperature": 1.0} if meta is None else meta
    save_file(tensors, str(path), metadata={"prime_rl": json.dumps(meta)} if meta != "none" else None)


@pytest.mark.parametrize(
    "mutate,field,fragment",
    [
        (lambda t: t.pop("advantages"), "advantages", "missing"),
        (lambda t: t.__setitem__("loss_mask", t["loss_mask"].long()), "loss_mask", "dtype"),
        (lambda t: t.__setitem__("input_ids", t["input_ids"][None]), "input_ids", "one dimension"),
        (
            lambda t: t.__setitem__("inference_logprobs", t["inference_logprobs"][:-1]),
            "inference_logprobs",
            "length",
        ),
        (lambda t: t.__setitem__("sample_lengths", t["sample_lengths"] + 1), "sample_lengths", "sum to"),
        (lambda t: t["input_ids"].__setitem__(0, 99), "input_ids", "outside the vocabulary"),
        (lambda t: t["input_ids"].__setitem__(0, -1), "input_ids", "outside the vocabulary"),
        (lambda t: t["position_ids"].__setitem__(1, 5), "position_ids", "0..len-1"),
        (lambda t: t["advantages"].__setitem__(2, float("nan")), "advantages", "NaN"),
        (lambda t: t.__setitem__("extra", torch.zeros(1)), "extra", "unexpected"),
    ],
)
def test_bad_files_name_file_and_field(tmp_path, mutate, field, fragment):
    tensors = {k: v.clone() for k, v in RolloutBatch.from_samples(SAMPLES).tensors().items()}
    mutate(tensors)
    path = tmp_path / "rank_0.safetensors"
    write_raw(path, tensors)
    with pytest.raises(RolloutFormatError) as e:
        read_rollout_batch(path, vocab_size=13)
    assert str(path) in str(e.value) and f"'{field}'" in str(e.value) and fragment in str(e.value)


def test_bad_metadata_and_garbage(tmp_path):
    tensors = RolloutBatch.from_samples(SAMPLES).tensors()
    path = tmp_path / "r.safetensors"
    write_raw(path, tensors, meta="none")
    with pytest.raises(RolloutFormatError, match="prime_rl'.*missing"):
        read_rollout_batch(path)
    write_raw(path, tensors, meta={"format": "other"})
    with pytest.raises(RolloutFormatError, match="format"):
        read_rollout_batch(path)
    write_raw(path, tensors, meta={"format": FORMAT, "temperature": 0})
    with pytest.raises(RolloutFormatError, match="temperature"):
        read_rollout_batch(path)
    path.write_bytes(b"\x00" * 20)
    with pytest.raises(RolloutFormatError, match="not a readable safetensors"):
        read_rollout_batch(path)


def test_wait_names_the_missing_file(tmp_path):
    with pytest.raises(RolloutTimeoutError, match="rank_0.safetensors"):
        wait_for_rollouts(tmp_path / "step_3" / "rank_0.safetensors", timeout_s=0.1, poll_s=0.02)


def test_policy_steps_round_trip_and_are_optional(tmp_path):
    samples = [{**s, "policy_step": 3 - i} for i, s in enumerate(SAMPLES)]
    path = tmp_path / "with.safetensors"
    write_rollout_batch(path, RolloutBatch.from_samples(samples, step=4))
    assert read_rollout_batch(path).policy_steps.tolist() == [3 - i for i in range(len(SAMPLES))]
    write_rollout_batch(tmp_path / "without.safetensors", RolloutBatch.from_samples(SAMPLES, step=4))
    assert read_rollout_batch(tmp_path / "without.safetensors").policy_steps is None
    with pytest.raises(ValueError, match="every sample or for none"):
        RolloutBatch.from_samples([samples[0], SAMPLES[1]])


@pytest.mark.parametrize(
    "policy,fragment",
    [([5, 4], "within 0..4"), ([-1, 0], "within 0..4"), ([1], "length 1, but sample_lengths has 2")],
)
def test_policy_steps_outside_the_batch_step_are_refused(tmp_path, policy, fragment):
    batch = RolloutBatch.from_samples(SAMPLES[:2], step=4)
    batch.policy_steps = torch.tensor(policy, dtype=torch.int64)
    path = tmp_path / "bad.safetensors"
    write_rollout_batch(path, batch)
    with pytest.raises(RolloutFormatError, match=fragment) as e:
        read_rollout_batch(path)
    assert "'policy_steps'" in str(e.value) and str(path) in str(e.value)
