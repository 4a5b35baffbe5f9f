"""Which columns SUMMARY.md's "Per server" table has: one rule for the table
(:func:`~prime_rl.analysis.report_sections.per_server`) and for COMPARE.md's per-server figures
(:func:`~prime_rl.analysis.compare.server_figures`), which are each run's own table's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prime_rl.analysis.servers import ServerRow


@dataclass(frozen=True)
class ServerColumns:
    """The groups of columns of one "Per server" table."""

    updates: bool
    """The weight updates' (updates, failed, retried, wall/rpc/queue medians): when some server had
    one, some update was left unanswered, or no server had a sample."""
    unanswered: bool
    """``unanswered``: when some server has an update the orchestrator died waiting for."""
    samples: bool
    """The collector's samples' (samples, failed, gen_ms median): when some server had one."""
    apart: bool
    """The orchestrator's retries and the collector's in columns of their own: when the table has
    both the updates' and the samples' columns, or both kinds of retries are there."""

    @property
    def retries_of(self) -> str | None:
        """Whose retries the one pair of retry columns counts (None: the table has them apart): the
        collector's in a collector's table (samples, no updates), else the orchestrator's."""
        if self.apart:
            return None
        return "collector" if self.samples and not self.updates else "orchestrator"


def server_columns(rows: Sequence[ServerRow]) -> ServerColumns:
    """The columns of the "Per server" table of servers ``rows``."""
    samples = any(r.samples or r.samples_failed for r in rows)
    unanswered = any(r.unanswered for r in rows)
    updates = any(r.updates for r in rows) or unanswered or not samples
    apart = (updates and samples) or (
        any(r.orchestrator_retries for r in rows) and any(r.sample_retries for r in rows)
    )
    return ServerColumns(updates, unanswered, samples, apart)
