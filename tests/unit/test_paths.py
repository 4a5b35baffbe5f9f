"""prime_rl.paths: atomic writes leave no partial file; the STABLE marker."""

from __future__ import annotations

import pytest

from prime_rl.paths import atomic_write_bytes, is_stable, mark_stable


def test_atomic_write_leaves_no_partial_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "d" / "f.json"
    atomic_write_bytes(target, b"old")

    import prime_rl.paths as paths

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(paths.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]


def test_stable_marker(tmp_path):
    assert not is_stable(tmp_path)
    mark_stable(tmp_path)
    assert is_stable(tmp_path)
