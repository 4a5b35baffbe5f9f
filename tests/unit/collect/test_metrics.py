"""prime_rl.collect.metrics: pass@k, aggregates, majority voting inputs, the price table."""

from __future__ import annotations

import json

import pytest
from tests.support.samples import rec

from prime_rl.collect.config import Price
from prime_rl.collect.metrics import PriceTable, aggregate, pass_at_k
from prime_rl.collect.store import (
    iter_records,
)


def test_pass_at_k_matches_the_unbiased_estimator():
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 2, 4) == 1.0


def test_aggregates_of_a_hand_made_file(tmp_path):
    # task 0: rewards 1,0,0,1 answers a,b,b,a -> majority@4 tie (a first) passes; pass@1 .5
    # task 1: rewards 0,0,0,1 answers c,c,c,d  -> majority wrong; pass@1 .25
    # task 2: rewards 0,0,0,0                   -> nothing passes
    rows = [
        rec(0, 0, 1.0, "A", metrics={"accuracy": 1.0}, usage={"output_tokens": 10}),
        rec(0, 1, 0.0, "b", metrics={"accuracy": 0.0}, usage={"output_tokens": 20}),
        rec(0, 2, 0.0, " b ", metrics={"accuracy": 0.0}),
        rec(0, 3, 1.0, "a", metrics={"accuracy": 1.0}),
        rec(1, 0, 0.0, answer="c"),
        rec(1, 1, 0.0, answer="c"),
        rec(1, 2, 0.0, answer="c"),
        rec(1, 3, 1.0, answer="d"),
        *[rec(2, r, 0.0, "z") for r in range(4)],
        rec(3, 0, None, "unscored", verify_error="verifier timed out"),
    ]
    path = tmp_path / "hand.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    agg = aggregate((r for _, r in iter_records(path)), pass_threshold=1.0)
    assert agg["reward"] == pytest.approx(3 / 12)
    assert agg["accuracy"] == pytest.approx(0.5)  # only task 0 reports it
    assert agg["usage.output_tokens"] == pytest.approx(15.0)
    assert agg["num_records"] == 13 and agg["num_tasks"] == 3 and agg["unscored"] == 1
    assert agg["verify_failures"] == 1
    assert agg["pass@1"] == pytest.approx((0.5 + 0.25 + 0.0) / 3)
    assert agg["pass@2"] == pytest.approx((pass_at_k(4, 2, 2) + pass_at_k(4, 1, 2)) / 3)
    assert agg["pass@4"] == pytest.approx(2 / 3)
    assert agg["majority@4"] == pytest.approx(1 / 3)
    assert agg["majority@2"] == pytest.approx(1 / 3)  # task 0: 'a','b' tie -> 'a' (first) passes
    assert list(agg)[0] == "reward"


def test_single_samples_get_no_pass_at_k():
    agg = aggregate([rec(0, 0, 1.0), rec(1, 0, 0.0)])
    assert agg["reward"] == 0.5 and not any(k.startswith(("pass@", "majority@")) for k in agg)


def test_price_table_matches_prefixes_and_computes_cost():
    table = PriceTable(
        {
            "gpt-4o": Price(input_per_1m=2.5, output_per_1m=10),
            "gpt-4o-mini": Price(input_per_1m=0.15, output_per_1m=0.6),
        }
    )
    assert table.lookup("gpt-4o-mini-2024-07-18").input_per_1m == 0.15
    assert table.lookup("gpt-4o-2024-08-06").input_per_1m == 2.5
    assert table.lookup("tiny") is None
    assert PriceTable.cost(table.lookup("gpt-4o-mini"), 1_000_000, 500_000) == pytest.approx(0.45)
    assert PriceTable.cost(None, 1, 1) is None
