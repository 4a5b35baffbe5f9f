"""vLLM worker extension: loads weights in place, called through ``collective_rpc``.

vLLM mixes this class into every worker (``--worker-extension-cls``), so each tensor-parallel
rank reads the safetensors files and the model's own ``load_weights`` shards them. The server
has checked the files before (strict headers, names, shapes and dtypes against the served model,
the manifest's sizes and checksums), so the load is expected to succeed; what can still fail is
handled here. The tensors are read one by one with plain reads, never memory-mapped
(:func:`prime_rl.transport.weights.iter_tensors`: a file cut or unreadable now raises an error
instead of killing the engine with SIGBUS), and go into the model one of two ways (below). The
load runs between engine steps, so no forward pass sees a half-loaded model from another
request's point of view.

Two ways in (``inference.weight_reload``, passed to the workers as ``PRIME_RL_WEIGHT_RELOAD``):

- **direct**: the model's own ``load_weights`` copies each tensor into the parameter
  that serves it, in place (fused parameters such as qkv and gate_up by their shards): one pass
  over the bytes. On the CPU backend vLLM would repack every linear layer's weight into oneDNN's
  format after loading and drop the plain one, so an in-place copy would not reach the kernels;
  with direct reloads :func:`install_plain_cpu_linear` makes those layers compute with oneDNN on
  their plain weight instead (installed when vLLM imports this module in the worker, before the
  model is built). On a GPU nothing is repacked; the copies go host to device. A load
  that fails part-way leaves some parameters new and the others old; the server then loads the
  previous weights again (a full reload), so the model is wholly one version before generation
  resumes.
- **layerwise**: vLLM's layerwise reload (the CPU repack included), for models whose layers
  transform their weights after loading (quantised weights, MLA).
- **auto** (the default): direct, except layerwise for those models (:func:`resolve_reload`).

If a layerwise load fails part-way (a read error, an engine error), vLLM's reload leaves the
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
import os
import time
from collections.abc import Iterator
from pathlib import Path

from prime_rl import failpoints
from prime_rl.transport.weights import iter_tensors

EXTENSION_QUALNAME = "prime_rl.inference.worker.WeightUpdateExtension"
_LAYERWISE_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
RELOAD_ENV = "PRIME_RL_WEIGHT_RELOAD"
"""The worker processes' copy of ``inference.weight_reload`` (``auto``, ``direct`` or ``layerwise``)."""

_logger = logging.getLogger(__name__)


def reload_mode() -> str:
    return os.environ.get(RELOAD_ENV, "layerwise")


def direct_blocker(model_config) -> str | None:
    """Why a model cannot take a direct reload (its layers transform their weights after loading,
    so an in-place copy of checkpoint tensors would not be what they compute with), or None."""
    quantization = getattr(model_config, "quantization", None)
    if quantization is not None:
        return f"quantization={quantization}"
    if getattr(model_config, "use_mla", False):
        return "MLA attention"
    return None


def resolve_reload(mode: str, model_config) -> str:
    """``direct`` or ``layerwise`` for this model: ``auto`` is direct wherever the model can take
    it; ``direct`` on a model that cannot falls back to layerwise with a warning."""
    blocker = direct_blocker(model_config)
    if mode == "layerwise" or (mode == "auto" and blocker is not None):
        return "layerwise"
    if blocker is not None:
        _logger.warning("weight_reload=direct cannot serve this model (%s): reloading layerwise", blocker)
        return "layerwise"
    return "direct"


def install_plain_cpu_linear() -> bool:
    """On the CPU backend, make linear layers keep their plain weight and compute on it
    (:func:`plain_cpu_linear`, no prepacked copy), so that an in-place copy into the weight is what
    the next forward pass uses. Wraps vLLM's ``dispatch_cpu_unquantized_gemm``, which its layers import when they
    finish loading. Returns whether it is installed."""
    try:
        from vllm.model_executor.layers import utils
    except ImportError:
        return False
    packed = utils.dispatch_cpu_unquantized_gemm
    if getattr(packed, "prime_rl_plain", False):
        return True

    def dispatch(layer, remove_weight: bool) -> None:
        weight = getattr(layer, "weight", None)
        if weight is None or weight.ndim != 2 or weight.is_meta:
            packed(layer, remove_weight)
            return
        layer.cpu_linear = plain_cpu_linear(weight)

    dispatch.prime_rl_plain = True  # type: ignore[attr-defined]
    utils.dispatch_cpu_unquantized_gemm = dispatch
    return True


def plain_cpu_linear(weight):
    """The fastest linear on ``weight`` as it is (read at every call, never a packed copy).

    oneDNN's inner product on the plain weight (``mkldnn._linear_pointwise``) where it supports
    the dtype (about 1.5x torch's ``F.linear`` at decode batch sizes, within 1.1-1.6x of vLLM's
    prepacked oneDNN); torch's ``F.linear`` otherwise (fp16 on CPUs without it, no mkldnn).
    """
    import torch

    linear = torch.nn.functional.linear
    pointwise = (
        getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None
    )
    if pointwise is None:
        return linear
    try:
        with torch.no_grad():
            pointwise(torch.zeros(1, weight.shape[1], dtype=weight.dtype), weight, None, "none", [], "")
    except RuntimeError:
        return linear
    return lambda x, w, bias: pointwise(x, w, bias, "none", [], "")


def _load_order(files: list[str], reuse: bool = False) -> Iterator[tuple[str, object]]:
    for i, (name, tensor) in enumerate(iter_tensors([Path(f) for f in files], reuse=reuse)):
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
        mode = resolve_reload(reload_mode(), self.vllm_config.model_config)  # type: ignore[attr-defined]
        direct = mode == "direct"
        try:
            if direct:
                self.get_model().load_weights(_load_order(files, reuse=True))  # type: ignore[attr-defined]
            else:
                self.reload_weights(weights_iterator=_load_order(files))  # type: ignore[attr-defined]
            failpoints.raise_if("inference.load.after")
        except BaseException:
            if not direct:  # direct: the parameters are whole tensors, some new; the server reloads
                abandon_partial_reload(self.get_model(), self.vllm_config.model_config)  # type: ignore[attr-defined]
            raise
        rank = getattr(self, "rank", 0)
        return {"rank": rank, "load_ms": (time.perf_counter() - start) * 1000.0, "reload": mode}


if reload_mode() in ("auto", "direct"):  # in a worker process vLLM started: before it builds the model
    install_plain_cpu_linear()
