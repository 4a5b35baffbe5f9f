"""prime_rl.trainer.publish_async: weights/step_N is written beside the next step, from a host copy
taken at publish time; never two writes in flight; a failed write is raised in the training thread
naming its step; training ends only once the last write is complete."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch
from tests.support.rollouts import make_samples, write_step

from prime_rl.paths import RunPaths, is_stable
from prime_rl.trainer import train as train_mod
from prime_rl.trainer.config import TrainerConfig
from prime_rl.trainer.publish_async import PublishError, StepPublisher
from prime_rl.trainer.weights import WeightPublisher
from prime_rl.transport.weights import verify_weight_dir


class FakeWriter:
    """Stands in for WeightPublisher: records what each write saw and when; slow or failing on demand."""

    def __init__(self, write_s: float = 0.0, fail_at: int | None = None):
        self.write_s, self.fail_at = write_s, fail_at
        self.active = self.most_active = 0
        self.lock = threading.Lock()
        self.seen: dict[int, dict[str, torch.Tensor]] = {}
        self.threads: set[str] = set()
        self.pruned: list[int] = []
        self.ended: dict[int, float] = {}  # step -> time.monotonic() at the end of its write

    def publish(self, state: dict[str, torch.Tensor], step: int, *, background: bool = False):
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            self.threads.add(threading.current_thread().name)
            time.sleep(self.write_s)
            self.ended[step] = time.monotonic()
            if step == self.fail_at:
                raise OSError(28, "No space left on device")
            self.seen[step] = {k: v.clone() for k, v in state.items()}
            return Path(f"step_{step}"), self.write_s * 1000.0, 0
        finally:
            with self.lock:
                self.active -= 1

    def prune(self, keep: int, newest: int) -> list[Path]:
        self.pruned.append(newest)
        return []


def _publisher(writer: FakeWriter) -> tuple[StepPublisher, torch.nn.Linear]:
    model = torch.nn.Linear(4, 3)
    return StepPublisher(writer, model, keep=2, background=True), model  # type: ignore[arg-type]


def test_each_write_sees_the_weights_of_its_step_never_two_in_flight_and_the_wait_is_counted():
    """The writer reads a host copy taken at publish time (the optimizer may change the model at
    once); the next publish waits for the write in flight, and that wait is critical-path time."""
    writer = FakeWriter(write_s=0.3)
    publishing, model = _publisher(writer)
    expected = {}
    timings = []
    called: list[tuple[float, float]] = []  # time.monotonic() when each publish began and returned
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.fill_(float(step))
        expected[step] = model.weight.detach().clone()
        began = time.monotonic()
        timings.append(publishing.publish(model, step))
        called.append((began, time.monotonic()))
        with torch.no_grad():
            model.weight.fill_(-1.0)  # the next optimizer step, while the write runs
    publishing.finish()

    assert writer.most_active == 1
    assert writer.threads and threading.current_thread().name not in writer.threads
    for step in (1, 2, 3):
        torch.testing.assert_close(writer.seen[step]["weight"], expected[step])
    assert writer.pruned == [1, 2, 3]
    assert timings[0].write_wait_ms == 0.0
    for step in (2, 3):
        # the publish of ``step`` could not return before the previous write ended: the wait counts
        # all of that write's time after the call (normally most of its 0.3 s; none if this thread
        # stalled past it), less the few microseconds from the call to the wait (50 ms allowed)
        t, (began, returned) = timings[step - 1], called[step - 1]
        still_writing_ms = (writer.ended[step - 1] - began) * 1000.0
        assert still_writing_ms - 50.0 <= t.write_wait_ms <= t.write_ms <= (returned - began) * 1000.0


def test_a_failed_background_write_is_raised_at_the_next_publish_naming_the_step():
    writer = FakeWriter(fail_at=2)
    publishing, model = _publisher(writer)
    publishing.publish(model, 1)
    publishing.publish(model, 2)
    deadline = time.monotonic() + 10
    with pytest.raises(PublishError, match=r"weights/step_2 failed: OSError: .*No space left on device"):
        while time.monotonic() < deadline:  # never blocks: raises once the write has failed
            publishing.raise_if_failed()
            time.sleep(0.01)
    publishing.publish(model, 3)  # raised once; the next write goes ahead
    publishing.finish()
    assert sorted(writer.seen) == [1, 3]

    writer = FakeWriter(write_s=0.1, fail_at=2)
    publishing, model = _publisher(writer)
    publishing.publish(model, 1)
    publishing.publish(model, 2)
    with pytest.raises(PublishError, match="weights/step_2"):
        publishing.publish(model, 3)
    assert 3 not in writer.seen
    publishing.close()


def test_the_last_write_is_waited_for_and_its_failure_raised_at_the_end():
    writer = FakeWriter(write_s=0.3)
    publishing, model = _publisher(writer)
    publishing.publish(model, 1)
    publishing.finish()
    assert 1 in writer.seen  # complete when finish returns

    writer = FakeWriter(write_s=0.1, fail_at=1)
    publishing, model = _publisher(writer)
    publishing.publish(model, 1)
    with pytest.raises(PublishError, match="weights/step_1"):
        publishing.finish()

    writer = FakeWriter(write_s=0.3, fail_at=1)
    publishing, model = _publisher(writer)
    publishing.publish(model, 1)
    publishing.close()  # an exception is already leaving the loop: logged, not raised over it
    assert writer.active == 0


def _args(tiny_model: Path, tmp_path: Path, **over) -> dict:
    return {
        "model": {"name": str(tiny_model)},
        "output_dir": tmp_path,
        "async_level": 1,
        "cpu_threads": 1,
        "weights": {"max_shard_bytes": 1 << 20, "keep": 3},
        **over,
    }


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_the_next_step_trains_while_the_previous_write_runs_and_training_ends_after_the_last(
    tiny_model, tmp_path, monkeypatch
):
    """The real trainer, in process: the write of weights/step_1 holds until step 1's compute has
    begun (a synchronous publish never lets it: it would time out); the last write is slow, yet
    weights/step_2 is complete when train() returns. step.done says what the step paid."""
    monkeypatch.setattr(train_mod, "setup_logging", lambda *a, **k: None)
    samples = make_samples(n_prompts=2, vocab_size=2048, seed=5)
    for step in (0, 1):
        write_step(tmp_path, step, samples, tiny_model)
    step_one_started = threading.Event()
    overlapped: list[bool] = []
    train_step, publish = train_mod.train_step, WeightPublisher.publish

    def spy_train_step(model, optimizer, batch, cfg, world):
        if batch.step == 1:
            step_one_started.set()
        return train_step(model, optimizer, batch, cfg, world)

    def slow_publish(self, state, step, **kw):
        if step == 1:
            overlapped.append(step_one_started.wait(timeout=120))
        else:
            time.sleep(0.5)
        return publish(self, state, step, **kw)

    monkeypatch.setattr(train_mod, "train_step", spy_train_step)
    monkeypatch.setattr(WeightPublisher, "publish", slow_publish)
    lines: list[str] = []
    sink = train_mod.logger.add(lambda m: lines.append(str(m)), level="INFO", format="{message}")
    try:
        train_mod.train(TrainerConfig(max_steps=2, **_args(tiny_model, tmp_path)))
    finally:
        train_mod.logger.remove(sink)

    assert overlapped == [True]
    paths = RunPaths(tmp_path)
    for step in (1, 2):
        assert is_stable(paths.weights_dir(step))
        verify_weight_dir(paths.weights_dir(step))
    done = [x for x in lines if x.startswith("[train] step.done")]
    writes = [x for x in lines if x.startswith("[ckpt] write.done")]
    assert len(done) == 2 and all("write_wait_ms=" in x for x in done)
    assert len(writes) == 2 and all("background=true" in x for x in writes)
    rows = [json.loads(x) for x in paths.metrics_file.read_text().splitlines()]
    # step 1 waited for the write of step_1, which waited for step 1's compute: counted as publish time
    assert all(r["write_ms"] >= r["write_wait_ms"] >= 0 for r in rows)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_a_failed_write_ends_the_wait_for_a_batch_that_waits_for_it(tiny_model, tmp_path, monkeypatch):
    """On-policy (async_level 0) the orchestrator generates step 1's batch only from weights/step_1:
    when that write fails, the trainer raises it while it waits, not after data.wait_timeout_s."""
    monkeypatch.setattr(train_mod, "setup_logging", lambda *a, **k: None)
    write_step(tmp_path, 0, make_samples(n_prompts=2, vocab_size=2048, seed=5), tiny_model)

    def failing_publish(self, state, step, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(WeightPublisher, "publish", failing_publish)
    args = _args(tiny_model, tmp_path, async_level=0, data={"wait_timeout_s": 120})
    start = time.monotonic()
    with pytest.raises(PublishError, match=r"weights/step_1 failed: OSError"):
        train_mod.train(TrainerConfig(max_steps=3, **args))
    assert time.monotonic() - start < 60
