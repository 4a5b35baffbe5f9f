"""Publishing ``weights/step_N`` after each step, off the step's critical path (``weights.background``).

What a step pays on its critical path (``[train] step.done write_ms``):

1. the wait for the previous background write: never two writes in flight, and the host buffers
   are only overwritten once the write that reads them is done. A failure of that write is raised
   here (:class:`PublishError`, naming its step), and already while the trainer waits for its
   next batch (:meth:`StepPublisher.raise_if_failed`);
2. the gather of the full state dict, tensor by tensor (``DTensor.full_tensor()``: a collective
   under FSDP2, so every rank runs it), and rank 0's copy of each tensor into host buffers that
   are allocated at the first publish and reused. With CUDA the buffers are pinned, the copies run
   with ``non_blocking=True`` and one synchronisation waits for all of them; on a CPU pinned memory
   does not exist and the buffers are plain host tensors (the copy is a memcpy).

Then one writer thread runs :meth:`WeightPublisher.publish` on the buffers (conversion to the
published dtypes, shards, index, manifest, fsyncs, rename, ``STABLE``, the ``[ckpt] write.done
... background=true`` line whose ``write_ms`` is this write alone) and prunes old weight dirs,
while the next step trains. A crash during it leaves a temporary dir (removed when the trainer
starts again) and never a ``STABLE`` dir with files missing: ``STABLE`` is still written last.

:meth:`StepPublisher.finish` waits for the last write at the end of training (so
``weights/step_{max_steps}`` exists when the trainer exits) and raises its failure;
:meth:`StepPublisher.close` waits too when an exception leaves the loop, logging a failure of the
write instead of hiding the exception. With ``weights.background = false`` the same object writes
synchronously: gather to CPU, write, prune, all in the step.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
from loguru import logger

from prime_rl.trainer.weights import WeightPublisher, full_state_dict, tied_keys


class PublishError(RuntimeError):
    """A background write of ``weights/step_N`` failed; raised in the training thread."""


@dataclass(frozen=True)
class PublishTiming:
    """What one publish cost the step that made it (rank 0)."""

    write_ms: float
    """Critical-path time: the wait for the previous write, the gather and the copy to host
    (background); the gather, the whole write and the pruning (synchronous)."""
    write_wait_ms: float | None
    """Of ``write_ms``, the wait for the previous background write (None when synchronous)."""


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: gathered from every rank when it is a DTensor (collective)."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _host_buffer(like: torch.Tensor, pin: bool) -> torch.Tensor:
    """An empty host tensor shaped like ``like``: pinned when ``pin`` (CUDA only), else plain."""
    return torch.empty(like.shape, dtype=like.dtype, device="cpu", pin_memory=pin)


def gather_into(
    model: torch.nn.Module, buffers: dict[str, torch.Tensor] | None, skip: set[str], pin: bool
) -> None:
    """Gather every tensor of ``model``'s state dict (collective under FSDP: every rank calls it, in
    the same order) and, when ``buffers`` is given (rank 0), copy it into ``buffers[name]``,
    allocating a missing or mismatched buffer. Names in ``skip`` (tied weights) are left out.

    With ``pin`` (CUDA) the buffers are pinned, the copies are ``non_blocking`` and one
    synchronisation at the end waits for them all; without, they are plain host tensors and
    synchronous copies."""
    # FSDP2 keeps the modules' names and gives DTensor shards; otherwise the tensors themselves.
    # (get_model_state_dict gives the same names here, for 10-25 ms more per step.)
    for name, tensor in model.state_dict().items():
        if name in skip:
            continue
        full = _full(tensor.detach())
        if buffers is None:
            continue
        buf = buffers.get(name)
        if buf is None or buf.shape != full.shape or buf.dtype != full.dtype:
            buf = buffers[name] = _host_buffer(full, pin)
        buf.copy_(full, non_blocking=pin)
    if pin and buffers is not None:
        torch.cuda.synchronize()


class StepPublisher:
    """Publishes ``weights/step_N`` after each step; every rank holds one (the gather is collective),
    rank 0's has the ``writer``. See the module docstring for what runs where."""

    def __init__(self, writer: WeightPublisher | None, model: torch.nn.Module, keep: int, background: bool):
        self.writer = writer
        self.keep = keep
        self.background = background
        self.skip = tied_keys(model)
        self.pin = background and torch.cuda.is_available() and next(model.parameters()).is_cuda
        self.buffers: dict[str, torch.Tensor] = {}
        self._executor = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="weights-writer")
            if background and writer is not None
            else None
        )
        self._pending: tuple[int, Future[None]] | None = None

    def publish(self, model: torch.nn.Module, step: int) -> PublishTiming | None:
        """Publish the model as ``weights/step_{step}`` (collective); rank 0 returns the timing."""
        start = time.monotonic()
        if not self.background:
            return self._publish_now(model, step, start)
        waited = self.wait() if self.writer is not None else 0.0
        gather_into(model, self.buffers if self.writer is not None else None, self.skip, self.pin)
        if self.writer is None or self._executor is None:
            return None
        self._pending = (step, self._executor.submit(self._write, step))
        return PublishTiming((time.monotonic() - start) * 1000.0, waited)

    def _publish_now(self, model: torch.nn.Module, step: int, start: float) -> PublishTiming | None:
        state = full_state_dict(model)
        if self.writer is None:
            return None
        self.writer.publish(state, step)
        del state
        self.writer.prune(self.keep, newest=step)
        return PublishTiming((time.monotonic() - start) * 1000.0, None)

    def _write(self, step: int) -> None:
        """The writer thread: the whole write of ``weights/step_{step}`` from the buffers, then pruning."""
        assert self.writer is not None
        self.writer.publish(self.buffers, step, background=True)
        self.writer.prune(self.keep, newest=step)

    def raise_if_failed(self) -> None:
        """Raise :class:`PublishError` now if the write in flight has already failed (never blocks)."""
        if self._pending is not None and self._pending[1].done():
            self.wait()

    def wait(self) -> float:
        """Wait for the write in flight, if any; return the ms waited. A failed write is raised as
        :class:`PublishError` naming its step (and then forgotten: it is raised once)."""
        if self._pending is None:
            return 0.0
        step, future = self._pending
        start = time.monotonic()
        try:
            future.result()
        except Exception as e:
            raise PublishError(
                f"background write of weights/step_{step} failed: {type(e).__name__}: {e}"
            ) from e
        finally:
            self._pending = None
        return (time.monotonic() - start) * 1000.0

    def finish(self) -> None:
        """End of training: wait for the last write (raising its failure) and stop the writer thread."""
        try:
            self.wait()
        finally:
            self.close()

    def close(self) -> None:
        """Wait for the write in flight and stop the writer thread; a failure of that write is logged,
        not raised (an exception is already leaving the loop). Safe to call more than once."""
        try:
            self.wait()
        except PublishError as e:
            logger.error(str(e))
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
