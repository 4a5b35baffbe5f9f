#!/usr/bin/env bash
# Bottleneck analysis of a run's logs: ./bottleneck_logs/analyze_logs.sh <orchestrator.log> [inference.log] [trainer logs ...]
# or a run directory (its logs/ are found). Writes bottleneck_logs/analysis_<timestamp>/ (or --out DIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python="python3"; fi
fi
exec "$python" -m prime_rl.analysis "$@"
