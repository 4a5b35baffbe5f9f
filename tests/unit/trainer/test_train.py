"""prime_rl.trainer.train: the learning-rate schedules; resume republishes a torn weight dir."""

from __future__ import annotations

import json
import os

import pytest
from loguru import logger
from tests.support.rollouts import make_samples, write_step

from prime_rl.paths import RunPaths, is_stable
from prime_rl.trainer import train as train_mod
from prime_rl.trainer.config import SchedulerConfig, TrainerConfig
from prime_rl.trainer.train import lr_factor
from prime_rl.transport.weights import verify_weight_dir


def test_lr_schedules():
    f = lr_factor(SchedulerConfig(type="constant", warmup_steps=4), 10)
    assert [f(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    lin = lr_factor(SchedulerConfig(type="linear", min_lr_ratio=0.1), 10)
    assert lin(0) == 1.0 and lin(5) == pytest.approx(0.55) and lin(10) == pytest.approx(0.1)
    cos = lr_factor(SchedulerConfig(type="cosine", warmup_steps=2), 12)
    assert cos(1) == 1.0 and cos(2) == 1.0 and cos(7) == pytest.approx(0.5) and cos(12) == pytest.approx(0.0)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_resume_republishes_a_weight_dir_whose_newest_shard_was_truncated(tiny_model, tmp_path, monkeypatch):
    """The real trainer, in process: one step and a checkpoint; a crash leaves weights/step_1 (the dir the
    resume depends on) with STABLE but a truncated shard; --resume republishes it and trains on."""
    monkeypatch.setattr(train_mod, "setup_logging", lambda *a, **k: None)  # keep pytest's loguru sinks
    paths = RunPaths(tmp_path)
    samples = make_samples(n_prompts=2, vocab_size=2048, seed=5)
    for step in (0, 1):
        write_step(tmp_path, step, samples, tiny_model)
    args = {
        "model": {"name": str(tiny_model)},
        "output_dir": tmp_path,
        "async_level": 0,
        "cpu_threads": 1,
        "ckpt": {"interval": 1},
        "weights": {"max_shard_bytes": 1 << 20, "keep": 2},
    }
    train_mod.train(TrainerConfig(max_steps=1, **args))
    shard = sorted(paths.weights_dir(1).glob("*.safetensors"))[-1]
    size = shard.stat().st_size
    os.truncate(shard, size // 2)
    assert is_stable(paths.weights_dir(1))

    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")
    try:
        train_mod.train(TrainerConfig(max_steps=2, resume=True, **args))
    finally:
        logger.remove(sink)

    assert len(warnings) == 1 and "\n" not in warnings[0].strip()
    assert f"{shard.name}: size mismatch: {size // 2} != {size} bytes" in warnings[0]
    for step in (1, 2):
        assert is_stable(paths.weights_dir(step))
        verify_weight_dir(paths.weights_dir(step))
    assert shard.stat().st_size == size
    rows = [json.loads(x) for x in paths.metrics_file.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]


def test_resume_weights_check_unmarks_a_bad_dir_and_keeps_a_good_one(tmp_path):
    """Before anything loads, rank 0 decides whether weights/step_N must be republished; a dir that
    fails verification (here: published before manifests) loses STABLE so no reader takes it meanwhile."""
    import torch
    from safetensors.torch import save_file

    from prime_rl.paths import mark_stable
    from prime_rl.transport.weights import write_file_manifest

    good, old, gone = tmp_path / "step_1", tmp_path / "step_2", tmp_path / "step_3"
    for d in (good, old):
        d.mkdir()
        save_file({"w": torch.ones(4)}, str(d / "model.safetensors"))
    write_file_manifest(good)
    mark_stable(good)
    mark_stable(old)

    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")
    try:
        assert train_mod.resume_weights_unusable(good) is None
        assert "no STABLE" in train_mod.resume_weights_unusable(gone)
        assert warnings == []
        reason = train_mod.resume_weights_unusable(old)
    finally:
        logger.remove(sink)
    assert "manifest.json: missing" in reason
    assert len(warnings) == 1 and "manifest.json: missing" in warnings[0]
    assert is_stable(good) and not is_stable(old)
