"""Helpers shared by the analyzer's tests: run the CLI, or build its inputs by hand."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from prime_rl.analysis.__main__ import main as analyze_main
from prime_rl.analysis.parser import ParseStats
from prime_rl.analysis.stats import SERIES, Collected
from prime_rl.analysis.updates import Update


@pytest.fixture
def analyze():
    """``analyze(paths, out, *extra)``: run the CLI, return (summary.json as a dict, SUMMARY.md text)."""

    def run(paths, out, *extra):
        analyze_main([*map(str, paths), "--out", str(out), *extra])
        return json.loads((out / "summary.json").read_text()), (out / "SUMMARY.md").read_text()

    return run


@pytest.fixture
def collected():
    """``collected(run_s=100.0, counts=None, updates=(), async_level=None, malformed=0, fields=None,
    last_lines=None, **series)``: a hand-built :class:`Collected` (a run of ``run_s`` seconds; series
    not named are empty; ``fields`` sets other fields of Collected, ``last_lines`` the files' last lines)."""

    def build(
        run_s: float | None = 100.0,
        counts: dict | None = None,
        updates: tuple[Update, ...] = (),
        async_level: int | None = None,
        malformed: int = 0,
        fields: dict | None = None,
        last_lines: dict | None = None,
        **series: list[float],
    ) -> Collected:
        unknown = set(series) - set(SERIES)
        assert not unknown, unknown
        parse = ParseStats(malformed=malformed, malformed_examples=["[ckpt] =3"] * min(malformed, 1))
        parse.last_lines.update(last_lines or {})
        values = {k: list(series.get(k, [])) for k in SERIES}
        built = Collected(parse, list(updates), [], values, Counter(counts or {}), async_level, run_s)
        return dataclasses.replace(built, **(fields or {}))

    return build
