"""``analyze-logs`` whose temporary directory fills up (a real tmpfs, real ENOSPC): a long run's
weight-update lines wait for their join on disk; when the disk is full they stay in memory, the
report is the one it would have been, the CLI says why on stderr, and nothing is left on the disk.
The bound past which lines go to disk is lowered so that a short synthetic run reaches it."""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

from tests.support.disk import small_tmpfs
from tests.support.synthetic_logs import make_run
from tests.support.weight_lines import add_by_file, usual_update_events

from prime_rl.analysis import updates
from prime_rl.analysis.__main__ import main
from prime_rl.analysis.spill import Spill
from prime_rl.analysis.updates import UpdateJoin


def _report(run: Path, out: Path, *extra: str) -> str:
    main([str(run), "--out", str(out), *extra])
    return "".join(
        line
        for line in (out / "SUMMARY.md").read_text().splitlines(keepends=True)
        if not line.startswith("Parsed ")
    )


def test_a_full_temporary_disk_keeps_the_lines_in_memory_and_the_report_as_it_was(
    tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"
    make_run("healthy", steps=1500).write(run)  # 1,500 updates: 7,500 [weights] lines
    expected = _report(run, tmp_path / "in_memory")
    assert not any(p.name.startswith("prime-rl-analysis-") for p in (tmp_path / "in_memory").iterdir())
    capsys.readouterr()

    monkeypatch.setattr(updates, "SPILL_ROWS", 500)
    monkeypatch.setattr(updates, "SPLIT_ROWS", 1000)
    written: list[Path | None] = []
    real_write = Spill.write
    monkeypatch.setattr(
        Spill, "write", lambda self, frame: written.append(real_write(self, frame)) or written[-1]
    )
    assert _report(run, tmp_path / "on_disk") == expected  # the default: under the output directory
    assert written and all(p is not None and p.parent.parent == tmp_path / "on_disk" for p in written)
    assert not any(p.name.startswith("prime-rl-analysis-") for p in (tmp_path / "on_disk").iterdir())
    assert capsys.readouterr().err == ""

    with small_tmpfs(tmp_path / "disk", 0.06) as disk:  # room for a few of the files, not all
        assert _report(run, tmp_path / "full", "--tmp-dir", str(disk)) == expected
        err = capsys.readouterr().err
        assert "the weight-update lines were kept in memory, not on disk" in err, err
        assert "No space left on device" in err and str(disk) in err, err
        assert list(disk.iterdir()) == []


def test_a_full_disk_mid_join_keeps_the_rest_in_memory(tmp_path):
    # the join itself: some lines on disk, the rest in memory after the disk filled; joined as without
    events = usual_update_events(3000)

    def joined(join: UpdateJoin) -> list[tuple]:
        add_by_file(join, events)
        return [astuple(u) for u in join.updates()]

    expected = joined(UpdateJoin())
    with small_tmpfs(tmp_path / "disk", 0.06) as disk:
        join = UpdateJoin(split_rows=1500, spill_rows=1000, spill_dir=disk)
        assert joined(join) == expected
        assert join.spill.written > 0 and join.spill.failed is not None
        assert "No space left on device" in join.spill.failed, join.spill.failed
        assert list(disk.iterdir()) == []
