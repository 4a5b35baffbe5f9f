"""Token logprobs and entropies of a packed row, with or without the [tokens x vocab] logits.

The loss needs, for every token t of a packed row, ``log p(y_t | y_<t)`` under the
temperature-scaled next-token distribution (scored by the prediction at t-1) and that
distribution's entropy. The direct way materialises the logits [T, V] and, in fp32, their
log-softmax and its exponential, several [T, V] tensors at once: at 16,384 tokens and a
151,936-word vocabulary each fp32 one is 10 GB.

:func:`chunked_token_logprobs` computes the same values from the last hidden states [T, H] and
the output projection, ``chunk`` tokens at a time, so that memory for this part is
O(chunk x V): the forward pass keeps only the per-token results, and the backward pass computes
each chunk's logits again (one more [chunk, H] x [H, V] product per chunk, about a third more
work in the output projection) to form the gradient ``g_t (onehot(y_t) - softmax_t) / T`` of the
chosen token's logprob. Entropies carry a gradient only when asked for (``entropy_grad``: the loss's
entropy bonus): ``-h_t p_t (log p_t + H_t) / T`` for an entropy weighted by ``h_t``, which costs one
more [chunk, V] tensor in the backward pass; otherwise the loss only reports them.

:func:`install_logprob_head` makes a Hugging Face causal LM return these values instead of the
logits: the output projection (``lm_head``) keeps its module and parameter names (checkpoints and
published weights do not change) but its forward, during a :func:`forward_logprobs` call,
returns ``[1, T, 2]`` (logprob, entropy). The projection runs inside the model's own forward, so
FSDP2's gathers of the root's parameters apply to it as to the logits.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch
import torch.nn.functional as F
from loguru import logger

# config attributes of models that change the logits after the output projection (soft-capping,
# scaling): their heads cannot be replaced by the chunked one, which would skip that step
_LOGIT_POSTPROCESSING = (
    "final_logit_softcapping",
    "logit_scale",
    "logits_scaling",
    "output_multiplier_scale",
)


def token_logprobs_and_entropy(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob of each token under the temperature-scaled next-token distribution, and its entropy.

    ``logits`` [T, V] from one packed row; token t is scored by logits[t-1]. Position 0 has no
    prediction and gets 0 (the loss mask never covers a sample's first token). The entropy has a
    gradient only with ``entropy_grad``. The direct computation (several fp32 [T, V] tensors): the
    reference of :func:`chunked_token_logprobs`.
    """
    scaled = logits[:-1].to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)
    chosen = logp_all.gather(-1, input_ids[1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    zero = torch.zeros(1, dtype=chosen.dtype, device=chosen.device)
    return torch.cat([zero, chosen]), torch.cat([zero, entropy if entropy_grad else entropy.detach()])


def _chunk_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float
) -> torch.Tensor:
    """fp32 temperature-scaled logits of a chunk: the projection in the parameters' dtype, as the
    model's own head computes them, then upcast."""
    return F.linear(hidden, weight, bias).to(torch.promote_types(weight.dtype, torch.float32)) / temperature


class _ChunkedLogprobs(torch.autograd.Function):
    """(hidden [N, H], weight [V, H], bias [V] | None, targets [N]) -> logprob [N], entropy [N]; the
    entropy differentiable with ``entropy_grad``."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature: float, chunk: int, entropy_grad: bool):
        n = hidden.shape[0]
        out_dtype = torch.promote_types(weight.dtype, torch.float32)
        logp = torch.empty(n, dtype=out_dtype, device=hidden.device)
        entropy = torch.empty(n, dtype=out_dtype, device=hidden.device)
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            logits = _chunk_logits(hidden[lo:hi], weight, bias, temperature)
            lse = torch.logsumexp(logits, dim=-1)
            logp[lo:hi] = logits.gather(-1, targets[lo:hi, None]).squeeze(-1) - lse
            probs = torch.softmax(logits, dim=-1)
            entropy[lo:hi] = lse - (probs * logits).sum(-1)
            del logits, probs
        ctx.save_for_backward(hidden, weight, bias, targets)
        ctx.temperature, ctx.chunk, ctx.entropy_grad = temperature, chunk, entropy_grad
        if not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        # the weight's gradient is summed over chunks: in fp32, then cast once, so a bf16 model
        # gets the same rounding as one product over all tokens
        acc = torch.promote_types(weight.dtype, torch.float32)
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=acc, device=weight.device) if need_b else None
        for lo in range(0, hidden.shape[0], ctx.chunk):
            hi = min(lo + ctx.chunk, hidden.shape[0])
            grad_logits = _chunk_grad_logits(
                _chunk_logits(hidden[lo:hi], weight, bias, ctx.temperature),
                targets[lo:hi],
                None if grad_logp is None else grad_logp[lo:hi],
                grad_entropy[lo:hi] if ctx.entropy_grad and grad_entropy is not None else None,
            )
            grad_logits = grad_logits.div_(ctx.temperature).to(weight.dtype)
            if need_h:
                grad_h[lo:hi] = grad_logits @ weight
            if need_w:
                grad_w.addmm_(grad_logits.t().to(acc), hidden[lo:hi].to(acc))
            if need_b:
                grad_b += grad_logits.to(acc).sum(0)
            del grad_logits
        grad_w = grad_w.to(weight.dtype) if need_w else None
        grad_b = grad_b.to(bias.dtype) if need_b else None
        return grad_h, grad_w, grad_b, None, None, None, None


def _chunk_grad_logits(
    z: torch.Tensor, targets: torch.Tensor, g: torch.Tensor | None, h: torch.Tensor | None
) -> torch.Tensor:
    """The gradient of ``sum_t g_t logp_t + h_t H_t`` with respect to a chunk's scaled logits ``z``
    [n, V] (``z`` is overwritten): ``g_t (onehot(y_t) - p_t) - h_t p_t (log p_t + H_t)``, with
    ``p_t = softmax(z_t)``, ``H_t = -sum p_t log p_t``. ``g`` or ``h`` None: that part is 0."""
    if h is None:
        grad = torch.softmax(z, dim=-1)
        del z
        grad.mul_(-g[:, None] if g is not None else 0.0)
    else:
        p = torch.softmax(z, dim=-1)
        log_p = z.sub_(torch.logsumexp(z, dim=-1, keepdim=True))  # in place: z is not needed again
        entropy = -torch.einsum("nv,nv->n", p, log_p)  # a row-wise dot: no third [n, V] tensor
        # -p (g + h (log p + H)), built in log_p's memory
        log_p.add_(entropy[:, None]).mul_(h[:, None])
        if g is not None:
            log_p.add_(g[:, None])
        grad = p.mul_(log_p).neg_()
        del log_p
    if g is not None:
        grad.scatter_add_(-1, targets[:, None], g[:, None])
    return grad


def chunked_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    input_ids: torch.Tensor,
    temperature: float,
    chunk: int,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What :func:`token_logprobs_and_entropy` returns for ``logits = hidden @ weight.T + bias``,
    without the [T, V] logits: ``hidden`` [T, H] (one packed row's last hidden states), ``weight``
    [V, H]; at most ``chunk`` tokens' logits exist at once, forward and backward (with
    ``entropy_grad``, two such tensors in the backward pass)."""
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1 token, got {chunk}")
    logp, entropy = _ChunkedLogprobs.apply(
        hidden[:-1], weight, bias, input_ids[1:], temperature, chunk, entropy_grad
    )
    zero = torch.zeros(1, dtype=logp.dtype, device=logp.device)
    return torch.cat([zero, logp]), torch.cat([zero, entropy])


class _HeadRequest:
    """What the replaced head computes during one :func:`forward_logprobs` call."""

    __slots__ = ("entropy_grad", "input_ids", "temperature", "tokens")

    def __init__(self, input_ids: torch.Tensor, temperature: float, tokens: int, entropy_grad: bool) -> None:
        self.input_ids, self.temperature, self.tokens = input_ids, temperature, tokens
        self.entropy_grad = entropy_grad


def _logprob_head_forward(chunk: int) -> Callable:
    def forward(self: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
        request: _HeadRequest | None = getattr(self, "_prime_rl_request", None)
        if request is None:  # outside forward_logprobs (generation, a user's own call): plain logits
            return F.linear(hidden, self.weight, self.bias)
        logp, entropy = chunked_token_logprobs(
            hidden[0, : request.tokens],
            self.weight,
            self.bias,
            request.input_ids[: request.tokens],
            request.temperature,
            chunk,
            request.entropy_grad,
        )
        return torch.stack([logp, entropy.to(logp.dtype)], dim=-1)[None]

    return forward


def install_logprob_head(model: torch.nn.Module, chunk: int | None) -> bool:
    """Make ``model``'s output projection compute chunked logprobs in :func:`forward_logprobs`
    (``chunk`` tokens at a time); returns whether it did. ``chunk`` None, a model without a plain
    ``nn.Linear`` output projection, or one whose config post-processes the logits (soft-capping,
    scaling) keeps the logits path, the last two with a warning naming why."""
    if chunk is None:
        return False
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    config = getattr(model, "config", None)
    why = None
    if not isinstance(head, torch.nn.Linear):
        why = f"its output projection is {type(head).__name__}, not a Linear layer"
    else:
        for name in _LOGIT_POSTPROCESSING:
            if getattr(config, name, None) not in (None, 1, 1.0):
                why = f"its config sets {name}={getattr(config, name)!r} (the logits are changed after the projection)"
    if why is not None:
        logger.warning(
            f"model.logprob_chunk_tokens={chunk} not used for this model: {why}; computing full logits"
        )
        return False
    head.forward = types.MethodType(_logprob_head_forward(chunk), head)
    head._prime_rl_chunked = True
    return True


def _chunked_head(model: torch.nn.Module) -> torch.nn.Module | None:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return head if getattr(head, "_prime_rl_chunked", False) else None


def forward_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    temperature: float,
    tokens: int | None = None,
    entropy_grad: bool = False,
    **model_kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprobs and entropies [tokens] of a packed row ``input_ids`` [T] (the first ``tokens`` of
    it; the rest is padding); through the chunked head when :func:`install_logprob_head` put one
    in, else from the full logits. The entropies have a gradient only with ``entropy_grad`` (the
    loss's entropy bonus)."""
    tokens = input_ids.numel() if tokens is None else tokens
    head = _chunked_head(model)
    if head is None:
        out = model(input_ids=input_ids[None], **model_kwargs)
        return token_logprobs_and_entropy(
            out.logits[0, :tokens], input_ids[:tokens], temperature, entropy_grad
        )
    head._prime_rl_request = _HeadRequest(input_ids, temperature, tokens, entropy_grad)
    try:
        out = model(input_ids=input_ids[None], **model_kwargs)
    finally:
        head._prime_rl_request = None
    both = out.logits[0]
    return both[:, 0], both[:, 1] if entropy_grad else both[:, 1].detach()
