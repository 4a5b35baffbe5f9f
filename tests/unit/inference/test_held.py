"""Held weights: hard links that keep what a server serves alive when the trainer prunes it."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

from prime_rl.inference.held import SERVING_DIR, HeldWeights


def shard(path, value: float):
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"w": torch.full((2, 2), value)}, str(path))
    return path


def test_hold_links_then_settle_keeps_only_what_is_served(tmp_path):
    held = HeldWeights(tmp_path)
    a = shard(tmp_path / "step_1" / "model.safetensors", 1.0)
    files_a, dir_a = held.hold([a])
    assert dir_a is not None and os.path.samefile(files_a[0], a)
    held.settle(dir_a, served=True)
    shutil.rmtree(tmp_path / "step_1")  # pruned: the held link still has the bytes
    assert load_file(str(files_a[0]))["w"][0, 0] == 1.0

    b = shard(tmp_path / "step_2" / "model.safetensors", 2.0)
    files_b, dir_b = held.hold([b])
    held.settle(dir_b, served=False)  # the load failed: step 1 stays held, step 2 is dropped
    assert not dir_b.exists() and files_a[0].exists() and held.serving == dir_a

    files_b, dir_b = held.hold([b])
    held.settle(dir_b, served=True)
    assert not dir_a.exists() and held.serving == dir_b
    held.settle(None, served=True)  # back on the base model: nothing held
    assert not dir_b.exists() and held.serving is None
    held.release()
    assert not held.home.exists()


def test_hold_falls_back_to_the_originals_when_links_are_impossible(tmp_path, monkeypatch):
    held = HeldWeights(tmp_path)
    a = shard(tmp_path / "step_1" / "model.safetensors", 1.0)

    def no_links(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_links)
    files, held_dir = held.hold([a])
    assert files == [a] and held_dir is None
    assert not any((tmp_path / SERVING_DIR).rglob("*.safetensors"))


def test_sweep_removes_dirs_of_dead_servers_of_this_host_only(tmp_path):
    held = HeldWeights(tmp_path)
    host = held.key.rsplit("-", 1)[0]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / SERVING_DIR / f"{host}-{dead.pid}" / "1"
    alive = tmp_path / SERVING_DIR / f"{host}-{os.getppid()}" / "1"
    other_host = tmp_path / SERVING_DIR / f"elsewhere-{dead.pid}" / "1"
    for d in (stale, alive, other_host):
        d.mkdir(parents=True)
    assert held.sweep() == [stale.parent]
    assert not stale.exists() and alive.exists() and other_host.exists()
