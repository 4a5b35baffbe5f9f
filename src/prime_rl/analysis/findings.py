"""A finding: one bottleneck a rule recognised, with the numbers that prove it and what to do.

The kinds and their signatures are listed in ``bottleneck_logs/README.md`` ("Diagnostic signatures").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Finding:
    """What one rule found. Findings are ranked by ``share``, largest first; the first is the primary."""

    kind: str
    """Machine name, e.g. ``frontend_queue_saturation`` (two rules may share one kind)."""
    title: str
    """One line for SUMMARY.md: the bottleneck and what it means."""
    evidence: str
    """The numbers that triggered the rule, as a sentence without the final period."""
    share: float
    """The rank score: the share of the run (or of the busy time) this bottleneck accounts for."""
    next: tuple[str, ...]
    """Next steps, most useful first."""
    thresholds: tuple[str, ...] = ()
    """The thresholds (names in :class:`~prime_rl.analysis.thresholds.Thresholds`) this finding crossed."""
    explains: str | None = None
    """The kind of finding this one is the cause of (ranked above it, see ``analyze.rank_findings``)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (summary.json): kind, title, evidence, share, next."""
        return {
            "kind": self.kind,
            "title": self.title,
            "evidence": self.evidence,
            "share": self.share,
            "next": list(self.next),
            "thresholds": list(self.thresholds),
            "explains": self.explains,
        }
