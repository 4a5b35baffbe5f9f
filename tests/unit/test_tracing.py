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


# --- nothing a caller passes can start a new line --------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from prime_rl.tracing import one_line  # noqa: E402

LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
HOSTILE = st.text(
    alphabet=st.one_of(
        st.characters(codec=None),  # any code point, lone surrogates included
        st.sampled_from([*LINE_BREAKS, "\x00", "\x1b", " ", "\t", "=", "[", "]", '"', "\u202e", "\ufeff"]),
    )
)
NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,12}", fullmatch=True)
VALUES = st.one_of(HOSTILE, st.integers(), st.floats(), st.booleans(), st.none())
PREFIX = "2026-01-01 10:00:00.000 | INFO    | "


def assert_one_safe_line(line: str) -> None:
    assert len(line.splitlines()) == 1 and line == line.splitlines()[0]
    assert line.isprintable()  # no control, format or separator character but the ASCII space
    line.encode("utf-8")  # no lone surrogate: the file sink can write it


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tag=st.from_regex(r"[A-Za-z0-9_.-]{1,10}", fullmatch=True),
    tid=st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True)),
    event=st.one_of(st.none(), NAMES),
    fields=st.dictionaries(NAMES, VALUES, max_size=6),
)
def test_no_value_can_break_or_forge_a_line(tag, tid, event, fields):
    if event is None and not any(v is not None for v in fields.values()):
        fields = {**fields, "k": 1}  # an event-less line needs a field
    line = format_tagged(tag, event, tid, **fields)
    assert_one_safe_line(line)
    parsed = parse_tagged(PREFIX + line)
    assert (parsed.tag, parsed.event, parsed.trace_id) == (tag, event or "", tid)
    kept = [k for k, v in fields.items() if v is not None]
    assert list(parsed.fields) == kept
    for key in kept:  # each value reads back as written: one token, no '=' lost
        assert f"{key}={parsed.fields[key]}" in line.split(" ")
    # in a log, the line stays one line and one tagged line: the next line is the next one
    lines = (PREFIX + line + "\n" + PREFIX + "[gen] next k=1\n").splitlines()
    assert len(lines) == 2 and parse_tagged(lines[1]).event == "next"


def test_line_breaks_and_control_characters_are_folded_or_escaped():
    forged = "/w/x\n[weights][abc] rpc.done op=update_weights t=1 rpc_ms=99999"
    line = format_tagged("weights", "rpc.start", "t1", op="update_weights", target=forged)
    assert line == (
        "[weights][t1] rpc.start op=update_weights target=/w/x_[weights][abc]_rpc.done_op=update_weights_t=1_rpc_ms=99999"
    )
    assert parse_tagged(line).fields == {
        "op": "update_weights",
        "target": forged.replace("\n", "_").replace(" ", "_"),
    }
    assert format_tagged("gen", "x", a="\x1b[31mred\x00", b="a\u2028b\u0085c\rd") == (
        "[gen] x a=\\x1b[31mred\\x00 b=a_b_c_d"
    )
    assert format_tagged("gen", "x", a="\u202eevil\ud800") == "[gen] x a=\\u202eevil\\ud800"


@pytest.mark.parametrize(
    "args,fields",
    [
        (("gen", "x\n[weights]"), {}),
        (("gen", "x\x00"), {}),
        (("gen", "x\x1b"), {}),
        (("gen", "ok", "tid\n"), {}),
        (("gen", "ok", "a" * 65), {}),
        (("gen\n", "ok"), {}),
        (("gen", "ok"), {"bad key": 1}),
        (("gen", "ok"), {"k\n[weights][a] rpc.done t": 1}),
        (("gen", "ok"), {"k=v": 1}),
        (("gen", "ok"), {"": 1}),
    ],
)
def test_tag_trace_event_and_keys_must_match_their_patterns(args, fields):
    with pytest.raises(ValueError) as e:
        format_tagged(*args, **fields)
    assert str(e.value).isprintable()


@settings(max_examples=300, deadline=None)
@given(text=HOSTILE, limit=st.one_of(st.none(), st.integers(1, 50)))
def test_one_line_is_one_printable_line(text, limit):
    out = one_line(text, limit)
    assert out.isprintable() and len(out.splitlines()) <= 1
    out.encode("utf-8")
    if text.isprintable() and (limit is None or len(text) <= limit):
        assert out == text  # printable text (spaces included) is kept as it is
    if limit is not None and len(text) > limit:
        assert out.endswith(f"... ({len(one_line(text, None))} characters)")
