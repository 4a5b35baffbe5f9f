"""A hand-written stand-in for vLLM's engine, for the admin routes' swapper (no vLLM): it records
the calls and fails or delays loads on demand."""

from __future__ import annotations

import asyncio


class FakeEngine:
    """Records calls; ``fail_loads`` makes that many prime_load_weights calls raise; a load waits
    ``load_delay`` seconds, or, where ``release`` is set, until the test sets that event."""

    def __init__(self, fail_loads: int = 0, load_delay: float = 0.0):
        self.calls: list[tuple] = []
        self.fail_loads = fail_loads
        self.load_delay = load_delay
        self.release: asyncio.Event | None = None
        self.paused = False
        self.loading = False
        self.loaded: list[str] | None = None

    async def pause_generation(self, *, mode="abort", clear_cache=True):
        self.paused = True
        self.calls.append(("pause", mode, clear_cache))

    async def resume_generation(self):
        self.paused = False
        self.calls.append(("resume",))

    async def check_health(self):
        return None

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        assert method == "prime_load_weights"
        assert not self.loading, "two loads at once: swaps overlap"
        self.loading = True
        self.calls.append(("load", tuple(args[0])))
        try:
            if self.release is not None:
                await self.release.wait()
            else:
                await asyncio.sleep(self.load_delay)
            if self.fail_loads > 0:
                self.fail_loads -= 1
                raise RuntimeError("disk on fire")
        finally:
            self.loading = False
        self.loaded = list(args[0])
        return [{"rank": 0, "load_ms": 1.5}]
