"""prime_rl.orchestrator.ledger: resume neither repeats nor skips a task."""

from __future__ import annotations


def test_task_ledger_survives_resume_without_repeating_or_skipping():
    from prime_rl.orchestrator.ledger import TaskLedger

    ledger = TaskLedger()
    for i in (0, 1, 2, 4, 6):  # groups finish out of order; 3 and 5 still in flight at the checkpoint
        ledger.mark(i)
    saved = ledger.snapshot()
    assert saved == {"low_water": 3, "used_above": [4, 6]}

    resumed = TaskLedger.restore(saved)
    handed_out = [i for i in range(10) if not resumed.skip(i)]
    assert handed_out == [3, 5, 7, 8, 9]  # the in-flight ones are redone, the used ones never again
    for i in (3, 5, 7):
        resumed.mark(i)
    assert resumed.snapshot() == {"low_water": 8, "used_above": []}  # the watermark moves past old and new
