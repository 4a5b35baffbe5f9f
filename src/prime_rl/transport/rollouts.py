"""Rollout batches: the file format between orchestrator (writer) and trainer (reader).

One file per trainer rank per step, ``rollouts/step_{s}/rank_{r}.safetensors``: flat tensors
over all tokens of the rank's samples, plus JSON metadata in the safetensors header (never
pickle). Samples are concatenated; ``sample_lengths`` splits them and ``position_ids`` restart at
0 for each sample.

=====================  =======  ===============================================================
tensor                 dtype    meaning (T = total tokens, S = samples)
=====================  =======  ===============================================================
input_ids              int64    [T] prompt + completion tokens, exactly as sampled
position_ids           int64    [T] 0..len-1 within each sample
loss_mask              bool     [T] True on sampled completion tokens the loss uses (False on
                                prompts and on an episode's environment messages between turns)
advantages             float32  [T] the sample's advantage on each of its tokens
inference_logprobs     float32  [T] logprob of each token under the sampling policy (0 on prompts)
sample_lengths         int64    [S] tokens per sample; sums to T
policy_steps           int64    [S] optional: the policy step that generated each sample (as
                                the server reported it); each within 0..step
=====================  =======  ===============================================================

Metadata (``__metadata__["prime_rl"]``, JSON): ``format``, ``step``, ``rank``, ``temperature``.
A batch for step ``s`` trains policy ``s``; ``s - policy_steps`` is each sample's staleness.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from prime_rl.paths import atomic_write_bytes

FORMAT = "prime-rl-rollouts/1"
TENSORS = {
    "input_ids": torch.int64,
    "position_ids": torch.int64,
    "loss_mask": torch.bool,
    "advantages": torch.float32,
    "inference_logprobs": torch.float32,
    "sample_lengths": torch.int64,
}
OPTIONAL = {"policy_steps": torch.int64}
"""Per-sample tensors a batch may carry (files written before they existed lack them)."""
PER_TOKEN = ("input_ids", "position_ids", "loss_mask", "advantages", "inference_logprobs")


class RolloutFormatError(ValueError):
    """A rollout file is malformed; the message names the file and the field."""


class RolloutTimeoutError(TimeoutError):
    """The rollout file of a step did not appear in time; the message names it."""


@dataclass
class RolloutBatch:
    """One rank's samples for one step (flat tensors, see the module docstring)."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    inference_logprobs: torch.Tensor
    sample_lengths: torch.Tensor
    policy_steps: torch.Tensor | None = None
    temperature: float = 1.0
    step: int = 0
    rank: int = 0

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def num_samples(self) -> int:
        return int(self.sample_lengths.numel())

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())

    def tensors(self) -> dict[str, torch.Tensor]:
        names = [*TENSORS, *(n for n in OPTIONAL if getattr(self, n) is not None)]
        return {name: getattr(self, name) for name in names}

    @classmethod
    def from_samples(
        cls, samples: list[dict], temperature: float = 1.0, step: int = 0, rank: int = 0
    ) -> RolloutBatch:
        """Build a batch from per-sample dicts with ``prompt_ids``, ``completion_ids``,
        ``completion_logprobs``, ``advantage`` and optionally ``policy_step`` (all or none) and
        ``completion_mask`` (which completion ids the loss uses: a multi-turn episode's sampled
        ids, not the environment's messages between them; default all)."""
        ids, pos, mask, adv, lps, lens = [], [], [], [], [], []
        policy = [s["policy_step"] for s in samples if "policy_step" in s]
        if policy and len(policy) != len(samples):
            raise ValueError("policy_step must be given for every sample or for none")
        for s in samples:
            p, c = list(s["prompt_ids"]), list(s["completion_ids"])
            n = len(p) + len(c)
            ids += p + c
            pos += list(range(n))
            trained = [bool(x) for x in s.get("completion_mask", [True] * len(c))]
            if len(trained) != len(c):
                raise ValueError(f"completion_mask has {len(trained)} entries for {len(c)} completion ids")
            mask += [False] * len(p) + trained
            adv += [float(s["advantage"])] * n
            lps += [0.0] * len(p) + [float(x) for x in s["completion_logprobs"]]
            lens.append(n)
        return cls(
            input_ids=torch.tensor(ids, dtype=torch.int64),
            position_ids=torch.tensor(pos, dtype=torch.int64),
            loss_mask=torch.tensor(mask, dtype=torch.bool),
            advantages=torch.tensor(adv, dtype=torch.float32),
            inference_logprobs=torch.tensor(lps, dtype=torch.float32),
            sample_lengths=torch.tensor(lens, dtype=torch.int64),
            policy_steps=torch.tensor(policy, dtype=torch.int64) if policy else None,
            temperature=temperature,
            step=step,
            rank=rank,
        )


def write_rollout_batch(path: Path, batch: RolloutBatch) -> None:
    """Publish a batch atomically (temp file in the same directory, fsync, rename)."""
    from safetensors.torch import save

    meta = {"format": FORMAT, "step": batch.step, "rank": batch.rank, "temperature": batch.temperature}
    tensors = {k: v.contiguous() for k, v in batch.tensors().items()}
    atomic_write_bytes(Path(path), save(tensors, metadata={"prime_rl": json.dumps(meta)}))


def read_rollout_batch(path: Path, vocab_size: int | None = None) -> RolloutBatch:
    """Read and validate a batch; :class:`RolloutFormatError` names the file and the field."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)

    def fail(field: str, problem: str) -> RolloutFormatError:
        return RolloutFormatError(f"{path}: field '{field}': {problem}")

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            raw_meta = (f.metadata() or {}).get("prime_rl")
            tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as e:
        raise RolloutFormatError(f"{path}: not a readable safetensors file: {e}") from e
    try:
        meta = json.loads(raw_meta) if raw_meta else None
    except json.JSONDecodeError as e:
        raise fail("__metadata__.prime_rl", f"not valid JSON: {e}") from e
    if not isinstance(meta, dict):
        raise fail("__metadata__.prime_rl", "missing (expected a JSON object with format, step, temperature)")
    if meta.get("format") != FORMAT:
        raise fail("__metadata__.prime_rl.format", f"expected {FORMAT!r}, got {meta.get('format')!r}")
    temperature = meta.get("temperature", 1.0)
    if not isinstance(temperature, int | float) or not temperature > 0:
        raise fail("__metadata__.prime_rl.temperature", f"must be a positive number, got {temperature!r}")

    for name, dtype in {**TENSORS, **OPTIONAL}.items():
        if name not in tensors:
            if name in OPTIONAL:
                continue
            raise fail(name, "missing")
        t = tensors[name]
        if t.dtype != dtype:
            raise fail(name, f"dtype {t.dtype}, expected {dtype}")
        if t.dim() != 1:
            raise fail(name, f"shape {list(t.shape)}, expected one dimension")
    extra = sorted(set(tensors) - set(TENSORS) - set(OPTIONAL))
    if extra:
        raise fail(extra[0], "unexpected tensor")
    total = tensors["input_ids"].numel()
    for name in PER_TOKEN:
        if tensors[name].numel() != total:
            raise fail(name, f"length {tensors[name].numel()}, but input_ids has {total}")
    lengths = tensors["sample_lengths"]
    if lengths.numel() == 0 or bool((lengths <= 0).any()) or int(lengths.sum()) != total:
        raise fail("sample_lengths", f"must be positive and sum to {total} (got {lengths.tolist()[:8]})")
    step = meta.get("step", 0)
    if not isinstance(step, int) or step < 0:
        raise fail("__metadata__.prime_rl.step", f"must be a non-negative integer, got {step!r}")
    policy = tensors.get("policy_steps")
    if policy is not None:
        if policy.numel() != lengths.numel():
            raise fail("policy_steps", f"length {policy.numel()}, but sample_lengths has {lengths.numel()}")
        if policy.numel() and (int(policy.min()) < 0 or int(policy.max()) > step):
            raise fail(
                "policy_steps", f"must lie within 0..{step} (the batch's step), got {policy.tolist()[:8]}"
            )
    ids = tensors["input_ids"]
    if total and (int(ids.min()) < 0 or (vocab_size is not None and int(ids.max()) >= vocab_size)):
        bad = int(ids.max()) if int(ids.min()) >= 0 else int(ids.min())
        raise fail("input_ids", f"token id {bad} outside the vocabulary [0, {vocab_size})")
    expected_pos = torch.cat([torch.arange(int(n)) for n in lengths])
    if not torch.equal(tensors["position_ids"], expected_pos):
        raise fail("position_ids", "must count 0..len-1 within each sample")
    for name in ("advantages", "inference_logprobs"):
        if not bool(torch.isfinite(tensors[name]).all()):
            raise fail(name, "contains NaN or infinity")
    if bool((tensors["inference_logprobs"][tensors["loss_mask"]] > 1e-4).any()):
        raise fail("inference_logprobs", "a logprob is positive")
    return RolloutBatch(
        **tensors,
        temperature=float(temperature),
        step=step,
        rank=int(meta.get("rank", 0)),
    )


def wait_for_rollouts(
    path: Path, timeout_s: float, poll_s: float, check: Callable[[], None] | None = None
) -> float:
    """Wait until ``path`` exists; return seconds waited. :class:`RolloutTimeoutError` names it.
    ``check`` is called at every poll while waiting: what it raises ends the wait (the trainer
    raises a failed background weight write there, which the batch may be waiting for)."""
    start = time.monotonic()
    while not Path(path).is_file():
        if check is not None:
            check()
        if time.monotonic() - start > timeout_s:
            raise RolloutTimeoutError(
                f"no rollout file {path} after {timeout_s:.0f}s (is the orchestrator running?)"
            )
        time.sleep(poll_s)
    return time.monotonic() - start
