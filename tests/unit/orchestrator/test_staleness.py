"""Every trained sample's staleness, from the policy step the server says produced it.

The orchestrator runs for real against fake inference servers (:mod:`tests.support.policy_server`)
that serve what they were told to load and report it, while a fake trainer publishes
``weights/step_{s+1}`` once ``rollouts/step_s`` is written. Faults: a server that silently loses
its weights (restarted on the base model right after a weight update), one that is down and
recovers, aborted answers, and answers whose policy the server cannot name.
"""

from __future__ import annotations

import json

from tests.support.orchestrator_run import ASYNC_LEVEL, BATCH, MAX_STEPS, run
from tests.support.policy_server import PolicyServer

from prime_rl.paths import RunPaths, rollout_path
from prime_rl.transport.rollouts import read_rollout_batch


def trained_policy_steps(tmp_path) -> dict[int, list[int]]:
    """Per step, the policy step of every sample in its rollout file."""
    out = {}
    for step in range(MAX_STEPS):
        batch = read_rollout_batch(rollout_path(RunPaths(tmp_path).rollouts_dir(step), 0))
        assert batch.num_samples == BATCH and batch.policy_steps is not None
        out[step] = batch.policy_steps.tolist()
    return out


def assert_bounded(policy: dict[int, list[int]]) -> None:
    for step, steps in policy.items():
        assert all(0 <= step - p <= ASYNC_LEVEL for p in steps), (step, steps)


def test_samples_from_a_server_that_lost_its_weights_are_regenerated_not_trained(tmp_path):
    with PolicyServer() as a, PolicyServer() as b:
        b.forget_after = {3, 5}  # restarted right after loading step 3 and 5: serves step 0
        orch, tagged = run(tmp_path, [a, b])
    assert 0 in b.served[b.served.index(0) :]  # it did answer with the base weights after a load
    assert_bounded(trained_policy_steps(tmp_path))
    assert orch.counters["stale_dropped"] >= 1 and orch.counters["policy_mismatch"] >= 1
    # every stale group came from b after it forgot its weights (nothing is produced ahead to go stale)
    assert orch.counters["stale_dropped"] <= b.served.count(0)
    drops = [p for p in tagged if p.tag == "gen" and p.event == "group.drop"]
    assert drops and all(p.fields["reason"] == "stale" for p in drops)
    assert all(int(p.fields["staleness"]) > ASYNC_LEVEL for p in drops)
    rows = [json.loads(x) for x in RunPaths(tmp_path).metrics_file.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(MAX_STEPS))
    assert rows[-1]["stale_dropped"] == orch.counters["stale_dropped"]


def test_a_server_that_was_down_serves_again_only_with_the_current_policy(tmp_path):
    with PolicyServer() as a, PolicyServer() as b:
        # restarts right after loading step 2 and answers 503 to everything for 3 s: long enough
        # that newer weights are published while it is down, however slow the machine
        b.down_after = {2: 3.0}
        # the trainer waits after step 4 until b is back in rotation: the last steps see it serve
        orch, tagged = run(tmp_path, [a, b], hold=lambda orch, step: step == 4 and bool(orch.down))
    assert_bounded(trained_policy_steps(tmp_path))
    reload_at = b.loaded.index(2) + 1
    assert len(b.loaded) > reload_at  # the health loop loaded weights on it before it served again
    # it missed updates while down (whether an update to it failed or a request to it failed
    # first and took it out of rotation is a race) and came back on a newer policy than it lost
    assert b.loaded[reload_at] > 2, b.loaded
    # the health loop's loads say background=true (no step waits for them: the analyzer leaves them
    # off the steps' time); the steps' updates, to both servers, background=false
    sends = [p for p in tagged if (p.tag, p.event) == ("weights", "client.send")]
    background = [p for p in sends if p.fields["background"] == "true"]
    assert background and {p.fields["url"] for p in background} == {b.base_url.rstrip("/")}
    assert {p.fields["url"] for p in sends if p.fields["background"] == "false"} == {
        s.base_url.rstrip("/") for s in (a, b)
    }
    assert orch.down == set()
    after = b.served[b.restarts[0] :]
    assert after, "it never served again after coming back"
    assert 0 not in after, after  # never with the base weights it restarted on
    assert orch.counters["stale_dropped"] == 0


def test_aborted_and_unattributed_answers_are_regenerated_and_counted(tmp_path):
    with PolicyServer() as a, PolicyServer() as b:
        a.abort_next = 2  # two answers (n=2 each) cut off by a weight swap
        b.step = None  # its last swap failed to roll back: it cannot say what it serves
        orch, tagged = run(tmp_path, [a, b])
    assert_bounded(trained_policy_steps(tmp_path))
    assert orch.counters["aborted"] == 4
    assert orch.counters["policy_unknown"] >= 1
    reasons = {p.fields["reason"] for p in tagged if p.tag == "gen" and p.event == "group.drop"}
    assert reasons == {"abort", "policy_unknown"}


def test_a_server_without_the_header_is_trusted_with_one_warning(tmp_path):
    with PolicyServer() as a:
        a.report_policy = False
        orch, _ = run(tmp_path, [a])
        assert len(orch._no_policy_header) == 1
    assert_bounded(trained_policy_steps(tmp_path))
