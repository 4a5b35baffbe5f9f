"""``collect-rollouts --ray`` without a Ray cluster: the option's parsing, a worker (the actor's
class, run directly in this event loop against the fake server), and the driver's bookkeeping
with stand-in worker handles: a pair is handed to one worker at a time, written once, handed out
again when its worker is lost, and given up after ``ray.max_pair_losses`` losses. Runs on a real
two-node cluster: tests/integration/test_collect_ray.py and tests/faults/test_collect_ray_faults.py."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from types import SimpleNamespace

import pytest
from tests.support.collect import collect_config, write_tasks
from tests.support.http_server import LocalTestServer, Reply

from prime_rl.collect.config import CollectConfig, DiagnoseConfig, ray_argv
from prime_rl.collect.limiter import AdaptiveLimiter
from prime_rl.collect.ray_driver import (
    ClusterError,
    RayCollector,
    _check_reachable,
    _Node,
    _Worker,
    import_ray,
)
from prime_rl.collect.ray_worker import CollectWorker, set_share
from prime_rl.collect.runner import CollectError
from prime_rl.collect.store import AppendWriter, iter_records
from prime_rl.config import ConfigError, load_config
from prime_rl.dev.server import free_port
from prime_rl.envs.base import task_messages

BASE = ["--input", "tasks.jsonl", "--output", "out.jsonl"]


def ray_cfg(*args: str, model=CollectConfig):
    return load_config(model, [*BASE, *ray_argv(list(args))])[0]


@pytest.mark.parametrize(
    ("args", "enabled", "address"),
    [
        ([], False, None),
        (["--ray"], True, None),
        (["--ray", "10.0.0.1:6379"], True, "10.0.0.1:6379"),
        (["--ray=auto"], True, "auto"),
        (["--ray", "local", "--limit", "3"], True, "local"),
        (["--ray", "--limit", "3"], True, None),
        (["--ray", '{"address": "h:1", "workers_per_node": 2}'], True, "h:1"),
        (["--no-ray"], False, None),
        (["--ray.address", "h:1"], True, "h:1"),
    ],
)
def test_ray_takes_an_optional_address(args, enabled, address):
    cfg = ray_cfg(*args)
    assert (cfg.ray.enabled, cfg.ray.address) == (enabled, address)


def test_ray_options_are_checked():
    cfg = ray_cfg("--ray", "--ray.node_base_urls", '{"10.0.0.2": ["http://10.0.0.2:8000"]}')
    assert cfg.ray.node_base_urls == {"10.0.0.2": ["http://10.0.0.2:8000"]}
    with pytest.raises(ConfigError, match="Ray Client"):
        ray_cfg("--ray", "ray://head:10001")
    with pytest.raises(ConfigError, match="no base URL for node n1"):
        ray_cfg("--ray", "--ray.node_base_urls", '{"n1": []}')
    with pytest.raises(ConfigError, match="diagnose runs in one process"):
        ray_cfg("--ray", model=DiagnoseConfig)


def test_no_ray_or_no_cluster_is_said_at_once(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # as if not installed
    with pytest.raises(CollectError, match=r"pip install 'prime-rl\[ray\]'"):
        import_ray()
    with pytest.raises(ClusterError, match="cannot connect to the Ray cluster at 127.0.0.1:"):
        _check_reachable(f"127.0.0.1:{free_port()}")  # nothing listens: no minutes of ray.init retries
    _check_reachable("auto")  # ray.init finds it


def test_a_new_share_keeps_the_limiters_cut():
    lim = AdaptiveLimiter(8)
    set_share(lim, 4, 1)
    assert (lim.maximum, lim.current, lim.min_seen) == (4, 4, 4)  # no cut yet: the share itself
    for _ in range(64):  # a window of nothing but 429s: cut to half
        lim.on_answer(rate_limited=True)
    assert (lim.current, lim.min_seen) == (2, 2)
    set_share(lim, 8, 2)
    assert (lim.maximum, lim.minimum, lim.current, lim.min_seen) == (8, 2, 4, 2)


def pairs(n: int, repeats: int = 1) -> list[tuple]:
    out = []
    for t in range(n):
        row = {"id": f"t{t}", "prompt": f"Say vowels, number {t}."}
        out += [(t, r, row, task_messages(row)) for r in range(repeats)]
    return out


async def drain(worker: CollectWorker, want: int, timeout_s: float = 20.0) -> list[dict]:
    batches: list[dict] = []
    got = 0

    async def read() -> None:
        nonlocal got
        async for batch in worker.stream():
            batches.append(batch)
            got += len(batch["records"]) + len(batch["failures"])
            if got >= want:
                return

    await asyncio.wait_for(read(), timeout_s)
    return batches


def test_a_worker_runs_the_collectors_code_and_streams_what_it_did(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 1)

    async def go(url: str, server: LocalTestServer) -> list[dict]:
        cfg = collect_config(url, tmp_path, "--retry.max_retries", "0")
        worker = CollectWorker(cfg, "w0", [url], own_logs=False)
        info = await worker.start(None, None, 3, 1)
        assert info["params"]["model"] == "m" and info["urls"] == [url]
        server.state.script("/v1/chat/completions", Reply(500))  # the first request fails for good
        await worker.submit(pairs(10, repeats=2))
        try:
            return await drain(worker, 20)
        finally:
            await worker.close()

    with LocalTestServer() as server:
        server.state.default_delay_s = 0.01
        batches = asyncio.run(go(server.base_url, server))
        assert max(n for _, n in _concurrency(server)) <= 3  # its share
    records = [r for b in batches for r in b["records"]]
    failures = [f for b in batches for f in b["failures"]]
    assert len(failures) == 1 and failures[0]["kind"] == "ServerError"
    done = Counter((r["task_index"], r["repeat_index"]) for r in records + failures)
    assert done == Counter({(t, r): 1 for t in range(10) for r in range(2)})
    assert all(r["reward"] == 0.0 and r["response"]["text"] == "x" * 6 for r in records)
    logs = [m for b in batches for _, m, _ in b["logs"]]
    assert sum("rollout.done" in m for m in logs) == 19 and sum("rollout.failed" in m for m in logs) == 1
    stats = batches[-1]["stats"]
    assert stats["written"] == 19 and stats["failed"] == 1 and stats["maximum"] == 3


def _concurrency(server: LocalTestServer) -> list[tuple[float, int]]:
    """(time, requests being answered) at each arrival and answer of a completion, from the log."""
    events = [(t, 1) for p, t, _ in server.state.seen if p.endswith("completions")]
    events += [(t, -1) for t, _, _ in server.state.answered]
    level, out = 0, []
    for t, d in sorted(events):
        level += d
        out.append((t, level))
    return out


async def _started_worker(url: str, tmp_path, share: int) -> CollectWorker:
    """A worker started as the driver starts a later one (the run's parameters given), with ``share``."""
    worker = CollectWorker(collect_config(url, tmp_path), "w1", [url], own_logs=False)
    await worker.start(None, {"model": "m", "max_output_tokens": 6, "temperature": 1.0}, share, 1)
    return worker


def test_a_pause_from_another_worker_holds_this_ones_requests(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 1)

    async def go(url: str) -> float:
        worker = await _started_worker(url, tmp_path, share=2)
        await worker.pause(0.5)
        start = asyncio.get_running_loop().time()
        await worker.submit(pairs(2))
        try:
            await drain(worker, 2)
        finally:
            await worker.close()
        return asyncio.get_running_loop().time() - start

    with LocalTestServer() as server:
        took = asyncio.run(go(server.base_url))
    assert took >= 0.45


def test_a_pause_that_comes_after_requests_were_admitted_holds_them_before_they_are_sent(tmp_path):
    # a loaded CI host did not run a worker for 2.2 s: when it ran again, the slots freed meanwhile
    # went to 3 requests before the pause that had arrived meanwhile was applied, and they went out
    write_tasks(tmp_path / "tasks.jsonl", 1)

    async def go(url: str) -> float:
        worker = await _started_worker(url, tmp_path, share=3)
        start = asyncio.get_running_loop().time()
        await worker.submit(pairs(3))
        await asyncio.sleep(0)  # the dispatcher admits the three; none is sent yet
        assert worker.c.limiter.inflight == 3
        await worker.pause(0.5)
        try:
            await drain(worker, 3)
        finally:
            await worker.close()
        return asyncio.get_running_loop().time() - start

    with LocalTestServer() as server:
        took = asyncio.run(go(server.base_url))
        sent = [t for p, t, _ in server.state.seen if p.endswith("completions")]
    assert took >= 0.45 and len(sent) == 3


class _Method:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def remote(self, *args):
        self.calls.append(args)


class _Handle:
    def __init__(self) -> None:
        self.submit, self.set_share, self.pause, self.scrape = _Method(), _Method(), _Method(), _Method()


def driver(tmp_path, *extra: str) -> RayCollector:
    write_tasks(tmp_path / "tasks.jsonl", 10)
    cfg = collect_config("http://127.0.0.1:9", tmp_path, "--ray", *extra)
    d = RayCollector(cfg)
    d.ray = SimpleNamespace(kill=lambda handle, no_restart=True: None)
    d.wake = asyncio.Event()
    d.writer = AppendWriter(tmp_path / "out.jsonl")
    d.failures = AppendWriter(tmp_path / "out_failures.jsonl", lazy=True)
    return d


def worker(d: RayCollector, name: str, urls=("http://a",), node="n0") -> _Worker:
    w = _Worker(name, _Handle(), _Node(node, "10.0.0.1", "host"), tuple(urls), pid=1, stats={"x": 1})
    d.workers[name] = w
    return w


def batch(*records: dict, failures=(), pauses=()) -> dict:
    return {
        "records": list(records),
        "failures": list(failures),
        "logs": [],
        "pauses": list(pauses),
        "stats": {},
    }


def rec(t: int, r: int = 0) -> dict:
    return {
        "task_index": t,
        "repeat_index": r,
        "usage": {"input_tokens": 3, "output_tokens": 6},
        "reward": 1.0,
    }


def test_the_driver_writes_each_pair_once_and_hands_a_lost_workers_pairs_out_again(tmp_path):
    d = driver(tmp_path, "--ray.window", "4", "--ray.max_pair_losses", "2")
    a, b = worker(d, "w0"), worker(d, "w1")
    d._rebalance()
    todo = {t: [0] for t in range(10)}
    source = d._pairs(todo)
    d._fill(source)
    assert [len(c[0]) for c in a.handle.submit.calls] == [4] and len(b.handle.submit.calls) == 1
    assert len(d.outstanding) == 8 and a.outstanding == b.outstanding == 4
    handed_to_a = [p[0] for p in a.handle.submit.calls[0][0]]

    d._apply(a, batch(rec(handed_to_a[0])))
    d._apply(b, batch(rec(handed_to_a[0])))  # the same pair again (it cannot come twice, but if it did)
    assert d.result.written == 1 and d.dropped == 1 and a.outstanding == 3

    d._lost(a, "ActorDiedError")  # its 3 unfinished pairs go back
    assert a.name not in d.workers and len(d.requeued) == 3 and len(d.outstanding) == 4
    d._fill(source)  # b has no room; requeued pairs wait
    d._apply(b, batch(*(rec(p[0]) for p in b.handle.submit.calls[0][0])))
    d._fill(source)
    again = [p[0] for p in b.handle.submit.calls[1][0]]
    assert again[:3] == handed_to_a[1:]  # handed out again first

    d._lost(b, "node lost")  # lost twice: given up on, recorded as failures
    assert d.result.failed == 3 and len(d.requeued) == 1  # a's three, lost twice; b's own one goes back
    d.failures.close()
    given_up = [f for _, f in iter_records(tmp_path / "out_failures.jsonl")]
    assert {f["task_index"] for f in given_up} == set(handed_to_a[1:])
    assert all(f["kind"] == "WorkerLost" and "lost with 2 Ray workers" in f["error"] for f in given_up)
    d.writer.close()
    written = Counter(r["task_index"] for _, r in iter_records(tmp_path / "out.jsonl"))
    assert set(written.values()) == {1} and len(written) == 5


def test_workers_of_one_set_of_servers_split_the_parallelism_and_share_pauses(tmp_path):
    d = driver(tmp_path, "--parallel", "5")
    a, b = worker(d, "w0"), worker(d, "w1")
    c = worker(d, "w2", urls=("http://c",), node="n1")
    d._rebalance()
    assert (a.share, b.share, c.share) == (3, 2, 5)
    assert a.handle.set_share.calls[-1][:2] == (3, 1) and c.handle.set_share.calls[-1][:2] == (5, 1)
    assert a.window == 2 * 3 + 2 * 0 + 16  # verify.workers 0
    d._apply(a, batch(pauses=[(2.0, 429)]))
    assert b.handle.pause.calls == [(2.0,)] and not a.handle.pause.calls and not c.handle.pause.calls
    # each server's /metrics is scraped by one worker
    assert (a.scrapes, b.scrapes, c.scrapes) == (("http://a",), (), ("http://c",))
    d._lost(b, "gone")
    assert a.share == 5 and a.handle.set_share.calls[-1][:2] == (5, 1)
    d._lost(a, "gone")
    assert not d.workers["w2"].handle.pause.calls and c.scrapes == ("http://c",)
    e = worker(d, "w3")
    d._rebalance()
    assert e.scrapes == ("http://a",) and [c[0] for c in e.handle.scrape.calls] == [["http://a"]]


class _Scraper:
    """Stands in for the /metrics scraper: records what it scrapes; closing takes a while."""

    running: list[_Scraper] = []

    def __init__(self, urls, cfg, headers) -> None:
        self.urls = list(urls)

    def start(self) -> None:
        _Scraper.running.append(self)

    async def aclose(self) -> None:
        await asyncio.sleep(0.05)
        _Scraper.running.remove(self)


def test_the_drivers_latest_share_and_scrape_win_in_whatever_order_ray_runs_them(tmp_path, monkeypatch):
    # Ray runs an async actor's calls in no set order: a CI run saw two workers of one server keep
    # 9 requests in flight with --parallel 6, as if one kept the whole share it had alone
    monkeypatch.setattr("prime_rl.collect.ray_worker.ServerMetricsScraper", _Scraper)
    monkeypatch.setattr(_Scraper, "running", [])
    d = driver(tmp_path, "--parallel", "6")
    a = worker(d, "w1")
    d._rebalance()  # alone: all 6, and a scrapes the server
    worker(d, "w0")
    d._rebalance()  # the older w0 joins: 3 each, and w0 scrapes
    shares, scrapes = a.handle.set_share.calls, a.handle.scrape.calls
    assert [c[:2] for c in shares] == [(6, 1), (3, 1)]
    assert [c[0] for c in scrapes] == [["http://a"], []]

    orders = [("set_share", call) for call in shares] + [("scrape", call) for call in scrapes]

    async def go() -> tuple[set, list[list[str]], list[list[str]]]:
        ends = set()
        for ran in itertools.permutations(orders):  # every order Ray may run a's four calls in
            w = CollectWorker(d.cfg, a.name, ["http://a"], own_logs=False)
            try:
                for method, call in ran:
                    await getattr(w, method)(*call)
                ends.add((w.c.limiter.maximum, tuple(tuple(s.urls) for s in _Scraper.running)))
            finally:
                await w.close()
        overlapped = CollectWorker(d.cfg, a.name, ["http://a"], own_logs=False)
        try:
            # in order, but the second runs while the first closes the scraper before it
            await overlapped.scrape(["http://old"], 0)
            await asyncio.gather(*(overlapped.scrape(*call) for call in scrapes))
            after_both = [s.urls for s in _Scraper.running]
            await overlapped.scrape(["http://a"], scrapes[-1][1] + 1)  # a newer order still counts
            return ends, after_both, [s.urls for s in _Scraper.running]
        finally:
            await overlapped.close()

    ends, after_both, after_newer = asyncio.run(go())
    assert ends == {(3, ())}  # the share of two workers, and w0 scrapes the server
    assert after_both == [] and after_newer == [["http://a"]]
    assert not _Scraper.running  # closing the worker stops it


def test_a_worker_bug_stops_the_run(tmp_path):
    d = driver(tmp_path)
    a = worker(d, "w0")
    d._apply(a, {**batch(), "fatal": "worker w0: KeyError: 'x'"})
    assert "a Ray worker failed: worker w0: KeyError" in str(d.fatal)
