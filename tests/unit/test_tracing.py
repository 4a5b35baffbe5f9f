from __future__ import annotations

import pytest

from prime_rl.tracing import Timer, format_tagged, new_trace_id, parse_tagged


def test_format_matches_the_design_grammar():
    line = format_tagged("weights", "client.done", "abc123", wall_ms=3556.14, rpc_ms=233.25, queue_ms=3322.89)
    assert line == "[weights][abc123] client.done wall_ms=3556.1 rpc_ms=233.2 queue_ms=3322.9"
    assert format_tagged("ckpt", "wait.start", target_step=4) == "[ckpt] wait.start target_step=4"
    assert format_tagged("weights", "server.recv", "t1", path="/update_weights", t=12.3456789) == (
        "[weights][t1] server.recv path=/update_weights t=12.345679"
    )


def test_round_trip_through_a_log_prefix():
    fields = dict(url="http://h:8000", path="/update_weights", t=1234.5, attempt=2, ok=True, skipped=None)
    line = "2026-01-01 10:00:00.000 | INFO    | " + format_tagged("weights", "client.send", "ff00", **fields)
    parsed = parse_tagged(line)
    assert parsed.tag == "weights" and parsed.trace_id == "ff00" and parsed.event == "client.send"
    assert parsed.fields == {
        "url": "http://h:8000",
        "path": "/update_weights",
        "t": "1234.500000",
        "attempt": "2",
        "ok": "true",
    }
    assert parsed.num("t") == 1234.5 and parsed.num("url") is None and parsed.num("nope", 0.0) == 0.0


def test_values_never_contain_spaces():
    line = format_tagged("gen", "note", reason="two words\tand tab", empty="")
    assert line == '[gen] note reason=two_words_and_tab empty=""'
    assert parse_tagged(line).fields["reason"] == "two_words_and_tab"


@pytest.mark.parametrize(
    "bad", [("we ights", "e"), ("weights", "two words"), ("weights", ""), ("weights", "a=b")]
)
def test_invalid_tag_or_event_is_rejected(bad):
    with pytest.raises(ValueError):
        format_tagged(*bad)


def test_lines_without_tags_and_truncated_lines():
    assert parse_tagged("plain log line [not closed") is None
    assert parse_tagged("") is None
    cut = parse_tagged("[gen] batch.done completions=12 dur_ms=3")
    assert cut.event == "batch.done" and cut.fields == {"completions": "12", "dur_ms": "3"}
    cut = parse_tagged("[gen] batch.done completions=12 dur_m")
    assert cut.fields == {"completions": "12"}


def test_event_less_rollout_line():
    line = format_tagged("rollout", None, trunc_pct=12.5, current_step=3, ckpt_step=2, staleness=1)
    assert line == "[rollout] trunc_pct=12.5 current_step=3 ckpt_step=2 staleness=1"
    parsed = parse_tagged(line)
    assert parsed.event == "" and parsed.num("staleness") == 1
    assert parse_tagged("[rollout] trunc_pct=12.5 current_step=3 ckpt_st").fields == {
        "trunc_pct": "12.5",
        "current_step": "3",
    }
    # a bracketed word before the tag does not hide it
    assert parse_tagged("(vllm) [x] [gen] batch.done dur_ms=5.0").event == "batch.done"


def test_trace_ids_are_unique_and_timer_measures():
    assert len({new_trace_id() for _ in range(1000)}) == 1000
    with Timer() as t:
        sum(range(1000))
    assert t.ms >= 0 and t.end is not None
