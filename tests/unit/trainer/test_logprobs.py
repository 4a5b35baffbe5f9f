"""prime_rl.trainer.logprobs: chunked logprobs equal the full-logits ones (values and gradients),
never hold a [tokens x vocab] tensor, and the chunked head keeps the model's names and plain calls."""

from __future__ import annotations

import pytest
import torch
from loguru import logger
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM

from prime_rl.trainer.logprobs import (
    chunked_token_logprobs,
    forward_logprobs,
    install_logprob_head,
    token_logprobs_and_entropy,
)


def _inputs(t=37, h=8, v=50, dtype=torch.float64, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(t, h, generator=g, dtype=dtype).requires_grad_(True)
    weight = torch.randn(v, h, generator=g, dtype=dtype).requires_grad_(True)
    b = torch.randn(v, generator=g, dtype=dtype).requires_grad_(True) if bias else None
    ids = torch.randint(0, v, (t,), generator=g)
    return hidden, weight, b, ids


def _grads(outputs, inputs, seed=1):
    """Gradients of a random weighting of the logprobs (as the loss weights them by advantages)."""
    logp = outputs[0]
    weights = torch.randn(logp.shape, generator=torch.Generator().manual_seed(seed), dtype=logp.dtype)
    return torch.autograd.grad((logp * weights).sum(), [x for x in inputs if x is not None])


@pytest.mark.parametrize("chunk", [1, 5, 36, 37, 1000])
def test_chunked_equals_full_logits_in_values_and_gradients(chunk):
    hidden, weight, bias, ids = _inputs()
    full = token_logprobs_and_entropy(hidden @ weight.T + bias, ids, temperature=0.7)
    chunked = chunked_token_logprobs(hidden, weight, bias, ids, 0.7, chunk)
    torch.testing.assert_close(chunked[0], full[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(chunked[1], full[1], rtol=0, atol=1e-12)
    assert not chunked[1].requires_grad
    for a, b in zip(
        _grads(chunked, (hidden, weight, bias)), _grads(full, (hidden, weight, bias)), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def _grads_with_entropy(outputs, inputs, seed=1):
    """Gradients of random weightings of the logprobs and of the entropies (the entropy bonus)."""
    logp, entropy = outputs
    g = torch.Generator().manual_seed(seed)
    w1, w2 = (torch.randn(logp.shape, generator=g, dtype=logp.dtype) for _ in range(2))
    weighted = (logp * w1 + entropy * w2).sum()
    return torch.autograd.grad(weighted, [x for x in inputs if x is not None], retain_graph=True)


@pytest.mark.parametrize("chunk", [1, 5, 37])
def test_chunked_entropy_gradient_equals_the_full_logits_one(chunk):
    hidden, weight, bias, ids = _inputs()
    full = token_logprobs_and_entropy(hidden @ weight.T + bias, ids, 0.7, entropy_grad=True)
    chunked = chunked_token_logprobs(hidden, weight, bias, ids, 0.7, chunk, entropy_grad=True)
    assert chunked[1].requires_grad and full[1].requires_grad
    torch.testing.assert_close(chunked[1], full[1], rtol=0, atol=1e-12)
    for a, b in zip(
        _grads_with_entropy(chunked, (hidden, weight, bias)),
        _grads_with_entropy(full, (hidden, weight, bias)),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    # the entropy alone (no logprob in the loss) and the logprob alone with entropy_grad on
    for pick in (1, 0):
        got = torch.autograd.grad(chunked[pick].sum(), (hidden, weight), retain_graph=True)
        want = torch.autograd.grad(full[pick].sum(), (hidden, weight), retain_graph=True)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_chunked_entropy_gradient_passes_gradcheck():
    hidden, weight, bias, ids = _inputs(t=9, h=4, v=11)
    assert torch.autograd.gradcheck(
        lambda h, w, b: chunked_token_logprobs(h, w, b, ids, 1.3, 4, entropy_grad=True)[1],
        (hidden, weight, bias),
    )


def test_chunked_gradient_passes_gradcheck():
    hidden, weight, bias, ids = _inputs(t=9, h=4, v=11)
    assert torch.autograd.gradcheck(
        lambda h, w, b: chunked_token_logprobs(h, w, b, ids, 1.3, 4)[0], (hidden, weight, bias)
    )


def test_bf16_chunked_matches_full_logits_within_bf16_tolerance():
    """A bf16 model: the same projection in bf16, the softmax in fp32, the weight's gradient summed
    over chunks in fp32; within bf16 rounding of the full-logits path."""
    hidden, weight, _, ids = _inputs(t=300, h=64, v=1000, dtype=torch.float32, bias=False)
    hidden = hidden.detach().bfloat16().requires_grad_(True)
    weight = weight.detach().bfloat16().requires_grad_(True)
    full = token_logprobs_and_entropy(hidden @ weight.T, ids, temperature=1.0)
    chunked = chunked_token_logprobs(hidden, weight, None, ids, 1.0, 64)
    assert chunked[0].dtype == full[0].dtype == torch.float32
    torch.testing.assert_close(chunked[0], full[0], rtol=0, atol=1e-4)
    torch.testing.assert_close(chunked[1], full[1], rtol=0, atol=1e-4)
    for a, b in zip(_grads(chunked, (hidden, weight)), _grads(full, (hidden, weight)), strict=True):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


class _LargestVocabTensor(TorchDispatchMode):
    """The most elements of any tensor with a ``vocab``-sized dimension that an op produced, other
    than the output projection's own [vocab, hidden] size (its weight, its transpose and its gradient)."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.vocab, self.hidden, self.largest = vocab, hidden, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else [out]:
            if (
                isinstance(t, torch.Tensor)
                and self.vocab in t.shape
                and t.numel() != self.vocab * self.hidden
            ):
                self.largest = max(self.largest, t.numel())
        return out


def _model(tiny_model, chunk):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="sdpa")
    model.config.use_cache = False
    install_logprob_head(model, chunk)
    return model


def test_no_tensor_of_tokens_x_vocab_exists_forward_or_backward(tiny_model):
    """The whole model, forward and backward: with chunks of 16 tokens the largest vocab-sized
    tensor is 16 x vocab; the full-logits path (what the trainer did before) makes 200 x vocab."""
    tokens, chunk = 200, 16
    ids = torch.randint(3, 2000, (tokens,), generator=torch.Generator().manual_seed(0))
    for chunked, bound in ((chunk, chunk), (None, tokens)):
        model = _model(tiny_model, chunked)
        vocab, hidden = model.config.vocab_size, model.config.hidden_size
        with _LargestVocabTensor(vocab, hidden) as seen:
            logp, _ = forward_logprobs(model, ids, 1.0)
            logp.sum().backward()
        assert seen.largest == bound * vocab, (chunked, seen.largest / vocab)
    model = _model(tiny_model, chunk)  # with the entropy's gradient (the entropy bonus) too
    with _LargestVocabTensor(vocab, hidden) as seen:
        logp, entropy = forward_logprobs(model, ids, 1.0, entropy_grad=True)
        (logp.sum() + entropy.sum()).backward()
    assert seen.largest == chunk * vocab, seen.largest / vocab


def test_the_chunked_head_gives_the_models_logprobs_and_gradients(tiny_model):
    """forward_logprobs through the chunked head equals the logits path on the same model, every
    parameter's gradient included; names and plain calls (generation) are unchanged."""
    ids = torch.randint(3, 2000, (50,), generator=torch.Generator().manual_seed(1))
    position_ids = torch.arange(50)[None]
    results = {}
    for chunk in (None, 7):
        model = _model(tiny_model, chunk)
        logp, entropy = forward_logprobs(model, ids, 0.8, tokens=45, position_ids=position_ids)
        assert logp.shape == entropy.shape == (45,)
        (logp * torch.linspace(-1, 1, 45)).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results[chunk] = (logp.detach(), entropy, grads, list(model.state_dict()))
        with torch.no_grad():
            logits = model(input_ids=ids[None]).logits
        assert logits.shape == (1, 50, model.config.vocab_size)  # outside forward_logprobs: plain logits
    (lp0, en0, g0, names0), (lp1, en1, g1, names1) = results[None], results[7]
    assert not en0.requires_grad and not en1.requires_grad  # no entropy bonus asked for
    assert names0 == names1
    torch.testing.assert_close(lp1, lp0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(en1, en0, rtol=1e-5, atol=1e-5)
    for name in g0:
        # fp32, summed in another order: within 1e-5 of each gradient's largest entry
        torch.testing.assert_close(
            g1[name], g0[name], rtol=1e-4, atol=1e-5 * float(g0[name].abs().max()), msg=name
        )


def test_a_model_that_changes_its_logits_keeps_the_full_logits_with_a_warning(tiny_model):
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    model.config.final_logit_softcapping = 30.0
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")
    try:
        assert install_logprob_head(model, 64) is False
    finally:
        logger.remove(sink)
    assert len(warnings) == 1 and "final_logit_softcapping=30.0" in warnings[0]
    assert "model.logprob_chunk_tokens=64" in warnings[0]
    assert install_logprob_head(AutoModelForCausalLM.from_pretrained(tiny_model), None) is False


def test_a_chunk_below_one_token_is_refused():
    hidden, weight, bias, ids = _inputs(t=4)
    with pytest.raises(ValueError, match="chunk must be at least 1 token, got 0"):
        chunked_token_logprobs(hidden, weight, bias, ids, 1.0, 0)


def test_an_entropy_bonus_through_either_head_raises_the_models_entropy(tiny_model):
    """forward_logprobs(entropy_grad=True): the chunked head and the logits path give the same
    parameter gradients for a loss of logprobs and entropies, and a step up the entropy's gradient
    raises the entropy (what the loss's entropy bonus relies on)."""
    ids = torch.randint(3, 2000, (40,), generator=torch.Generator().manual_seed(2))
    grads = {}
    for chunk in (None, 6):
        model = _model(tiny_model, chunk)
        logp, entropy = forward_logprobs(model, ids, 1.0, entropy_grad=True)
        ((logp * torch.linspace(-1, 1, 40)).sum() - 0.3 * entropy.sum()).backward()
        grads[chunk] = {n: p.grad.clone() for n, p in model.named_parameters()}
    for name, want in grads[None].items():
        torch.testing.assert_close(
            grads[6][name], want, rtol=1e-4, atol=1e-5 * float(want.abs().max()), msg=name
        )
    model = _model(tiny_model, 6)
    before = forward_logprobs(model, ids, 1.0, entropy_grad=True)[1]
    before[1:].mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            p += 0.5 * p.grad  # up the gradient of the mean entropy
        after = forward_logprobs(model, ids, 1.0)[1]
    assert float(after[1:].mean()) > float(before[1:].mean().detach()) + 1e-3
