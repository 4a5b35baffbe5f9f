#!/usr/bin/env bash
# The log analyzer's speed benchmark (issue 18, item 8) on the lent machine, where absolute times
# are measured: that machine has its own python3 (3.12) and numpy, no polars, no Pillow, no pydantic,
# and reaches no package index.
#
#   here:   [PY=path/to/python3.12] scripts/analyzer_device.sh prepare [PYVER]
#           the wheels the analyzer needs there, at this checkout's versions, and the C scan
#           (prime_rl.analysis._scan) built for that Python, into .analyzer-device/ (about 63 MB,
#           git-ignored through .git/info/exclude)
#   there:  device run, carry .analyzer-device:  bash scripts/analyzer_device.sh run
#           installs them under /tmp/analyzer-site, checks that the C scan loads, then runs
#           benchmarks/analyzer_speed.py on 1M- and 10M-line logs (LINES, default "1000000
#           10000000"); the table goes to $OUT/analyzer_speed.txt (default outputs/analyzer_device),
#           the rows to $OUT/analyzer_speed.json.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.analyzer-device

prepare() {
  local pyver="${1:-3.12}" py tag exclude pkgs=()
  py="${PY:-python$pyver}"
  "$py" -c "" 2>/dev/null || { echo "no $py here to build the C scan for (set PY to a python$pyver)"; exit 1; }
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qx "/$dir/" "$exclude" 2>/dev/null || echo "/$dir/" >>"$exclude"
  rm -rf "$dir" && mkdir -p "$dir"
  for name in polars polars-runtime-32 pillow pydantic pydantic-core annotated-types typing-inspection \
    typing-extensions; do
    pkgs+=("$name==$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('$name'))")")
  done
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$dir" "${pkgs[@]}"
  # the C scan as setup.py builds it (the interpreter's own flags), for that interpreter's ABI
  tag=$("$py" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  # shellcheck disable=SC2046  # the flags are words
  cc $("$py" -c "import sysconfig; print(sysconfig.get_config_var('CFLAGS'))") -fPIC -shared \
    -I"$("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])")" \
    src/prime_rl/analysis/_scan.c -o "$dir/_scan$tag"
  du -sh "$dir"
  ls "$dir"
}

run() {
  local out="${OUT:-outputs/analyzer_device}" site=/tmp/analyzer-site so
  mkdir -p "$out"
  # compiled to bytecode here, as an install does: the benchmark's first run would otherwise compile
  # polars' sources (half a second) inside its timing
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target "$site" "$dir"/*.whl
  python3 -m compileall -q src >/dev/null
  # the build for this interpreter, where the package looks for it (*.so is git-ignored: a copy of
  # the tree carries none)
  so="$dir/_scan$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")"
  [ -f "$so" ] || { echo "no $so: run prepare for this machine's Python"; exit 1; }
  cp "$so" src/prime_rl/analysis/
  export PYTHONPATH="$site:src:." PYTHONUNBUFFERED=1
  python3 -c "from prime_rl.analysis import parser; assert parser._scan is not None, 'the C scan did not load'" || exit 1
  { nproc; lscpu | grep -E "Model name|^CPU\(s\)" || true; python3 --version; } | tee "$out/analyzer_speed.txt"
  local args=()
  for n in ${LINES:-1000000 10000000}; do args+=(--lines "$n"); done
  python3 benchmarks/analyzer_speed.py "${args[@]}" --dir /tmp/analyzer-bench --json "$out/analyzer_speed.json" \
    | tee -a "$out/analyzer_speed.txt"
}

case "${1:-}" in
prepare) shift && prepare "$@" ;;
run) run ;;
*) echo "usage: $0 prepare [PYVER] | run" >&2 && exit 2 ;;
esac
