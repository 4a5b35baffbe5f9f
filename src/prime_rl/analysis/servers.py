"""Per server: with several inference servers, every figure broken down by server URL.

Each server's load scraped from /metrics (``[server]`` lines, folded by
:mod:`~prime_rl.analysis.server_load`): :func:`kv_cache_pressure` names a server that preempts
requests or runs with a full KV cache while requests wait, :func:`server_load_section` is its
SUMMARY.md table, and :func:`server_dicts` puts it beside the figures above in summary.json.

Weight updates come from the client's ``[weights]`` lines (``url=``), one update per trace id and
server (:mod:`~prime_rl.analysis.updates`); retries (429 and errors) from ``[gen] request.retry
url=``; failed updates from ``client.error``; an update's wall time is the client's whole wait for
it, the failed attempts of a retried one included (:func:`~prime_rl.analysis.updates.update_frame`);
an update never answered is counted apart (``unanswered``): one the orchestrator died waiting for
(:func:`~prime_rl.analysis.updates.died_waiting`; the stages count it up to the crash), and one still
waiting where the logs end (the stall rule's, :func:`~prime_rl.analysis.stalls.first_unanswered`).
A server whose median update wall time is ``server_slow_ratio`` times its peers' median is named,
with the ratio.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from prime_rl.analysis.findings import Finding
from prime_rl.analysis.output import md_cell
from prime_rl.analysis.server_load import ServerLoadSeries, percentile
from prime_rl.analysis.stages import collector_of_run, of_the_samples, update_group
from prime_rl.analysis.stats import SAMPLE_RETRY, Collected
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.updates import unanswered as never_answered


def _median(values: Sequence[float]) -> float:
    """What :func:`statistics.median` gives (the middle value, or the mean of the two middle ones),
    by a partial sort in numpy."""
    v = np.asarray(values, dtype=np.float64)
    mid = len(v) // 2
    if len(v) % 2:
        return float(np.partition(v, mid)[mid])
    part = np.partition(v, [mid - 1, mid])
    return float((part[mid - 1] + part[mid]) / 2)


@dataclass
class ServerRow:
    """One server's figures."""

    url: str
    updates: int = 0
    failed: int = 0
    """Its failed updates (``client.error``) and the collector's failed samples ([collect]
    rollout.failed url=): in a report of one kind, that kind's (both: :attr:`updates_failed`,
    :attr:`samples_failed`)."""
    retried: int = 0
    """Its updates answered after more than one attempt (their wall time counts from the first
    attempt: :data:`~prime_rl.analysis.updates.RETRY_GAP_MS`); one never answered is
    :attr:`unanswered` alone, retried or not (no answer, no wall time to tell)."""
    wall_ms: Sequence[float] = field(default_factory=list)
    """Its updates' values, in their order (from the join: numpy arrays, 8 bytes a value)."""
    rpc_ms: Sequence[float] = field(default_factory=list)
    queue_ms: Sequence[float] = field(default_factory=list)
    retries: Counter = field(default_factory=Counter)
    """Retried requests to it by ``retry.<status>``: the orchestrator's ([gen] request.retry) and the
    collector's ([collect] request.retry) when both logs are analysed (apart:
    :attr:`orchestrator_retries`, :attr:`sample_retries`)."""
    samples: int = 0
    """Samples the collector got from this server ([collect] rollout.done url=)."""
    gen_ms: Sequence[float] = field(default_factory=list)
    """Their generation times."""
    samples_failed: int = 0
    """Of :attr:`failed`, the collector's samples."""
    sample_retries: Counter = field(default_factory=Counter)
    """Of :attr:`retries`, the collector's."""
    unanswered: int = 0
    """Its updates never answered (:func:`~prime_rl.analysis.updates.unanswered`): those the
    orchestrator died waiting for (sent before its last restart:
    :func:`~prime_rl.analysis.updates.died_waiting`; the stages count them up to the crash) and those
    still waiting where the logs end; not in :attr:`updates` nor in the value lists."""
    _medians: dict[str, float | None] = field(default_factory=dict, repr=False, compare=False)

    @property
    def updates_failed(self) -> int:
        """Of :attr:`failed`, the updates."""
        return self.failed - self.samples_failed

    @property
    def orchestrator_retries(self) -> Counter:
        """Of :attr:`retries`, the orchestrator's."""
        return self.retries - self.sample_retries

    def median(self, key: str) -> float | None:
        """The median of ``wall_ms``, ``rpc_ms``, ``queue_ms`` or ``gen_ms`` (None: no values),
        computed once (a collector run has millions of gen_ms)."""
        if key not in self._medians:
            values = getattr(self, key)
            self._medians[key] = _median(values) if len(values) else None
        return self._medians[key]

    def to_dict(self) -> dict[str, object]:
        return {
            "url": self.url,
            "updates": self.updates,
            "failed": self.failed,
            "retried": self.retried,
            "wall_ms_p50": self.median("wall_ms"),
            "rpc_ms_p50": self.median("rpc_ms"),
            "queue_ms_p50": self.median("queue_ms"),
            "retries": dict(self.retries),
            "sample_retries": dict(self.sample_retries),
            "samples": self.samples,
            "samples_failed": self.samples_failed,
            "gen_ms_p50": self.median("gen_ms"),
            "unanswered": self.unanswered,
        }


def retry_counts(retries: Counter) -> tuple[int, int]:
    """(429s, the other retries) of a server's retries by ``retry.<status>``."""
    n429 = retries.get("retry.429", 0)
    return n429, sum(retries.values()) - n429


def server_rows(d: Collected) -> list[ServerRow]:
    """One row per server URL seen in [weights] or [gen] request.retry lines, by URL (made once;
    callers read the rows, they do not change them)."""
    return d.memo("server_rows", lambda: _server_rows(d))


def _server_rows(d: Collected) -> list[ServerRow]:
    rows: dict[str, ServerRow] = {}
    if d.updates:  # per URL, column-wise: each value list in the updates' order
        url = pl.col("url")
        # the updates never answered are counted apart, their values left out: those the orchestrator
        # died waiting for (before its last restart) and those still waiting where the logs end
        dead = pl.col("dead")
        kept = lambda c: c.filter(~dead)  # noqa: E731
        per_url = (
            d.update_frame()
            .filter(url.is_not_null() & (url != ""))
            .with_columns(dead=never_answered())
            .group_by("url", maintain_order=True)
            .agg(
                n=(~dead).sum(),
                failed=pl.col("failed").sum(),  # an unanswered update neither failed nor was retried
                retried=pl.col("retried").sum(),
                wall=kept(pl.col("wall")).drop_nulls(),
                rpc=kept(pl.coalesce("rpc", "server_rpc")).drop_nulls(),
                queue=kept(pl.col("queue")).drop_nulls(),
                unanswered=dead.sum(),
            )
        )
        values = [per_url.get_column(name) for name in ("wall", "rpc", "queue")]
        for k, (u, n, failed, retried, unanswered) in enumerate(
            per_url.select("url", "n", "failed", "retried", "unanswered").iter_rows()
        ):
            # each value list as an array: a long run's as Python floats would cost 32 bytes a value
            row = ServerRow(u, n, failed, retried, *(v[k].to_numpy() for v in values))
            row.unanswered = unanswered
            rows[u] = row
    for url, counts in d.server_counts.items():
        row = rows.setdefault(url, ServerRow(url))
        row.samples_failed = counts.get("failed", 0)  # only [collect] rollout.failed counts these
        row.failed += row.samples_failed
        for key, n in counts.items():  # the collector's retries (collect.retry.429) in both counters
            if key != "failed":
                retry = key.removeprefix(SAMPLE_RETRY)
                row.retries[retry] += n
                if retry != key:
                    row.sample_retries[retry] += n
    for url, gen in d.server_gen_ms.items():
        row = rows.setdefault(url, ServerRow(url))
        row.samples, row.gen_ms = len(gen), gen
    return [rows[k] for k in sorted(rows)]


def waited_for(d: Collected, url: str | Sequence[str], key: str) -> float:
    """What every update waited for ``url`` (ms; or for any of several servers): per update
    (:func:`~prime_rl.analysis.stages.update_group`) with ``key`` (``wall_ms`` or ``rpc_ms``, the
    client's) from those servers and from another, how far their slowest is beyond the others'
    slowest (0 when it is not), summed in order. Their updates that failed (``client.error``) are
    left out: that wait is the failed attempts' (:func:`~prime_rl.analysis.rules.failed_attempts`),
    not a slow answer's; the others' count whatever they were (a failed one was waited for too)."""
    value = pl.col({"wall_ms": "wall", "rpc_ms": "rpc"}[key])
    urls = [url] if isinstance(url, str) else list(url)
    of_them = pl.col("url").is_in(urls).fill_null(False)
    mine = of_them & ~pl.col("failed").fill_null(False)
    per_update = (
        d.update_frame()
        .group_by(*update_group(), maintain_order=True)
        .agg(mine=value.filter(mine).max(), others=value.filter(~of_them).max())
    )
    waited = 0.0
    for slow, others in per_update.select("mine", "others").iter_rows():
        if slow is not None and others is not None:
            waited += max(0.0, slow - others)
    return waited


@dataclass(frozen=True)
class _Answered:
    """One server's weight updates that were answered (``client.done``: neither failed nor left
    unanswered), for :func:`slow_server`."""

    updates: int
    retried: int
    has_wall: bool
    """Some of them have a client wall time."""
    wall_ms: float | None
    """Their median ``wall_ms`` (None: none has one)."""
    rpc_ms: float | None
    """Their median ``rpc_ms`` (the server's when the client gives none)."""


def _answered(d: Collected) -> dict[str, _Answered]:
    """Each server's answered weight updates (by URL): an update that failed (``client.error``)
    never loaded and has no answer's time to judge (the time it cost is the failed attempts' and the
    warning names the server), one never answered neither."""
    if not d.updates:
        return {}
    url = pl.col("url")
    per_url = (
        d.update_frame()
        .filter(url.is_not_null() & (url != "") & ~pl.col("failed").fill_null(False) & ~never_answered())
        .group_by("url", maintain_order=True)
        .agg(
            n=pl.len(),
            retried=pl.col("retried").sum(),
            walls=pl.col("wall").is_not_null().sum(),
            wall=pl.col("wall").median(),
            rpc=pl.coalesce("rpc", "server_rpc").median(),
        )
    )
    return {
        u: _Answered(n, retried, walls > 0, wall, rpc)
        for u, n, retried, walls, wall, rpc in per_url.select(
            "url", "n", "retried", "walls", "wall", "rpc"
        ).iter_rows()
    }


def stale_servers(d: Collected) -> list[tuple[str, int, int]]:
    """(url, its updates that failed in a row at the end, its updates) of each server whose last
    weight update failed (``client.error``), in time order, by URL: it kept the weights it had
    before them, those it was started with when every update to it failed, while the trainer
    moved on (the health loop's updates count: one that loaded weights loaded them). The updates
    never answered are left out (no answer says whether they loaded)."""
    if not d.updates:
        return []
    col = pl.col
    failed = col("failed").fill_null(False)
    last_ok = col("start").filter(~failed).max()
    rows = (
        d.update_frame()
        .filter(col("url").is_not_null() & (col("url") != "") & ~never_answered())
        .group_by("url")
        .agg(n=pl.len(), trailing=(failed & (col("start") > last_ok).fill_null(True)).sum())
        .filter(col("trailing") > 0)
        .sort("url")
    )
    return list(rows.select("url", "trailing", "n").iter_rows())


def stale_said(stale: Sequence[tuple[str, int, int]]) -> str:
    """What :func:`stale_servers` found, as a clause (empty without any)."""
    parts = [
        f"every update to {u} failed ({n}): it never loaded new weights, so what it served all run came "
        "from the weights it was started with"
        if k == n
        else f"the last {k} of the {n} updates to {u} failed: it served the weights of its last loaded update "
        "from then on"
        for u, k, n in stale
    ]
    return "; ".join(parts)


def slow_server(d: Collected, th: Thresholds) -> Finding | None:
    """The servers markedly slower than their peers: each whose median update wall_ms (rpc_ms when
    the client gives no wall time) is at least ``server_slow_ratio`` times the peers' (the median of
    the faster half's medians: with two slow servers of four, each is named, the other slow one is
    no peer), over at least ``server_min_updates`` answered updates (one that failed is no answer to
    time: :func:`_answered`). Every update waits for the slowest server, so the share is the time
    the others spent waiting for them. Else, those slow to a first token (:func:`_slow_first_token`).
    A collector's servers slow to generate are :func:`slow_generation`'s, a rule of their own, so a
    trio's logs analysed with the collector's hide neither."""
    answered = {u: a for u, a in _answered(d).items() if a.updates >= th.server_min_updates}
    if len(answered) < 2:
        return _slow_first_token(d, th)
    key = "wall_ms" if all(a.has_wall for a in answered.values()) else "rpc_ms"
    medians = {u: m for u, a in answered.items() if (m := getattr(a, key)) is not None}
    if len(medians) < 2:
        return _slow_first_token(d, th)
    peers, ratios, slow = _slower(medians, th.server_slow_ratio)
    if not slow:
        return _slow_first_token(d, th)
    waited = waited_for(d, slow, key)
    run = d.run_ms
    retried = [
        f"{answered[u].retried} of the {answered[u].updates} updates of {u} were retried"
        for u in slow
        if answered[u].retried
    ]
    retried_note = (
        f"; {'; '.join(retried)} (their wall time counts from the first attempt: the failed ones and the waits "
        "between them)"
        if retried and key == "wall_ms"
        else ""
    )
    others = len(medians) - len(slow)
    where = ", ".join(f"{medians[u]:.0f} ms on {u}" for u in slow)
    return Finding(
        kind="slow_server",
        title=_slow_title(slow, ratios, "update"),
        evidence=f"median update {key} {where} vs {peers:.0f} ms on the {others} other server(s) "
        f"(>= server_slow_ratio {th.server_slow_ratio:g}x); every update waits for "
        f"{'it' if len(slow) == 1 else 'them'}, {waited / 1000:.1f} s in all{retried_note}",
        share=waited / run if run else 0.0,
        next=(
            *(
                (
                    "Read why their attempts failed: the orchestrator log's warnings \"[weights][<trace id>] "
                    f'/update_weights to {slow[0]} failed (...)".',
                )
                if retried
                else ()
            ),
            f"Check {' and '.join(slow)}'s host: storage it loads weights from, GPU health, other load on it.",
            "Take it out of the pool (orchestrator client.base_url) until it is fixed.",
        ),
        thresholds=("server_slow_ratio", "server_min_updates"),
        # its updates' retries are why the updates fail to finish: named first, with the server
        explains="failed_attempts" if retried else "slow_reload",
    )


def _slow_title(slow: list[str], ratios: dict[str, float], what: str) -> str:
    """The finding's title naming the ``slow`` servers with their ratios, slow to ``what``."""
    if len(slow) == 1:
        return f"Slow server: {slow[0]} takes {ratios[slow[0]]:.1f}x as long as its peers to {what}"
    named = ", ".join(f"{u} ({ratios[u]:.1f}x)" for u in slow)
    return f"Slow servers: {named} take that many times as long as their peers to {what}"


def _slower(values: dict[str, float], ratio: float) -> tuple[float, dict[str, float], list[str]]:
    """(the peers' value, each server's ratio to it, the servers at ``ratio`` or more, slowest
    first) of each server's ``values``: the peers' value is the median of the faster half's, so
    that with two slow servers of four each is measured against the two that are not. At most half
    the servers are slow, the slowest, and of servers equally slow all or none: of five at 20, 20,
    100, 100 and 100 ms the two are fast, not three slow; of 10, 10, 25, 25 and 100 ms the last is
    slow, not the 25 ms pair with it."""
    ranked = sorted(values.values())
    peers = statistics.median(ranked[: (len(ranked) + 1) // 2])
    if peers <= 0:  # the peers took no time (a server that reports none): nothing to be a multiple of
        return peers, {}, []
    ratios = {u: v / peers for u, v in values.items()}
    slow = sorted((u for u, r in ratios.items() if r >= ratio), key=lambda u: -values[u])
    half = len(values) // 2
    if len(slow) > half:  # the first one left out, and any as slow as it, are not slow
        slow = [u for u in slow[:half] if values[u] > values[slow[half]]]
    return peers, ratios, slow


def _slow_first_token(d: Collected, th: Thresholds) -> Finding | None:
    """A trio's servers that answer markedly later than their peers: each whose mean time to first
    token (its /metrics, ``[server]`` lines) is ``server_slow_ratio`` times its peers', over at
    least ``server_min_updates`` scrapes that saw one each. Its share is an estimate of the time
    that costs the run (:func:`_first_token_cost`). Servers that :func:`slow_generation` names
    (a collector's, slow to generate) are named there once, by their samples' time: not here."""
    means = {
        url: s.weighted_mean(s.ttft_ms)
        for url, s in d.server_load.items()
        if len(s.ttft_ms) >= th.server_min_updates
    }
    means = {u: m for u, m in means.items() if m is not None}
    if len(means) < 2:
        return None
    peers, ratios, slow = _slower(means, th.server_slow_ratio)
    if not slow or set(slow) <= set(_generation_slow(d, th)[2]):
        return None
    run = d.run_ms
    extra = max(means[u] for u in slow) - peers
    cost, how = _first_token_cost(d, extra)
    named = ", ".join(f"{means[u]:.0f} ms on {u}" for u in slow)
    return Finding(
        kind="slow_server",
        title=_slow_title(slow, ratios, "a first token"),
        evidence=f"mean time to first token {named} vs {peers:.0f} ms on the {len(means) - len(slow)} other "
        f"server(s) (their /metrics, [server] lines; >= server_slow_ratio {th.server_slow_ratio:g}x): the requests "
        f"sent there wait about {extra:.0f} ms longer for a first token{how}",
        share=min(1.0, cost / run) if run else 0.0,
        next=(
            f"Check {' and '.join(slow)}: its queue and KV cache (Server load above), GPU health, other load on it.",
            "Take it out of the pool (orchestrator client.base_url), or give it fewer requests, until it is fixed.",
        ),
        thresholds=("server_slow_ratio", "server_min_updates"),
        explains="generation_bound",
    )


def _first_token_cost(d: Collected, extra_ms: float) -> tuple[float, str]:
    """(ms, how it is estimated, for the evidence) the run loses to requests that wait ``extra_ms``
    longer for a first token at a slow server. The requests of a batch are in flight together and
    the batch waits for its last answer, so a batch takes about ``extra_ms`` longer, once for each
    turn of an episode (a multi-turn episode's turns wait one after the other; the mean of its
    ``[env] episode.done turns=``, else 1), and at most its own ``dur_ms``: not the batch's whole
    time, which is mostly decoding. An estimate from means: the ``[server]`` line gives no batch's
    slowest request. No ``[gen] batch.done`` (a collector's run): nothing is estimated (0)."""
    batches = d.series["gen_dur_ms"]
    if not batches:
        return 0.0, ""
    turns = d.stat("episode_turns", "mean") or 1.0
    per_batch = extra_ms * turns
    cost = sum(min(per_batch, b) for b in batches)
    each = f"{extra_ms:.0f} ms x {turns:.1f} turns per episode" if turns != 1.0 else f"{extra_ms:.0f} ms"
    return cost, (
        f"; a batch waits for its last answer, so each of the {len(batches)} batches takes about {each} longer "
        f"(at most its dur_ms): ~{cost / 1000:.1f} s of the run (estimated from the means)"
    )


def _generation_slow(
    d: Collected, th: Thresholds
) -> tuple[float, dict[str, float], list[str], dict[str, ServerRow]]:
    """(the peers' median gen_ms, each server's ratio to it, the slow servers, the rows judged) of a
    collector's servers with at least ``server_min_updates`` samples each (:func:`_slower`); no
    slow server when fewer than two are judged."""
    rows = {r.url: r for r in server_rows(d) if r.samples >= th.server_min_updates}
    medians = {u: m for u, r in rows.items() if (m := r.median("gen_ms")) is not None}
    if len(medians) < 2:
        return 0.0, {}, [], rows
    peers, ratios, slow = _slower(medians, th.server_slow_ratio)
    return peers, ratios, slow, rows


def slow_generation(d: Collected, th: Thresholds) -> Finding | None:
    """A collector run's slow servers: each whose median generation time per sample is
    ``server_slow_ratio`` times its peers' (the median of the faster half's medians, as for updates:
    :func:`_slower`), over at least ``server_min_updates`` samples each; with a trio's logs too (its
    own servers' updates are :func:`slow_server`'s). Its share is the time its samples took beyond
    what the peers' median would have taken (its summed gen_ms less its samples times the peers'
    median), over the samples' summed time (``[collect] dur_ms``): the samples share the
    collector's slots (``num_samples_in_parallel``, each freed slot takes the next sample), so its
    sampling time is their summed time over the slots and that part of it is what the slow server
    cost. Not its share of the samples by count: a slow server answers fewer samples, each longer.
    Times the sampling's part of the run (:func:`~prime_rl.analysis.stages.collector_of_run`: a
    trio's logs analysed with the collector's, or a verify pass, make the run longer than the
    sampling)."""
    peers, ratios, slow, by_url = _generation_slow(d, th)
    if not slow:
        return None
    samples = sum(r.samples for r in by_url.values())
    extra = {u: max(0.0, float(np.sum(by_url[u].gen_ms)) - by_url[u].samples * peers) for u in slow}
    busy = d.total("collect_ms") or float(sum(np.sum(r.gen_ms) for r in by_url.values())) or 1.0
    part = min(1.0, sum(extra.values()) / busy)
    where = ", ".join(f"{by_url[u].median('gen_ms'):.0f} ms on {u}" for u in slow)
    answered = "; ".join(
        f"{u} answered {by_url[u].samples} of {samples} samples, which took {extra[u] / 1000:.1f} s longer in all "
        "than at the peers' median (summed over the samples in flight)"
        for u in slow
    )
    return Finding(
        kind="slow_server",
        title=_slow_title(slow, ratios, "generate"),
        evidence=f"median generation {where} per sample vs {peers:.0f} ms on the {len(ratios) - len(slow)} other "
        f"server(s) (>= server_slow_ratio {th.server_slow_ratio:g}x); {answered}{of_the_samples(d, part)}",
        share=part * collector_of_run(d),
        next=(
            f"Check {' and '.join(slow)}'s host (GPU health, other load, its batch size and KV cache in [server] "
            "lines).",
            "Drop it from --base_urls, or give it a smaller share until it is fixed.",
        ),
        thresholds=("server_slow_ratio", "server_min_updates"),
        explains="collect_generation_bound",
    )


def server_dicts(d: Collected) -> list[dict[str, object]]:
    """The rows for summary.json: every server of the update and retry lines, and of the ``[server]``
    lines, each with its ``load`` from /metrics (None when it was not scraped)."""
    rows = {r.url: r.to_dict() for r in server_rows(d)}
    for url in d.server_load:
        rows.setdefault(url, ServerRow(url).to_dict())
    loads = server_load_dicts(d)
    return [rows[url] | {"load": loads.get(url)} for url in sorted(rows)]


@dataclass(frozen=True)
class _Judged:
    """One server's KV-cache figures against the thresholds."""

    load: ServerLoadSeries
    rate: float | None
    """Preemptions per minute."""
    kv95: float | None
    by_rate: bool
    """More than ``preemptions_per_min``."""
    by_kv: bool
    """``kv_cache_pct`` p95 above ``kv_cache_pct_high``, and a scrape that full found requests waiting."""


def _judged(d: Collected, th: Thresholds) -> list[_Judged]:
    """Every server with at least ``server_min_scrapes`` scrapes, judged."""
    out = []
    for s in d.server_load.values():
        if s.scrapes < th.server_min_scrapes:
            continue
        rate = s.preemptions_per_min()
        kv95 = percentile(s.kv_values(), 0.95)
        full_and_waiting = any(
            kv is not None and kv >= th.kv_cache_pct_high and w > 0
            for kv, w in zip(s.kv_cache_pct, s.waiting, strict=True)
        )
        by_kv = kv95 is not None and kv95 > th.kv_cache_pct_high and full_and_waiting
        out.append(_Judged(s, rate, kv95, rate is not None and rate > th.preemptions_per_min, by_kv))
    return out


def _evidence(s: ServerLoadSeries, rate: float | None, kv95: float | None, th: Thresholds) -> str:
    parts = []
    if rate is not None:
        cmp = ">" if rate > th.preemptions_per_min else "<="
        parts.append(
            f"{s.preempted():.0f} preemptions in {s.covered_s() / 60:.1f} min ({rate:.1f}/min {cmp} "
            f"preemptions_per_min {th.preemptions_per_min:g})"
        )
    if kv95 is not None:
        cmp = ">" if kv95 > th.kv_cache_pct_high else "<="
        parts.append(
            f"kv_cache_pct p95 {kv95:.0f}% ({cmp} kv_cache_pct_high {th.kv_cache_pct_high:g}%) with up to "
            f"{max(s.waiting, default=0):.0f} requests waiting"
        )
    queue = s.weighted_mean(s.queue_ms)
    if queue is not None:
        parts.append(f"queue time mean {queue:.0f} ms")
    covered = s.covered_s()
    pressure = s.pressure_s(th.kv_cache_pct_high)
    if covered:
        parts.append(f"under pressure {pressure:.0f} s of {covered:.0f} s scraped")
    return f"{s.url}: " + "; ".join(parts)


def kv_cache_pressure(d: Collected, th: Thresholds) -> Finding | None:
    """A server runs out of KV cache: over at least ``server_min_scrapes`` scrapes it preempts more
    than ``preemptions_per_min`` requests a minute, or its ``kv_cache_pct`` p95 is above
    ``kv_cache_pct_high`` while requests wait in a scrape that found it that full. The share is
    the time under pressure (intervals with a preemption, or ending full with requests waiting)
    of the worst server, over the run. It explains generation time, and is ranked above it."""
    fired = [j for j in _judged(d, th) if j.by_rate or j.by_kv]
    if not fired:
        return None
    fired.sort(key=lambda j: -j.load.pressure_s(th.kv_cache_pct_high))
    worst = fired[0].load
    base_s = d.run_seconds or worst.covered_s()
    pressure = worst.pressure_s(th.kv_cache_pct_high)
    evidence = _evidence(worst, fired[0].rate, fired[0].kv95, th)
    if len(fired) > 1:
        evidence += f"; also under pressure: {', '.join(j.load.url for j in fired[1:])}"
    names = (("preemptions_per_min",) if any(j.by_rate for j in fired) else ()) + (
        ("kv_cache_pct_high",) if any(j.by_kv for j in fired) else ()
    )
    return Finding(
        kind="kv_cache_pressure",
        title=f"KV-cache pressure / preemption: {worst.url} runs out of KV cache, requests are preempted "
        "or wait for room",
        evidence=evidence,
        share=min(1.0, pressure / base_s) if base_s else 0.5,
        next=(
            "Give the server more KV cache: raise --gpu-memory-utilization (--kv-cache-memory-bytes on CPU), "
            "or a KV-cache dtype of fewer bytes (--kv-cache-dtype fp8).",
            "Run fewer sequences at once: lower vLLM's --max-num-seqs, or the orchestrator's max_inflight "
            "(the collector's num_samples_in_parallel).",
            "Shorten the sequences (max_tokens, seq_len / --max-model-len) or add servers.",
        ),
        thresholds=names,
        explains="collect_generation_bound" if d.is_collector_run else "generation_bound",
    )


def server_load_dicts(d: Collected) -> dict[str, dict[str, object]]:
    """Each server's load for summary.json, by URL."""
    return {url: s.to_dict() for url, s in sorted(d.server_load.items())}


def server_load_section(d: Collected) -> list[str]:
    """The SUMMARY.md table of each server's load from its ``[server]`` lines (empty without any)."""
    if not d.server_load:
        return []

    def f(v: object, digits: int = 0) -> str:
        return "-" if v is None else f"{v:.{digits}f}"

    lines = [
        "",
        "## Server load (from /metrics)",
        "",
        "Scraped from each server's `/metrics` (`[server] metrics` lines); the queue time is the mean over the "
        "requests that finished, the TTFT over those that got their first token, between scrapes.",
        "",
        "| server | scrapes | running p50 / max | waiting p50 / max | kv_cache_pct p50 / p95 / max | "
        "preemptions (per min) | queue_ms mean | ttft_ms mean | scrape errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for url, s in sorted(d.server_load.items()):
        x = s.to_dict()
        if not s.scrapes:
            lines.append(
                f"| {md_cell(url)} | 0 | - | - | - | - | - | - | {md_cell(f'{s.errors}' + ('; off: ' + s.off if s.off else ''))} |"
            )
            continue
        lines.append(
            f"| {md_cell(url)} | {s.scrapes} | {f(x['running_p50'])} / {f(x['running_max'])} | "
            f"{f(x['waiting_p50'])} / {f(x['waiting_max'])} | {f(x['kv_cache_pct_p50'])} / "
            f"{f(x['kv_cache_pct_p95'])} / {f(x['kv_cache_pct_max'])} | {f(x['preemptions'])} "
            f"({f(x['preemptions_per_min'], 1)}) | {f(x['queue_ms_mean'])} | {f(x['ttft_ms_mean'])} | "
            f"{md_cell(f'{s.errors}' + ('; off: ' + s.off if s.off else ''))} |"
        )
    return lines
