"""Aggregate metrics of a rollout file and the cost of tokens.

The aggregate of a file is the mean of every numeric field of its records (``reward``, each
verifier metric by its own name, ``usage.*``, ``timings.*``), plus, when tasks were sampled more
than once, ``pass@k`` (unbiased estimator over each task's samples) and ``majority@k`` (the most
frequent answer among a task's first k samples is a passing one). A sample passes when its
reward is at least ``pass_threshold``.

Samples without a reward (``reward: null``: the verifier raised or hung, ``verify_error`` says
why, or the record was never scored) are handled as follows:

- ``reward`` (and each verifier metric) is the mean over the samples that have one, i.e. over
  scored samples only; the samples it leaves out are counted in ``unscored``.
- In ``pass@k`` and ``majority@k`` such a sample is a *failed* sample: it counts in its task's
  ``n`` (the number of samples of the task) and never among the ``c`` passing ones, and it has
  no answer, so it casts no vote and cannot win ``majority@k``; a task whose first k samples
  are all unscored fails. Dropping them instead would bias both upward, as a verifier that
  crashes on hard answers would hide exactly the failures. ``pass@k``/``majority@k`` are left
  out when no sample of the file was scored or failed verification (a ``--no-verify`` file).
- Verifier failures are also reported on their own: ``verify_failures`` (records with a
  ``verify_error``) and ``verify_failure_rate`` (that over ``num_records``).
"""

from __future__ import annotations

import re
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from math import comb
from typing import Any

from prime_rl.collect.config import Price

_WS = re.compile(r"\s+")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them passing) passes."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def answer_key(record: dict[str, Any]) -> str:
    """What majority voting compares: the verifier's extracted answer, else the normalised text."""
    answer = record.get("answer")
    if answer is None:
        answer = (record.get("response") or {}).get("text") or ""
    return _WS.sub(" ", str(answer)).strip().lower()


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Counts:
    """A growable array of small counters indexed by task index (4 bytes per task)."""

    def __init__(self) -> None:
        self.values = array("I")

    def bump(self, index: int, by: int = 1) -> None:
        if index >= len(self.values):
            self.values.frombytes(bytes(self.values.itemsize * (index + 1 - len(self.values))))
        self.values[index] += by


class Aggregator:
    """Streaming accumulator: :meth:`add` each record, then :meth:`result`.

    Memory: each task's sample and pass counts (8 bytes per task index, for ``pass@k``); the
    samples themselves (repeat, passed, answer) only with ``keep_answers``, which ``majority@k``
    needs. :func:`aggregate_file` reads a file once without them and a second time with them only
    when its tasks have several samples each, so a file of a million single samples aggregates in
    a few megabytes."""

    def __init__(self, pass_threshold: float = 1.0, keep_answers: bool = True) -> None:
        self.pass_threshold = pass_threshold
        self.keep_answers = keep_answers
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: Counter[str] = Counter()
        self.n = _Counts()
        """Samples per task index."""
        self.c = _Counts()
        """Passing samples per task index."""
        self.samples: dict[int, list[tuple[int, bool, str | None]]] = defaultdict(list)
        """Per task (with ``keep_answers``): (repeat_index, passed, answer key) of every sample;
        unscored ones are (repeat_index, False, None): failed, and without a vote."""
        self.records = 0
        self.verify_failures = 0
        self.unscored = 0

    def _add(self, name: str, value: Any) -> None:
        if _numeric(value):
            self.sums[name] += float(value)
            self.counts[name] += 1

    def add(self, record: dict[str, Any]) -> None:
        self.records += 1
        reward = record.get("reward")
        if record.get("verify_error"):
            self.verify_failures += 1
        task = int(record["task_index"])
        passed = False
        if not _numeric(reward):
            self.unscored += 1
        else:
            self._add("reward", reward)
            passed = float(reward) >= self.pass_threshold
        self.n.bump(task)
        if passed:
            self.c.bump(task)
        if self.keep_answers:  # an unscored sample is a failed one, with no vote
            answer = answer_key(record) if _numeric(reward) else None
            self.samples[task].append((int(record["repeat_index"]), passed, answer))
        for name, value in (record.get("metrics") or {}).items():
            self._add(f"metrics.{name}" if name == "reward" else name, value)
        for block in ("usage", "timings"):
            for name, value in (record.get(block) or {}).items():
                self._add(f"{block}.{name}", value)

    def samples_per_task(self) -> tuple[int, int]:
        """The fewest and the most samples of a task (0, 0 when there is none)."""
        counts = [n for n in self.n.values if n]
        return (min(counts), max(counts)) if counts else (0, 0)

    def wants_answers(self) -> bool:
        """Whether :meth:`result` reports ``majority@k``, for which the answers must be kept."""
        scored = self.records - self.unscored
        return self.samples_per_task()[0] > 1 and bool(scored or self.verify_failures)

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: self.sums[name] / self.counts[name] for name in sorted(self.sums)}
        if "reward" in out:  # reward first, as users look for it
            out = {"reward": out.pop("reward"), **out}
        tasks = [(n, c) for n, c in zip(self.n.values, self._c_values(), strict=True) if n]
        out.update(
            num_records=self.records,
            num_tasks=len(tasks),
            unscored=self.unscored,
            verify_failures=self.verify_failures,
            verify_failure_rate=self.verify_failures / self.records if self.records else 0.0,
        )
        if tasks:
            n_min, n_max = self.samples_per_task()
            out["samples_per_task"] = n_min if n_min == n_max else {"min": n_min, "max": n_max}
            # a --no-verify file (nothing scored, nothing failed verification) has no pass@k
            if self.wants_answers():
                ks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64, 128) if k <= n_min} | {n_min})
                for k in ks:
                    out[f"pass@{k}"] = sum(pass_at_k(n, c, k) for n, c in tasks) / len(tasks)
                if self.keep_answers:
                    for k in ks[1:]:
                        out[f"majority@{k}"] = sum(
                            _majority_passes(s, k) for s in self.samples.values()
                        ) / len(self.samples)
        return out

    def _c_values(self) -> array:
        missing = len(self.n.values) - len(self.c.values)
        return (
            self.c.values + array("I", bytes(self.c.values.itemsize * missing))
            if missing > 0
            else self.c.values
        )


def _majority_passes(samples: list[tuple[int, bool, str | None]], k: int) -> bool:
    """Whether the most frequent answer among the first k samples (by repeat) is a passing one.
    Unscored samples (answer None) take their place among the k but cast no vote."""
    first = [s for s in sorted(samples, key=lambda s: s[0])[:k] if s[2] is not None]
    if not first:
        return False
    votes = Counter(answer for _, _, answer in first)
    top = max(votes.values())
    winner = next(answer for _, _, answer in first if votes[answer] == top)  # ties: the earliest
    return any(passed for _, passed, answer in first if answer == winner)


def aggregate(records: Iterable[dict[str, Any]], pass_threshold: float = 1.0) -> dict[str, Any]:
    """The aggregate of records held or streamed once (answers kept, for ``majority@k``)."""
    agg = Aggregator(pass_threshold)
    for record in records:
        agg.add(record)
    return agg.result()


def aggregate_file(
    read: Callable[[], Iterable[dict[str, Any]]], pass_threshold: float = 1.0
) -> dict[str, Any]:
    """The aggregate of a file's records, ``read()`` giving them afresh each time: one pass that keeps
    counts only, then, when its tasks have several samples each (``majority@k``), a second pass that
    keeps their answers too."""
    agg = Aggregator(pass_threshold, keep_answers=False)
    for record in read():
        agg.add(record)
    if not agg.wants_answers():
        return agg.result()
    return aggregate(read(), pass_threshold)


class PriceTable:
    """Looks a model up by exact name, else by the longest matching prefix
    (``gpt-4o-mini-2024-07-18`` -> ``gpt-4o-mini``)."""

    def __init__(self, prices: dict[str, Price]):
        self.prices = prices

    def lookup(self, model: str | None) -> Price | None:
        if not model:
            return None
        if model in self.prices:
            return self.prices[model]
        matches = [name for name in self.prices if model.startswith(name)]
        return self.prices[max(matches, key=len)] if matches else None

    @staticmethod
    def cost(price: Price | None, input_tokens: float, output_tokens: float) -> float | None:
        if price is None:
            return None
        return (input_tokens * price.input_per_1m + output_tokens * price.output_per_1m) / 1e6
