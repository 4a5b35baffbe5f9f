"""Issue 18 item 7: ``--compare RUN_A RUN_B``, the before/after of a fix side by side with ratios."""

from __future__ import annotations

import json

from tests.support.synthetic_logs import Shape, make_run

from prime_rl.analysis.__main__ import main as analyze_main


def test_compare_puts_both_runs_side_by_side_with_ratios(tmp_path, capsys):
    before = make_run("healthy", steps=12, seed=1, shape=Shape(rpc_ms=9600.0, gen_ms=3000.0))
    after = make_run("healthy", steps=12, seed=1, shape=Shape(rpc_ms=960.0, gen_ms=3000.0))
    before.write(tmp_path / "a" / "logs")
    after.write(tmp_path / "b" / "logs")
    analyze_main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert "A: Slow engine reload" in printed and "B: No bottleneck found" in printed
    md = (tmp_path / "out" / "COMPARE.md").read_text()
    data = json.loads((tmp_path / "out" / "compare.json").read_text())
    rpc = next(r for r in data["stats"] if r["series"] == "rpc_ms")
    assert 0.09 < rpc["b_p50"] / rpc["a_p50"] < 0.11
    assert "| Server RPC time per weight update (client view) |" in md and "| 0.10x |" in md
    stage = next(r for r in data["stages"] if r["stage"] == "weight update: rpc")
    assert stage["b_share"] < stage["a_share"] / 3
    assert (tmp_path / "out" / "a" / "SUMMARY.md").is_file() and (
        tmp_path / "out" / "b" / "SUMMARY.md"
    ).is_file()


def test_compare_refuses_extra_inputs(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        analyze_main(["x.log", "--compare", "a", "b"])
    assert "--compare takes the two runs" in capsys.readouterr().err


def _collector_log(path, gen_ms_by_url: dict[str, float], n429: int = 0) -> None:
    from prime_rl.tracing import format_tagged

    lines = []
    for i in range(10):
        for url, gen in gen_ms_by_url.items():
            tagged = format_tagged(
                "collect", "rollout.done", f"t{i}", task=i, repeat=0, status=200, dur_ms=gen + 5, queue_ms=0.0,
                gen_ms=gen, verify_ms=5.0, out_tokens=8, attempts=1, url=url,
            )  # fmt: skip
            lines.append(f"2026-01-01 12:00:{i:02d}.000 | INFO    | {tagged}")
    for i in range(n429):
        tagged = format_tagged(
            "collect", "request.retry", f"r{i}", status=429, wait_ms=100.0, url="http://a:1"
        )
        lines.append(f"2026-01-01 12:00:10.000 | INFO    | {tagged}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_compare_of_collector_runs_lists_each_server_s_figures(tmp_path, capsys):
    """The per-server table had only the updates' wall_ms: all dashes for two collector runs."""
    _collector_log(tmp_path / "a" / "collect.log", {"http://a:1": 100.0, "http://b:1": 300.0}, n429=5)
    _collector_log(tmp_path / "b" / "collect.log", {"http://a:1": 100.0, "http://b:1": 100.0})
    analyze_main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "compare.json").read_text())
    figures = {(r["url"], r["figure"]): (r["a"], r["b"]) for r in data["servers"]}
    assert figures[("http://b:1", "gen_ms p50")] == (300.0, 100.0)
    assert figures[("http://a:1", "samples")] == (10, 10)
    # the collector's: named as SUMMARY.md's table names them, which has no orchestrator's beside them
    assert figures[("http://a:1", "429 retries")] == (5, 0)
    md = (tmp_path / "out" / "COMPARE.md").read_text()
    assert "| http://b:1 | gen_ms p50 | 300.0 | 100.0 | 0.33x |" in md


def test_compare_keeps_a_server_s_failed_samples_apart_from_its_failed_updates(tmp_path, capsys):
    """SUMMARY.md's per-server table has failed updates and failed samples apart; the comparison had
    one "failed" figure adding them up."""
    from prime_rl.tracing import format_tagged

    _collector_log(tmp_path / "a" / "collect.log", {"http://a:1": 100.0})
    _collector_log(tmp_path / "b" / "collect.log", {"http://a:1": 100.0})
    failed = format_tagged(
        "collect",
        "rollout.failed",
        "f1",
        task=99,
        repeat=0,
        status=500,
        dur_ms=5.0,
        kind="X",
        url="http://a:1",
    )
    with (tmp_path / "a" / "collect.log").open("a") as f:
        f.write(f"2026-01-01 12:00:11.000 | INFO    | {failed}\n")
    analyze_main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "compare.json").read_text())
    figures = {(r["url"], r["figure"]): (r["a"], r["b"]) for r in data["servers"]}
    assert figures[("http://a:1", "failed samples")] == (1, 0)
    assert figures.get(("http://a:1", "failed updates"), (0, 0)) == (0, 0)


def test_compare_says_a_run_without_tagged_lines_has_nothing_to_analyse(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "orchestrator.log").write_text("hello\nworld\n")
    make_run("healthy", steps=8, seed=1).write(tmp_path / "b" / "logs")
    analyze_main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")])
    said = "Nothing to analyse: none of the 2 line(s) of the 1 file(s) given is a tagged timing line"
    assert f"A: {said}\n" in capsys.readouterr().out  # as SUMMARY.md and the single run's command say
    assert json.loads((tmp_path / "out" / "compare.json").read_text())["a_primary"] == said


def _summary_columns(md: str) -> list[str]:
    """The columns of SUMMARY.md's "Per server" table (the server's left out)."""
    at = md.index("## Per server")
    head = next(line for line in md[at:].splitlines() if line.startswith("| server |"))
    return [c.strip() for c in head.strip("|").split("|")][1:]


def test_compare_shows_every_per_server_column_of_the_single_run_table_zeros_too(tmp_path):
    """A healthy run against one with 429s on its server (reviewer's s10): COMPARE.md had the
    server's updates, medians and, as it was not 0 in B, its 429 retries; the failed and retried
    updates and the other retries (0 in both) were left out, and a run's 429s would have been too
    had neither any. Every column of SUMMARY.md's table is there now, zeros as zeros."""
    make_run("healthy", steps=12, seed=1).write(tmp_path / "a" / "logs")
    make_run("rate_limited", steps=12, seed=1).write(tmp_path / "b" / "logs")
    out = tmp_path / "out"
    analyze_main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)])
    data = json.loads((out / "compare.json").read_text())
    urls = sorted({r["url"] for r in data["servers"]})
    assert urls == ["http://h:8000"]
    figures = {r["figure"]: (r["a"], r["b"]) for r in data["servers"]}
    # SUMMARY.md's columns, in its order ("failed" and "retried" are the updates' there)
    names = {"failed": "failed updates", "retried": "retried updates"}
    for run in ("a", "b"):
        columns = _summary_columns((out / run / "SUMMARY.md").read_text())
        assert list(figures) == [names.get(c, c) for c in columns], columns
    a429, b429 = figures["429 retries"]
    assert a429 == 0 and b429 > 10
    assert figures["failed updates"] == (0, 0) and figures["retried updates"] == (0, 0)
    assert figures["other retries"] == (0, 0) and figures["updates"][0] == figures["updates"][1] > 0
    md = (out / "COMPARE.md").read_text()
    for line in (
        "| http://h:8000 | failed updates | 0 | 0 | - |",
        "| http://h:8000 | retried updates | 0 | 0 | - |",
        "| http://h:8000 | other retries | 0 | 0 | - |",
        f"| http://h:8000 | 429 retries | 0 | {b429} | new |",
    ):
        assert line in md, md


def test_compare_of_a_trio_and_a_collector_shows_each_run_s_own_table(tmp_path):
    """A trio's run against a collector's (the reviewer's s21b, the other way round): each server's
    figures were the columns of both tables, so the collector's server showed "updates 0" and "429
    retries (orchestrator) 0", columns its own SUMMARY.md does not have, and the trio's server
    "samples 0". Each run shows its own table's columns now, '-' where its table has none; the
    collector's "failed" is "failed samples", and the two tables' retries, one client's each, are
    named by whose they are."""
    make_run("healthy", steps=6, seed=1).write(tmp_path / "a" / "logs")
    _collector_log(tmp_path / "b" / "collect.log", {"http://a:1": 100.0}, n429=3)
    out = tmp_path / "out"
    analyze_main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)])
    rows = json.loads((out / "compare.json").read_text())["servers"]
    by = {(r["url"], r["figure"]): (r["a"], r["b"]) for r in rows}
    assert [r["figure"] for r in rows if r["url"] == "http://a:1"] == [
        "samples", "failed samples", "gen_ms p50", "429 retries (collector)", "other retries (collector)",
    ]  # fmt: skip
    assert _summary_columns((out / "b" / "SUMMARY.md").read_text()) == [
        "samples", "failed", "gen_ms p50", "429 retries", "other retries",
    ]  # fmt: skip
    assert by[("http://a:1", "samples")] == (None, 10) and by[("http://a:1", "failed samples")] == (None, 0)
    assert by[("http://a:1", "429 retries (collector)")] == (None, 3)
    assert [r["figure"] for r in rows if r["url"] == "http://h:8000"] == [
        "updates", "failed updates", "retried updates", "wall_ms p50", "rpc_ms p50", "queue_ms p50",
        "429 retries (orchestrator)", "other retries (orchestrator)",
    ]  # fmt: skip
    assert by[("http://h:8000", "429 retries (orchestrator)")] == (0, None)
    md = (out / "COMPARE.md").read_text()
    assert "| http://a:1 | 429 retries (collector) | - | 3 | - |" in md
    assert "| http://a:1 | updates |" not in md and "| http://h:8000 | samples |" not in md
    assert "'-' where a run's table has no such column or not that server" in md


def test_compare_names_a_trio_s_retries_the_orchestrator_s_against_a_table_with_both(tmp_path):
    """A trio alone (its table: "429 retries") against the trio with a collector analysed beside it
    (the orchestrator's and the collector's retries apart): the trio's retries are the orchestrator's
    figure, beside B's orchestrator's, not a row of their own."""
    make_run("rate_limited", steps=6, seed=1).write(tmp_path / "a" / "logs")
    make_run("rate_limited", steps=6, seed=1).write(tmp_path / "b" / "logs")
    _collector_log(tmp_path / "b" / "logs" / "collect.log", {"http://a:1": 100.0}, n429=3)
    out = tmp_path / "out"
    analyze_main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)])
    by = {
        (r["url"], r["figure"]): (r["a"], r["b"])
        for r in json.loads((out / "compare.json").read_text())["servers"]
    }
    assert by[("http://h:8000", "429 retries (orchestrator)")] == (60, 60)
    assert by[("http://h:8000", "429 retries (collector)")] == (None, 0)
    assert by[("http://a:1", "429 retries (collector)")] == (None, 3)
    assert by[("http://h:8000", "samples")] == (None, 0)  # B's table has the samples' columns
    assert ("http://h:8000", "429 retries") not in by


def test_compare_s_stages_keep_their_process_and_the_within_marker(tmp_path):
    """A healthy run against a rate-limited one (reviewer's s10): COMPARE.md listed "rate-limit waits
    (429)" at the bottom, with no process and no "(within generation)" marker, so B's orchestrator
    shares added to 128.8%; compare.json had no within field. Each row has its process and marker
    now, a part right under the stage it is a part of, and COMPARE.md says what the marker means."""
    make_run("healthy", steps=20).write(tmp_path / "a" / "logs")
    make_run("rate_limited", steps=20).write(tmp_path / "b" / "logs")
    out = tmp_path / "out"
    analyze_main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)])
    rows = json.loads((out / "compare.json").read_text())["stages"]
    orchestrator = [r for r in rows if r["process"] == "orchestrator"]
    assert [r["stage"] for r in orchestrator[:2]] == ["generation", "rate-limit waits (429)"]
    limited = orchestrator[1]
    assert limited["within"] == "generation" and limited["beside"] is None
    assert limited["a_s"] is None and abs(limited["b_s"] - 10.0) < 1e-6
    assert abs(sum(r["b_share"] for r in orchestrator if not r["within"]) - 1.0) < 0.01
    md = (out / "COMPARE.md").read_text()
    assert "| orchestrator | (within generation) rate-limit waits (429) | - | 10.0 | - | - | 28.8% |" in md
    assert 'A row marked "(within generation)" is a part of generation\'s time, not added to it.' in md
    assert "| trainer | trainer compute |" in md
