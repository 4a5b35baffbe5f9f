"""``analyze-logs --compare RUN_A RUN_B``: the same tables side by side with ratios (before/after a fix).

Each run is analysed on its own (its full report goes to ``<out>/a`` and ``<out>/b``); COMPARE.md
and compare.json put the verdicts, the stage shares, the key numbers and the per-server figures
next to each other, with B/A ratios.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prime_rl.analysis.analyze import Analysis
from prime_rl.analysis.output import dumps, md_cell, md_text, write_text
from prime_rl.analysis.report import STAT_FILES
from prime_rl.analysis.report_sections import marker_note, verdict
from prime_rl.analysis.server_columns import ServerColumns, server_columns
from prime_rl.analysis.servers import ServerRow, retry_counts, server_rows
from prime_rl.analysis.stages import Stage, row_marker, stages


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    if a == 0:
        return "-" if b == 0 else "new"
    return f"{b / a:.2f}x"


def _num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


Value = Callable[[ServerRow], float | None]
Figure = tuple[str, Value]
UPDATE_FIGURES: tuple[Figure, ...] = (
    ("updates", lambda r: r.updates),
    ("failed updates", lambda r: r.updates_failed),
    ("retried updates", lambda r: r.retried),
    ("wall_ms p50", lambda r: r.median("wall_ms")),
    ("rpc_ms p50", lambda r: r.median("rpc_ms")),
    ("queue_ms p50", lambda r: r.median("queue_ms")),
)
SAMPLE_FIGURES: tuple[Figure, ...] = (
    ("samples", lambda r: r.samples),
    ("failed samples", lambda r: r.samples_failed),
    ("gen_ms p50", lambda r: r.median("gen_ms")),
)
UNANSWERED_FIGURE: Figure = ("unanswered updates", lambda r: r.unanswered)
RETRY_FIGURES: tuple[Figure, ...] = (
    ("429 retries", lambda r: retry_counts(r.retries)[0]),
    ("other retries", lambda r: retry_counts(r.retries)[1]),
)
APART_RETRY_FIGURES: tuple[Figure, ...] = (
    ("429 retries (orchestrator)", lambda r: retry_counts(r.orchestrator_retries)[0]),
    ("other retries (orchestrator)", lambda r: retry_counts(r.orchestrator_retries)[1]),
    ("429 retries (collector)", lambda r: retry_counts(r.sample_retries)[0]),
    ("other retries (collector)", lambda r: retry_counts(r.sample_retries)[1]),
)


def _retry_figures(who: str) -> tuple[Figure, ...]:
    """One client's retries (all a table's one pair of retry columns counts), under that client's name."""
    return (
        (f"429 retries ({who})", lambda r: retry_counts(r.retries)[0]),
        (f"other retries ({who})", lambda r: retry_counts(r.retries)[1]),
    )


def _table_figures(columns: ServerColumns | None, named_apart: bool) -> dict[str, Value]:
    """A run's figures, by name: its own "Per server" table's columns (:func:`server_columns`; None: it
    has no table), the retries under their client's name when ``named_apart``."""
    if columns is None:
        return {}
    figures = (
        (UPDATE_FIGURES if columns.updates else ())
        + ((UNANSWERED_FIGURE,) if columns.unanswered else ())
        + (SAMPLE_FIGURES if columns.samples else ())
    )
    if columns.retries_of is None:
        figures += APART_RETRY_FIGURES
    elif named_apart:
        figures += _retry_figures(columns.retries_of)
    else:
        figures += RETRY_FIGURES
    return dict(figures)


ORDER = [
    name
    for name, _ in (
        UPDATE_FIGURES + (UNANSWERED_FIGURE,) + SAMPLE_FIGURES + RETRY_FIGURES + APART_RETRY_FIGURES
    )
]
"""The order of the figures of the comparison (the tables' column order)."""


def server_figures(
    rows_a: list[ServerRow], rows_b: list[ServerRow]
) -> tuple[dict[str, Value], dict[str, Value]]:
    """Each run's per-server figures, by name: the columns its own SUMMARY.md's "Per server" table has
    (:func:`~prime_rl.analysis.server_columns.server_columns`, the table's own rule), a figure its table
    lacks left out (shown as '-', not 0). Named as the tables name them, but unambiguously: the
    updates' "failed" and "retried" are "failed updates" and "retried updates", a collector's table's
    "failed" is "failed samples"; a table's one pair of retry columns is "429 retries" and "other
    retries" when both runs' count the same client's, else under that client's name ("429 retries
    (orchestrator)", a trio's; "(collector)", a collector's), as a table with both has them."""
    ca, cb = (server_columns(rows) if rows else None for rows in (rows_a, rows_b))
    whose = {c.retries_of for c in (ca, cb) if c is not None}
    named_apart = None in whose or len(whose) > 1
    return _table_figures(ca, named_apart), _table_figures(cb, named_apart)


StageKey = tuple[str, str | None, str | None, str]


def _stage_key(s: Stage) -> StageKey:
    """A stage's row in the comparison: its process, its marker (``within``, ``beside``) and its name
    (two processes may have a stage of one name: the orchestrator's and the collector's rate-limit
    waits; a row within generation in one run and not in the other is two rows)."""
    return s.process, s.within, s.beside, s.name


def _merged_order(a: list[StageKey], b: list[StageKey]) -> list[StageKey]:
    """A's stages in their order, each of B's that A lacks right after the one before it in B (the
    first at the start): every run's rows stay in its order, a part under the stage it is a part of."""
    out = list(a)
    at = 0
    for key in b:
        if key in out:
            at = out.index(key) + 1
        else:
            out.insert(at, key)
            at += 1
    return out


def compare_rows(a: Analysis, b: Analysis) -> dict[str, list[dict[str, Any]]]:
    """The rows of every table: stages (share; with their process and marker, as SUMMARY.md lists
    them), key numbers (p50 and mean), and per server every figure the single run's "Per server"
    table has for either run (:func:`server_figures`)."""
    sa = {_stage_key(s): s for s in stages(a.data)}
    sb = {_stage_key(s): s for s in stages(b.data)}
    stage_rows = [
        {
            "process": key[0],
            "stage": key[3],
            "within": key[1],
            "beside": key[2],
            "a_s": sa[key].total_ms / 1000 if key in sa else None,
            "b_s": sb[key].total_ms / 1000 if key in sb else None,
            "a_share": sa[key].share if key in sa else None,
            "b_share": sb[key].share if key in sb else None,
        }
        for key in _merged_order(list(sa), list(sb))
    ]
    stat_rows = []
    for series, title in STAT_FILES.values():
        da, db = a.data.describe(series), b.data.describe(series)
        if da.get("count") or db.get("count"):
            stat_rows.append(
                {
                    "metric": title,
                    "series": series,
                    "a_p50": da.get("p50"),
                    "b_p50": db.get("p50"),
                    "a_mean": da.get("mean"),
                    "b_mean": db.get("mean"),
                    "a_count": da["count"],
                    "b_count": db["count"],
                }
            )
    ra = {r.url: r for r in server_rows(a.data)}
    rb = {r.url: r for r in server_rows(b.data)}
    fa, fb = server_figures(list(ra.values()), list(rb.values()))
    names = [name for name in ORDER if name in fa or name in fb]
    server_rows_ = []
    for url in sorted({*ra, *rb}):
        for name in names:  # 0 as 0; None: not that run's server, not its table's column, or no value
            has_a, has_b = url in ra and name in fa, url in rb and name in fb
            if has_a or has_b:  # a cell of some run's table
                va = fa[name](ra[url]) if has_a else None
                vb = fb[name](rb[url]) if has_b else None
                server_rows_.append({"url": url, "figure": name, "a": va, "b": vb})
    return {"stages": stage_rows, "stats": stat_rows, "servers": server_rows_}


def compare_md(a: Analysis, b: Analysis, names: tuple[str, str]) -> str:
    """COMPARE.md: verdicts, then every table with A, B and B/A."""
    rows = compare_rows(a, b)
    ra, rb = a.data.run_ms / 1000, b.data.run_ms / 1000
    lines = [
        "# Bottleneck analysis: comparison",
        "",
        f"- A: `{names[0]}`: **{verdict(a)}** ({ra:.1f} s)",
        f"- B: `{names[1]}`: **{verdict(b)}** ({rb:.1f} s)",
        "",
        "Findings: A "
        + (", ".join(f.kind for f in a.findings) or "none")
        + "; B "
        + (", ".join(f.kind for f in b.findings) or "none")
        + ".",
        "",
        "## Where the time goes",
        "",
        "Each run's stages as its SUMMARY.md gives them, shares of its own wall time (the processes' stages "
        "run side by side, so the rows of different processes do not add up)."
        + marker_note([*stages(a.data), *stages(b.data)]),
        "",
        "| process | stage | A s | B s | B/A | A share | B share |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows["stages"]:
        share = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        lines.append(
            f"| {r['process']} | {row_marker(r['within'], r['beside'])}{r['stage']} | {_num(r['a_s'])} | {_num(r['b_s'])} | "
            f"{_ratio(r['a_s'], r['b_s'])} | {share(r['a_share'])} | {share(r['b_share'])} |"
        )
    lines += [
        "",
        "## Key numbers",
        "",
        "| metric | A p50 | B p50 | B/A | A mean | B mean | B/A |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows["stats"]:
        lines.append(
            f"| {r['metric']} | {_num(r['a_p50'])} | {_num(r['b_p50'])} | {_ratio(r['a_p50'], r['b_p50'])} | "
            f"{_num(r['a_mean'])} | {_num(r['b_mean'])} | {_ratio(r['a_mean'], r['b_mean'])} |"
        )
    if rows["servers"]:
        lines += [
            "",
            "## Per server",
            "",
            SERVERS_NOTE,
            "",
            "| server | figure | A | B | B/A |",
            "|---|---|---|---|---|",
        ]
        for r in rows["servers"]:
            fmt = "{:.1f}" if "p50" in r["figure"] else "{:.0f}"
            lines.append(
                f"| {md_cell(r['url'])} | {r['figure']} | {_num(r['a'], fmt)} | {_num(r['b'], fmt)} | "
                f"{_ratio(r['a'], r['b'])} |"
            )
    lines += ["", "Full reports: [A](a/SUMMARY.md), [B](b/SUMMARY.md)."]
    return md_text("\n".join(lines) + "\n")


SERVERS_NOTE = (
    "Every cell of either run's own SUMMARY.md \"Per server\" table, a row per server and column: '-' where "
    "a run's table has no such column or not that server (or a median has no value). The updates' `failed` and `retried` are "
    "`failed updates` and `retried updates` here, a collector's table's `failed` is `failed samples`; a "
    "table's `429 retries` and `other retries` are named by whose they are (the orchestrator's in a trio's "
    "table, the collector's in a collector's) when the other run's table counts another client's or both."
)


def write_compare(a: Analysis, b: Analysis, names: tuple[str, str], out: Path) -> Path:
    """COMPARE.md and compare.json in ``out`` (the two reports are written by the caller)."""
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "COMPARE.md", compare_md(a, b, names))
    data = {
        "a": names[0],
        "b": names[1],
        "a_primary": verdict(a),
        "b_primary": verdict(b),
        **compare_rows(a, b),
    }
    write_text(out / "compare.json", dumps(data, indent=1))
    return out / "COMPARE.md"
