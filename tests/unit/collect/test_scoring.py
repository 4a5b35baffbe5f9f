"""prime_rl.collect.scoring inline (verify.workers 0): a verifier whose reward or metric is no finite
number gives a failed rollout, recorded with its reason and no reward, as one that raises does."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.support import FAULTY_ENV

from prime_rl.collect.config import VerifySettings
from prime_rl.collect.scoring import Scorer, apply_verdict


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("nan", "the reward nan is no finite number"),
        ("inf_metric", "the metric 'ok' = inf is no finite number"),
        ("raise", "verifier bug on task 0"),
    ],
)
def test_an_inline_verifier_that_gives_no_finite_number_fails_the_rollout(mode, why):
    scorer = Scorer(FAULTY_ENV, {"mode": mode}, VerifySettings(workers=0))
    bad = asyncio.run(scorer.score({"n": 0}, "text"))
    good = asyncio.run(scorer.score({"n": 1}, "text"))
    stepped = asyncio.run(scorer.step({"n": 0}, [{"role": "assistant", "content": "text"}]))
    assert why in bad.error and why in stepped.error and good.error is None and good.reward == 1.0
    record: dict = {}
    apply_verdict(record, bad)
    assert record["reward"] is None and why in record["verify_error"] and not record["verified"]
    json.loads(json.dumps(record, allow_nan=False))  # the line JSON readers take
