"""Raise points: armed through a file, each item fires once and is removed as it fires."""

from __future__ import annotations

import pytest

from prime_rl import failpoints
from prime_rl.failpoints import FAULT_FILE_ENV, InjectedFault, raise_if


def test_unarmed_points_do_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(FAULT_FILE_ENV, raising=False)
    raise_if("inference.load.tensor", 0)
    monkeypatch.setenv(FAULT_FILE_ENV, str(tmp_path / "absent"))
    raise_if("inference.load.tensor", 0)


def test_each_item_fires_once_at_its_index_and_is_removed(tmp_path, monkeypatch):
    faults = tmp_path / "faults"
    faults.write_text("inference.load.tensor@2\ninference.load.after, inference.load.tensor@0")
    monkeypatch.setenv(FAULT_FILE_ENV, str(faults))
    raise_if("inference.load.tensor", 1)  # not armed at 1
    raise_if("inference.load.other", 2)  # another point
    with pytest.raises(InjectedFault, match=r"inference\.load\.tensor@2"):
        raise_if("inference.load.tensor", 2)
    assert faults.read_text() == "inference.load.after,inference.load.tensor@0"
    raise_if("inference.load.tensor", 2)  # fired already
    with pytest.raises(InjectedFault):
        raise_if("inference.load.after")
    with pytest.raises(InjectedFault):
        raise_if("inference.load.tensor", 0)
    assert not faults.exists()  # nothing left: the file is gone, so the test knows all fired


def test_raise_points_never_kill(tmp_path, monkeypatch):
    """``hit`` (SIGKILL) reads another variable: an armed raise point is never a kill point."""
    monkeypatch.setenv(FAULT_FILE_ENV, str(tmp_path / "faults"))
    (tmp_path / "faults").write_text("trainer.publish.renamed@3")
    monkeypatch.delenv(failpoints.ENV, raising=False)
    failpoints.hit("trainer.publish.renamed", 3)  # still alive
    assert (tmp_path / "faults").exists()
