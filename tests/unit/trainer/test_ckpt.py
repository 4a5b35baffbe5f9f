"""Trainer checkpoints: only complete ones are resumed, and they carry the lr scheduler's state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from loguru import logger

from prime_rl.paths import CheckpointError, mark_stable
from prime_rl.trainer import ckpt
from prime_rl.trainer.ckpt import complete_steps, resolve_resume_step
from prime_rl.trainer.config import SchedulerConfig
from prime_rl.trainer.model import World
from prime_rl.trainer.train import build_scheduler

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

WORLD = World(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
MAX_STEPS = 10
LR = 1e-2


def _fresh(sched: SchedulerConfig):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    return model, optimizer, build_scheduler(optimizer, sched, MAX_STEPS)


def _run(model, optimizer, scheduler, steps: range) -> list[float]:
    """Optimizer steps as the trainer takes them; per step the scheduler's lr and the optimizer's."""
    seen = []
    for step in steps:
        x = torch.linspace(-1, 1, 12).reshape(3, 4) * (step + 1)
        optimizer.zero_grad(set_to_none=True)
        model(x).pow(2).sum().backward()
        seen += [scheduler.get_last_lr()[0], optimizer.param_groups[0]["lr"]]
        optimizer.step()
        scheduler.step()
    return seen


SCHEDULES = {
    "mid-warmup": (SchedulerConfig(type="cosine", warmup_steps=4, min_lr_ratio=0.1), 2),
    "mid-decay": (SchedulerConfig(type="linear", warmup_steps=2), 7),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_resumed_run_continues_the_lr_schedule_exactly(tmp_path, name):
    sched, at = SCHEDULES[name]
    full_model, *full = _fresh(sched)
    uninterrupted = _run(full_model, *full, range(MAX_STEPS))
    assert len(set(uninterrupted)) > 3  # the schedule does move

    model, optimizer, scheduler = _fresh(sched)
    before = _run(model, optimizer, scheduler, range(at))
    ckpt.save_checkpoint(tmp_path, at, model, optimizer, {"total_tokens": 7}, WORLD, scheduler=scheduler)

    part = tmp_path / f"step_{at}" / "trainer"
    progress = json.loads((part / "progress.json").read_text())
    state = progress["scheduler"]
    assert state["last_epoch"] == at and state["_step_count"] == at + 1
    assert state["_last_lr"] == pytest.approx([uninterrupted[2 * at]])
    assert "lr_lambdas" not in state
    assert not [p for p in part.iterdir() if p.suffix not in {".safetensors", ".json", ""}], list(
        part.iterdir()
    )

    model2, optimizer2, scheduler2 = _fresh(sched)  # a new process: schedule at step 0
    assert scheduler2.get_last_lr()[0] != pytest.approx(uninterrupted[2 * at])
    loaded = ckpt.load_checkpoint(tmp_path, at, model2, optimizer2, WORLD, scheduler=scheduler2)
    assert loaded["total_tokens"] == 7 and loaded["step"] == at
    after = _run(model2, optimizer2, scheduler2, range(at, MAX_STEPS))

    assert before + after == uninterrupted  # exactly: the same lr at every step
    for a, b in zip(full_model.parameters(), model2.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-7)


def test_checkpoint_without_scheduler_state_derives_it_from_the_step(tmp_path):
    sched, at = SCHEDULES["mid-decay"]
    uninterrupted = _run(*_fresh(sched), range(MAX_STEPS))
    model, optimizer, scheduler = _fresh(sched)
    _run(model, optimizer, scheduler, range(at))
    ckpt.save_checkpoint(tmp_path, at, model, optimizer, {}, WORLD)  # older format: no scheduler
    progress_file = Path(tmp_path / f"step_{at}" / "trainer" / "progress.json")
    assert "scheduler" not in json.loads(progress_file.read_text())

    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        model2, optimizer2, scheduler2 = _fresh(sched)
        ckpt.load_checkpoint(tmp_path, at, model2, optimizer2, WORLD, scheduler=scheduler2)
    finally:
        logger.remove(sink)
    assert any("no scheduler state" in w for w in warnings), warnings
    assert scheduler2.state_dict() == scheduler.state_dict()
    assert _run(model2, optimizer2, scheduler2, range(at, MAX_STEPS)) == uninterrupted[2 * at :]


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


def test_overwriting_a_checkpoint_unmarks_it_before_deleting_anything(tmp_path, monkeypatch):
    import shutil

    sched, _ = SCHEDULES["mid-decay"]
    model, optimizer, scheduler = _fresh(sched)
    final = ckpt.save_checkpoint(tmp_path, 3, model, optimizer, {}, WORLD, scheduler=scheduler)
    assert complete_steps(tmp_path) == [3]

    real_rmtree = shutil.rmtree
    stable_when_removing: list[bool] = []

    def crashing_rmtree(path, *args, **kwargs):
        if Path(path) != final:
            return real_rmtree(path, *args, **kwargs)
        stable_when_removing.append((final / "STABLE").exists())
        next(p for p in final.iterdir() if p.name != "STABLE").unlink()  # one file gone, then a crash
        raise OSError("disk went away mid-delete")

    monkeypatch.setattr(ckpt.shutil, "rmtree", crashing_rmtree)
    with pytest.raises(OSError, match="mid-delete"):
        ckpt.save_checkpoint(tmp_path, 3, model, optimizer, {}, WORLD, scheduler=scheduler)
    assert stable_when_removing == [False]  # the marker went first
    assert complete_steps(tmp_path) == []  # the half-deleted step is not offered for resume

    monkeypatch.setattr(ckpt.shutil, "rmtree", real_rmtree)  # a clean overwrite is complete again
    ckpt.save_checkpoint(tmp_path, 3, model, optimizer, {"total_tokens": 1}, WORLD, scheduler=scheduler)
    assert complete_steps(tmp_path) == [3]
    assert json.loads((final / "progress.json").read_text())["total_tokens"] == 1
