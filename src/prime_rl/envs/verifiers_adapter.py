"""``verifiers``: an environment written for the `verifiers` library (0.4.x), run by our episodes.

verifiers 0.4 (``import verifiers.v1 as vf``) describes an environment as a **taskset** (a
``vf.Taskset`` yielding ``vf.Task`` objects: ``TaskData`` with ``prompt``/``system_prompt`` and
its own fields, and the task's ``@vf.reward(weight=...)``, ``@vf.metric`` and ``@vf.stop``
methods) played by an **env** (``vf.Env.run(task, agents)``; a plain taskset gets
``vf.SingleAgentEnv``, whose one agent answers once). verifiers drives the model itself; here our
orchestrator and ``collect-rollouts`` drive it, one model turn at a time, and
:meth:`VerifiersEnv.step` answers each turn:

- tasks: the taskset's, each as our task (``prompt``: the system prompt and prompt as chat
  messages; ``vf_task``: the ``TaskData`` as JSON, from which any worker process rebuilds it);
- turns: the env's ``run()`` is *replayed* over the conversation so far, its agent answering from
  the model's recorded turns (``agent.run(task)``, ``agent.interaction(task)`` and
  ``interaction.turn(message)``). Where ``run()`` asks for a model turn the conversation does not
  hold yet, the messages it sent are our :meth:`~prime_rl.envs.base.Turn.reply`; once ``run()``
  returns, the episode ends. ``step`` stays stateless as our contract wants, so ``run()`` must
  answer the same conversation the same way (a seeded game does; a mismatch is an error);
- stops: the task's ``@vf.stop`` methods on the trace and the agent's ``max_turns`` end the
  exchange before a model turn, as in verifiers;
- reward: the task's rewards and metrics over a ``vf.Trace`` of the conversation
  (``task.score(trace)``), then the env's ``finalize``; the reward is verifiers' own
  ``trace.reward``, the weighted sum ``sum(score * weight)``, and each reward's unweighted score is
  the metric ``reward/<name>`` (each verifiers metric ``metric/<name>``).

A failure inside the wrapped env (``run()``, a reward or stop raising, a scoring error, a replay
that does not match) raises :class:`VerifiersEnvError` with the reason: the episode is recorded
with outcome ``env_error`` and that reason, like any environment that raises. Not supported (an
error names it): tools (``Toolset``), rewards, metrics and hooks that need a runtime (sandbox),
judges, ``@vf.intercept``, stops on a ``Request``/``Response``, tasks without a prompt, and envs
that run more than one agent or rollout per episode (the model plays one conversation).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import random
from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import Field, ValidationError

from prime_rl.config import StrictModel
from prime_rl.envs.base import EnvError, Environment, Score, Task, Turn

SUPPORTED = ("0.4.",)
"""The verifiers release lines this adapter is written against."""

INSTALL_HINT = "install it with `pip install verifiers==0.4.0` (it requires openai<3)"


class VerifiersOptions(StrictModel):
    """Options of the ``verifiers`` environment (``env.options``)."""

    env_id: str = Field(min_length=1)
    """The verifiers taskset id, as ``vf eval <id>`` takes it: an installed taskset package
    (``my-taskset``, or a hub id ``owner/my-taskset``) or one that ships with verifiers."""

    env_args: dict[str, Any] = {}
    """Fields of the taskset's config (its ``vf.TasksetConfig`` subclass), e.g. ``{"game": "Wordle-v0"}``."""

    env: dict[str, Any] = {}
    """Other fields of the verifiers ``EnvConfig``: ``id`` pairs a reusable ``Env`` with the
    taskset, a role's ``max_turns`` caps its turns (``{"agent": {"max_turns": 3}}``)."""

    max_turns: int | None = Field(default=None, ge=1)
    """Model turns an episode may take; None: 1 for a plain taskset (``SingleAgentEnv`` answers
    once), 16 for an ``Env`` with its own ``run()``."""

    shuffle: bool = True
    """Shuffle a finite taskset every epoch (seeded); an endless one is read in its order."""


class VerifiersEnvError(RuntimeError):
    """The wrapped verifiers environment failed or does something the adapter does not support."""


class _NeedsModel(BaseException):  # noqa: N818 - control flow, not an error
    """``run()`` asked for a model turn past the conversation so far (its new messages). A
    BaseException, so that the env's own ``except Exception`` does not swallow it."""

    def __init__(self, messages: list[dict[str, Any]]):
        super().__init__("needs a model turn")
        self.messages = messages


def _import_vf():
    try:
        import verifiers
        import verifiers.v1 as vf
    except ImportError as e:
        raise EnvError(f"environment 'verifiers' needs the verifiers package: {INSTALL_HINT}") from e
    if not verifiers.__version__.startswith(SUPPORTED):
        raise EnvError(
            f"environment 'verifiers' is written for verifiers 0.4.x, found {verifiers.__version__} "
            f"(older releases have another API): {INSTALL_HINT}"
        )
    return vf


def _run_sync(coro):
    """Run ``coro`` to the end, also when called from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _text(message: Any) -> tuple[str, str]:
    """A message's role and text, to compare a replayed message with the recorded one."""
    if not isinstance(message, dict):
        message = message.model_dump(mode="json")
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return message.get("role", ""), content.strip()


class VerifiersEnv(Environment):
    """Options: :class:`VerifiersOptions` (``env_id`` required)."""

    def __init__(self, **options: Any):
        try:
            self.options = VerifiersOptions(**options)
        except ValidationError as e:
            raise EnvError(f"environment 'verifiers': bad options: {e}") from e
        vf = self.vf = _import_vf()
        o = self.options
        try:
            config = vf.resolve_env_config({**o.env, "taskset": {**o.env_args, "id": o.env_id}})
            self.vf_env = vf.load_environment(config)
        except Exception as e:  # an unknown id, a bad taskset config, a broken plugin
            raise EnvError(f"verifiers environment {o.env_id!r}: cannot load: {type(e).__name__}: {e}") from e
        self.taskset = self.vf_env.taskset
        self.task_cls = type(self.taskset).task_type()
        task_config = self.taskset.config.task
        if self.task_cls.NEEDS_CONTAINER:
            raise EnvError(f"verifiers taskset {o.env_id!r} needs a container runtime: not supported")
        if self.task_cls.toolsets(task_config) or type(self.taskset).toolsets(self.taskset.config):
            raise EnvError(f"verifiers taskset {o.env_id!r} has tools (toolsets): not supported")
        if task_config.judges:
            raise EnvError(f"verifiers taskset {o.env_id!r} is scored by judges (LLM calls): not supported")
        single = type(self.vf_env).run is vf.SingleAgentEnv.run
        self.max_turns = o.max_turns or (1 if single else 16)
        self._rows: list | None = None

    # ------------------------------------------------------------------ tasks

    def tasks(self, seed: int) -> Iterator[Task]:
        if not self.taskset.bounded:
            return (self._task(t, f"{i}") for i, t in enumerate(self.taskset))
        if self._rows is None:
            try:
                self._rows = list(self.taskset)
            except Exception as e:
                raise EnvError(
                    f"verifiers taskset {self.options.env_id!r}: loading its tasks failed: {e}"
                ) from e
            if not self._rows:
                raise EnvError(f"verifiers taskset {self.options.env_id!r} has no tasks")
        return self._epochs(seed)

    def _epochs(self, seed: int) -> Iterator[Task]:
        assert self._rows is not None
        rng = random.Random(seed)
        epoch = 0
        while True:
            order = list(range(len(self._rows)))
            if self.options.shuffle:
                rng.shuffle(order)
            for i in order:
                yield self._task(self._rows[i], f"{i}@{epoch}")
            epoch += 1

    def _task(self, vtask: Any, suffix: str) -> Task:
        data = vtask.data
        name = data.id or data.name or self.options.env_id
        return {
            "id": f"{name}#{suffix}",
            "prompt": self._messages(data),
            "vf_task": data.model_dump(mode="json"),
        }

    def _messages(self, data: Any) -> list[dict[str, Any]]:
        """The chat messages verifiers' tool-less chat harness sends: the system prompt, then the prompt."""
        if data.prompt is None:
            raise EnvError(
                f"verifiers task {data.idx} has no prompt (the user opens the conversation): not supported"
            )
        messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
        if isinstance(data.prompt, str):
            return [*messages, {"role": "user", "content": data.prompt}]
        return [*messages, *(m.model_dump(mode="json", exclude_none=True) for m in data.prompt)]

    def _vf_task(self, task: Task) -> Any:
        """The verifiers task of one of ours: its ``vf_task``, else the row itself read as ``TaskData``
        (a ``collect-rollouts`` JSONL line in the taskset's own shape)."""
        raw = task.get("vf_task", task)
        try:
            data = self.task_cls.data_type().model_validate(raw)
        except ValidationError as e:
            raise EnvError(f"task {task.get('id')!r} is not a task of {self.options.env_id!r}: {e}") from e
        return self.task_cls(data, self.taskset.config.task)

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        if "vf_task" in task and isinstance(task.get("prompt"), list):
            return task["prompt"]
        return self._messages(self._vf_task(task).data)

    # ------------------------------------------------------------------ turns

    def step(self, task: Task, messages: list[dict[str, Any]]) -> Turn:
        vtask = self._vf_task(task)
        return _run_sync(_Replay(self, vtask, messages, len(self.prompt(task))).play())

    def score(self, task: Task, completion: str) -> Score:
        """One answer (``collect-rollouts`` of a single-turn env): the one-turn episode's score."""
        turn = self.step(task, [*self.prompt(task), {"role": "assistant", "content": completion}])
        if turn.score is None:
            raise VerifiersEnvError("the verifiers env wants more turns: run it as an episode")
        return turn.score


class _Replay:
    """One ``step``: the env's ``run()`` over the conversation so far (see the module docstring)."""

    def __init__(self, env: VerifiersEnv, task: Any, history: list[dict[str, Any]], prompt_len: int):
        self.env, self.vf, self.task, self.history = env, env.vf, task, history
        self.pos = prompt_len
        self.prompt_len = prompt_len
        self.trace: Any = None
        self.failure: str | None = None

    async def play(self) -> Turn:
        vf_env = self.env.vf_env
        agents = self.vf.Agents(vf_env.config, lambda name, spec: _ReplayAgent(self, name, spec))
        where = f"{type(vf_env).__name__}.run()"
        try:
            await vf_env.setup(agents)
            await vf_env.run(self.task, agents)
        except _NeedsModel as need:
            if not need.messages:
                raise VerifiersEnvError(f"{where} asked for a model turn without a message") from None
            return Turn.reply(*need.messages)
        except VerifiersEnvError:
            raise
        except Exception as e:
            raise VerifiersEnvError(f"{where} raised {type(e).__name__}: {e}") from e
        if self.failure is not None:
            raise VerifiersEnvError(self.failure)
        if self.trace is None:
            raise VerifiersEnvError(f"{where} ran no agent")
        if self.pos < len(self.history):
            raise VerifiersEnvError(
                f"{where} ended before the conversation did (replayed {self.pos} of "
                f"{len(self.history)} messages): it must answer the same conversation the same way"
            )
        episode = self.vf.Episode(
            env=self.vf.EnvInfo(id=vf_env.config.env_id), task=self.trace.task, traces=[self.trace]
        )
        try:
            await vf_env.finalize(self.task, episode)
        except Exception as e:
            raise VerifiersEnvError(
                f"{type(vf_env).__name__}.finalize() raised {type(e).__name__}: {e}"
            ) from e
        return Turn.end(self._score())

    def _score(self) -> Score:
        trace = self.trace
        metrics = {f"reward/{k}": r.score for k, r in trace.rewards.items() if r is not None}
        metrics |= {f"metric/{k}": float(v) for k, v in trace.metrics.items() if v is not None}
        return Score(float(trace.reward), metrics)

    # -- what the replay agents call

    def open(self, name: str, task: Any, spec: Any) -> Any:
        vf = self.vf
        if self.trace is not None:
            raise VerifiersEnvError(
                f"the verifiers env runs a second rollout (agent {name!r}): one conversation per "
                "episode is supported"
            )
        if task.data.prompt is None:
            raise VerifiersEnvError(f"agent {name!r} got a task without a prompt: not supported")
        from verifiers.v1.state import state_cls
        from verifiers.v1.utils.decorators import discover_decorated

        if intercepts := [f.__name__ for f in discover_decorated(task, "intercept")]:
            raise VerifiersEnvError(f"@vf.intercept hooks {intercepts}: not supported")

        self.trace = vf.Trace(
            task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=vf.AgentInfo(config=spec, name=name),
            state=state_cls(type(task))(),
        )
        self.spec = spec
        for m in self.history[: self.prompt_len]:
            self._add(self._parse(m), sampled=False)
        return self.trace

    def _parse(self, message: dict[str, Any]) -> Any:
        if message.get("role") == "assistant":  # content only: the model is offered no tools
            return self.vf.AssistantMessage(content=message.get("content") or "")
        from verifiers.v1.dialects.chat import parse_message

        return parse_message(message)

    def _add(self, message: Any, sampled: bool) -> None:
        nodes = self.trace.nodes
        nodes.append(
            self.vf.MessageNode(parent=len(nodes) - 1 if nodes else None, message=message, sampled=sampled)
        )

    async def refused(self, task: Any) -> bool:
        """verifiers' checks before a model turn: the agent's ``max_turns``, then the ``@vf.stop``s."""
        trace = self.trace
        if self.spec.max_turns is not None and trace.num_turns >= self.spec.max_turns:
            trace.stop("max_turns")
            return True
        from verifiers.v1.session import call_hook, hook_boundary

        for stop in task.hooks("stop"):
            try:
                if hook_boundary(stop, allow_trace=True) is not self.vf.Trace:
                    raise VerifiersEnvError(
                        f"@vf.stop {stop.__name__}: only stops on the trace are supported"
                    )
                result = await call_hook(stop, {self.vf.Trace: trace})
            except VerifiersEnvError:
                raise
            except Exception as e:
                raise VerifiersEnvError(f"@vf.stop {stop.__name__} raised {type(e).__name__}: {e}") from e
            if not isinstance(result, bool):
                raise VerifiersEnvError(
                    f"@vf.stop {stop.__name__} returned {type(result).__name__}, not bool"
                )
            if result:
                trace.stop(stop.__name__)
                return True
        return False

    def feed(self, messages: list[Any]) -> None:
        """The env's messages to the model: recorded ones are checked, new ones end this replay."""
        for i, message in enumerate(messages):
            if self.pos >= len(self.history):
                raise _NeedsModel([m.model_dump(mode="json", exclude_none=True) for m in messages[i:]])
            recorded = self.history[self.pos]
            if _text(recorded) != _text(message):
                raise VerifiersEnvError(
                    f"on replay the env sent {_text(message)!r} where the conversation holds "
                    f"{_text(recorded)!r}: it must answer the same conversation the same way"
                )
            self._add(message, sampled=False)
            self.pos += 1

    def reply(self) -> Any:
        """The model's next recorded turn (a new one ends this replay)."""
        if self.pos >= len(self.history):
            raise _NeedsModel([])
        recorded = self.history[self.pos]
        if recorded.get("role") != "assistant":
            raise VerifiersEnvError(f"on replay the env asked the model to answer before message {self.pos}")
        message = self._parse(recorded)
        self._add(message, sampled=True)
        self.pos += 1
        return message

    async def finish(self, task: Any, condition: str) -> None:
        """The rollout is over: stop condition, then the task's rewards and metrics (verifiers
        records a scoring failure on the trace; here it fails the episode, with its reason)."""
        trace = self.trace
        trace.stop(condition)
        needs_runtime = [
            f.__name__
            for kind in ("reward", "metric")
            for f in task.hooks(kind)
            if (p := inspect.signature(f).parameters.get("runtime")) is not None
            and p.default is inspect.Parameter.empty
        ]
        if needs_runtime:
            self.failure = f"rewards/metrics {needs_runtime} need a runtime (sandbox): not supported"
            return
        try:
            await task.score(trace)
        except Exception as e:
            trace.record_error(e)
            self.failure = f"scoring raised {type(e).__name__}: {e}"
            return
        trace.ok = True


class _ReplayAgent:
    """A seat of the wrapped env, answering from the conversation (``agents.<name>``)."""

    def __init__(self, replay: _Replay, name: str, spec: Any):
        self.replay, self.name, self.config = replay, name, spec
        self.trainable = True

    async def run(self, task: Any, **_: Any) -> Any:
        """One segment, as verifiers' tool-less chat harness runs it: one answer."""
        replay = self.replay
        trace = replay.open(self.name, task, self.config)
        if not await replay.refused(task):
            replay.reply()
        await replay.finish(task, "agent_completed")
        return trace

    @asynccontextmanager
    async def interaction(self, task: Any, **_: Any):
        replay = self.replay
        replay.open(self.name, task, self.config)
        interaction = _ReplayInteraction(replay, task)
        yield interaction  # an exception in the body (a _NeedsModel too) propagates: nothing is scored
        await replay.finish(task, "user_closed")  # a @stop's condition, when one fired, stays


class _ReplayInteraction:
    """``agent.interaction(task)``: ``turn(message)`` sends a user turn and returns the model's answer."""

    def __init__(self, replay: _Replay, task: Any):
        self.replay, self.task = replay, task
        self.started = self.over = False

    @property
    def trace(self) -> Any:
        return self.replay.trace

    async def turn(self, message: Any = None) -> Any:
        vf, replay = self.replay.vf, self.replay
        if self.over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        prompted = not self.started
        if message is None and not prompted:
            raise ValueError("a bare turn() takes the prompted task's opening reply only")
        if message is not None and prompted:
            raise ValueError("the task's prompt opens this exchange: take its first reply with a bare turn()")
        self.started = True
        if await replay.refused(self.task):  # the message goes unconsumed, as in verifiers
            self.over = True
            return vf.Segment(messages=[], terminated=True)
        if message is not None:
            new = [vf.UserMessage(content=message)] if isinstance(message, str) else list(message)
            replay.feed([replay._parse(m) if isinstance(m, dict) else m for m in new])
        return vf.Segment(messages=[replay.reply()])

    async def send(self, *_: Any, **__: Any) -> dict:
        raise VerifiersEnvError("interaction.send/steer: not supported (use turn())")

    steer = send
