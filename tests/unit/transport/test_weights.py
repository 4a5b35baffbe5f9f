"""prime_rl.transport.weights: weight dirs inside the root only, safetensors headers, index files, compatibility,
the file manifest (sizes and checksums) and its verifier."""

from __future__ import annotations

import json
import os
import struct

import pytest
import torch
from safetensors.torch import save_file

from prime_rl.transport.weights import (
    CHECKSUM_ALGORITHM,
    INDEX_FILE,
    MANIFEST_FILE,
    TensorInfo,
    WeightDirError,
    check_compatible,
    file_checksum,
    manifest,
    read_file_manifest,
    read_safetensors_header,
    resolve_weight_dir,
    verify_weight_dir,
    weight_files,
    write_file_manifest,
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


SHARD_1 = "model-00001-of-00002.safetensors"
SHARD_2 = "model-00002-of-00002.safetensors"


def published_dir(path):
    """A sharded weight dir as the publisher leaves it: shards, index, config, manifest, STABLE."""
    path.mkdir(parents=True)
    save_file({"a": torch.arange(1000, dtype=torch.float32)}, str(path / SHARD_1))
    save_file({"b": torch.ones(3000)}, str(path / SHARD_2))
    (path / INDEX_FILE).write_text(json.dumps({"weight_map": {"a": SHARD_1, "b": SHARD_2}}))
    (path / "config.json").write_text('{"model_type": "qwen2"}')
    write_file_manifest(path)
    (path / "STABLE").touch()
    return path


def refusal(path, **kwargs) -> str:
    with pytest.raises(WeightDirError) as e:
        verify_weight_dir(path, **kwargs)
    assert e.value.status == 422
    return e.value.reason


def test_manifest_round_trip(tmp_path):
    d = published_dir(tmp_path / "step_1")
    (d / ".STABLE.x.tmp").write_bytes(b"")  # hidden temporaries are not part of a weight dir
    entries = read_file_manifest(d)
    assert sorted(entries) == sorted(["config.json", INDEX_FILE, SHARD_1, SHARD_2])
    for name, (size, checksum) in entries.items():
        assert (size, checksum) == file_checksum(d / name)
        assert size == (d / name).stat().st_size
    doc = json.loads((d / MANIFEST_FILE).read_text())
    assert doc["algorithm"] == CHECKSUM_ALGORITHM == "xxh3_128"
    verify_weight_dir(d)
    verify_weight_dir(d, checksums=False)


def test_checksum_streams_files_larger_than_one_chunk(tmp_path):
    import xxhash

    data = os.urandom(8 * 1024 * 1024 * 2 + 12345)  # two full 8 MiB chunks and a partial one
    (tmp_path / "big").write_bytes(data)
    assert file_checksum(tmp_path / "big") == (len(data), xxhash.xxh3_128_hexdigest(data))


def test_truncated_shard_is_refused_naming_it(tmp_path):
    d = published_dir(tmp_path / "step_1")
    size = (d / SHARD_2).stat().st_size
    os.truncate(d / SHARD_2, size - 100)  # a crash cut the newest shard short
    for checksums in (True, False):
        reason = refusal(d, checksums=checksums)
        assert reason.startswith(f"{SHARD_2}: size mismatch: {size - 100} != {size} bytes in {MANIFEST_FILE}")


def test_flipped_byte_is_refused_naming_the_file(tmp_path):
    d = published_dir(tmp_path / "step_1")
    data = bytearray((d / SHARD_1).read_bytes())
    data[-7] ^= 0x01  # one bit of one tensor: the header still parses, the size is the same
    (d / SHARD_1).write_bytes(bytes(data))
    read_safetensors_header(d / SHARD_1)
    reason = refusal(d)
    assert reason.startswith(f"{SHARD_1}: checksum mismatch: xxh3_128 ")
    assert MANIFEST_FILE in reason
    verify_weight_dir(d, checksums=False)  # the fast path checks sizes only


def test_missing_file_is_refused_naming_it(tmp_path):
    d = published_dir(tmp_path / "step_1")
    (d / "config.json").unlink()
    assert refusal(d) == f"config.json: missing (listed in {MANIFEST_FILE})"


def test_unlisted_shard_is_refused(tmp_path):
    d = published_dir(tmp_path / "step_1")
    save_file({"c": torch.zeros(2)}, str(d / "extra.safetensors"))
    assert refusal(d) == f"extra.safetensors: not listed in {MANIFEST_FILE}"
    (d / "extra.safetensors").unlink()
    (d / "notes.txt").write_text("not read by any loader")
    verify_weight_dir(d)


@pytest.mark.parametrize(
    "content,match",
    [
        (None, "manifest.json: missing"),
        (b'{"format": "prime-rl-weight-manifest/1", "algo', "manifest.json: not valid JSON"),
        (b"[]", "manifest.json: not a prime-rl-weight-manifest/1 manifest"),
        (
            b'{"format": "prime-rl-weight-manifest/1", "algorithm": "md5", "files": {}}',
            "manifest.json: checksum algorithm 'md5', expected 'xxh3_128'",
        ),
        (
            b'{"format": "prime-rl-weight-manifest/1", "algorithm": "xxh3_128", "files": {}}',
            "manifest.json: 'files' is not a non-empty object",
        ),
        (
            b'{"format": "prime-rl-weight-manifest/1", "algorithm": "xxh3_128", '
            b'"files": {"../x.safetensors": {"size": 1, "checksum": "0"}}}',
            "manifest.json: bad file name '../x.safetensors'",
        ),
        (
            b'{"format": "prime-rl-weight-manifest/1", "algorithm": "xxh3_128", '
            b'"files": {"config.json": {"size": "12", "checksum": "0"}}}',
            "manifest.json: malformed entry for 'config.json'",
        ),
    ],
)
def test_missing_or_garbled_manifest_is_refused(tmp_path, content, match):
    d = published_dir(tmp_path / "step_1")
    if content is None:
        (d / MANIFEST_FILE).unlink()
    else:
        (d / MANIFEST_FILE).write_bytes(content)
    assert refusal(d).startswith(match)
    assert refusal(d, checksums=False).startswith(match)
