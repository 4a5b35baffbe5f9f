"""vLLM worker extension: loads weights in place, called through ``collective_rpc``.

vLLM mixes this class into every worker (``--worker-extension-cls``), so each tensor-parallel
rank reads the safetensors files and the model's own ``load_weights`` shards them. The server
has checked the files before (strict headers, names, shapes and dtypes against the served model,
the manifest's sizes and checksums), so the load is expected to succeed; what can still fail is
handled here. The tensors are read one by one with plain reads, never memory-mapped
(:func:`prime_rl.transport.weights.iter_tensors`: a file cut or unreadable now raises an error
instead of killing the engine with SIGBUS), and go through the worker's ``reload_weights``,
vLLM's layerwise in-place reload, which handles the kernel-format repacking of the CPU backend
(a direct ``model.load_weights`` does not). It runs between engine steps, so no forward pass
sees a half-loaded model from another request's point of view.

If the load fails part-way (a read error, an engine error), vLLM's layerwise reload leaves the
layers it had not finished on the meta device (the next forward pass would kill the engine) and
the ones it had finished on the new weights. :func:`abandon_partial_reload` puts every
unfinished layer back on its previous tensors, untouched because vLLM only copies a layer once
all of it has arrived; the server then loads the previous weights again (a full reload), so the
model is wholly one version before generation resumes. Raise points (``inference.load.*``,
:mod:`prime_rl.failpoints`) let the tests fail a load at any tensor.

Not staged in memory first: reading everything before applying doubled the load time on the CPU
backend (1030 against 551 ms for 503 MB, ``benchmarks/reload_cost.py``) and needs a second copy
of the model in host memory, for no gain over the checks above plus the undo.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

from prime_rl import failpoints
from prime_rl.transport.weights import iter_tensors

EXTENSION_QUALNAME = "prime_rl.inference.worker.WeightUpdateExtension"
_LAYERWISE_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


def _load_order(files: list[str]) -> Iterator[tuple[str, object]]:
    for i, (name, tensor) in enumerate(iter_tensors([Path(f) for f in files])):
        failpoints.raise_if("inference.load.tensor", i)
        yield name, tensor


def abandon_partial_reload(model, model_config) -> int:
    """Put the layers a failed layerwise reload left unfinished back on their previous tensors.

    Clears what each unfinished layer had buffered and lets vLLM's own finalisation place its
    kept kernel tensors back (the path vLLM takes for a layer the checkpoint did not cover).
    Returns how many layers were unfinished. Layers that had finished hold the new weights: the
    caller reloads the previous ones after this.
    """
    from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO, finalize_layerwise_reload

    pending = 0
    for layer in model.modules():
        info = LAYERWISE_INFO.get(layer)
        if info is not None and info.can_load():
            info.loaded_weights = []
            info.load_numel = 0
            pending += 1
    layerwise = logging.getLogger(_LAYERWISE_LOGGER)
    level = layerwise.level
    layerwise.setLevel(logging.ERROR)  # one "Failed to load weights" warning per layer otherwise
    try:
        finalize_layerwise_reload(model, model_config)
    finally:
        layerwise.setLevel(level)
    return pending


class WeightUpdateExtension:
    """Methods added to vLLM's worker. Names are prefixed so they never shadow the worker's own."""

    def prime_load_weights(self, files: list[str]) -> dict:
        """Load every tensor of ``files`` into the running model; return timing of this rank.

        On a failure the unfinished layers are put back before the error is raised again (see
        the module docstring); the caller must then reload whole weights.
        """
        start = time.perf_counter()
        try:
            self.reload_weights(weights_iterator=_load_order(files))  # type: ignore[attr-defined]
            failpoints.raise_if("inference.load.after")
        except BaseException:
            abandon_partial_reload(self.get_model(), self.vllm_config.model_config)  # type: ignore[attr-defined]
            raise
        rank = getattr(self, "rank", 0)
        return {"rank": rank, "load_ms": (time.perf_counter() - start) * 1000.0}
