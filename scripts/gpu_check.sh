#!/usr/bin/env bash
# Issue 15's device work in one call on the lent GPU machine (run from the repository root there,
# after scripts/gpu_wheels.sh here; carry .gpu-wheels): the gpu tests, then benchmarks/trainer_gpu.py
# on Qwen2.5-0.5B's shape (the default path, activation checkpointing, and the path before issue 15:
# full logits and a dense mask). Everything it writes goes to $OUT (default outputs/gpu_check).
#   device run: bash scripts/gpu_check.sh            (about 6-9 minutes on an H100)
set -uo pipefail
out="${OUT:-outputs/gpu_check}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .gpu-wheels/*.whl || exit 1
export PYTHONPATH="/tmp/site:src:." PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$out/device.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  | tee -a "$out/device.txt"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tee "$out/gpu_tests.log"
bench() { timeout "$1" python3 benchmarks/trainer_gpu.py --shape qwen2.5-0.5b --models_dir /tmp/models "${@:2}"; }
bench 240 --json "$out/trainer_gpu.json" 2>&1 | grep -v "write.done" | tee "$out/bench.log"
bench 120 --seq_lens 16384,32768 --micro_batch_tokens 32768 --activation_checkpointing \
  --json "$out/trainer_gpu_ac.json" 2>&1 | grep -v "write.done" | tee -a "$out/bench.log"
bench 120 --seq_lens 4096,16384 --micro_batch_tokens 8192,16384 --attention sdpa --logprob_chunk_tokens 0 \
  --json "$out/trainer_gpu_before.json" 2>&1 | grep -v "write.done" | tee -a "$out/bench.log"
