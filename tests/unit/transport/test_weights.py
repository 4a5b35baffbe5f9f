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
            "manifest.json: checksum algorithm is not 'xxh3_128'",  # what it is is not echoed
        ),
        (
            b'{"format": "prime-rl-weight-manifest/1", "algorithm": "xxh3_128", "files": {}}',
            "manifest.json: 'files' is not a non-empty object",
        ),
        (
            b'{"format": "prime-rl-weight-manifest/1", "algorithm": "xxh3_128", '
            b'"files": {"../x.safetensors": {"size": 1, "checksum": "0"}}}',
            "manifest.json: bad file name <a name of 16 characters, not shown>",
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


# --- every file a loader reads stays inside the weight dir (symlinks resolved) -------------------


def _relink(path, target):
    """Replace ``path`` by a symlink to ``target``."""
    path.unlink()
    os.symlink(target, path)


@pytest.mark.parametrize("which", [SHARD_1, INDEX_FILE, "config.json", MANIFEST_FILE])
def test_file_symlinked_outside_the_weight_dir_is_refused(tmp_path, which):
    root = tmp_path / "weights"
    d = published_dir(root / "step_1")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / which).write_bytes((d / which).read_bytes())  # the same bytes: only the place differs
    _relink(d / which, outside / which)
    checks = [lambda: resolve_weight_dir("step_1", root), lambda: verify_weight_dir(d)]
    if which in (SHARD_1, INDEX_FILE):
        checks.append(lambda: weight_files(d))
    for check in checks:
        with pytest.raises(WeightDirError) as e:
            check()
        assert e.value.status == 403
        assert e.value.reason.startswith(f"{which}: resolves outside the weight dir")
        assert str(outside) not in e.value.reason  # the target is not revealed


def test_symlink_into_another_weight_dir_of_the_same_root_is_refused(tmp_path):
    root = tmp_path / "weights"
    d1 = published_dir(root / "step_1")
    d2 = published_dir(root / "step_2")
    _relink(d2 / SHARD_2, d1 / SHARD_2)  # the rule is the weight dir itself, not the weights root
    with pytest.raises(WeightDirError) as e:
        resolve_weight_dir("step_2", root)
    assert e.value.status == 403 and SHARD_2 in e.value.reason


def test_symlink_that_stays_inside_the_dir_is_accepted(tmp_path):
    root = tmp_path / "weights"
    d = published_dir(root / "step_1")
    (d / SHARD_1).rename(d / "real.bin.safetensors.data")
    os.symlink("real.bin.safetensors.data", d / SHARD_1)
    assert resolve_weight_dir("step_1", root) == d.resolve()
    assert [p.name for p in weight_files(d)] == [SHARD_1, SHARD_2]


def test_base_model_dir_may_link_into_a_cache(tmp_path):
    """A base model (no STABLE) from the HF cache: its snapshot files link to ../../blobs/."""
    blobs = tmp_path / "hub" / "blobs"
    snap = tmp_path / "hub" / "snapshots" / "abc"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(blobs / "0123"))
    os.symlink(blobs / "0123", snap / "model.safetensors")
    assert set(manifest(weight_files(snap))) == {"w"}
    (snap / "STABLE").touch()  # a published weight dir is held to the rule
    with pytest.raises(WeightDirError) as e:
        weight_files(snap)
    assert e.value.status == 403


def test_system_file_is_never_echoed(tmp_path):
    """A file that is not safetensors: neither its size nor its first bytes reach the error text."""
    secret = tmp_path / "secret"
    data = b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1\n"
    secret.write_bytes(data)
    with pytest.raises(WeightDirError) as e:
        read_safetensors_header(secret)
    reason = e.value.reason
    (header_len,) = struct.unpack("<Q", data[:8])
    assert str(header_len) not in reason and str(len(data)) not in reason and "root" not in reason
    assert reason.startswith("secret: ")


@pytest.mark.parametrize(
    "header,leak",
    [
        ({"a": {"dtype": "ROOTPW", "shape": [1], "data_offsets": [0, 1]}}, "ROOTPW"),
        (
            {"evil\n[weights][abc] rpc.done t=1": {"dtype": "XX", "shape": [1], "data_offsets": [0, 1]}},
            "[weights]",
        ),
        ({"a": {"dtype": "F32", "shape": ["SECRET"], "data_offsets": [0, 4]}}, "SECRET"),
        ({"__metadata__": {"k": 1}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, "'k'"),
    ],
)
def test_header_errors_name_the_field_never_its_content(tmp_path, header, leak):
    bad = tmp_path / "x.safetensors"
    raw = json.dumps(header).encode()
    bad.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 4)
    with pytest.raises(WeightDirError) as e:
        read_safetensors_header(bad)
    assert e.value.status == 422 and e.value.reason.startswith("x.safetensors: ")
    assert leak not in e.value.reason and "\n" not in e.value.reason


def test_undecodable_header_does_not_echo_its_bytes(tmp_path):
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(struct.pack("<Q", 4) + b"{\xfe\xfd}")
    with pytest.raises(WeightDirError) as e:
        read_safetensors_header(bad)
    assert e.value.status == 422 and "0xfe" not in e.value.reason and "byte 9" in e.value.reason


@pytest.mark.parametrize(
    "content,leak",
    [
        (b'{"format": "prime-rl-weight-manifest/1", "algorithm": "SECRET", "files": {}}', "SECRET"),
        (b'{"format": "\xfe"}', "0xfe"),
        (
            b'{"format": "prime-rl-weight-manifest/1", "algorithm": "xxh3_128", '
            b'"files": {"SECRET\\n[weights][a] rpc.done": {"size": 1, "checksum": "0"}}}',
            "SECRET",
        ),
    ],
)
def test_manifest_errors_never_echo_its_content(tmp_path, content, leak):
    d = published_dir(tmp_path / "step_1")
    (d / MANIFEST_FILE).write_bytes(content)
    reason = refusal(d)
    assert reason.startswith(f"{MANIFEST_FILE}: ") and leak not in reason and "\n" not in reason


def test_index_errors_never_echo_its_content(tmp_path):
    d = published_dir(tmp_path / "step_1")
    (d / INDEX_FILE).write_text(json.dumps({"weight_map": {"a": "SECRET\n[weights][a] x.safetensors"}}))
    with pytest.raises(WeightDirError) as e:
        weight_files(d)
    assert e.value.status == 422 and e.value.reason.startswith(f"{INDEX_FILE}: ")
    assert "SECRET" not in e.value.reason and "\n" not in e.value.reason


def test_reasons_are_one_printable_line():
    e = WeightDirError(403, "a\nb\r\x00\x1b[31m\u2028c")
    assert e.reason.isprintable() and str(e) == e.reason


def test_weight_dir_with_a_newline_cannot_forge_a_log_line(tmp_path):
    root = tmp_path / "weights"
    root.mkdir()
    forged = "/tmp/x\n[weights][abc] rpc.done op=update_weights t=1 rpc_ms=99999"
    with pytest.raises(WeightDirError) as e:
        resolve_weight_dir(forged, root)
    assert e.value.status == 403 and e.value.reason.isprintable()


# --- strict safetensors headers ---------------------------------------------------------------


def _write_raw(path, entries, data_len, header_pad=b""):
    raw = json.dumps(entries).encode() + header_pad
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data_len)
    return path


@pytest.mark.parametrize(
    "entries,data_len,rule",
    [
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 16, "file size"),  # trailing bytes
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]},
            },
            24,
            "contiguous",
        ),  # a gap
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            },
            8,
            "contiguous",
        ),  # two tensors on the same bytes
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, 16, "contiguous"),  # not from 0
        (
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}},
            12,
            "shape",
        ),  # length != numel*width
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, 8, "data_offsets"),
        ({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}}, 8, "shape"),
        ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, 8, "shape"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, True]}}, 8, "data_offsets"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 9]}}, 8, "data_offsets"),
    ],
)
def test_header_offsets_are_checked_strictly(tmp_path, entries, data_len, rule):
    bad = _write_raw(tmp_path / "x.safetensors", entries, data_len)
    with pytest.raises(WeightDirError) as e:
        read_safetensors_header(bad)
    assert e.value.status == 422 and e.value.reason.startswith("x.safetensors: ") and rule in e.value.reason


def test_duplicate_header_keys_are_refused(tmp_path):
    bad = tmp_path / "x.safetensors"
    raw = (
        b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
        b'"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}'
    )
    bad.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 8)
    with pytest.raises(WeightDirError, match="more than once"):
        read_safetensors_header(bad)


def test_real_safetensors_files_pass_the_strict_check(tmp_path):
    tensors = {
        "f32": torch.zeros(3, 5),
        "bf16": torch.zeros(7, dtype=torch.bfloat16),
        "f16": torch.zeros(1, 1, 3, dtype=torch.float16),
        "i64": torch.zeros(2, dtype=torch.int64),
        "i8": torch.zeros(3, dtype=torch.int8),
        "u8": torch.zeros(5, dtype=torch.uint8),
        "bool": torch.zeros(3, dtype=torch.bool),
        "scalar": torch.tensor(1.0),
        "empty": torch.zeros(0, 4),
        "f8": torch.zeros(3, dtype=torch.float8_e4m3fn),
    }
    save_file(tensors, str(tmp_path / "all.safetensors"), metadata={"format": "pt"})
    info = read_safetensors_header(tmp_path / "all.safetensors")
    assert info["scalar"] == TensorInfo("F32", ()) and info["empty"] == TensorInfo("F32", (0, 4))
    assert set(info) == set(tensors)
    save_file({}, str(tmp_path / "none.safetensors"))
    assert read_safetensors_header(tmp_path / "none.safetensors") == {}


def test_the_tiny_model_and_a_dev_weight_dir_pass(tmp_path):
    from pathlib import Path

    from prime_rl.dev.weights import write_perturbed_weights

    tiny = Path(__file__).resolve().parents[3] / "models" / "tiny"
    if not (tiny / "model.safetensors").is_file():
        pytest.skip("models/tiny is not built (make model)")
    assert manifest(weight_files(tiny))
    d = write_perturbed_weights(tiny, tmp_path / "weights" / "step_1")
    assert resolve_weight_dir("step_1", tmp_path / "weights") == d.resolve()
    verify_weight_dir(d)
    assert manifest(weight_files(d)) == manifest(weight_files(tiny))


# --- weight_dir strings the OS cannot resolve -------------------------------------------------


@pytest.mark.parametrize(
    "make,status",
    [
        (lambda root: "a" * 10_000, 400),  # longer than PATH_MAX
        (lambda root: "x/" * 3000, 400),
        (lambda root: str(root / ("n" * 300)), 400),  # one name over NAME_MAX
        (lambda root: "step\x00_1", 400),
        (lambda root: "loop/inner", 404),  # a symlink loop (ELOOP)
    ],
)
def test_unresolvable_weight_dir_is_a_4xx_that_does_not_echo_it(tmp_path, make, status):
    root = tmp_path / "weights"
    root.mkdir()
    os.symlink("loop", root / "loop")
    weight_dir = make(root)
    with pytest.raises(WeightDirError) as e:
        resolve_weight_dir(weight_dir, root)
    assert e.value.status == status
    assert len(e.value.reason) < 500 and e.value.reason.isprintable()


def test_hidden_safetensors_file_is_never_a_weight(tmp_path):
    """The manifest leaves hidden names (temporaries) out, so no loader may pick one up either."""
    d = make_dir(tmp_path / "step_1")
    save_file({"w": torch.ones(2, 3), "b": torch.ones(3)}, str(d / ".evil.safetensors"))
    assert [p.name for p in weight_files(d)] == ["model.safetensors"]


def test_read_tensors_equals_the_safetensors_loader_for_every_dtype_and_alignment(tmp_path):
    from safetensors.torch import load_file

    from prime_rl.transport.weights import read_tensors

    tensors = {
        "a.u8": torch.arange(3, dtype=torch.uint8),  # odd length: the next tensor starts unaligned
        "b.bf16": torch.randn(3, 5).to(torch.bfloat16),
        "c.f32": torch.randn(7),
        "d.i64": torch.arange(5, dtype=torch.int64),
        "e.bool": torch.tensor([True, False, True]),
        "f.f16": torch.randn(2, 2, 2).to(torch.float16),
        "g.empty": torch.zeros(0, 4),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    got = read_tensors(path)
    assert [n for n, _ in got] == sorted(tensors)
    expected = load_file(str(path))
    for name, t in got:
        assert t.dtype == expected[name].dtype and t.shape == expected[name].shape
        assert torch.equal(t, expected[name]), name


def test_read_tensors_refuses_a_cut_file_before_reading_it(tmp_path):
    from prime_rl.transport.weights import WeightDirError, read_tensors

    path = tmp_path / "model.safetensors"
    save_file({"w": torch.randn(64)}, str(path))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(WeightDirError, match="cut short"):
        read_tensors(path)


def test_a_shard_cut_while_it_is_read_raises_an_error_naming_it(tmp_path):
    """No memory map: a file cut between the header check and the read is an OSError (which the
    worker undoes), where a mapped read would kill the engine with SIGBUS."""
    from prime_rl.transport.weights import iter_tensors

    path = tmp_path / "model.safetensors"
    save_file({"a": torch.randn(64), "b": torch.randn(64)}, str(path))
    tensors = iter_tensors([path])
    name, first = next(tensors)
    assert name == "a" and first.shape == (64,)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 100)
    with pytest.raises(OSError, match=r"model\.safetensors: file ended inside tensor 'b'"):
        next(tensors)


@pytest.fixture
def varied_shard(tmp_path):
    """Tensors of several sizes and dtypes, so a reused buffer must grow and be viewed anew."""
    torch.manual_seed(0)
    tensors = {
        f"t{i}": torch.randn(n).to(dtype)
        for i, (n, dtype) in enumerate(
            [
                (7, torch.float32),
                (300, torch.bfloat16),
                (64, torch.float32),
                (1000, torch.float16),
                (5, torch.float32),
            ]
        )
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    return path, tensors


def read_buffers_made(monkeypatch) -> list:
    from prime_rl.transport import weights

    made: list = []

    class Counted(weights._ReadBuffers):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(weights, "_ReadBuffers", Counted)
    return made


def test_reused_reads_give_each_tensor_exactly_to_a_loader_that_copies_it(monkeypatch, varied_shard):
    from prime_rl.transport.weights import iter_tensors

    path, tensors = varied_shard
    made = read_buffers_made(monkeypatch)
    copies = {name: t.clone() for name, t in iter_tensors([path], reuse=True)}
    assert copies.keys() == tensors.keys()
    for name, t in tensors.items():
        assert torch.equal(copies[name], t), name
    # two buffers taken in turn (the loop variable holds the last tensor), grown when too small
    assert made[0].allocations <= 4


def test_reused_reads_never_overwrite_a_tensor_the_caller_kept(monkeypatch, varied_shard):
    from prime_rl.transport.weights import iter_tensors

    path, tensors = varied_shard
    made = read_buffers_made(monkeypatch)
    kept = dict(iter_tensors([path], reuse=True))  # keeps a view of every tensor, like a layerwise loader
    for name, t in tensors.items():
        assert torch.equal(kept[name], t), f"{name} was overwritten by a later read"
    assert made[0].allocations == len(tensors)  # each kept one got its own memory
