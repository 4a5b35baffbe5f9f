"""Synthetic rollout batches for trainer tests and benchmarks.

Plays the orchestrator's part without an inference server: fixed prompt/completion pairs with
given advantages, their inference logprobs computed with transformers under the weights that
"sampled" them, written as ``rollouts/step_s/rank_r.safetensors``.
"""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import torch

from prime_rl.paths import RunPaths, is_stable, rollout_path
from prime_rl.trainer.main import command as trainer_command
from prime_rl.transport.rollouts import RolloutBatch, write_rollout_batch


def make_samples(
    n_prompts: int, vocab_size: int, seed: int = 0, prompt_len: int = 6, completion_len: int = 5
) -> list[dict]:
    """Two completions per prompt: the first with advantage +1, the second with -1."""
    rng = random.Random(seed)
    low = 3  # keep clear of the special tokens at the start of the vocabulary
    samples = []
    for _ in range(n_prompts):
        prompt = [rng.randrange(low, vocab_size) for _ in range(prompt_len)]
        for adv in (1.0, -1.0):
            completion = [rng.randrange(low, vocab_size) for _ in range(completion_len)]
            samples.append({"prompt_ids": prompt, "completion_ids": completion, "advantage": adv})
    return samples


@torch.no_grad()
def completion_logprobs(model, samples: list[dict], temperature: float = 1.0) -> list[list[float]]:
    """Logprob of each completion token under ``model`` (a transformers causal LM)."""
    out = []
    for s in samples:
        ids = torch.tensor([s["prompt_ids"] + s["completion_ids"]])
        logp = torch.log_softmax(model(ids).logits[0].float() / temperature, dim=-1)
        p = len(s["prompt_ids"])
        out.append([float(logp[p - 1 + i, t]) for i, t in enumerate(s["completion_ids"])])
    return out


def load_hf(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def write_step(
    output_dir: Path,
    step: int,
    samples: list[dict],
    weights: Path,
    world_size: int = 1,
    temperature: float = 1.0,
) -> None:
    """Write step ``step``'s batch for every rank (samples split round-robin), logprobs from ``weights``."""
    logprobs = completion_logprobs(load_hf(weights), samples, temperature)
    enriched = [{**s, "completion_logprobs": lp} for s, lp in zip(samples, logprobs, strict=True)]
    for rank in range(world_size):
        mine = enriched[rank::world_size]
        batch = RolloutBatch.from_samples(mine, temperature=temperature, step=step, rank=rank)
        write_rollout_batch(rollout_path(RunPaths(output_dir).rollouts_dir(step), rank), batch)


def wait_stable(path: Path, process: subprocess.Popen | None, timeout_s: float = 300.0) -> None:
    """Wait for ``path/STABLE``; fail early with the process's output if it died."""
    deadline = time.monotonic() + timeout_s
    while not is_stable(path):
        if process is not None and process.poll() is not None:
            out = process.stdout.read() if process.stdout else ""
            raise RuntimeError(
                f"trainer exited with {process.returncode} before {path} was published:\n{out[-4000:]}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} not published after {timeout_s}s")
        time.sleep(0.05)


class TrainerRun:
    """A real trainer subprocess fed on-policy (async_level 0) by this process.

    ``feed(step)`` writes step ``step``'s batch with logprobs from ``weights/step_{step}`` (the base
    model for step 0) and waits for ``weights/step_{step+1}``.
    """

    def __init__(
        self,
        model_dir: Path,
        output_dir: Path,
        samples: list[dict],
        max_steps: int,
        nproc: int = 1,
        extra_args: list[str] | None = None,
    ):
        self.model_dir, self.output_dir, self.samples, self.nproc = (
            Path(model_dir),
            Path(output_dir),
            samples,
            nproc,
        )
        self.paths = RunPaths(self.output_dir)
        self.args = [
            "--model.name",
            str(model_dir),
            "--output_dir",
            str(output_dir),
            "--max_steps",
            str(max_steps),
            "--async_level",
            "0",
            *(extra_args or []),
        ]
        self.proc: subprocess.Popen | None = None

    def start(self, *more_args: str) -> TrainerRun:
        import os

        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = trainer_command(self.nproc, [*self.args, *more_args])
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        return self

    def weights(self, step: int) -> Path:
        return self.model_dir if step == 0 else self.paths.weights_dir(step)

    def feed(self, step: int) -> Path:
        write_step(self.output_dir, step, self.samples, self.weights(step), world_size=self.nproc)
        wait_stable(self.weights(step + 1), self.proc)
        return self.weights(step + 1)

    def finish(self, timeout_s: float = 120.0) -> int:
        assert self.proc is not None
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        if self.proc.returncode != 0:
            raise RuntimeError(f"trainer exited with {self.proc.returncode}:\n{out[-4000:]}")
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_on_policy(
    model_dir: Path,
    output_dir: Path,
    samples: list[dict],
    steps: int,
    nproc: int = 1,
    extra_args: list[str] | None = None,
) -> TrainerRun:
    """Run the trainer for ``steps`` on-policy steps to completion."""
    run = TrainerRun(model_dir, output_dir, samples, steps, nproc, extra_args).start()
    try:
        for step in range(steps):
            run.feed(step)
        run.finish()
    finally:
        run.kill()
    return run
