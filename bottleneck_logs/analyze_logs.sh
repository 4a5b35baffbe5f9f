#!/usr/bin/env bash
# Bottleneck analysis of a run's logs: ./bottleneck_logs/analyze_logs.sh <orchestrator.log> [inference.log] [trainer logs ...]
# or a run directory (its logs/ are found), or a bundle from `rl bundle` (bottleneck_logs_<ts>.tar.gz:
# unpacked into a temporary directory, removed afterwards). Writes bottleneck_logs/analysis_<timestamp>/
# (or --out DIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python="python3"; fi
fi
args=()
tmp=""
cleanup() { if [ -n "$tmp" ]; then rm -rf "$tmp"; fi; }
trap cleanup EXIT
for a in "$@"; do
  case "$a" in
    *.tar.gz|*.tgz)
      if [ ! -f "$a" ]; then echo "error: $a: no such file" >&2; exit 2; fi
      if [ -z "$tmp" ]; then tmp="$(mktemp -d)"; fi
      dest="$tmp/$(basename "$a")"
      mkdir -p "$dest"
      if ! tar -xzf "$a" -C "$dest" 2>"$tmp/tar.err"; then
        echo "error: $a: not a readable tar.gz bundle ($(head -c 300 "$tmp/tar.err"))" >&2; exit 2
      fi
      # the bundle holds one top folder (the run directory); else analyze what was unpacked
      tops=("$dest"/*)
      if [ ${#tops[@]} -eq 1 ] && [ -d "${tops[0]}" ]; then args+=("${tops[0]}"); else args+=("$dest"); fi
      ;;
    *) args+=("$a") ;;
  esac
done
"$python" -m prime_rl.analysis "${args[@]}"
