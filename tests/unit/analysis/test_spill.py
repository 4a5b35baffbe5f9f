"""A long log's kept weight-update lines wait for the join on disk (:mod:`prime_rl.analysis.spill`):
what is in memory stays under the bound while the lines are added, the join gives what it gives
in memory, and the temporary directory is gone afterwards."""

from __future__ import annotations

import sys
import threading
from dataclasses import astuple
from pathlib import Path

import polars as pl
import pytest
from tests.support.weight_lines import add_by_file, usual_update_events

import prime_rl.analysis.spill as spill_module
from prime_rl.analysis.spill import PREFIX, Spill
from prime_rl.analysis.updates import UpdateJoin


def test_the_kept_lines_go_to_disk_past_the_bound_and_join_as_in_memory(tmp_path):
    events = usual_update_events(3000)
    in_memory = UpdateJoin()
    add_by_file(in_memory, events)
    assert in_memory.spill.directory is None  # 15,000 lines: under the default bound, nothing written
    expected = [astuple(u) for u in in_memory.updates()]
    assert len(expected) == 3000

    # split into 8 parts past 1,500 lines, 64 past 12,000 (files read back and routed again), on
    # disk past 1,000 lines a side
    join = UpdateJoin(split_rows=1500, spill_rows=1000, spill_dir=tmp_path)
    held = add_by_file(join, events)
    directory = join.spill.directory
    assert directory is not None and directory.parent == tmp_path and directory.name.startswith(PREFIX)
    assert max(held) <= 2 * (1000 + 500)  # each side: at most the bound and one batch
    assert join._client.parts_n == 64
    join.spill.wait()
    on_disk = [f for part in join._client.parts + join._server.parts for f in part if isinstance(f, Path)]
    assert on_disk and all(f.parent == directory and f.exists() for f in on_disk)
    assert set(directory.iterdir()) == set(on_disk)  # the files read back by the split are gone

    assert [astuple(u) for u in join.updates()] == expected
    assert not directory.exists()  # the lines' files and the parts' updates' files, removed
    assert join.spill.failed is None


def test_a_frame_comes_back_as_written_and_its_file_goes(tmp_path):
    spill = Spill(tmp_path)
    frame = pl.DataFrame(
        {
            "event": pl.Series(["client.send", "client.done"], dtype=pl.Categorical),
            "tid": ["a", None],
            "rpc": [1.5, None],
            "i": pl.Series([0, 1], dtype=pl.UInt32),
        }
    )
    path = spill.write(frame)
    assert path is not None
    spill.wait()
    assert path.exists()
    assert spill.read(path).equals(frame) and not path.exists()
    spill.close()
    assert not spill.directory.exists()


def test_no_directory_to_write_in_is_a_failure_not_an_error(tmp_path):
    spill = Spill(tmp_path / "missing")
    assert spill.write(pl.DataFrame({"a": [1]})) is None
    assert spill.failed is not None and "missing" in spill.failed
    assert spill.write(pl.DataFrame({"a": [1]})) is None  # no second try


@pytest.mark.parametrize("close", [True, False], ids=["closed", "collected"])
def test_the_directory_goes_when_the_store_is_closed_or_collected(tmp_path, close):
    spill = Spill(tmp_path)
    spill.write(pl.DataFrame({"a": [1]}))
    directory = spill.directory
    assert directory is not None and directory.exists()
    if close:
        spill.close()
    else:
        del spill
    assert not directory.exists()


def test_a_read_waits_for_its_write_and_the_writes_waiting_stay_bounded(tmp_path, monkeypatch):
    import time

    from prime_rl.analysis import spill as module

    real_write = module._write

    def slow_write(frame: pl.DataFrame, path: Path) -> int:
        time.sleep(0.02)  # a disk slower than the caller
        return real_write(frame, path)

    monkeypatch.setattr(module, "_write", slow_write)
    frames = [pl.DataFrame({"k": list(range(k * 1000, (k + 1) * 1000))}) for k in range(20)]
    size = frames[0].estimated_size()
    monkeypatch.setattr(module, "PENDING_BYTES", 3 * size)
    spill = Spill(tmp_path)
    paths = []
    for frame in frames:
        paths.append(spill.write(frame))
        assert spill._pending_bytes <= 4 * size  # the bound and the frame just handed over
    assert spill.read(paths[-1]).equals(frames[-1])  # the last one, read as soon as it is written
    assert [spill.read(p).equals(f) for p, f in zip(paths[:-1], frames[:-1], strict=True)] == [True] * 19
    spill.close()


@pytest.mark.parametrize("round_", range(4))
def test_files_read_in_threads_while_others_are_written_come_back_whole(tmp_path, monkeypatch, round_):
    """The join reads parts back in threads of its own while the caller writes more: every frame
    comes back as written, and every file goes (threads switching every microsecond, so that a race
    in the bookkeeping shows: without the store's lock, about one round in four failed)."""
    monkeypatch.setattr(spill_module, "PENDING_BYTES", 1)  # every write waits for the ones before it
    spill = Spill(tmp_path)
    frames = [pl.DataFrame({"k": [k] * 50, "v": list(range(50))}) for k in range(300)]
    first = [spill.write(f) for f in frames[:200]]
    got: dict[int, pl.DataFrame] = {}
    errors: list[BaseException] = []

    def read(ks: range) -> None:
        try:
            for k in ks:
                got[k] = spill.read(first[k])
        except BaseException as e:  # noqa: BLE001  # raised below, in the test's thread
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        readers = [threading.Thread(target=read, args=(range(k, 200, 2),)) for k in (0, 1)]
        for t in readers:
            t.start()
        later = [spill.write(f) for f in frames[200:]]  # while the readers read
        for t in readers:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert all(got[k].equals(frames[k]) for k in range(200))
    assert all(spill.read(p).equals(f) for p, f in zip(later, frames[200:], strict=True))
    assert not list(spill.directory.iterdir())
    spill.close()
