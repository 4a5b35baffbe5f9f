"""The worker extension's two ways of loading weights (issue 13, a reload at the cost of the read)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from prime_rl.failpoints import FAULT_FILE_ENV, InjectedFault
from prime_rl.inference import worker
from prime_rl.inference.worker import (
    RELOAD_ENV,
    WeightUpdateExtension,
    install_plain_cpu_linear,
    plain_cpu_linear,
    resolve_reload,
)


class Layer(torch.nn.Module):
    def __init__(self, *shape: int, device: str = "cpu") -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(*shape, device=device), requires_grad=False)


def test_plain_cpu_linear_keeps_each_linear_weight_and_computes_on_it(monkeypatch):
    from vllm.model_executor.layers import utils

    packed: list[tuple[Layer, bool]] = []
    monkeypatch.setattr(
        utils, "dispatch_cpu_unquantized_gemm", lambda layer, remove: packed.append((layer, remove))
    )
    assert install_plain_cpu_linear() and install_plain_cpu_linear()  # a second call changes nothing
    linear, conv, meta = Layer(4, 3), Layer(4, 1, 4), Layer(4, 3, device="meta")
    for layer in (linear, conv, meta):
        utils.dispatch_cpu_unquantized_gemm(layer, True)
    # the 2-D weight stays where an in-place copy reaches the kernel: no packed copy, nothing removed
    assert linear.weight.shape == (4, 3)
    linear.weight.data.copy_(torch.full((4, 3), 2.0))
    assert torch.equal(linear.cpu_linear(torch.ones(1, 3), linear.weight, None), torch.full((1, 4), 6.0))
    assert packed == [(conv, True), (meta, True)]  # not a linear weight: vLLM's own dispatch


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_plain_cpu_linear_matches_torch_linear_and_reads_the_weight_at_every_call(dtype):
    torch.manual_seed(0)
    weight, bias, x = (
        torch.randn(64, 32, dtype=dtype),
        torch.randn(64, dtype=dtype),
        torch.randn(2, 3, 32, dtype=dtype),
    )
    linear = plain_cpu_linear(weight)  # oneDNN on the plain weight, or torch's linear where it cannot
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    with torch.inference_mode():
        torch.testing.assert_close(
            linear(x, weight, bias), torch.nn.functional.linear(x, weight, bias), atol=tol, rtol=tol
        )
        weight.mul_(-1)  # an in-place update, as a direct reload does
        torch.testing.assert_close(
            linear(x, weight, None), torch.nn.functional.linear(x, weight), atol=tol, rtol=tol
        )


class ModelConfig:
    def __init__(self, quantization=None, use_mla=False) -> None:
        self.quantization, self.use_mla = quantization, use_mla


@pytest.mark.parametrize(
    ("mode", "config", "expected"),
    [
        ("auto", ModelConfig(), "direct"),
        ("auto", ModelConfig(quantization="fp8"), "layerwise"),
        ("auto", ModelConfig(use_mla=True), "layerwise"),
        ("direct", ModelConfig(), "direct"),
        ("layerwise", ModelConfig(), "layerwise"),
    ],
)
def test_auto_reloads_directly_only_models_whose_layers_use_the_checkpoint_tensors(mode, config, expected):
    assert resolve_reload(mode, config) == expected


def test_direct_on_a_quantised_model_falls_back_to_layerwise_with_a_warning(caplog):
    with caplog.at_level("WARNING"):
        assert resolve_reload("direct", ModelConfig(quantization="fp8")) == "layerwise"
    assert "quantization=fp8" in caplog.text


class FakeWorker(WeightUpdateExtension):
    """The worker methods the extension calls, recording what they were given."""

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.layerwise: list[str] = []
        self.model = self
        self.vllm_config = type("C", (), {"model_config": ModelConfig()})()

    def get_model(self):
        return self

    def load_weights(self, weights):  # the model's own in-place loader
        self.loaded += [name for name, _ in weights]

    def reload_weights(self, weights_iterator):  # vLLM's layerwise reload
        self.layerwise += [name for name, _ in weights_iterator]


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"a": torch.zeros(2), "b": torch.ones(3), "c": torch.ones(1)}, str(path))
    return [str(path)]


def test_a_direct_reload_copies_into_the_parameters_and_never_takes_the_layerwise_path(monkeypatch, shard):
    monkeypatch.setenv(RELOAD_ENV, "direct")
    w = FakeWorker()
    out = w.prime_load_weights(shard)
    assert w.loaded == ["a", "b", "c"] and w.layerwise == [] and out["load_ms"] >= 0
    assert out["reload"] == "direct"


def test_a_direct_reload_that_fails_part_way_raises_without_the_layerwise_undo(monkeypatch, shard, tmp_path):
    monkeypatch.setenv(RELOAD_ENV, "direct")
    fault = tmp_path / "faults"
    fault.write_text("inference.load.tensor@1")
    monkeypatch.setenv(FAULT_FILE_ENV, str(fault))
    monkeypatch.setattr(
        worker, "abandon_partial_reload", lambda *a: pytest.fail("no layerwise state to undo")
    )
    w = FakeWorker()
    with pytest.raises(InjectedFault):
        w.prime_load_weights(shard)
    assert w.loaded == []  # the load stopped at the failing tensor; the server reloads the previous weights


def test_auto_on_a_quantised_model_takes_the_layerwise_path(monkeypatch, shard):
    monkeypatch.setenv(RELOAD_ENV, "auto")
    w = FakeWorker()
    w.vllm_config.model_config = ModelConfig(quantization="fp8")
    w.prime_load_weights(shard)
    assert w.layerwise == ["a", "b", "c"] and w.loaded == []


def test_the_layerwise_mode_uses_vllms_reload_and_undoes_a_partial_one(monkeypatch, shard, tmp_path):
    monkeypatch.setenv(RELOAD_ENV, "layerwise")
    w = FakeWorker()
    w.prime_load_weights(shard)
    assert w.layerwise == ["a", "b", "c"] and w.loaded == []
    fault = tmp_path / "faults"
    fault.write_text("inference.load.after")
    monkeypatch.setenv(FAULT_FILE_ENV, str(fault))
    undone: list[object] = []
    monkeypatch.setattr(worker, "abandon_partial_reload", lambda model, cfg: undone.append(model))
    with pytest.raises(InjectedFault):
        w.prime_load_weights(shard)
    assert undone == [w]
