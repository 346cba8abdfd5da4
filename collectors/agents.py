"""The agents a collector runs, and how it calls them.

Agent protocol (``Agent``)::

    agent.act(obs_list, histories) -> list[(Action, logprob | None, ntokens[, info])]   # may be async
    agent.policy_version: int
    agent.world_model_version: int          # optional, default 0
    agent.source: "expert" | "real"         # optional, default "real"
    agent.batch_wait_s: float               # optional: >0 batches contexts that wait together

``histories[i]`` is the list of ``(Observation, Action)`` pairs of context i's
episode so far.  An agent that sets ``wants_tasks = True`` also gets
``tasks=[task names]``.  A CPU-heavy model agent should be ``async`` and run
its forward pass off the event loop (``asyncio.to_thread``).

* ``ExpertAgent`` (the scripted experts) and ``RandomAgent`` (the random policy) are the
  built-in agents (``collector.policy`` ``expert`` / ``random``, see ``default_agent_factory``);
  the ``latest`` policy is a model agent the caller passes in (``collectors.policy_agent``).
* ``_Acting`` is the collector's side of the protocol: it calls the agent directly, or batched
  over the contexts that wait together, paced to ``collector.max_steps_per_s``, and normalises
  every answer to ``(Action, logprob, ntokens, info)`` (``_norm``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, Protocol

from collectors.experts import EXPERTS, WAIT, Expert
from collectors.perturbed import PerturbedExpertAgent
from collectors.random_policy import RandomPolicy
from core.config import Config
from core.spaces import Action, Observation


class Agent(Protocol):
    policy_version: int

    def act(self, obs_list: list[Observation], histories: list[list]) -> Any: ...


# --- adapters --------------------------------------------------------------------


class ExpertAgent:
    """Scripted experts as an Agent (source ``expert``); picks the expert by task."""

    source = "expert"
    wants_tasks = True
    policy_version = 0
    world_model_version = 0

    def __init__(self, experts: dict[str, Expert] | None = None):
        self.experts = experts if experts is not None else EXPERTS
        self._by_path = {}

    def supports(self, task: str) -> bool:
        return self._expert(task) is not None

    def _expert(self, task: str | None) -> Expert | None:
        """The task's expert: from the table, else an app task's own (``AppTask.expert``)."""
        ex = self.experts.get(task or "")
        if ex is None and task and not task.startswith("miniwob/"):
            from collectors.tasks import app_expert

            ex = app_expert(task)
        return ex

    def _task_of(self, obs: Observation) -> str | None:
        path = (obs.url or "").split("?")[0].lstrip("/")
        if path.endswith(".html") and path.startswith("miniwob/"):
            return "miniwob/" + path[len("miniwob/") : -5]
        return None

    async def act(
        self, obs_list: list[Observation], histories: list[list], tasks: list[str] | None = None
    ) -> list:
        out = []
        wait = 0.0
        for i, (obs, hist) in enumerate(zip(obs_list, histories, strict=False)):
            task = tasks[i] if tasks else self._task_of(obs)
            ex = self._expert(task)
            if ex is None:
                raise KeyError(f"no expert for task {task!r}")
            a = ex.act(obs, hist)
            if a == WAIT:  # the page is still changing: pause like a person would
                wait = max(wait, float(getattr(ex, "wait_s", 0.1)))
            out.append((a, None, 0))
        if wait:
            await asyncio.sleep(wait)
        return out


class RandomAgent:
    """The random policy as an Agent (source ``real``)."""

    source = "real"
    policy_version = 0
    world_model_version = 0

    def __init__(self, seed: int | None = None):
        self.policy = RandomPolicy(seed)

    def act(self, obs_list: list[Observation], histories: list[list]) -> list:
        return [(self.policy.act(o, h), None, 0) for o, h in zip(obs_list, histories, strict=False)]


def default_agent_factory(cfg: Config) -> Agent:
    """``collector.policy``: ``expert``, ``random`` or ``perturbed`` (``latest`` needs a model agent
    from the caller)."""
    p = cfg.collector.policy
    if p == "expert":
        return ExpertAgent()
    if p == "random":
        return RandomAgent()
    if p == "perturbed":
        return PerturbedExpertAgent(ExpertAgent(), cfg.collector.perturb_prob)
    raise ValueError(f"collector.policy={p!r} needs an agent_factory that loads the policy model")


def make_agent(cfg: Config, agent_factory: Callable | None) -> Agent:
    """The agent of ``agent_factory`` (``default_agent_factory`` when None), which is called
    with ``cfg`` when it takes a positional argument, else without."""
    factory = agent_factory or default_agent_factory
    return factory(cfg) if _arity(factory) else factory()


def _arity(fn: Callable) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 0
    return sum(
        1
        for p in sig.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    )


# --- acting ------------------------------------------------------------------------


class _Acting:
    """Calls the agent: directly, or batched over the contexts that wait together."""

    def __init__(self, agent: Any, slots: int, max_steps_per_s: float = 0.0):
        self.agent = agent
        self.min_interval = 1.0 / max_steps_per_s if max_steps_per_s > 0 else 0.0
        self._next_at = 0.0
        self.wait = float(getattr(agent, "batch_wait_s", 0.0) or 0.0)
        self.slots = slots
        self.wants_tasks = bool(getattr(agent, "wants_tasks", False))
        self.pending: list = []
        self._wake = asyncio.Event()
        self._runner: asyncio.Task | None = None
        self.active = slots

    def versions(self) -> tuple[int, int]:
        return int(getattr(self.agent, "policy_version", 0) or 0), int(
            getattr(self.agent, "world_model_version", 0) or 0
        )

    async def _call(self, obs_list: list, hists: list, tasks: list) -> list:
        kw = {"tasks": tasks} if self.wants_tasks else {}
        r = self.agent.act(obs_list, hists, **kw)
        if inspect.isawaitable(r):
            r = await r
        r = list(r)
        if len(r) != len(obs_list):
            raise RuntimeError(f"agent returned {len(r)} actions for {len(obs_list)} observations")
        return [_norm(x) for x in r]

    async def _pace(self) -> None:
        """Rate limit over all contexts (``collector.max_steps_per_s``; 0 = unlimited)."""
        if not self.min_interval:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        at = max(now, self._next_at)
        self._next_at = at + self.min_interval
        if at > now:
            await asyncio.sleep(at - now)

    @staticmethod
    def acted_version(ex: dict, pv: int) -> int:
        """The policy version a step is stamped with: the one the agent reports it acted with
        (``info["policy_version"]``, a hot-reloading agent), else ``pv``, read before the call.
        Read before the call alone, it was the version before a reload the call itself installed:
        the first act of a ``latest`` collector, which loads version 0, was stamped -1, and its
        group then spanned -1 to 2 in ``bench reload`` (beyond ``max_staleness`` 2)."""
        v = ex.pop("policy_version", None)
        return pv if v is None else int(v)

    async def act(self, obs: Observation, hist: list, task: str) -> tuple:
        await self._pace()
        if self.wait <= 0:
            pv, wv = self.versions()
            ((a, lp, nt, ex),) = await self._call([obs], [hist], [task])
            return a, lp, nt, self.acted_version(ex, pv), wv, ex
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((obs, hist, task, fut))
        self._wake.set()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.ensure_future(self._run())
        return await fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self.pending:
                continue
            deadline = loop.time() + self.wait
            while len(self.pending) < self.active and loop.time() < deadline:
                await asyncio.sleep(min(0.002, self.wait))
            batch, self.pending = self.pending, []
            pv, wv = self.versions()
            try:
                res = await self._call(
                    [b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch]
                )
            except Exception as e:  # noqa: BLE001 - deliver the failure to every waiter
                for b in batch:
                    if not b[3].done():
                        b[3].set_exception(e)
                continue
            for b, (a, lp, nt, ex) in zip(batch, res, strict=False):
                if not b[3].done():
                    b[3].set_result((a, lp, nt, self.acted_version(ex, pv), wv, ex))

    def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()


def _norm(x: Any) -> tuple[Action, float | None, int, dict]:
    """An agent's answer -> (Action, logprob, ntokens, info); ``info`` (optional 4th element, a policy
    agent's ``candidates_hash`` and ``temperature``, see ``models.policy.runner.PolicyRunner.act_info``)."""
    if isinstance(x, Action):
        return x, None, 0, {}
    a, lp, nt, ex = (tuple(x) + (None, 0, None))[:4]
    return a, (None if lp is None else float(lp)), int(nt or 0), dict(ex or {})
