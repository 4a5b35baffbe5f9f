#!/usr/bin/env bash
# Wheels the GPU machine lacks for the trainer's GPU tests and benchmark (issue 15), into
# .gpu-wheels/ (git-ignored through .git/info/exclude). That machine has its own python3 (3.12),
# torch (2.11), transformers, safetensors, tokenizers, numpy, httpx, pytest and hypothesis, and
# reaches no package index; these are the rest of what `prime_rl.trainer` and tests/conftest.py
# import, at the versions this checkout's environment runs. Usage: scripts/gpu_wheels.sh [PYVER]
set -euo pipefail
cd "$(dirname "$0")/.."
pyver="${1:-3.12}"
grep -qx '/.gpu-wheels/' .git/info/exclude 2>/dev/null || echo '/.gpu-wheels/' >> .git/info/exclude
mkdir -p .gpu-wheels
pkgs=()
for name in pydantic pydantic-core pydantic-settings annotated-types typing-inspection python-dotenv loguru; do
  pkgs+=("$name==$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('$name'))")")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .gpu-wheels "${pkgs[@]}"
ls .gpu-wheels
