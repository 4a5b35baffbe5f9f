"""Packed micro-batches: each sample in a packed row gets what it gets alone (sdpa's call per sample,
with no [T, T] tensor, and FlexAttention's block mask, padding included); activation checkpointing
and compiled layers keep the gradients; what load_model refuses."""

from __future__ import annotations

import pytest
import torch
from tests.support.packed import block_causal_mask, packed_row
from transformers import AutoModelForCausalLM

from prime_rl.trainer.config import ModelConfig
from prime_rl.trainer.data import MicroBatch
from prime_rl.trainer.forward import micro_batch_logprobs, pad_row
from prime_rl.trainer.model import (
    PAD_SAMPLE,
    World,
    document_block_mask,
    load_model,
    packed_sdpa_attention,
    padded_length,
    resolve_attention,
    sample_lengths_of,
)

CPU = torch.device("cpu")
WORLD = World(0, 1, 0, CPU)


def _alone(mb: MicroBatch, lengths: list[int]) -> list[MicroBatch]:
    out, lo = [], 0
    for k in lengths:
        sl = slice(lo, lo + k)
        out.append(
            MicroBatch(
                mb.input_ids[sl],
                mb.position_ids[sl],
                mb.loss_mask[sl],
                mb.advantages[sl],
                mb.inference_logprobs[sl],
                torch.zeros(k, dtype=torch.int64),
                1,
            )
        )
        lo += k
    return out


def _first_tokens(lengths: list[int]) -> torch.Tensor:
    """Each sample's first position: scored across the sample boundary, never a loss token."""
    return torch.cumsum(torch.tensor([0, *lengths[:-1]]), 0)


LENGTHS = [5, 19, 3, 11]


def _reference(tiny_model) -> torch.nn.Module:
    """The model with transformers' own sdpa attention, for one sample at a time."""
    ref = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="sdpa")
    ref.config.use_cache = False
    return ref


def test_sdpa_packed_row_equals_each_sample_alone_with_gradients(tiny_model):
    """The packed row through the trainer's sdpa (one call per sample, grouped-query heads: the tiny
    model has 4 query and 2 key/value heads) against each sample alone through transformers' own
    sdpa attention: the same logprobs, entropies and gradients."""
    model = load_model(ModelConfig(name=str(tiny_model), attention="sdpa"), WORLD)
    mb = packed_row(LENGTHS)
    logp, entropy = micro_batch_logprobs(model, mb, 0.9, "sdpa", 64, CPU)
    keep = torch.ones(logp.numel(), dtype=torch.bool)
    keep[_first_tokens(LENGTHS)] = False
    weights = torch.linspace(-1, 1, logp.numel()) * keep
    (logp * weights).sum().backward()

    ref = _reference(tiny_model)
    alone = [micro_batch_logprobs(ref, one, 0.9, "sdpa", 64, CPU) for one in _alone(mb, LENGTHS)]
    alone_logp = torch.cat([a[0] for a in alone])
    torch.testing.assert_close(logp[keep], alone_logp[keep], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy[keep], torch.cat([a[1] for a in alone])[keep], rtol=1e-5, atol=1e-5)
    (alone_logp * weights).sum().backward()
    ref_grads = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        g = ref_grads[name].grad
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5 * float(g.abs().max()) + 1e-12, msg=name)


def test_sdpa_makes_no_tensor_of_the_rows_length_squared(tiny_model):
    """64 samples of 64 tokens in one row of 4096: no tensor of anything near 4096^2 elements is made
    forward or backward (a dense block-causal mask or score matrix would be 16.8M; the largest
    expected is a chunk of logits, 2048 tokens x 2048 vocabulary)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    Largest.numel = max(Largest.numel, t.numel())
            return out

    model = load_model(ModelConfig(name=str(tiny_model), attention="sdpa"), WORLD)
    mb = packed_row([64] * 64)
    with Largest():
        logp, _ = micro_batch_logprobs(model, mb, 1.0, "sdpa", 4096, CPU)
        logp.sum().backward()
    assert 2048 * 2048 <= Largest.numel < 4096 * 4096 // 2, Largest.numel


def test_sdpa_attention_is_causal_attention_within_each_sample_with_the_models_scale():
    """The function alone, on random heads (4 query heads sharing 2 key/value heads, a scale that is
    not 1/sqrt(head_dim)), against one dense call with the block-causal mask."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 4, 9, 8, generator=g),
        torch.randn(1, 2, 9, 8, generator=g),
        torch.randn(1, 2, 9, 8, generator=g),
    )
    lengths = [2, 4, 3]
    ids = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=block_causal_mask(ids), scale=0.7
    ).transpose(1, 2)
    out, weights = packed_sdpa_attention(
        torch.nn.Identity(), q, k, v, None, scaling=0.7, sample_lengths=sample_lengths_of(ids)
    )
    assert weights is None and out.shape == (1, 9, 4, 8)
    torch.testing.assert_close(out, expected)
    assert sample_lengths_of(ids).tolist() == lengths


def test_sdpa_attention_names_what_it_cannot_do():
    q = torch.zeros(1, 4, 6, 8)
    kv = torch.zeros(1, 2, 6, 8)
    layer = torch.nn.Linear(1, 1)
    with pytest.raises(RuntimeError, match="Linear: the packed sdpa attention got no sample_lengths"):
        packed_sdpa_attention(layer, q, kv, kv, None)
    with pytest.raises(NotImplementedError, match="no sliding-window or soft-capped"):
        packed_sdpa_attention(layer, q, kv, kv, None, sample_lengths=(6,), sliding_window=4)
    with pytest.raises(NotImplementedError, match="no sliding-window or soft-capped"):
        packed_sdpa_attention(layer, q, kv, kv, None, sample_lengths=(6,), softcap=50.0)
    with pytest.raises(ValueError, match="sample_lengths sum to 5, the row has 6 tokens"):
        packed_sdpa_attention(layer, q, kv, kv, None, sample_lengths=(2, 3))
    with pytest.raises(ValueError, match="one packed row and no attention mask .got a batch of 1 and a mask"):
        packed_sdpa_attention(layer, q, kv, kv, torch.ones(1, 1, 6, 6, dtype=torch.bool), sample_lengths=(6,))
    with pytest.raises(ValueError, match="got a batch of 2\\)"):
        packed_sdpa_attention(layer, q.expand(2, -1, -1, -1), kv, kv, None, sample_lengths=(6,))


def test_a_model_with_sliding_window_layers_is_refused_at_load_for_sdpa(tiny_model, tmp_path):
    import json
    import shutil

    model_dir = tmp_path / "sliding"
    shutil.copytree(tiny_model, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config.update(
        use_sliding_window=True, sliding_window=16, layer_types=["sliding_attention", "full_attention"]
    )
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError, match="model.attention=sdpa: .*sliding has sliding-window attention layers"
    ):
        load_model(ModelConfig(name=str(model_dir), attention="sdpa"), WORLD)


def test_flex_packed_and_padded_row_equals_each_sample_alone(tiny_model):
    """FlexAttention's block mask with the row padded to micro_batch_tokens (forward only: on CPU
    FlexAttention has no backward pass; the gradient is the gpu test's)."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="flex_attention")
    model.config.use_cache = False
    mb = packed_row(LENGTHS, seed=3)
    with torch.no_grad():
        logp, entropy = micro_batch_logprobs(model, mb, 1.0, "flex", 64, CPU)
        ref = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="sdpa")
        alone = [micro_batch_logprobs(ref, one, 1.0, "sdpa", 64, CPU) for one in _alone(mb, LENGTHS)]
    assert logp.shape == (sum(LENGTHS),)  # the padding's outputs are not returned
    keep = torch.ones(logp.numel(), dtype=torch.bool)
    keep[_first_tokens(LENGTHS)] = False
    torch.testing.assert_close(logp[keep], torch.cat([a[0] for a in alone])[keep], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy[keep], torch.cat([a[1] for a in alone])[keep], rtol=1e-5, atol=1e-5)


def test_the_block_mask_allows_what_the_dense_mask_allows_and_skips_other_samples_blocks():
    from torch.nn.attention.flex_attention import create_mask

    samples = torch.repeat_interleave(torch.arange(4), 256)  # 4 samples of 2 blocks each
    block_mask = document_block_mask(samples)
    dense = create_mask(block_mask.mask_mod, None, None, 1024, 1024, device="cpu")
    assert torch.equal(dense, block_causal_mask(samples))
    # each sample: its 2 diagonal blocks and the one below them; a causal mask would need 36 of 64
    assert int(block_mask.to_dense().sum()) == 4 * 3

    odd = torch.tensor([0] * 100 + [1] * 57 + [PAD_SAMPLE] * 99)
    assert torch.equal(
        create_mask(document_block_mask(odd).mask_mod, None, None, 256, 256, "cpu"), block_causal_mask(odd)
    )


def test_padding_goes_after_every_real_token_as_its_own_sample():
    mb = packed_row([3, 2])
    ids, positions, samples = pad_row(mb, 8)
    assert ids.tolist()[:5] == mb.input_ids.tolist() and ids.tolist()[5:] == [0, 0, 0]
    assert positions.tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    assert samples.tolist() == [0, 0, 0, 1, 1, PAD_SAMPLE, PAD_SAMPLE, PAD_SAMPLE]
    assert pad_row(mb, 5)[0] is mb.input_ids


@pytest.mark.parametrize(
    ("tokens", "budget", "expected"),
    [(1, 4096, 4096), (4096, 4096, 4096), (4097, 4096, 8192), (20000, 4096, 32768)],
)
def test_padded_length_is_the_budget_or_a_power_of_two_multiple(tokens, budget, expected):
    assert padded_length(tokens, budget) == expected


def test_attention_choice_and_flex_refused_on_cpu():
    assert resolve_attention(ModelConfig(), CPU) == "sdpa"
    assert resolve_attention(ModelConfig(), torch.device("cuda", 0)) == "flex"
    assert resolve_attention(ModelConfig(attention="sdpa"), torch.device("cuda", 0)) == "sdpa"
    with pytest.raises(ValueError, match="model.attention=flex needs a CUDA device.*no backward pass on CPU"):
        resolve_attention(ModelConfig(attention="flex"), CPU)


def _grads_and_saved_bytes(model, mb):
    model.train()  # as train_step does: checkpointing applies in training mode only
    saved = 0

    def pack(t):
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = micro_batch_logprobs(model, mb, 1.0, "sdpa", 256, CPU)
        logp.sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}, saved


def test_activation_checkpointing_keeps_names_and_gradients_and_saves_less(tiny_model):
    mb = packed_row([100, 60, 90])
    results, names = {}, {}
    for checkpointing in (False, True):
        torch.manual_seed(0)
        cfg = ModelConfig(name=str(tiny_model), activation_checkpointing=checkpointing)
        model = load_model(cfg, WORLD)
        names[checkpointing] = list(model.state_dict())  # what publishing and checkpoints name
        results[checkpointing] = _grads_and_saved_bytes(model, mb)
    assert names[True] == names[False]
    (plain, plain_saved), (ckpt, ckpt_saved) = results[False], results[True]
    for name, g in plain.items():
        torch.testing.assert_close(ckpt[name], g, rtol=1e-5, atol=1e-6, msg=name)
    # a layer keeps only its input: less than half of what the plain layers keep (2 layers here)
    assert ckpt_saved < plain_saved / 2, (ckpt_saved, plain_saved)


@pytest.mark.slow
def test_compiled_layers_keep_names_and_gradients(tiny_model):
    mb = packed_row([40, 24])
    results = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        model = load_model(ModelConfig(name=str(tiny_model), compile=compiled), WORLD)
        results[compiled] = (list(model.state_dict()), _grads_and_saved_bytes(model, mb)[0])
    assert results[True][0] == results[False][0]
    for name, g in results[False][1].items():
        torch.testing.assert_close(
            results[True][1][name], g, rtol=1e-4, atol=1e-5 * float(g.abs().max()), msg=name
        )


@pytest.mark.slow
def test_compiled_layers_are_not_compiled_again_for_each_count_of_samples(tiny_model):
    """The samples' lengths reach the compiled layers as one tensor whose size changes: after the
    second row (the compiler makes its size dynamic) rows of other sample counts compile nothing
    more (with a tuple of ints, every new count compiled the layers again, up to torch's limit)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    model = load_model(ModelConfig(name=str(tiny_model), compile=True), WORLD)

    def row(n: int) -> None:
        logp, _ = micro_batch_logprobs(
            model, packed_row([7 + i for i in range(n)], seed=n), 1.0, "sdpa", 4096, CPU
        )
        logp.sum().backward()

    row(2)
    row(3)
    graphs = counters["stats"]["unique_graphs"]
    for n in (4, 5, 7, 9, 12):
        row(n)
    assert graphs > 0 and counters["stats"]["unique_graphs"] == graphs


def test_a_micro_batchs_loss_carries_the_entropy_bonus_and_its_gradient(tiny_model):
    """micro_batch_loss with loss.entropy_coef: the loss is the one without it minus c times the
    entropy summed over loss tokens over the global token count, and its gradient moves the weights
    (advantages all 0: the bonus is the whole gradient)."""
    from prime_rl.trainer.config import LossConfig
    from prime_rl.trainer.forward import micro_batch_loss

    model = load_model(ModelConfig(name=str(tiny_model), attention="sdpa"), WORLD)
    mb = packed_row(LENGTHS)
    mb.loss_mask[_first_tokens(LENGTHS)] = False
    plain, stats = micro_batch_loss(model, mb, 1.0, "sdpa", 64, LossConfig(), 30.0, CPU)
    bonus, _ = micro_batch_loss(
        model, mb, 1.0, "sdpa", 64, LossConfig(entropy_coef=0.2), 30.0, CPU, entropy_normalizer=100.0
    )
    assert float(bonus) == pytest.approx(float(plain) - 0.2 * stats.entropy_sum / 100.0, rel=1e-5)
    bonus.backward()
    assert model.lm_head.weight.grad.abs().max() > 0
