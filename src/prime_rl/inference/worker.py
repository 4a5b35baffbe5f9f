"""vLLM worker extension: loads weights in place, called through ``collective_rpc``.

vLLM mixes this class into every worker (``--worker-extension-cls``), so each tensor-parallel
rank reads the safetensors files and the model's own ``load_weights`` shards them. Loading goes
through the worker's ``reload_weights(weights_iterator=...)``, which handles the kernel-format
repacking of the CPU backend (a direct ``model.load_weights`` does not) and runs between engine
steps, so no forward pass ever sees half-loaded weights from another request's point of view.
"""

from __future__ import annotations

import time

from prime_rl.transport.weights import iter_safetensors

EXTENSION_QUALNAME = "prime_rl.inference.worker.WeightUpdateExtension"


class WeightUpdateExtension:
    """Methods added to vLLM's worker. Names are prefixed so they never shadow the worker's own."""

    def prime_load_weights(self, files: list[str]) -> dict:
        """Load every tensor of ``files`` into the running model; return timing of this rank."""
        start = time.perf_counter()
        self.reload_weights(weights_iterator=iter_safetensors(files))  # type: ignore[attr-defined]
        rank = getattr(self, "rank", 0)
        return {"rank": rank, "load_ms": (time.perf_counter() - start) * 1000.0}
