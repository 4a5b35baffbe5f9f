"""A server log on a clock of its own (another time zone, a clock not synced) is named, and the
run's length is measured on the orchestrator's clock. Before, an inference log two hours ahead
made a checkpoint-bound run two hours longer: "no bottleneck found", and no warning."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from tests.support.synthetic_logs import Shape, make_run


def _shifted(lines: list[str], seconds: float) -> list[str]:
    """Log lines in loguru's file format with their times moved by ``seconds``."""
    out = []
    for line in lines:
        when = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f") + timedelta(seconds=seconds)
        out.append(when.strftime("%Y-%m-%d %H:%M:%S.%f")[:23] + line[23:])
    return out


@pytest.mark.parametrize("offset_s", [7200.0, -10800.0])
def test_an_inference_log_hours_off_is_named_and_the_run_measured_on_the_orchestrators_clock(
    tmp_path, analyze, offset_s
):
    expected, _ = analyze(
        make_run("checkpoint_io", steps=20).write(tmp_path / "same").values(), tmp_path / "a"
    )
    run = make_run("checkpoint_io", steps=20)
    run.inference = _shifted(run.inference, offset_s)
    files = run.write(tmp_path / "off")
    summary, md = analyze(files.values(), tmp_path / "b")
    assert expected["primary"]["kind"] == summary["primary"]["kind"] == "checkpoint_io"
    assert summary["run_seconds"] == pytest.approx(expected["run_seconds"], abs=0.01)
    ((log, got),) = summary["clock_offsets"].items()
    assert log == str(files["inference"]) and got["updates"] == 18
    assert got["seconds"] == pytest.approx(offset_s, abs=1.0)
    side = "ahead of" if offset_s > 0 else "behind"
    assert (
        f"{files['inference']} is {abs(offset_s):.0f} s {side} the orchestrator's (median of 18 update(s))"
        in md
    )
    assert expected["clock_offsets"] == {}
    # joined on the orchestrator's clock: a server behind received every update "before" it was
    # sent and was paired with none; the send -> receipt gap is the network's again
    for key in ("server_rpc_ms", "send_to_recv_ms"):
        assert summary["stats"][key]["count"] == expected["stats"][key]["count"] == 18
    assert summary["stats"]["send_to_recv_ms"]["max"] == pytest.approx(
        expected["stats"]["send_to_recv_ms"]["max"]
    )


def test_clocks_a_few_seconds_apart_and_one_server_of_several_off(tmp_path, analyze):
    """NTP-level differences (here 2 s) are no offset; with four servers only the one whose clock
    is off is named, whichever log is read first."""
    run = make_run("healthy", steps=20, shape=Shape(servers=4))
    run.inference = _shifted(run.inference, 2.0)
    run.servers["inference_2"] = _shifted(run.servers["inference_2"], 3600.0)
    files = run.write(tmp_path / "logs")
    summary, _ = analyze(reversed(list(files.values())), tmp_path / "out")
    assert list(summary["clock_offsets"]) == [str(files["inference_2"])]
    assert summary["clock_offsets"][str(files["inference_2"])]["seconds"] == pytest.approx(3600.0, abs=1.0)
