"""Reproduce the seed investigation: front-end queue saturation, then the fix, diagnosed from logs.

Starts the real inference server, holds --n concurrent streams through the shared inference
pool, and sends weight updates first through the shared pool, then through the dedicated admin
client. Each mode's client log goes to its own directory, and the analyzer runs on each, together
with the server log. Expected: the shared run is diagnosed as front-end queue saturation and the
admin run as healthy.

usage: python benchmarks/queue_saturation.py [--n 256] [--updates 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from weight_update_latency import run_case  # noqa: E402  (the same load generator)

from prime_rl.analysis.__main__ import main as analyze  # noqa: E402
from prime_rl.dev.server import start_server  # noqa: E402
from prime_rl.dev.tiny_model import PRESETS, build_tiny_model  # noqa: E402
from prime_rl.dev.weights import write_perturbed_weights  # noqa: E402
from prime_rl.logging import setup_logging  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="concurrent streams")
    parser.add_argument("--pool", type=int, default=256, help="shared inference pool size")
    parser.add_argument("--updates", type=int, default=6)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--max_tokens", type=int, default=64)
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_queue_saturation"))
    args = parser.parse_args()
    model = build_tiny_model(Path("models/bench-small"), PRESETS["small"])
    server_dir = args.output_dir / "server"
    extra = ["--enforce-eager", "--kv-cache-memory-bytes", str(512 * 1024 * 1024), "--max-num-seqs", "256"]
    server = start_server(model, server_dir, extra_args=extra)
    verdicts = {}
    try:
        server.wait_ready()
        dirs = [
            write_perturbed_weights(model, server.weights_root / f"step_{i}", seed=i).resolve()
            for i in (1, 2)
        ]
        for mode in ("shared", "dedicated"):
            log = args.output_dir / mode / "logs" / "orchestrator.log"
            setup_logging(log, console=False)
            asyncio.run(run_case(server.base_url, str(model), args.n, mode, dirs, args))
            out = args.output_dir / mode / "analysis"
            analyze([str(log), str(server_dir / "logs" / "inference.log"), "--out", str(out)])
            summary = json.loads((out / "summary.json").read_text())
            verdicts[mode] = summary["primary"]["kind"] if summary["primary"] else "healthy"
    finally:
        server.stop()
    print(json.dumps(verdicts))
    ok = verdicts.get("shared") == "frontend_queue_saturation" and verdicts.get("dedicated") == "healthy"
    print(
        "reproduced: shared -> front-end queue saturation, dedicated -> healthy"
        if ok
        else f"NOT reproduced: {verdicts}"
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
