"""A weight swap that fails at any point of the load leaves the real server on its old weights.

The session server (real vLLM, CPU) runs with ``PRIME_RL_FAULT_FILE``; each case arms one raise
point (:mod:`prime_rl.failpoints`) and updates from ``step_1`` to ``step_2``, with ``step_1``
pruned by "the trainer" in between (the server holds hard links of what it serves). The load
fails at the first tensor, in the middle of a fused parameter (``k_proj``
delivered to the fused ``qkv_proj`` but not ``q_proj``; ``gate_proj`` to ``gate_up_proj`` but not
``up_proj``), at the last tensor, or after every tensor is in. Each time: the update answers 500
with ``rolled_back: true``, the fault fired, completions give exactly step 1's log-probabilities,
``GET /weights`` names step 1, ``/health`` answers 200. On the old code a failure at a fused
parameter left layers on the meta device and the next completion killed the engine.

When the rollback fails as well, the weights are unknown: generation and ``/health`` answer 503
with the reason and ``GET /weights`` says so, until a reload succeeds.
"""

from __future__ import annotations

import shutil

import httpx
import pytest
from tests.support.completions import complete
from tests.support.servers import serving

from prime_rl.dev.weights import write_perturbed_weights
from prime_rl.transport.weights import read_tensors, weight_files

pytestmark = pytest.mark.slow

PROMPT = "The quick brown fox"


@pytest.fixture
def server(base_server):
    return base_server


def completion(server) -> tuple[list[int], list[float]]:
    choice = complete(server, PROMPT, 8)["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


def admin(server, method: str, path: str, **kwargs) -> httpx.Response:
    return httpx.request(
        method, f"{server.base_url}{path}", headers=server.admin_headers(), timeout=120, **kwargs
    )


def load_order(model_dir) -> list[str]:
    """Tensor names in the order the worker hands them to the model."""
    return [name for f in weight_files(model_dir) for name, _ in read_tensors(f)]


def point(tiny_model, spec: str) -> str:
    names = load_order(tiny_model)
    if spec == "last":
        return f"inference.load.tensor@{len(names) - 1}"
    if spec.startswith("after:"):  # fail at the tensor after the named one
        return f"inference.load.tensor@{names.index(spec[len('after:') :]) + 1}"
    return spec


@pytest.mark.parametrize(
    "spec",
    [
        "inference.load.tensor@0",
        "after:model.layers.0.self_attn.k_proj.weight",  # inside the fused qkv_proj
        "after:model.layers.1.mlp.gate_proj.weight",  # inside the fused gate_up_proj
        "last",
        "inference.load.after",
    ],
)
def test_a_load_failing_anywhere_leaves_the_previous_weights_served(
    server, tiny_model, server_fault_file, spec
):
    """The session server reloads directly (``weight_reload = auto`` on an unquantised model)."""
    check_a_failed_load_rolls_back(server, tiny_model, server_fault_file, spec, "direct")


@pytest.fixture(scope="module")
def layerwise_server(tiny_model, tmp_path_factory):
    """A second real server that reloads through vLLM's layerwise path (quantised or MLA models
    take it; this tiny model takes it only when told)."""
    from prime_rl.dev.server import CPU_TEST_ARGS

    fault_file = tmp_path_factory.mktemp("layerwise-faults") / "faults"
    extra_args = [*CPU_TEST_ARGS, "--weight_reload", "layerwise"]
    run_dir = tmp_path_factory.mktemp("layerwise-run")
    with serving(tiny_model, run_dir, fault_file, "layerwise-admin-token", extra_args) as server:
        yield server, fault_file


def test_a_layerwise_load_failing_inside_a_fused_parameter_leaves_the_previous_weights_served(
    layerwise_server, tiny_model
):
    server, fault_file = layerwise_server
    check_a_failed_load_rolls_back(
        server, tiny_model, fault_file, "after:model.layers.0.self_attn.k_proj.weight", "layerwise"
    )


def check_a_failed_load_rolls_back(server, tiny_model, server_fault_file, spec: str, reload: str) -> None:
    fault = point(tiny_model, spec)
    step_1 = write_perturbed_weights(tiny_model, server.weights_root / "step_1", scale=0.05, seed=11)
    step_2 = write_perturbed_weights(tiny_model, server.weights_root / "step_2", scale=0.05, seed=12)
    r = admin(server, "POST", "/update_weights", json={"weight_dir": str(step_1)})
    assert r.status_code == 200 and r.json()["reload"] == reload, r.text
    ids_1, logprobs_1 = completion(server)
    shutil.rmtree(step_1)  # the trainer prunes it: the rollback source must survive

    server_fault_file.write_text(fault)
    r = admin(server, "POST", "/update_weights", json={"weight_dir": str(step_2)})
    assert r.status_code == 500, r.text
    assert r.json()["rolled_back"] is True, r.text
    assert not server_fault_file.exists(), f"the fault {fault} was never reached"

    ids, logprobs = completion(server)
    assert ids == ids_1
    assert logprobs == pytest.approx(logprobs_1, abs=1e-5), "not wholly back on step 1"
    info = admin(server, "GET", "/weights").json()
    assert info["policy_step"] == 1 and info["weight_dir"].endswith("step_1") and info["error"] is None
    assert httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200

    # and the server still swaps: step 2 loads cleanly now
    assert admin(server, "POST", "/update_weights", json={"weight_dir": str(step_2)}).status_code == 200
    assert completion(server)[1] != pytest.approx(logprobs_1, abs=1e-5)
    shutil.rmtree(step_2)


def test_a_failed_rollback_makes_the_server_say_so_until_a_reload(server, tiny_model, server_fault_file):
    base_ids, base_logprobs = completion(server)
    step_3 = write_perturbed_weights(tiny_model, server.weights_root / "step_3", scale=0.05, seed=13)
    names = load_order(tiny_model)
    # the update fails in the middle; so does the rollback, at its first tensor
    server_fault_file.write_text(f"inference.load.tensor@{len(names) // 2},inference.load.tensor@0")
    r = admin(server, "POST", "/update_weights", json={"weight_dir": str(step_3)})
    assert r.status_code == 500 and r.json()["rolled_back"] is False, r.text
    assert not server_fault_file.exists()

    health = httpx.get(f"{server.base_url}/health", timeout=10)
    assert health.status_code == 503 and "unknown" in health.json()["error"]
    gen = httpx.post(
        f"{server.base_url}/v1/completions",
        json={"model": server.model, "prompt": PROMPT, "max_tokens": 4},
        timeout=30,
    )
    assert gen.status_code == 503 and "injected fault" in gen.json()["error"]
    info = admin(server, "GET", "/weights").json()
    assert info["policy_step"] is None and "injected fault" in info["error"]

    assert admin(server, "POST", "/reload_weights", json={}).status_code == 200
    assert httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200
    ids, logprobs = completion(server)
    assert ids == base_ids and logprobs == pytest.approx(base_logprobs, abs=1e-5)
    assert admin(server, "GET", "/weights").json()["error"] is None
    shutil.rmtree(step_3)
