"""Print the orchestrator's reward and truncation per step from a run's metrics.jsonl, with a bar.

usage: python scripts/show_rewards.py outputs/rl-debug/metrics.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    path = Path(sys.argv[1])
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r.get("process") == "orchestrator"]
    if not steps:
        raise SystemExit(f"{path}: no orchestrator steps")
    print(f"\nreward per step ({path}):")
    for r in steps:
        bar = "#" * int(round(r["reward_mean"] * 50))
        print(
            f"  step {r['step']:3d}  reward {r['reward_mean']:.3f}  truncated {r['trunc_pct']:5.1f}%  "
            f"staleness {r['staleness']}  {bar}"
        )
    k = max(1, len(steps) // 5)
    first = sum(r["reward_mean"] for r in steps[:k]) / k
    last = sum(r["reward_mean"] for r in steps[-k:]) / k
    print(f"\nmean reward, first {k} steps: {first:.3f}; last {k} steps: {last:.3f} ({last - first:+.3f})")
    trunc = sum(r["trunc_pct"] for r in steps) / len(steps)
    print(f"mean truncation: {trunc:.1f}% of completions hit max_tokens")


if __name__ == "__main__":
    main()
