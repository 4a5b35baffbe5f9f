"""prime_rl.trainer.weights: the shard plan respects the byte budget; a publish writes the manifest
before the dir is fsynced, renamed into place and marked STABLE."""

from __future__ import annotations

import json

import torch

from prime_rl.trainer import weights as publisher_mod
from prime_rl.trainer.weights import WeightPublisher, plan_shards
from prime_rl.transport.weights import INDEX_FILE, MANIFEST_FILE, file_checksum, verify_weight_dir


def test_shard_plan_respects_the_byte_budget():
    sd = {"a": torch.zeros(10), "b": torch.zeros(10), "c": torch.zeros(100), "d": torch.zeros(1)}
    assert plan_shards(sd, max_shard_bytes=80) == [["a", "b"], ["c"], ["d"]]
    assert plan_shards(sd, max_shard_bytes=10**6) == [["a", "b", "c", "d"]]


def test_publish_writes_the_manifest_before_rename_and_stable(tiny_model, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    publisher = WeightPublisher(model, str(tiny_model), tmp_path / "weights", max_shard_bytes=1 << 20)
    seen = []  # (event, whether the dir it names holds a manifest then)
    fsync_dir, mark_stable = publisher_mod.fsync_dir, publisher_mod.mark_stable

    def spy_fsync_dir(path):
        if path.name.startswith(".step_"):
            seen.append(("fsync tmp", (path / MANIFEST_FILE).is_file()))
        fsync_dir(path)

    def spy_mark_stable(path):
        verify_weight_dir(path)  # complete and consistent before anyone may read it
        seen.append(("stable", (path / MANIFEST_FILE).is_file()))
        mark_stable(path)

    monkeypatch.setattr(publisher_mod, "fsync_dir", spy_fsync_dir)
    monkeypatch.setattr(publisher_mod, "mark_stable", spy_mark_stable)
    dest, _, _ = publisher.publish(model.state_dict(), 3)

    assert seen == [("fsync tmp", True), ("stable", True)]
    doc = json.loads((dest / MANIFEST_FILE).read_text())
    shards = sorted(p.name for p in dest.glob("*.safetensors"))
    assert len(shards) > 1
    assert set(shards) | {INDEX_FILE, "config.json", "tokenizer.json"} <= set(doc["files"])
    assert "STABLE" not in doc["files"] and MANIFEST_FILE not in doc["files"]
    for name, entry in doc["files"].items():
        assert (entry["size"], entry["checksum"]) == file_checksum(dest / name)
    verify_weight_dir(dest)


def test_a_shard_written_from_memory_is_what_safetensors_reads_and_its_checksum_the_files(tmp_path):
    """write_shard: every dtype the publisher writes, odd shapes and an empty tensor; the header our
    loaders check strictly, safetensors' own reader, and the checksum of the bytes on disk."""
    import torch
    from safetensors import safe_open

    from prime_rl.trainer.weights import write_shard
    from prime_rl.transport.weights import file_checksum, read_safetensors_header

    g = torch.Generator().manual_seed(0)
    tensors = {
        "b.weight": torch.randn(3, 5, generator=g).bfloat16(),
        "a.bias": torch.randn(7, generator=g),
        "c.half": torch.randn(2, 2, 2, generator=g).half(),
        "d.double": torch.randn(1, generator=g).double(),
        "e.ids": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "f.mask": torch.tensor([True, False, True]),
        "g.empty": torch.zeros(0, 4),
        "h.scalar": torch.tensor(2.5),
    }
    path = tmp_path / "model-00001-of-00001.safetensors"
    size, digest = write_shard(path, tensors, {"format": "pt"})
    assert (size, digest) == file_checksum(path)
    header = read_safetensors_header(path)
    assert list(header) == list(tensors)
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
        for name, t in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t), name
