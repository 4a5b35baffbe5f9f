"""Parsing ahead in a thread: the items in order, the thread's errors raised to the caller, at most
``depth`` items made ahead, and no thread left behind when the caller stops early."""

from __future__ import annotations

import threading

import pytest

from prime_rl.analysis.read_ahead import read_ahead


def test_items_come_in_order():
    assert list(read_ahead(iter(range(1000)), depth=3)) == list(range(1000))


def test_an_error_in_the_thread_is_raised_to_the_caller_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise ValueError("bad line 3")

    got = []
    with pytest.raises(ValueError, match="bad line 3"):
        for item in read_ahead(items()):
            got.append(item)
    assert got == [1, 2]


def test_the_thread_makes_at_most_depth_items_ahead_and_stops_when_the_caller_does():
    made: list[int] = []
    closed = threading.Event()

    def items():
        try:
            for i in range(100):
                made.append(i)
                yield i
        finally:
            closed.set()

    it = read_ahead(items(), depth=2)
    assert next(it) == 0
    waited = threading.Event()
    waited.wait(0.3)  # let the thread run ahead as far as it may
    assert len(made) <= 1 + 2 + 1  # the one taken, two waiting, one made and blocked on the queue
    it.close()
    assert closed.is_set()  # the thread closed the source on its way out
    assert not [t for t in threading.enumerate() if t.name == "analyzer-parse"]
