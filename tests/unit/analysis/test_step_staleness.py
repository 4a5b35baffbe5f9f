"""Each step's staleness is kept as arrays (a dict cost about 100 bytes a step): it must say what the
dict said, the step and staleness as int() takes them, the last line of a step winning (the
violations of async_level: any line of a step, at its highest, each line judged by its run's
async_level, else the one given)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis.step_staleness import StepStaleness

NUMBER = st.one_of(
    st.integers(-3, 40).map(float),
    st.sampled_from([-0.0, 0.5, -0.5, 2.9, -2.9, 1e6 + 0.25, 2.0**53 + 2, -(2.0**60), 1e20]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.tuples(NUMBER, NUMBER, st.integers(-1, 4)), max_size=12), max_size=5),
    st.one_of(st.none(), st.integers(-2, 5)),
)
def test_the_arrays_say_what_the_dict_of_each_step_said(batches, level):
    """Each line's run's async_level (-1: its run did not say, ``level`` judges it; None: unknown)."""
    kept, by_step, worst, used = StepStaleness(), {}, {}, []
    for lines in batches:
        steps = pl.Series([s for s, _, _ in lines], dtype=pl.Float64)
        values = pl.Series([v for _, v, _ in lines], dtype=pl.Float64)
        kept.add(steps, values, np.array([r for _, _, r in lines], dtype=np.int64))
        by_step.update((int(s), int(v)) for s, v, _ in lines)  # what the collector did
        for (
            s,
            v,
            run,
        ) in lines:  # a violation counts from any line of its step (a redone step's first run too)
            limit = run if run >= 0 else level
            if limit is not None and limit not in used:
                used.append(limit)
            if limit is not None and int(v) > limit:
                worst[int(s)] = max(worst.get(int(s), int(v)), int(v))
    assert kept.as_dict() == by_step and len(kept) == len(by_step)
    hist: dict[int, int] = {}
    for s in by_step.values():
        hist[s] = hist.get(s, 0) + 1
    assert list(kept.histogram().items()) == sorted(hist.items())
    assert kept.above(level) == sorted(worst.items()) and kept.levels(level) == used


def test_staleness_at_no_step_is_said_alike_in_the_section_the_warning_and_the_key_numbers(tmp_path, analyze):
    """A 20-step healthy run (async_level 1) with two [rollout] lines whose current_step is no step
    number (x, 123456789012; staleness 3; reviewer's s31): the Staleness section said "None above
    async_level." while Warnings said "staleness reached 3, above async_level 1", and Key numbers'
    "Policy staleness per step" counted 22 for the 20 steps. The lines at no step are judged by
    async_level all the same, said apart from the steps' in the section, the warning and summary.json,
    and a per-step series' title says how many of its values are at no step (counts nostep.*)."""
    from tests.support.synthetic_logs import make_run

    files = make_run("healthy", steps=20, seed=1).write(tmp_path / "logs")
    log = files["orchestrator"]
    lines = log.read_text().splitlines()
    lines[50:50] = [
        "2026-01-01 12:00:10.000 | INFO    | [rollout] trunc_pct=90 current_step=x ckpt_step=1 staleness=3",
        "2026-01-01 12:00:12.000 | INFO    | [rollout] trunc_pct=90 current_step=123456789012 ckpt_step=1 staleness=3",
        "2026-01-01 12:00:12.500 | INFO    | [rollout] trunc_pct=90 ckpt_step=1 staleness=1",  # no step, not above
    ]
    log.write_text("\n".join(lines) + "\n")
    summary, md = analyze(list(files.values()), tmp_path / "out", "--async-level", "1")
    section = md.split("## Staleness", 1)[1].split("\n## ", 1)[0]
    assert "None above async_level." not in section
    assert (
        "None above async_level at a step. At no step number (a [rollout] line whose current_step is none or "
        "no step number): 2 line(s) above async_level, staleness up to 3." in section
    )
    assert (
        "staleness above async_level 1 at no step: 2 [rollout] line(s) at no step number (current_step none "
        "or no step number), staleness up to 3"
    ) in summary["warnings"]
    assert not any(w.startswith("staleness reached") for w in summary["warnings"])
    assert summary["staleness"]["violations"] == []
    assert summary["staleness"]["violations_at_no_step"] == {"lines": 2, "max_staleness": 3}
    assert summary["staleness"]["histogram"] == {"0": 1, "1": 19}  # the 20 steps
    assert summary["counts"]["nostep.staleness"] == 3 and summary["stats"]["staleness"]["count"] == 23
    assert "| Policy staleness per step (3 of the 23 values at no step number) | 23 |" in md
    assert "| Truncated completions per step (%) (3 of the 23 values at no step number) | 23 |" in md
    assert (
        (tmp_path / "out" / "staleness_stats.txt")
        .read_text()
        .startswith("Policy staleness per step (3 of the 23 values at no step number)\n")
    )
    # a step above it too: both said, the steps' first
    lines[53:53] = [
        "2026-01-01 12:00:13.000 | INFO    | [rollout] trunc_pct=2 current_step=7 ckpt_step=4 staleness=3"
    ]
    log.write_text("\n".join(lines) + "\n")
    summary, md = analyze(list(files.values()), tmp_path / "out2", "--async-level", "1")
    assert "Above async_level: steps 7. At no step number" in md
    assert any(
        w.startswith(
            "staleness above async_level 1 at 1 step(s): 7 (3) (step (staleness)); and 2 [rollout] line(s)"
        )
        for w in summary["warnings"]
    )
    # an older log whose [rollout] lines have no current_step: a section all the same, no empty table
    old = tmp_path / "old" / "orchestrator.log"
    old.parent.mkdir()
    old.write_text(
        "".join(
            f"2026-01-01 12:00:0{k}.000 | INFO    | [rollout] trunc_pct=2 staleness={k}\n" for k in range(4)
        )
    )
    summary, md = analyze([old], tmp_path / "out3", "--async-level", "1")
    section = md.split("## Staleness", 1)[1].split("\n## ", 1)[0]
    assert section.strip().splitlines() == [
        "async_level 1; no [rollout] line at a step number.",
        "",
        "None above async_level at a step. At no step number (a [rollout] line whose current_step is none or no "
        "step number): 2 line(s) above async_level, staleness up to 3.",
    ]
