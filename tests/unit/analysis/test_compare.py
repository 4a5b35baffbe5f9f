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
    assert "A: Slow engine reload" in printed and "B: no bottleneck found" in printed
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
