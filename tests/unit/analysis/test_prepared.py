"""The collection's polars part done ahead (``stats.prepared``, in the parse's thread): the same
analysis as without it, bad values counted in the same order, and every number a handler reads
converted ahead (the table :data:`~prime_rl.analysis.stats.NUMBERS` matches the handlers)."""

from __future__ import annotations

from pathlib import Path

from tests.support.synthetic_logs import make_run

from prime_rl.analysis import stats, tagged
from prime_rl.analysis.log_files import discover
from prime_rl.analysis.parser import scan_files
from prime_rl.analysis.tagged import ParseStats, TaggedLines

BAD = [  # a bad value in a field of each tag that has numbers read ahead
    "2026-01-01 12:00:01.000 | INFO    | [ckpt] wait.done target_step=3 wait_ms=oops",
    "2026-01-01 12:00:01.001 | INFO    | [gen] batch.done step=3 completions=4 dur_ms=inf",
    "2026-01-01 12:00:01.002 | INFO    | [verify] batch.done step=3 dur_ms=1.0 cpu_ms=nan",
    "2026-01-01 12:00:01.003 | INFO    | [rollout] trunc_pct=1 current_step=3 ckpt_step=0 staleness=x",
    "2026-01-01 12:00:01.004 | INFO    | [weights][abc] client.done url=u wall_ms=?? rpc_ms=1",
]


def _logs(tmp_path: Path) -> list[tuple[str, Path]]:
    run = make_run("healthy", steps=60, seed=3)
    run.orchestrator[30:30] = BAD  # inside the run, between its batches' lines
    run.write(tmp_path)
    return discover([tmp_path])


def _collect(files, prepare: bool) -> stats.Collected:
    parse = ParseStats()
    batches = scan_files(files, parse)
    return stats.collect(stats.prepared(batches) if prepare else batches, parse, 1)


def _essence(c: stats.Collected) -> tuple:
    return (
        {k: v.tolist() for k, v in c.series.items()},
        dict(c.counts),
        [u.to_dict() for u in c.updates],
        [(s.kind, s.start, s.end, s.label) for s in c.spans],
        c.parse.bad_values,
        c.parse.bad_value_examples,
        c.staleness_by_step.as_dict(),
    )


def test_prepared_batches_give_the_same_collection_and_the_same_bad_values(tmp_path):
    files = _logs(tmp_path)
    plain, ahead = _collect(files, prepare=False), _collect(files, prepare=True)
    assert plain.parse.bad_values == 5  # the test's bad values were read, in both
    assert _essence(ahead) == _essence(plain)


def test_every_number_and_step_a_handler_reads_was_converted_ahead(tmp_path, monkeypatch):
    """A handler that reads a number or a step the tables do not list converts it on the collector's
    thread (correct, but slower): the tables and the handlers must agree."""
    files = _logs(tmp_path)
    made: list[tuple[str, str, tuple | None]] = []
    convert, step_numbers = TaggedLines._convert, tagged.step_numbers

    def recorded(self, wanted, steps):
        made.extend((self.frame.get_column("tag")[0], key, events) for key, events in wanted)
        made.extend(("step", key, None) for key in steps)
        return convert(self, wanted, steps)

    def recorded_steps(steps):
        made.append(("step", steps.name, None))
        return step_numbers(steps)

    monkeypatch.setattr(TaggedLines, "_convert", recorded)
    monkeypatch.setattr(tagged, "step_numbers", recorded_steps)
    parse = ParseStats()
    batches = list(stats.prepared(scan_files(files, parse)))
    ahead = set(made)
    # every tag of the table is in the logs but the collector's (its own test below)
    assert {tag for tag, _, _ in ahead} == {*stats.NUMBERS, "step"} - {"collect"}
    assert {key for tag, key, _ in ahead if tag == "step"} == {
        k for keys in stats.STEPS.values() for k in keys
    }
    made.clear()
    stats.collect(batches, parse, 1)
    assert made == []


def test_a_collector_log_converts_only_its_durations_on_the_collectors_thread(tmp_path, monkeypatch):
    """The collector's numbers are converted ahead but ``dur_ms``, whose lines (every event but
    request.retry and verify.done) are known from the batch alone (the C scan reads it as a number
    all the same), and the retries' ``wait_ms``, read from their lines alone."""
    log = tmp_path / "collector.log"
    log.write_text(
        "".join(
            f"2026-01-01 12:00:0{i}.250 | INFO    | [collect][c{i}] {event} url=http://a:1 dur_ms=5 "
            "queue_ms=1 gen_ms=2 verify_ms=1\n"
            for i, event in enumerate(["rollout.done", "rollout.failed", "request.retry", "rollout.done"])
        )
    )
    made: list[tuple[str, tuple | None]] = []
    convert = TaggedLines._convert

    def recorded(self, wanted, steps):
        made.extend(wanted)
        return convert(self, wanted, steps)

    monkeypatch.setattr(TaggedLines, "_convert", recorded)
    parse = ParseStats()
    batches = list(stats.prepared(scan_files([("collector", log)], parse, stats.FIELDS, stats.FIELD_KINDS)))
    assert {key for key, _ in made} == {key for key, _ in stats.NUMBERS["collect"]}
    made.clear()
    collected = stats.collect(batches, parse)
    assert [key for key, _ in made] == ["dur_ms", "wait_ms"]
    assert stats.FIELD_KINDS["collect"]["dur_ms"] == tagged.NUMBER
    assert list(collected.series["collect_ms"]) == [5.0, 5.0, 5.0]
