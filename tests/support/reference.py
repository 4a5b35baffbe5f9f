"""Reference computations with transformers, to compare the server and the trainer against."""

from __future__ import annotations

from pathlib import Path

import torch


def hf_model(path: Path):
    """A transformers causal LM in float32, eval mode."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.no_grad()
def hf_greedy(model, prompt_ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """Greedy continuation of ``prompt_ids`` and the logprob of each chosen token."""
    ids = torch.tensor([prompt_ids])
    out, lps = [], []
    for _ in range(n):
        logp = torch.log_softmax(model(ids).logits[0, -1].float(), dim=-1)
        tok = int(torch.argmax(logp))
        out.append(tok)
        lps.append(float(logp[tok]))
        ids = torch.cat([ids, torch.tensor([[tok]])], dim=1)
    return out, lps
