#!/usr/bin/env bash
# Issue 15's device work on the lent GPU machine (run from the repository root there, after
# scripts/gpu_wheels.sh here; carry .gpu-wheels). A smoke step first: it stops the call at once if
# the trainer does not run there (and warms FlexAttention's compile cache for what follows). Then
# the parts named in PARTS, in that order, each under the smaller of its limit and what is left of
# BUDGET seconds (default 520). Everything goes to $OUT (default outputs/gpu_check).
#
# Parts, with their limits (from the H100 runs of 2026-11-26, benchmarks/RESULTS.md):
#   tests    the gpu-marked tests                                    (~70 s)   90 s
#   profile  one step at 16k tokens under torch.profiler             (~45 s)   90 s
#   compile  --compile at 16k (compiling 24 layers takes > 2 min)              260 s
#   ac       activation checkpointing at 16k and 32k, 32k micro-batches       110 s
#   default  every sequence length x micro-batch (the table)  (180 s)  200 s
#   before   the path before issue 15: full logits, a dense mask               60 s
#   device run: PARTS="tests profile compile ac" bash scripts/gpu_check.sh    (default: all six)
set -uo pipefail
out="${OUT:-outputs/gpu_check}"
budget="${BUDGET:-520}"
parts="${PARTS:-tests profile compile ac default before}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .gpu-wheels/*.whl || exit 1
export PYTHONPATH="/tmp/site:src:." PYTHONUNBUFFERED=1
log="$out/device.txt"
nvidia-smi -L | tee "$log"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  | tee -a "$log"

# part LIMIT NAME CMD...: runs CMD under the smaller of LIMIT and the budget left (skipped under 20 s)
part() {
  local limit=$1 name=$2 left=$((budget - SECONDS - 5))
  shift 2
  ((left < limit)) && limit=$left
  if ((limit < 20)); then echo "== $name: skipped, $left s of the budget left" | tee -a "$log"; return 1; fi
  echo "== $name (at $SECONDS s, limit $limit s)" | tee -a "$log"
  timeout "$limit" "$@"
  local rc=$?
  echo "== $name: rc=$rc at $SECONDS s" | tee -a "$log"
  return $rc
}
bench=(python3 benchmarks/trainer_gpu.py --shape qwen2.5-0.5b --models_dir /tmp/models)
quiet() { grep -v write.done | tee -a "$out/bench.log"; }

part 90 smoke python3 benchmarks/trainer_gpu.py --shape tiny --models_dir /tmp/models --seq_lens 256 \
  --micro_batch_tokens 512 --tokens_per_step 2048 --steps 1 --json /tmp/smoke.json 2>&1 | tail -2 | tee -a "$log"
[ -s /tmp/smoke.json ] || { echo "smoke failed: stopping" | tee -a "$log"; exit 3; }

for p in $parts; do
  case $p in
  tests) part 90 tests python3 -m pytest -q -p no:cacheprovider tests/gpu >"$out/gpu_tests.log" 2>&1
    grep -E "passed|failed|error|outlived" "$out/gpu_tests.log" | tee -a "$log" ;;
  profile) part 90 profile "${bench[@]}" --seq_lens 16384 --micro_batch_tokens 16384 --steps 1 --publish none \
    --profile "$out" --json /tmp/profile.json 2>&1 | quiet ;;
  compile) part 260 compile "${bench[@]}" --seq_lens 16384 --micro_batch_tokens 16384 --steps 2 --compile \
    --json "$out/trainer_gpu_compile.json" 2>&1 | quiet ;;
  ac) part 110 ac "${bench[@]}" --seq_lens 16384,32768 --micro_batch_tokens 32768 --steps 2 \
    --activation_checkpointing --json "$out/trainer_gpu_ac.json" 2>&1 | quiet ;;
  default) part 200 default "${bench[@]}" --json "$out/trainer_gpu.json" 2>&1 | quiet ;;
  before) part 60 before "${bench[@]}" --seq_lens 4096,16384 --micro_batch_tokens 8192,16384 --attention sdpa \
    --logprob_chunk_tokens 0 --json "$out/trainer_gpu_before.json" 2>&1 | quiet ;;
  *) echo "unknown part $p (tests profile compile ac default before)" | tee -a "$log" ;;
  esac
done
echo "== done at $SECONDS s" | tee -a "$log"
