"""The hang watchdog's logic on hand-fed lines and a hand-driven clock: the threshold follows the
median step time, a hang is reported once per silence, and it names who waits on whom."""

from __future__ import annotations

import pytest

from prime_rl.launcher.watchdog import Watchdog, WatchdogConfig
from prime_rl.paths import RunPaths, rollout_path


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _dog(tmp_path, **cfg) -> tuple[Watchdog, Clock]:
    clock = Clock()
    return Watchdog(WatchdogConfig(**cfg), RunPaths(tmp_path), clock), clock


def _steps(dog: Watchdog, clock: Clock, n: int, every_s: float, first: int = 0) -> None:
    for step in range(first, first + n):
        dog.feed("orchestrator", f"12:00:00.000 | INFO    | [gen] batch.start step={step} inflight=0\n")
        clock.now += every_s
        dog.feed("orchestrator", f"12:00:00.000 | INFO    | [gen] batch.done step={step} completions=4\n")


def test_the_threshold_is_a_multiple_of_the_median_step_time_with_a_floor(tmp_path):
    dog, clock = _dog(tmp_path, factor=10, min_s=5, first_step_s=100)
    assert dog.threshold_s() == 100  # no step seen yet
    _steps(dog, clock, 4, every_s=2.0)
    assert dog.median_step_s() == pytest.approx(2.0)
    assert dog.threshold_s() == pytest.approx(20.0)
    _steps(dog, clock, 4, every_s=0.1, first=4)
    assert dog.threshold_s() == 5  # 10 x a median of 0.1 s is below the floor


def test_a_hang_is_reported_once_per_silence_and_periodic_lines_are_no_progress(tmp_path):
    dog, clock = _dog(tmp_path, factor=10, min_s=1)
    _steps(dog, clock, 5, every_s=1.0)  # the first two (async_level 1) and the gap to the third: no pace
    clock.now += 9.9
    assert dog.check() is None
    dog.feed("orchestrator", "[server] metrics url=http://a running=1 waiting=0\n")  # not progress
    clock.now += 0.2
    hang = dog.check()
    assert hang is not None and hang.silent_s == pytest.approx(10.1) and hang.threshold_s == pytest.approx(10)
    clock.now += 100
    assert dog.check() is None  # once per silence
    _steps(dog, clock, 1, every_s=1.0, first=5)
    clock.now += 11
    assert dog.check() is not None  # progress came, then stopped again


def test_the_orchestrator_waiting_for_a_checkpoint_and_the_trainer_computing_are_named(tmp_path):
    dog, clock = _dog(tmp_path, factor=2, min_s=1)
    _steps(dog, clock, 5, every_s=1.0)  # a pace: two gaps past the run-ahead batches (async_level 1)
    dog.feed("trainer", "[train] step.done step=1 wait_ms=1.0 train_ms=900.0 write_ms=3.0\n")
    dog.feed("orchestrator", "[ckpt] wait.start target_step=3\n")
    path = rollout_path(RunPaths(tmp_path).rollouts_dir(2), 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # the trainer has its rollouts: it is the one that is slow
    dog.feed("trainer", "still computing, no tagged line\n")
    clock.now += 5
    hang = dog.check()
    assert [w.code for w in hang.waits] == ["orchestrator>trainer:weights/step_3"]
    assert hang.waits[0].since == clock.now - 5
    text = hang.describe(clock.now)
    assert "orchestrator waits for trainer: weights/step_3 (for 5s)" in text
    assert "trainer: computing step 2 (rollouts/step_2 is there)" in text
    assert "trainer's last line (5s ago): still computing, no tagged line" in text


def test_an_unanswered_weight_update_and_a_trainer_without_rollouts_are_named(tmp_path):
    dog, clock = _dog(tmp_path, factor=2, min_s=1)
    _steps(dog, clock, 5, every_s=1.0)  # a pace: two gaps past the run-ahead batches (async_level 1)
    dog.feed("trainer", "[train] step.done step=2 wait_ms=1.0 train_ms=900.0 write_ms=3.0\n")
    for tid, url in (("u1", "http://a:8000"), ("u1", "http://b:8000")):
        dog.feed(
            "orchestrator", f"[weights][{tid}] client.send url={url} path=/update_weights t=1.0 attempt=1\n"
        )
    dog.feed("orchestrator", "[weights][u1] client.done url=http://a:8000 path=/update_weights wall_ms=5.0\n")
    clock.now += 30
    hang = dog.check()
    assert [w.code for w in hang.waits] == [
        "orchestrator>inference_http://b:8000:weight_update_u1",
        "trainer>orchestrator:rollouts/step_3",
    ]


def test_a_batch_that_never_ends_is_a_wait_on_inference(tmp_path):
    dog, clock = _dog(tmp_path, factor=2, min_s=1)
    _steps(dog, clock, 5, every_s=1.0)  # a pace: two gaps past the run-ahead batches (async_level 1)
    dog.feed("orchestrator", "[gen] batch.start step=3 inflight=8\n")
    clock.now += 3
    (wait,) = dog.check().waits
    assert (wait.who, wait.whom, wait.what) == ("orchestrator", "inference", "generation of step 3")


def test_the_batches_that_run_ahead_of_a_compiling_trainer_set_no_threshold(tmp_path):
    """async_level 2: the orchestrator's first batches need no weights and take 12 s each while the
    trainer loads and compiles its first step for minutes. Their pace set a 120 s threshold and the
    watchdog called a hang (dumping every stack) at 120 s. The first async_level + 1 batches and
    the gap to the next (the trainer's first step, compile and all, whose tenfold was hours) are
    left out of the pace: first_step_s holds until two batches at the run's pace were seen."""
    clock = Clock()
    dog = Watchdog(WatchdogConfig(), RunPaths(tmp_path), clock, first_step=0, async_level=2)
    _steps(dog, clock, 3, every_s=12.0)
    dog.feed("orchestrator", "[ckpt] wait.start target_step=1\n")
    assert dog.median_step_s() is None and dog.threshold_s() == WatchdogConfig().first_step_s
    clock.now += 300
    assert dog.check() is None
    _steps(dog, clock, 1, every_s=12.0, first=3)  # weights came: the fourth batch waited for them
    assert dog.median_step_s() is None and dog.threshold_s() == WatchdogConfig().first_step_s
    _steps(dog, clock, 2, every_s=200.0, first=4)  # then the trainer's pace
    assert dog.median_step_s() == pytest.approx(200.0)


def test_the_trainer_s_wait_for_its_first_rollouts_is_named_before_it_logs_a_step(tmp_path):
    """A resumed run: the trainer waits for rollouts/step_10 before its first step.done (it was not
    named: the watchdog learned the trainer's step from its step lines alone)."""
    clock = Clock()
    dog = Watchdog(WatchdogConfig(first_step_s=100), RunPaths(tmp_path), clock, first_step=10)
    dog.feed("orchestrator", "[gen] batch.start step=10 inflight=8\n")
    clock.now += 101
    assert [w.code for w in dog.check().waits] == [
        "orchestrator>inference:generation_of_step_10",
        "trainer>orchestrator:rollouts/step_10",
    ]
