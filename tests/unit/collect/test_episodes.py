"""collect-rollouts on a multi-turn environment, over real HTTP against the fake server: each later
turn is one more chat request over the whole conversation, and the record carries the trajectory."""

from __future__ import annotations

import asyncio
import json

from tests.support.collect import collect_config, records
from tests.support.http_server import LocalTestServer, ScriptState

from prime_rl.collect.runner import collect


def guess_in_order(bodies: list[dict]):
    """A model that guesses a, b, c, ... one letter per turn (its turn count read from the
    request); the request bodies are kept in ``bodies``."""

    def reply(body: dict) -> str:
        bodies.append(body)
        return "abcdefgh"[sum(m["role"] == "assistant" for m in body["messages"])]

    return reply


def write_games(path, secrets: list[int]) -> None:
    rows = [
        {"id": f"g{i}", "prompt": [{"role": "user", "content": "Guess a letter from a to d."}], "secret": s}
        for i, s in enumerate(secrets)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def run(tmp_path, *flags: str) -> tuple[object, list[dict], list[dict]]:
    bodies: list[dict] = []
    state = ScriptState(reply_text=guess_in_order(bodies))
    with LocalTestServer(state) as server:
        cfg = collect_config(
            server.base_url,
            tmp_path,
            "--env",
            "guess",
            "--env_options",
            '{"high": 4, "max_turns": 4}',
            *flags,
        )
        result = asyncio.run(collect(cfg))
    return result, sorted(records(tmp_path / "out.jsonl"), key=lambda r: r["task_index"]), bodies


def test_each_turn_is_a_request_and_the_record_holds_the_whole_trajectory(tmp_path):
    write_games(tmp_path / "tasks.jsonl", [1, 3])
    result, rows, chats = run(tmp_path)
    assert result.written == 2 and result.failed == 0
    first, third = rows
    assert [m["content"] for m in first["messages"]] == ["Guess a letter from a to d.", "a"]
    assert [m["content"] for m in third["messages"]] == [
        "Guess a letter from a to d.",
        "a",
        "Later.",
        "b",
        "Later.",
        "c",
    ]
    assert third["outcome"] == "done" and len(third["turns"]) == 3
    assert third["reward"] == 0.8 * (1 - 2 / 4) + 0.2 and third["metrics"]["solved"] == 1.0
    assert third["response"]["text"] == "c"
    assert third["usage"]["output_tokens"] == sum(t["usage"]["output_tokens"] for t in third["turns"])
    assert third["timings"]["gen_ms"] == sum(t["gen_ms"] for t in third["turns"])
    # 1 + 3 chat requests in all, the later ones carrying the conversation so far
    assert len(chats) == 4 and max(len(b["messages"]) for b in chats) == 5


def test_the_collectors_turn_limit_ends_an_episode_with_reward_0_and_an_env_failure_is_recorded(tmp_path):
    write_games(tmp_path / "tasks.jsonl", [4])
    _, rows, _ = run(tmp_path, "--episode.max_turns", "2")
    assert rows[0]["outcome"] == "max_turns" and rows[0]["reward"] == 0.0 and len(rows[0]["turns"]) == 2

    (tmp_path / "out.jsonl").unlink()
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "no-secret", "question": "guess"}) + "\n")
    result, rows, _ = run(tmp_path)
    assert result.written == 1 and rows[0]["outcome"] == "env_error"
    assert rows[0]["reward"] is None and "environment raised KeyError" in rows[0]["verify_error"]
