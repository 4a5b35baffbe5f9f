"""SIGTERM ends a collector run like Ctrl-C (exit 130, the run's cleanup done), wherever in the
main thread it lands. Each case runs in a child process: the handler is process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PRELUDE = """
import asyncio, signal, sys, time
from prime_rl.collect.interrupt import run_async
from prime_rl.collect.main import _run
from tests.support.lost_signals import sigterm_inside_a_weakref_callback
"""


def run_child(body: str) -> subprocess.CompletedProcess:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )  # in the repository's root: the child imports tests.support


def test_a_sigterm_that_lands_in_a_weakref_callback_still_stops_the_async_run_with_130():
    child = run_child(
        """
        async def work():
            try:
                sigterm_inside_a_weakref_callback()
                for _ in range(200):  # 10 s unless stopped
                    await asyncio.sleep(0.05)
                print("finished")
            finally:
                print("cleaned up")
            return 0

        sys.exit(_run(lambda: run_async(work())))
        """
    )
    assert child.returncode == 130, child.stderr
    assert child.stdout.split() == ["cleaned", "up"]
    assert "Exception ignored" not in child.stderr


def test_a_second_sigterm_during_the_cancelled_runs_cleanup_ends_it_at_once():
    child = run_child(
        """
        async def work():
            try:
                signal.raise_signal(signal.SIGTERM)
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                print("cancelled")
                asyncio.get_running_loop().call_later(0.1, signal.raise_signal, signal.SIGTERM)
                await asyncio.sleep(30)  # a cleanup that hangs
                print("cleanup finished")
            return 0

        start = time.monotonic()
        code = _run(lambda: run_async(work()))
        print(f"{time.monotonic() - start:.1f}")
        sys.exit(code)
        """
    )
    assert child.returncode == 130, child.stderr
    lines = child.stdout.split()
    assert lines[0] == "cancelled" and "finished" not in child.stdout
    assert float(lines[1]) < 10


def test_a_sigterm_outside_an_event_loop_raises_keyboard_interrupt_and_exits_130():
    child = run_child(
        """
        def work():  # merge: no event loop
            signal.raise_signal(signal.SIGTERM)
            print("finished")
            return 0

        sys.exit(_run(work))
        """
    )
    assert child.returncode == 130, child.stderr
    assert "finished" not in child.stdout


def test_an_unsignalled_run_returns_its_value_and_a_later_run_is_not_taken_for_interrupted():
    child = run_child(
        """
        async def value(x):
            await asyncio.sleep(0.01)
            return x

        async def cancelled_from_inside():
            asyncio.current_task().cancel()
            await asyncio.sleep(1)

        print(_run(lambda: run_async(value(7))))
        try:  # a cancellation that is not a SIGTERM stays a CancelledError
            run_async(cancelled_from_inside())
        except asyncio.CancelledError:
            print("cancelled")
        async def signalled():
            sigterm_inside_a_weakref_callback()
            await asyncio.sleep(30)

        def twice():  # a SIGTERM handled in one run leaves the next run unaffected
            try:
                run_async(signalled())
            except KeyboardInterrupt:
                print("interrupted")
            return run_async(value(8))
        print(_run(twice))
        """
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["7", "cancelled", "interrupted", "8"]


MERGE_PHASES = {
    # where the signal lands: the function wrapped, which records it is at, what the output holds after
    "reading": ("record_key", "earlier"),
    "copying": ("_copy_sorted", "earlier"),
    "after the output was replaced": ("write_aggregates", "merged"),
}


@pytest.mark.parametrize("phase", list(MERGE_PHASES))
def test_a_sigterm_dropped_inside_a_weakref_callback_still_stops_a_merge_with_130(tmp_path, phase):
    """merge runs without an event loop: the handler raises KeyboardInterrupt where the signal
    lands, and inside a weakref callback Python drops it (the merge went on and exited 0). The
    merge checks for the signal between records and before it replaces the output, the entry point
    once more at the end: exit 130, and the output untouched unless it was already replaced."""
    shard = tmp_path / "rollouts_0.jsonl"
    records = "".join(f'{{"task_index": {i}, "repeat_index": 0, "task": {{"q": {i}}}}}\n' for i in range(50))
    shard.write_text(records)
    out = tmp_path / "merged.jsonl"
    earlier = '{"task_index": 99, "repeat_index": 0, "task": {"q": 99}}\n'  # an earlier merge's output
    out.write_text(earlier)
    wrapped, after = MERGE_PHASES[phase]
    child = run_child(
        f"""
        import prime_rl.collect.merge as merge_mod
        from prime_rl.collect.main import run_merge

        real, calls = merge_mod.{wrapped}, []

        def wrapper(*args):  # the signal lands in a weakref callback (at the tenth record read)
            calls.append(1)
            if len(calls) == (10 if {wrapped!r} == "record_key" else 1):
                sigterm_inside_a_weakref_callback()
            return real(*args)

        merge_mod.{wrapped} = wrapper
        sys.exit(run_merge(["--output", {str(out)!r}, {str(shard)!r}]))
        """
    )
    assert child.returncode == 130, child.stderr
    assert out.read_text() == (earlier if after == "earlier" else records)
    assert not (tmp_path / ".merged.jsonl.merging").exists()


def test_a_run_that_was_interrupted_leaves_no_signal_behind_for_a_later_merge(tmp_path):
    """The signal is forgotten once its run has ended: a later merge in the same process runs."""
    shard = tmp_path / "rollouts_0.jsonl"
    shard.write_text('{"task_index": 0, "repeat_index": 0, "task": {"q": 0}}\n')
    out = tmp_path / "merged.jsonl"
    child = run_child(
        f"""
        from pathlib import Path
        from prime_rl.collect.config import MergeConfig
        from prime_rl.collect.merge import merge

        print(_run(lambda: signal.raise_signal(signal.SIGTERM)))
        cfg = MergeConfig(inputs=[Path({str(shard)!r})], output_jsonl_fpath=Path({str(out)!r}))
        print(merge(cfg).records)
        """
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["130", "1"]
