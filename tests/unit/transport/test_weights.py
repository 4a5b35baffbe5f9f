"""prime_rl.transport.weights: weight dirs inside the root only, safetensors headers, index files, compatibility."""

from __future__ import annotations

import json
import os
import struct

import pytest
import torch
from safetensors.torch import save_file

from prime_rl.transport.weights import (
    TensorInfo,
    WeightDirError,
    check_compatible,
    manifest,
    read_safetensors_header,
    resolve_weight_dir,
    weight_files,
)


def make_dir(path, tensors=None, stable=True):
    path.mkdir(parents=True, exist_ok=True)
    tensors = tensors if tensors is not None else {"w": torch.zeros(2, 3), "b": torch.zeros(3)}
    save_file(tensors, str(path / "model.safetensors"))
    if stable:
        (path / "STABLE").touch()
    return path


def test_inside_root_is_accepted_absolute_or_relative(tmp_path):
    root = tmp_path / "weights"
    d = make_dir(root / "step_1")
    assert resolve_weight_dir(str(d), root) == d.resolve()
    assert resolve_weight_dir("step_1", root) == d.resolve()


@pytest.mark.parametrize(
    "case,status",
    [
        ("outside", 403),
        ("dotdot", 403),
        ("symlink", 403),
        ("no_stable", 409),
        ("missing", 404),
        ("empty", 400),
        ("prefix", 403),
    ],
)
def test_refused_dirs(tmp_path, case, status):
    root = tmp_path / "weights"
    root.mkdir()
    outside = make_dir(tmp_path / "other")
    target = {
        "outside": str(outside),
        "dotdot": str(root / ".." / "other"),
        "no_stable": str(make_dir(root / "s", stable=False)),
        "missing": str(root / "nope"),
        "empty": " ",
        "prefix": str(make_dir(tmp_path / "weights_evil")),  # shares the root's name as a prefix
    }.get(case)
    if case == "symlink":
        os.symlink(outside, root / "link")
        target = str(root / "link")
    with pytest.raises(WeightDirError) as e:
        resolve_weight_dir(target, root)
    assert e.value.status == status


def test_header_is_read_without_loading_and_checked(tmp_path):
    d = make_dir(tmp_path / "m", {"a": torch.zeros(4, 2, dtype=torch.float16)})
    assert read_safetensors_header(d / "model.safetensors") == {"a": TensorInfo("F16", (4, 2))}

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(WeightDirError, match="does not fit"):
        read_safetensors_header(bad)
    header = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    bad.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    with pytest.raises(WeightDirError, match="do not match"):
        read_safetensors_header(bad)
    bad.write_bytes(struct.pack("<Q", 3) + b"{x}")
    with pytest.raises(WeightDirError, match="not valid JSON"):
        read_safetensors_header(bad)
    bad.write_bytes(b"abc")
    with pytest.raises(WeightDirError, match="too short"):
        read_safetensors_header(bad)


def test_sharded_index_and_pickle_refusal(tmp_path):
    d = tmp_path / "sharded"
    d.mkdir()
    save_file({"a": torch.zeros(2)}, str(d / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.zeros(3)}, str(d / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    assert set(manifest(weight_files(d))) == {"a", "b"}

    index["weight_map"]["c"] = "model-00003-of-00003.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightDirError, match="missing"):
        weight_files(d)
    index["weight_map"]["c"] = "../escape.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightDirError, match="bad shard name"):
        weight_files(d)

    p = tmp_path / "pickled"
    p.mkdir()
    (p / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(WeightDirError, match="pickle formats are never loaded"):
        weight_files(p)


def test_duplicate_tensor_across_shards_is_refused(tmp_path):
    d = tmp_path / "dup"
    d.mkdir()
    save_file({"a": torch.zeros(2)}, str(d / "x.safetensors"))
    save_file({"a": torch.zeros(2)}, str(d / "y.safetensors"))
    with pytest.raises(WeightDirError, match="more than one shard"):
        manifest(weight_files(d))


def test_compatibility_names_every_kind_of_mismatch():
    base = {"a": TensorInfo("F32", (2, 3)), "b": TensorInfo("F32", (3,)), "c": TensorInfo("BF16", (1,))}
    check_compatible(dict(base), base)
    cand = {"a": TensorInfo("F32", (3, 2)), "c": TensorInfo("F32", (1,)), "z": TensorInfo("F32", (1,))}
    with pytest.raises(WeightDirError) as e:
        check_compatible(cand, base)
    msg = e.value.reason
    assert e.value.status == 422
    assert "missing tensors ['b']" in msg and "unexpected tensors ['z']" in msg
    assert "a: shape [3, 2], served model has [2, 3]" in msg and "c: dtype F32, served model has BF16" in msg
