"""Run the demo (``configs/debug/rl.toml``) several times: does it learn, every time, on answers it ends?

For each run: mean reward of the first and last 6 steps, the learning test's verdict on it
(``tests/support/learning.py``: late-over-early pairs, truncation of the first and the best 6
steps, whether it collapsed), mean and worst truncation (completions that hit max_tokens), the
reward of every step, and the run's wall time. The demo is sampled at temperature 1 unseeded, so
runs differ; a config is good when every run passes the learning test and none collapses.

usage: python benchmarks/demo_learning.py [--runs 4] [--max_steps 30] [--output_dir outputs/bench_demo]
       [--config configs/debug/rl.toml]   (configs/debug/rl_guess.toml: the multi-turn demo)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
from benchmarks.children import run_grouped  # noqa: E402
from tests.support.learning import verdict  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def one_run(out: Path, max_steps: int, config: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    start = time.monotonic()
    rl = Path(sys.executable).parent / "rl"
    args = [
        str(rl),
        "--config",
        str(config),
        "--output_dir",
        str(out),
        "--max_steps",
        str(max_steps),
    ]
    done = run_grouped(args, cwd=ROOT)
    wall = time.monotonic() - start
    if done.returncode != 0:
        return {"error": f"rl exited {done.returncode}: {done.stderr[-500:]}", "wall_s": wall}
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    orch = [r for r in rows if r["process"] == "orchestrator"]
    rewards = [r["reward_mean"] for r in orch]
    trunc = [r["trunc_pct"] for r in orch]
    judged = verdict(rewards, trunc)
    return {
        "reward_first6": sum(rewards[:6]) / 6,
        "reward_last6": sum(rewards[-6:]) / 6,
        "rise": judged.rise,
        "pairs": judged.pairs,
        "trunc_mean_pct": sum(trunc) / len(trunc),
        "trunc_max_pct": max(trunc),
        "trunc_first6_pct": judged.trunc_first,
        "trunc_best6_pct": judged.trunc_best,
        "collapsed": judged.collapsed,
        "passes": judged.learned,
        "failures": list(judged.failures),
        "rewards": [round(r, 3) for r in rewards],
        "wall_s": wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--max_steps", type=int, default=30)
    p.add_argument("--output_dir", type=Path, default=Path("outputs/bench_demo"))
    p.add_argument("--config", type=Path, default=Path("configs/debug/rl.toml"))
    a = p.parse_args()
    results = []
    for i in range(a.runs):
        r = one_run(a.output_dir / f"run_{i}", a.max_steps, a.config)
        results.append(r)
        print(
            json.dumps({"run": i, **{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}}),
            flush=True,
        )
    ok = [r for r in results if "error" not in r]
    rising = sum(r["rise"] > 0.1 for r in ok)
    passes = sum(r["passes"] for r in ok)
    collapses = sum(r["collapsed"] for r in ok)
    print(
        f"{passes}/{a.runs} runs pass the learning test's criteria (tests/support/learning.py); "
        f"{rising}/{a.runs} rose by more than 0.1; {collapses}/{a.runs} collapsed"
    )


if __name__ == "__main__":
    main()
