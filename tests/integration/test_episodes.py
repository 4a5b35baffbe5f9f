"""Multi-turn episodes through the real orchestrator against the real vLLM server: the trainer's
rollout file holds exactly the token ids the server sampled, turn after turn."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from tests.support.orchestrator_run import tagged_lines

from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.orchestrator.loop import Orchestrator
from prime_rl.paths import RunPaths, rollout_path
from prime_rl.transport.rollouts import read_rollout_batch

TOOL_ENV = Path(__file__).resolve().parents[1] / "support" / "tool_env.py"


def run_one_step(server, tmp_path, env: dict, **overrides) -> tuple[Orchestrator, list[dict], list]:
    """Step 0 of a run (no weight update), recording every generation request and answer."""
    cfg = OrchestratorConfig(
        output_dir=tmp_path,
        model=server.model,
        client={"base_urls": [server.base_url]},
        verify={"workers": 1},
        max_steps=1,
        batch_size=4,
        rollouts_per_example=2,
        max_inflight=2,
        env=env,
        episode={"tokenizer": server.model},
        **{"seq_len": 256, **overrides},
    )
    orch = Orchestrator(cfg)
    exchanges: list[dict] = []
    post = orch.pool.post

    async def recording_post(url, full_url, body, timeout_s):
        reply = await post(url, full_url, body, timeout_s=timeout_s)
        exchanges.append({"path": full_url.rsplit("/v1/", 1)[1], "body": body, "data": reply.data})
        return reply

    orch.pool.post = recording_post
    with tagged_lines() as lines:
        asyncio.run(asyncio.wait_for(orch.run(), timeout=300))
    return orch, exchanges, lines


def expected_sequences(exchanges: list[dict]) -> list[tuple[list[int], list[bool]]]:
    """Each episode's ids and loss mask rebuilt from the server's answers alone: the chat answer's
    prompt ids and sampled ids, then for each later turn the completions prompt the server says it
    read (which must extend the episode so far) and the ids it sampled."""
    episodes: list[tuple[list[int], list[bool], int]] = []
    for x in exchanges:
        if x["path"] == "chat/completions":
            prompt = x["data"]["prompt_token_ids"]
            for choice in x["data"]["choices"]:
                episodes.append(
                    (prompt + choice["token_ids"], [True] * len(choice["token_ids"]), len(prompt))
                )
            continue
        choice = x["data"]["choices"][0]
        read = choice.get("prompt_token_ids") or x["data"].get("prompt_token_ids")
        assert read == x["body"]["prompt"]  # the server continued from exactly the ids we sent
        i = next(i for i, (ids, _, _) in enumerate(episodes) if read[: len(ids)] == ids)
        ids, mask, n_prompt = episodes[i]
        env_ids = read[len(ids) :]
        episodes[i] = (
            read + choice["token_ids"],
            mask + [False] * len(env_ids) + [True] * len(choice["token_ids"]),
            n_prompt,
        )
    return [(ids, [False] * n + mask) for ids, mask, n in episodes]


def test_guess_episodes_train_on_exactly_the_sampled_ids_turn_after_turn(inference_server, tmp_path):
    orch, exchanges, lines = run_one_step(
        inference_server,
        tmp_path,
        {"name": "guess", "options": {"high": 4, "max_turns": 3}},
        sampling={"max_tokens": 4, "stop": [" ", "\n"], "seed": 7},
    )
    batch = read_rollout_batch(rollout_path(RunPaths(tmp_path).rollouts_dir(0), 0))
    assert batch.num_samples == 4
    later_turns = [x for x in exchanges if x["path"] == "completions"]
    assert later_turns, "no episode went past its first turn"

    expected = expected_sequences(exchanges)
    got = []
    offset = 0
    for n in batch.sample_lengths.tolist():
        got.append(
            (batch.input_ids[offset : offset + n].tolist(), batch.loss_mask[offset : offset + n].tolist())
        )
        offset += n
    used = [e for e in expected if e in got]
    assert len(used) == 4 and sorted(got) == sorted(used)
    # the logprobs the trainer corrects with are the server's, on the sampled ids only
    assert (batch.inference_logprobs[~batch.loss_mask] == 0).all()
    assert (batch.inference_logprobs[batch.loss_mask] < 0).all()

    episodes = [x for x in lines if x.tag == "env" and x.event == "episode.done"]
    assert len(episodes) >= 4
    assert {x.fields["outcome"] for x in episodes} == {"done"}  # the game ends every episode itself
    assert all(1 <= int(x.fields["turns"]) <= 3 for x in episodes)
    # one [env] turn.done line per answer of the environment: as many as the episodes' turns, the
    # last of each ending the episode (groups still in flight when the run ended are left out)
    tasks = {x.fields["task"] for x in episodes}
    turns = [x for x in lines if x.tag == "env" and x.event == "turn.done" and x.fields["task"] in tasks]
    assert len(turns) == sum(int(x.fields["turns"]) for x in episodes)
    assert sum(x.fields["end"] == "done" for x in turns) == len(episodes)
    assert all(x.fields["step"] == "0" and x.fields["tool_calls"] == "0" for x in turns)


def test_a_two_tool_episode_runs_through_the_orchestrator_and_the_trainer_trains_on_its_sampled_ids(
    inference_server, tmp_path
):
    from tests.support.rollouts import TrainerRun, wait_stable
    from tests.support.tool_env import CALL_REGEX, TOOLS
    from transformers import AutoTokenizer

    orch, exchanges, lines = run_one_step(
        inference_server,
        tmp_path,
        {"name": f"{TOOL_ENV}:TwoToolEnv", "options": {"max_turns": 4}},
        sampling={"max_tokens": 96, "seed": 3, "extra": {"structured_outputs": {"regex": CALL_REGEX}}},
        seq_len=512,
    )
    chat = [x for x in exchanges if x["path"] == "chat/completions"]
    assert all(x["body"]["tools"][0]["function"]["name"] == "add" for x in chat)  # the specs were sent
    batch = read_rollout_batch(rollout_path(RunPaths(tmp_path).rollouts_dir(0), 0))
    expected = expected_sequences(exchanges)
    offset, got = 0, []
    for n in batch.sample_lengths.tolist():
        got.append(
            (batch.input_ids[offset : offset + n].tolist(), batch.loss_mask[offset : offset + n].tolist())
        )
        offset += n
    assert all(g in expected for g in got)
    episodes = [x for x in lines if x.tag == "env" and x.event == "episode.done"]
    assert all(x.fields["outcome"] == "done" for x in episodes)
    # the batch lines say what they measure: scoring time summed over the workers, and the wall
    # time at the batch's end spent on scoring alone, within the batch's wall time
    (gen,) = [x for x in lines if x.tag == "gen" and x.event == "batch.done"]
    (verify,) = [x for x in lines if x.tag == "verify" and x.event == "batch.done"]
    assert verify.fields["workers"] == "1"
    summed = sum(float(x.fields["env_ms"]) for x in episodes)
    assert float(verify.fields["cpu_ms"]) == pytest.approx(summed, abs=0.1 * len(episodes) + 0.1)
    assert 0 <= float(verify.fields["tail_ms"]) <= float(gen.fields["dur_ms"])
    # every episode called a tool each turn and got a tool answer back; several took 2+ turns
    assert max(int(x.fields["turns"]) for x in episodes) >= 2
    tool_turns = [x for x in exchanges if x["path"] == "completions"]
    full = [x["data"]["choices"][0]["text"] for x in tool_turns if x["body"]["max_tokens"] == 96]
    assert full and all(t.startswith("<tool_call>") for t in full), full
    # a turn with less room left than 96 ids was given only that room (seq_len 512 holds)
    assert all(x["body"]["max_tokens"] + len(x["body"]["prompt"]) <= 512 for x in tool_turns)
    # each later turn's prompt ends with the tool's answer to the call just before it (a call cut
    # off at max_tokens is answered with the error, and the episode goes on)
    tok = AutoTokenizer.from_pretrained(inference_server.model)
    answered = 0
    for x in tool_turns:
        seen = tok.decode(x["body"]["prompt"])
        call = seen.rsplit("<|im_start|>assistant\n", 2)[-2]
        done = re.fullmatch(
            r'<tool_call>\{"name": "(add|mul)", "arguments": \{"a": (\d), "b": (\d)\}\}</tool_call>(<\|endoftext\|>)?<\|im_end\|>\n<\|im_start\|>tool\n(.*)<\|im_end\|>\n',
            call,
            re.S,
        )
        if done:
            name, a, b, _, reply = done.groups()
            assert reply == str(TOOLS[name](int(a), int(b))), seen  # the typed tool's own answer
            answered += 1
        else:
            assert "<|im_start|>tool\nerror: " in call, seen  # a cut-off call: the tool box's error
    assert answered >= 1
    assert orch.counters["too_long"] == 0

    # the trainer takes the step: loss on the sampled ids only, weights published
    run = TrainerRun(Path(inference_server.model), tmp_path, [], max_steps=1).start()
    try:
        wait_stable(RunPaths(tmp_path).weights_dir(1), run.proc)
        run.finish()
    finally:
        run.kill()
    row = [json.loads(x) for x in RunPaths(tmp_path).metrics_file.read_text().splitlines()]
    trained = [r for r in row if r["process"] == "trainer"]
    assert trained[0]["step"] == 0 and trained[0]["tokens"] == batch.num_tokens
    assert 0 < trained[0]["entropy"] < 20
