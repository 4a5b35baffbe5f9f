"""The analysis in three steps: collect the events, run every rule, rank the findings.

Parsing is :mod:`~prime_rl.analysis.parser` (the tagged-line grammar of ``docs/design.md``),
collection :mod:`~prime_rl.analysis.stats`, the rules :mod:`~prime_rl.analysis.rules` and
:mod:`~prime_rl.analysis.run_warnings`; :mod:`~prime_rl.analysis.report` writes the result
(see ``bottleneck_logs/README.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prime_rl.analysis.findings import Finding
from prime_rl.analysis.rules import RULES
from prime_rl.analysis.run_warnings import WARNINGS
from prime_rl.analysis.stats import Collected, collect
from prime_rl.analysis.tagged import Event, ParseStats, TaggedLines
from prime_rl.analysis.thresholds import Thresholds


@dataclass(frozen=True)
class Analysis:
    """The collected data with what the rules made of it."""

    data: Collected
    thresholds: Thresholds
    findings: tuple[Finding, ...]
    """Ranked by :func:`order`; rules with equal shares keep the order of :data:`~prime_rl.analysis.rules.RULES`."""
    warnings: tuple[str, ...]

    @property
    def primary(self) -> Finding | None:
        """The primary bottleneck: the finding with the largest share (None: no bottleneck found)."""
        return self.findings[0] if self.findings else None


def order(found: list[Finding]) -> list[Finding]:
    """Largest share first, then two rules: a stall comes first (a run that hangs has no other
    bottleneck that matters at its end), and a finding that explains another (``explains``: slow
    scoring or truncation explain generation-bound, a slow server a slow reload) comes right above
    it when it ranked lower."""
    ranked = sorted(found, key=lambda f: (f.kind not in ("stall", "hang"), -f.share))
    for cause in [f for f in ranked if f.explains]:
        kinds = [f.kind for f in ranked]
        if cause.explains in kinds and kinds.index(cause.explains) < ranked.index(cause):
            ranked.remove(cause)
            ranked.insert(kinds.index(cause.explains), cause)
    return ranked


def rank_findings(data: Collected, thresholds: Thresholds) -> Analysis:
    """Run every rule and every warning check on ``data``; rank the findings (:func:`order`)."""
    found = [f for rule in RULES if (f := rule(data, thresholds)) is not None]
    warnings = [w for check in WARNINGS if (w := check(data, thresholds)) is not None]
    return Analysis(data, thresholds, tuple(order(found)), tuple(warnings))


def analyze(
    lines: Iterable[TaggedLines] | Iterable[Event],
    parse: ParseStats,
    thresholds: Thresholds,
    async_level: int | None = None,
    spill_dir: str | Path | None = None,
) -> Analysis:
    """Collect ``lines`` (batches of tagged lines or events; ``parse`` fills as they are read;
    ``spill_dir``: see :func:`~prime_rl.analysis.stats.collect`), then :func:`rank_findings`."""
    return rank_findings(collect(lines, parse, async_level, spill_dir), thresholds)
