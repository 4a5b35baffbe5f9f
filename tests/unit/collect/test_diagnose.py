"""prime_rl.collect.diagnose: the rules that name a bottleneck from a low and a high parallelism run."""

from __future__ import annotations

from prime_rl.collect.diagnose import judge


def row(level, wall, gen, verify=None, n429=0, failed=0):
    return {
        "parallelism": level,
        "wall_s": wall,
        "gen_ms_mean": gen,
        "verify_ms_mean": verify,
        "rate_limited": n429,
        "failed": failed,
    }


def test_diagnose_follows_the_three_bottleneck_guide():
    assert judge(row(5, 10, 100), row(20, 3, 110)).kind == "under_parallelised"
    assert judge(row(5, 10, 100, verify=400), row(20, 9, 100, verify=1500)).kind == "verification"
    assert judge(row(5, 10, 100), row(20, 9.5, 380)).kind == "model_saturated"
    assert judge(row(5, 10, 100), row(20, 9.5, 110)).kind == "network"
    assert judge(row(5, 10, 100), row(20, 3, 100, n429=12)).kind == "rate_limited"
    assert judge(row(5, 10, 100), row(20, 3, 100, failed=3)).kind == "overloaded"
