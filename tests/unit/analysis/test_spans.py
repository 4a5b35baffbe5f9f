"""KeptSpans: the kept rows of span blocks, made into objects or read as columns only as asked, in
the order a stable sort of every span by start gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis.spans import KeptSpans, Span, SpanBlock, SpanColumns, span_columns

PART = st.tuples(
    st.sampled_from(["gen", "update", "train"]),
    st.lists(st.integers(0, 6), max_size=8),  # the block's starts: few values, so many ties
    st.booleans(),
    st.data(),
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(PART, max_size=6), n=st.integers(0, 20))
def test_kept_spans_made_alone_are_the_stable_sort_of_every_span(parts, n):
    """The first ``n``, one kind's and all of them are what a stable sort by start of every part's
    spans (in the parts' order) holds, whichever is asked first; ties keep the parts' order."""
    made, every = [], []
    for kind, starts, with_info, data in parts:
        lo = data.draw(st.integers(0, len(starts)))
        hi = data.draw(st.integers(lo, len(starts)))
        args = [f"{kind}{i}" for i in range(len(starts))]
        info = {"ms": [float(i) for i in range(len(starts))]} if with_info else None
        block = SpanBlock([float(s) for s in starts], [s + 0.5 for s in starts], kind + " {}", args, info)
        made.append((kind, block, lo, hi))
        every += [
            Span(
                kind,
                float(starts[i]),
                starts[i] + 0.5,
                f"{kind} {args[i]}",
                {"ms": float(i)} if with_info else {},
            )
            for i in range(lo, hi)
        ]
    ordered = sorted(every, key=lambda s: s.start)
    kept = KeptSpans(made)
    assert len(kept) == len(ordered) and bool(kept) == bool(ordered)
    assert _spans(span_columns(kept, n)) == ordered[:n]
    assert _spans(span_columns(kept, kind="gen")) == [s for s in ordered if s.kind == "gen"]
    assert list(kept) == ordered and kept == ordered and kept[: n + 1] == ordered[: n + 1]
    # once all are made, the same answers from them
    assert _spans(kept.columns(n)) == ordered[:n]
    assert _spans(kept.columns(None, "update")) == [s for s in ordered if s.kind == "update"]


def _spans(columns: SpanColumns) -> list[Span]:
    """The columns as the spans they hold (a key a span has no value for is left out of its info)."""
    return [
        Span(
            kind,
            columns.start[i],
            columns.end[i],
            columns.label[i],
            {key: values[i] for key, values in columns.info.items() if values[i] is not None},
        )
        for i, kind in enumerate(columns.kind)
    ]


def test_a_list_of_spans_answers_the_same_questions():
    """A hand-built Collected holds a list: the helpers read it as it is."""
    spans = [
        Span("gen", 0.0, 1.0, "a"),
        Span("update", 0.5, 0.7, "b", {"ms": 2.0}),
        Span("gen", 2.0, 3.0, "c"),
    ]
    assert _spans(span_columns(spans, 2)) == spans[:2]
    assert span_columns(spans, 2).info == {"ms": [None, 2.0]}
    assert span_columns(spans, kind="gen").label == ["a", "c"]
