"""prime_rl.envs.verify: a verifier that raises, hangs or dies becomes a recorded failure."""

from __future__ import annotations

import asyncio

import pytest
from tests.support import FAULTY_ENV

from prime_rl.envs.verify import VerifierPool


@pytest.mark.parametrize("mode", ["raise", "hang", "die", "nan", "inf_metric"])
def test_verifier_faults_become_recorded_failures(mode):
    """Real worker processes: a raising, hanging or dying verifier, or one whose reward or metric is
    no finite number (trained on, a NaN reward made the loss NaN), yields reward 0 + error, and
    later calls still work (a hung or dead pool is replaced)."""

    async def go():
        pool = VerifierPool(FAULTY_ENV, {"mode": mode}, workers=1, timeout_s=3.0)
        try:
            bad = await pool.score({"n": 0}, "text")
            good = await pool.score({"n": 1}, "text")
            again = await pool.score({"n": 3}, "text")
            return bad, good, again
        finally:
            pool.close()

    bad, good, again = asyncio.run(go())
    assert bad.reward == 0.0 and bad.error
    assert {
        "raise": "ValueError",
        "hang": "timed out",
        "die": "died",
        "nan": "the reward nan is no finite number",
        "inf_metric": "the metric 'ok' = inf is no finite number",
    }[mode] in bad.error
    assert good.error is None and good.reward == 1.0 and again.reward == 1.0
