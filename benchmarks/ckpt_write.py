"""Weight publishing cost: write_ms of ``weights/step_N`` against a raw write + fsync of the same bytes.

Loads a random model of each size, then alternates (a) ``WeightPublisher.publish`` (shards,
index, config/tokenizer files, manifest, fsyncs, rename, STABLE) and (b) writing the same tensor
bytes to one file and fsyncing it, --repeats times each, in one run; reports medians and their
ratio. Also times, inside each publish, ``write_file_manifest`` (sizes and xxh3_128 checksums of
every file, read back from the page cache) and, after it, ``verify_weight_dir`` on the published
dir (what a resume and a server's check cost), each as a share of the publish's write_ms.
``--compare_hashes`` instead times xxh3_128 against blake2b on 1 GiB in memory (the choice made
in ``prime_rl.transport.weights``).

usage: python benchmarks/ckpt_write.py [--sizes tiny,medium] [--repeats 5] [--compare_hashes]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from prime_rl.dev.tiny_model import PRESETS, build_tiny_model
from prime_rl.logging import setup_logging
from prime_rl.trainer import weights as publisher_mod
from prime_rl.trainer.weights import WeightPublisher
from prime_rl.transport.weights import verify_weight_dir, write_file_manifest

MANIFEST_MS: list[float] = []


def timed_write_file_manifest(directory: Path) -> dict:
    start = time.perf_counter()
    out = write_file_manifest(directory)
    MANIFEST_MS.append((time.perf_counter() - start) * 1000.0)
    return out


def raw_write_ms(tensors: list[torch.Tensor], directory: Path) -> float:
    """Write the tensors' bytes back to back into one file and fsync it."""
    fd, name = tempfile.mkstemp(dir=directory, suffix=".raw")
    start = time.perf_counter()
    with os.fdopen(fd, "wb") as f:
        for t in tensors:
            f.write(memoryview(t.contiguous().view(-1).view(torch.uint8).numpy()))
        f.flush()
        os.fsync(f.fileno())
    ms = (time.perf_counter() - start) * 1000.0
    os.unlink(name)
    return ms


def bench(size: str, repeats: int, out_dir: Path) -> dict:
    from transformers import AutoModelForCausalLM

    model_dir = build_tiny_model(Path("models") / f"bench-{size}", PRESETS[size])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    root = out_dir / size / "weights"
    publisher = WeightPublisher(model, str(model_dir), root, max_shard_bytes=2 * 1024**3)
    tensors = [v for k, v in state.items() if k not in publisher.skip]
    publisher.publish(state, 0)  # warm-up: page cache, allocator
    pubs, raws, manifests, verifies = [], [], [], []
    for i in range(1, repeats + 1):
        publisher.prune(keep=1, newest=i - 1)
        os.sync()  # start each timed write with no other dirty data pending
        raws.append(raw_write_ms(tensors, root))
        os.sync()
        MANIFEST_MS.clear()
        dest, ms, nbytes = publisher.publish(state, i)
        pubs.append(ms)
        manifests.append(MANIFEST_MS[-1])
        start = time.perf_counter()
        verify_weight_dir(dest)
        verifies.append((time.perf_counter() - start) * 1000.0)
    return {
        "size": size,
        "bytes": nbytes,
        "repeats": repeats,
        "write_ms_median": statistics.median(pubs),
        "raw_write_fsync_ms_median": statistics.median(raws),
        "ratio": statistics.median(pubs) / statistics.median(raws),
        "manifest_ms_median": statistics.median(manifests),
        "manifest_share": statistics.median(m / p for m, p in zip(manifests, pubs, strict=True)),
        "verify_ms_median": statistics.median(verifies),
        "verify_ratio": statistics.median(v / p for v, p in zip(verifies, pubs, strict=True)),
        "write_ms": pubs,
        "raw_ms": raws,
        "manifest_ms": manifests,
        "verify_ms": verifies,
    }


def compare_hashes(gib: int = 1, repeats: int = 3) -> None:
    """Best-of-``repeats`` time to hash ``gib`` GiB in memory, in the verifier's 8 MiB chunks."""
    import hashlib

    import xxhash

    data = memoryview(os.urandom(gib << 30))
    chunk = 8 << 20
    print("| hash | ms per GiB | GiB/s |")
    print("|---|---|---|")
    for name, factory in (("xxh3_128", xxhash.xxh3_128), ("blake2b", hashlib.blake2b)):
        best = float("inf")
        for _ in range(repeats):
            h = factory()
            start = time.perf_counter()
            for i in range(0, len(data), chunk):
                h.update(data[i : i + chunk])
            h.hexdigest()
            best = min(best, time.perf_counter() - start)
        print(f"| {name} | {best * 1000.0 / gib:.1f} | {gib / best:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny,medium")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_ckpt_write"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/ckpt_write.json"))
    parser.add_argument("--compare_hashes", action="store_true", help="time xxh3_128 vs blake2b and exit")
    args = parser.parse_args()
    if args.compare_hashes:
        compare_hashes()
        return
    publisher_mod.write_file_manifest = timed_write_file_manifest  # time the manifest inside each publish
    setup_logging(args.output_dir / "logs" / "trainer" / "rank_0.log", console=False)
    rows = [bench(size, args.repeats, args.output_dir) for size in args.sizes.split(",")]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))
    print("| size | bytes | write_ms median | raw write+fsync median | ratio |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['size']} | {r['bytes'] / 1e6:.1f} MB | {r['write_ms_median']:.1f} | {r['raw_write_fsync_ms_median']:.1f} | {r['ratio']:.2f} |"
        )
    print()
    print("| size | manifest_ms median | manifest / write_ms | verify_ms median | verify / write_ms |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['size']} | {r['manifest_ms_median']:.1f} | {r['manifest_share']:.3f} | {r['verify_ms_median']:.1f} | {r['verify_ratio']:.3f} |"
        )


if __name__ == "__main__":
    main()
