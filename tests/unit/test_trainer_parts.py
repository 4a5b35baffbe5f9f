"""Rollout file format, micro-batching, LR schedule, shard planning, retention, resume choice."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from prime_rl.config import ConfigError, load_config
from prime_rl.paths import CheckpointError, mark_stable
from prime_rl.trainer.ckpt import complete_steps, resolve_resume_step
from prime_rl.trainer.config import SchedulerConfig, TrainerConfig
from prime_rl.trainer.data import micro_batches
from prime_rl.trainer.train import lr_factor
from prime_rl.trainer.weights import plan_shards
from prime_rl.transport.rollouts import (
    FORMAT,
    RolloutBatch,
    RolloutFormatError,
    RolloutTimeoutError,
    read_rollout_batch,
    wait_for_rollouts,
    write_rollout_batch,
)

SAMPLES = [
    {
        "prompt_ids": [5, 6],
        "completion_ids": [7, 8, 9],
        "completion_logprobs": [-1.0, -2.0, -0.5],
        "advantage": 1.0,
    },
    {"prompt_ids": [10], "completion_ids": [11, 12], "completion_logprobs": [-0.1, -0.2], "advantage": -0.5},
    {"prompt_ids": [3, 4, 5], "completion_ids": [6], "completion_logprobs": [-3.0], "advantage": 0.0},
]


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


def test_micro_batches_pack_whole_samples_within_budget():
    batch = RolloutBatch.from_samples(SAMPLES)  # lengths 5, 3, 4
    mbs = micro_batches(batch, token_budget=8)
    assert [mb.input_ids.numel() for mb in mbs] == [8, 4]
    assert mbs[0].sample_ids.tolist() == [0, 0, 0, 0, 0, 1, 1, 1] and mbs[0].num_samples == 2
    assert torch.equal(torch.cat([mb.input_ids for mb in mbs]), batch.input_ids)
    # a sample longer than the budget gets a micro-batch of its own
    assert [mb.input_ids.numel() for mb in micro_batches(batch, token_budget=2)] == [5, 3, 4]


def test_lr_schedules():
    f = lr_factor(SchedulerConfig(type="constant", warmup_steps=4), 10)
    assert [f(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    lin = lr_factor(SchedulerConfig(type="linear", min_lr_ratio=0.1), 10)
    assert lin(0) == 1.0 and lin(5) == pytest.approx(0.55) and lin(10) == pytest.approx(0.1)
    cos = lr_factor(SchedulerConfig(type="cosine", warmup_steps=2), 12)
    assert cos(1) == 1.0 and cos(2) == 1.0 and cos(7) == pytest.approx(0.5) and cos(12) == pytest.approx(0.0)


def test_shard_plan_respects_the_byte_budget():
    sd = {"a": torch.zeros(10), "b": torch.zeros(10), "c": torch.zeros(100), "d": torch.zeros(1)}
    assert plan_shards(sd, max_shard_bytes=80) == [["a", "b"], ["c"], ["d"]]
    assert plan_shards(sd, max_shard_bytes=10**6) == [["a", "b", "c", "d"]]


def test_resume_picks_only_complete_checkpoints(tmp_path):
    for s, stable in [(2, True), (4, True), (6, False)]:
        part = tmp_path / f"step_{s}" / "trainer"
        part.mkdir(parents=True)
        if stable:
            mark_stable(part)
    for stray in (".step_8.tmp", "step_x", "step_9-old"):  # temporary and foreign names are not steps
        (tmp_path / stray / "trainer").mkdir(parents=True)
        mark_stable(tmp_path / stray / "trainer")
    assert complete_steps(tmp_path) == [2, 4]
    assert resolve_resume_step(tmp_path, None) == 4  # the torn step_6 is never picked up
    assert resolve_resume_step(tmp_path, 2) == 2
    with pytest.raises(CheckpointError, match="incomplete"):
        resolve_resume_step(tmp_path, 6)
    with pytest.raises(CheckpointError, match="does not exist"):
        resolve_resume_step(tmp_path, 9)
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        resolve_resume_step(tmp_path / "nothing", None)


def test_resume_flag_forms_and_weight_retention_bound():
    cfg, _ = load_config(TrainerConfig, ["--resume", "--max_steps", "3"])
    assert cfg.resume.enabled and cfg.resume.step is None and cfg.max_steps == 3
    cfg, _ = load_config(TrainerConfig, ["--resume.step", "3"])
    assert cfg.resume.enabled and cfg.resume.step == 3
    assert not load_config(TrainerConfig, [])[0].resume.enabled
    with pytest.raises(ConfigError, match="sampling|unknown option"):
        load_config(TrainerConfig, ["--sampling", "x"])
    cfg, _ = load_config(TrainerConfig, ["--async_level", "2"])
    assert cfg.weights_keep == 3
    with pytest.raises(ConfigError, match="async_level"):
        load_config(TrainerConfig, ["--async_level", "2", "--weights.keep", "2"])
