"""The trainer on a CUDA GPU (issue 15): chunked logprobs, FlexAttention over packed rows with
gradients, 20 steps of the Qwen2.5-0.5B shape, FSDP2 on one GPU, published weights served by
transformers. Skipped without CUDA (tests/conftest.py)."""

from __future__ import annotations

import os
import socket

import pytest
import torch

from prime_rl.dev.tiny_model import PRESETS, build_tiny_model
from prime_rl.trainer.config import LossConfig, ModelConfig
from prime_rl.trainer.data import MicroBatch
from prime_rl.trainer.forward import micro_batch_logprobs, micro_batch_loss
from prime_rl.trainer.logprobs import chunked_token_logprobs, token_logprobs_and_entropy
from prime_rl.trainer.loss import normalizer_for
from prime_rl.trainer.model import World, load_model
from prime_rl.trainer.weights import WeightPublisher, full_state_dict

pytestmark = pytest.mark.gpu

GPU = torch.device("cuda", 0)
WORLD = World(0, 1, 0, GPU)


@pytest.fixture(scope="module")
def qwen_05b_shape(tmp_path_factory):
    """A random model of Qwen2.5-0.5B's shape (494M parameters, bf16, tied embeddings)."""
    return build_tiny_model(tmp_path_factory.mktemp("qwen05b"), PRESETS["qwen2.5-0.5b"])


def _packed(lengths, vocab, seed=0) -> MicroBatch:
    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    loss_mask = torch.ones(n, dtype=torch.bool)
    starts = torch.cumsum(torch.tensor([0, *lengths[:-1]]), 0)
    loss_mask[starts] = False  # a sample's first token is never a loss token
    return MicroBatch(
        input_ids=torch.randint(0, vocab, (n,), generator=g),
        position_ids=torch.cat([torch.arange(k) for k in lengths]),
        loss_mask=loss_mask,
        advantages=torch.randn(n, generator=g),
        inference_logprobs=-torch.rand(n, generator=g),
        sample_ids=torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)),
        num_samples=len(lengths),
    )


def _step(model, optimizer, mbs, attention, budget) -> float:
    cfg = LossConfig()
    tokens = float(sum(int(mb.loss_mask.sum()) for mb in mbs))
    normalizer = normalizer_for(cfg, tokens, float(sum(mb.num_samples for mb in mbs)))
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for mb in mbs:
        loss, _ = micro_batch_loss(model, mb, 1.0, attention, budget, cfg, normalizer, GPU)
        loss.backward()
        total += float(loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return total


def test_chunked_logprobs_match_full_logits_and_need_a_fraction_of_the_memory():
    g = torch.Generator(device=GPU).manual_seed(0)
    tokens, hidden, vocab = 8192, 896, 151936
    h = (torch.randn(tokens, hidden, device=GPU, generator=g) * 0.5).bfloat16().requires_grad_(True)
    w = (torch.randn(vocab, hidden, device=GPU, generator=g) * 0.05).bfloat16().requires_grad_(True)
    ids = torch.randint(0, vocab, (tokens,), device=GPU, generator=g)
    peaks, results = {}, {}
    for name in ("full", "chunked"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        if name == "full":
            logp, entropy = token_logprobs_and_entropy(h @ w.T, ids, 1.0)
        else:
            logp, entropy = chunked_token_logprobs(h, w, None, ids, 1.0, 1024)
        logp.sum().backward()
        torch.cuda.synchronize()
        peaks[name] = (torch.cuda.max_memory_allocated() - base) / 2**30
        results[name] = (logp.detach(), entropy, h.grad.clone(), w.grad.clone())
        h.grad = w.grad = None
    full, chunked = results["full"], results["chunked"]
    torch.testing.assert_close(chunked[0], full[0], rtol=0, atol=2e-3)
    torch.testing.assert_close(chunked[1], full[1], rtol=0, atol=2e-3)
    for a, b in zip(chunked[2:], full[2:], strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2 * float(b.abs().max()))
    # full: several [8192 x 151936] fp32 tensors (4.6 GiB each); chunked: [1024 x 151936] ones
    assert peaks["chunked"] < peaks["full"] / 4, peaks


def test_flex_attention_packed_row_equals_each_sample_alone_with_gradients(tiny_model):
    torch.manual_seed(0)
    model = load_model(ModelConfig(name=str(tiny_model), attention="flex", dtype="float32"), WORLD)
    lengths = [300, 17, 700, 5]
    mb = _packed(lengths, 2048)
    logp, _ = micro_batch_logprobs(model, mb, 1.0, "flex", 2048, GPU)
    weights = torch.linspace(-1, 1, logp.numel(), device=GPU) * mb.loss_mask.to(GPU)
    (logp * weights).sum().backward()
    packed = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    alone, lo = [], 0
    for k in lengths:
        sl = slice(lo, lo + k)
        one = MicroBatch(
            mb.input_ids[sl], mb.position_ids[sl], mb.loss_mask[sl], mb.advantages[sl],
            mb.inference_logprobs[sl], torch.zeros(k, dtype=torch.int64), 1,
        )  # fmt: skip
        alone.append(micro_batch_logprobs(model, one, 1.0, "flex", 2048, GPU)[0])
        lo += k
    alone_logp = torch.cat(alone)
    keep = mb.loss_mask.to(GPU)
    torch.testing.assert_close(logp[keep], alone_logp[keep], rtol=1e-4, atol=1e-4)
    (alone_logp * weights).sum().backward()
    for name, p in model.named_parameters():
        g = packed[name]
        torch.testing.assert_close(p.grad, g, rtol=1e-3, atol=1e-4 * float(g.abs().max()) + 1e-12, msg=name)


def test_twenty_steps_of_the_05b_shape_without_nan(qwen_05b_shape):
    model = load_model(ModelConfig(name=str(qwen_05b_shape)), WORLD)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    mbs = [_packed([1024] * 4, 151936, seed=s) for s in range(2)]
    for step in range(20):
        loss = _step(model, optimizer, mbs, "flex", 4096)
        assert torch.isfinite(torch.tensor(loss)), (step, loss)
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp2_on_one_gpu_takes_the_same_step_as_the_plain_model(tiny_model):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        states = {}
        for shard in (False, True):
            torch.manual_seed(0)
            model = load_model(ModelConfig(name=str(tiny_model), dtype="float32"), WORLD, shard=shard)
            model.train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            mbs = [_packed([200, 300], 2048, seed=1), _packed([500], 2048, seed=2)]
            for _ in range(2):
                _step(model, optimizer, mbs, "flex", 512)
            states[shard] = full_state_dict(model)
        assert states[True].keys() == states[False].keys()
        for name, t in states[False].items():
            torch.testing.assert_close(states[True][name], t, rtol=1e-4, atol=1e-5, msg=name)
    finally:
        dist.destroy_process_group()


def test_published_weights_give_transformers_the_trainers_logits(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    model = load_model(ModelConfig(name=str(tiny_model), attention="sdpa", dtype="bfloat16"), WORLD)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _step(model, optimizer, [_packed([100, 156], 2048)], "sdpa", 256)
    publisher = WeightPublisher(model, str(tiny_model), tmp_path, 1 << 30)
    path, _, _ = publisher.publish(full_state_dict(model), 1)
    served = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa").to(
        GPU
    )
    ids = torch.randint(0, 2048, (1, 64), generator=torch.Generator().manual_seed(3)).to(GPU)
    model.eval()
    with torch.no_grad():
        # the published dir keeps the base checkpoint's dtypes (fp32): compare in the trainer's bf16
        assert torch.equal(served(input_ids=ids).logits, model(input_ids=ids, sample_lengths=(64,)).logits)
