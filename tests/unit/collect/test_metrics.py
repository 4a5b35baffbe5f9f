"""prime_rl.collect.metrics: pass@k, aggregates, majority voting inputs, the price table."""

from __future__ import annotations

import json

import pytest
from tests.support.samples import rec

from prime_rl.collect.config import Price
from prime_rl.collect.metrics import Aggregator, PriceTable, aggregate, aggregate_file, pass_at_k
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
    # task 3: the verifier timed out on all 4   -> 4 failed samples: counted, nothing passes
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
        *[rec(3, r, None, "unscored", verify_error="verifier timed out") for r in range(4)],
    ]
    path = tmp_path / "hand.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    agg = aggregate((r for _, r in iter_records(path)), pass_threshold=1.0)
    assert agg["reward"] == pytest.approx(3 / 12)  # over the 12 scored samples only
    assert agg["accuracy"] == pytest.approx(0.5)  # only task 0 reports it
    assert agg["usage.output_tokens"] == pytest.approx(15.0)
    assert agg["num_records"] == 16 and agg["num_tasks"] == 4 and agg["unscored"] == 4
    assert agg["verify_failures"] == 4 and agg["verify_failure_rate"] == pytest.approx(4 / 16)
    assert agg["samples_per_task"] == 4
    # task 3 is a task like the others, that fails: it is in every denominator
    assert agg["pass@1"] == pytest.approx((0.5 + 0.25 + 0.0 + 0.0) / 4)
    assert agg["pass@2"] == pytest.approx((pass_at_k(4, 2, 2) + pass_at_k(4, 1, 2)) / 4)
    assert agg["pass@4"] == pytest.approx(2 / 4)
    assert agg["majority@4"] == pytest.approx(1 / 4)
    assert agg["majority@2"] == pytest.approx(1 / 4)  # task 0: 'a','b' tie -> 'a' (first) passes
    assert list(agg)[0] == "reward"


def test_verifier_failures_are_failed_samples_in_pass_at_k_and_majority(tmp_path):
    # F = the verifier failed (reward null, verify_error); U = never scored (reward null, no error)
    # task 0: rewards 1, F, 0, F   answers a, -, b, -    n=4, c=1
    # task 1: rewards F, F, 1, 1   answers -, -, x, x    n=4, c=2
    # task 2: rewards 0, 0, U, 0   answers y, y, -, z    n=4, c=0
    err = {"verify_error": "verifier raised ValueError: boom"}
    rows = [
        rec(0, 0, 1.0, answer="a"),
        rec(0, 1, None, "junk", **err),
        rec(0, 2, 0.0, answer="b"),
        rec(0, 3, None, "junk", **err),
        rec(1, 0, None, "junk", **err),
        rec(1, 1, None, "junk", **err),
        rec(1, 2, 1.0, answer="x"),
        rec(1, 3, 1.0, answer="x"),
        rec(2, 0, 0.0, answer="y"),
        rec(2, 1, 0.0, answer="y"),
        rec(2, 2, None, "y", verified=False),
        rec(2, 3, 0.0, answer="z"),
    ]
    path = tmp_path / "failures.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    agg = aggregate((r for _, r in iter_records(path)), pass_threshold=1.0)
    # reward: the mean over the 7 scored samples only: (1+0 + 1+1 + 0+0+0) / 7
    assert agg["reward"] == pytest.approx(3 / 7)
    assert agg["num_records"] == 12 and agg["num_tasks"] == 3 and agg["samples_per_task"] == 4
    assert agg["unscored"] == 5  # 4 verifier failures + 1 never scored
    assert agg["verify_failures"] == 4 and agg["verify_failure_rate"] == pytest.approx(4 / 12)
    # pass@1 = c/n per task: 1/4, 2/4, 0/4 -> (0.25 + 0.5 + 0) / 3 = 0.25
    #   (dropping the failures gave 1/2, 2/2, 0/3 -> (0.5 + 1 + 0) / 3 = 0.5)
    assert agg["pass@1"] == pytest.approx(0.25)
    # pass@2 = 1 - C(n-c,2)/C(n,2): task 0: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2;
    #   task 1: 1 - C(2,2)/C(4,2) = 1 - 1/6 = 5/6; task 2: 0 -> (1/2 + 5/6 + 0) / 3 = 4/9
    #   (dropping the failures gave (1 + 1 + 0) / 3 = 2/3)
    assert agg["pass@2"] == pytest.approx(4 / 9)
    # pass@4: n-c < 4 for tasks 0 and 1 -> 1, task 2 -> 0: 2/3
    #   (dropping the failures left 2 samples on task 0: no pass@4 at all)
    assert agg["pass@4"] == pytest.approx(2 / 3)
    # majority@2 (repeats 0,1): task 0: votes a (F has none) -> a passes; task 1: F,F -> no vote,
    #   fails; task 2: y,y -> fails -> 1/3  (dropping the failures voted x,x on task 1: 2/3)
    assert agg["majority@2"] == pytest.approx(1 / 3)
    # majority@4: task 0: a,b tie -> a (first) passes; task 1: x,x passes; task 2: y,y,z fails -> 2/3
    assert agg["majority@4"] == pytest.approx(2 / 3)
    assert "pass@3" not in agg and list(agg)[0] == "reward"


def test_an_unverified_file_gets_no_pass_at_k_but_its_counts():
    agg = aggregate([rec(t, r, None, "x", verified=False) for t in range(3) for r in range(2)])
    assert "reward" not in agg and not any(k.startswith(("pass@", "majority@")) for k in agg)
    assert agg["num_tasks"] == 3 and agg["unscored"] == 6 and agg["verify_failures"] == 0
    assert agg["verify_failure_rate"] == 0.0


def test_single_samples_get_no_pass_at_k():
    agg = aggregate([rec(0, 0, 1.0), rec(1, 0, 0.0)])
    assert agg["reward"] == 0.5 and not any(k.startswith(("pass@", "majority@")) for k in agg)


def test_a_file_aggregates_in_counts_and_reads_answers_only_for_majority_votes():
    single = [rec(t, 0, float(t % 2), str(t)) for t in range(1000)]
    reads = []

    def read(rows):
        reads.append(1)
        return iter(rows)

    assert aggregate_file(lambda: read(single)) == aggregate(single)
    assert len(reads) == 1  # one sample per task: no majority@k, one pass, no answers kept
    counts = Aggregator(keep_answers=False)
    for r in single:
        counts.add(r)
    assert counts.samples == {} and len(counts.n.values) == 1000 and sum(counts.c.values) == 500
    multi = [rec(t, r, float(r == t % 3), "ab"[r % 2]) for t in range(30) for r in range(3)]
    reads.clear()
    got = aggregate_file(lambda: read(multi))
    assert got == aggregate(multi) and "majority@3" in got and "pass@2" in got
    assert len(reads) == 2  # counts first, then the answers for the votes


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
