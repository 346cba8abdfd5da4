"""The collector: N browser contexts in one process, publishing real transitions.

    await run_collector(cfg, publisher, topics, agent_factory, stop_event)

* ``cfg.collector.contexts`` contexts run concurrently (one asyncio task and one
  ``WebEnv`` each, all in one Chromium).
* Episodes cycle over ``cfg.collector.tasks`` (names, ``miniwob/*``, ``experts``)
  and the seeds ``[seed_start, seed_stop)`` (see ``_Schedule``: runs of
  ``run_length`` episodes of one task per context; the seed offset comes from
  the collector id, so two collectors do not walk the same seeds, unless
  ``seed_offset`` is given).
* Every step becomes a ``streams.records.Transition`` published with
  ``publisher.send(topic, rec, key=group_id or episode_id)`` (keyed by group, so the G episodes of a
  live group reach the same partition, hence one stream worker) (``topics.expert`` when the
  agent's ``source`` is ``"expert"``, else ``topics.real``); ``send`` is
  asynchronous, nothing waits per step.
* A crashed page or browser is restarted; its episode ends ``truncated``.
* ``stats`` (``CollectorStats``) keeps plain counters for whoever exports
  metrics; an optional ``metrics`` object gets ``on_step(task, latency_s,
  source)``, ``on_episode(task, ok, reward, steps, truncated)``,
  ``on_blocked(kind)``, ``on_restart()`` (a crashed page or browser was
  restarted) and ``on_timeout(task)`` calls, for the methods it has.

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
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import socket
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from collectors.browser import Browser
from collectors.env import WebEnv
from collectors.experts import EXPERTS, WAIT, Expert
from collectors.random_policy import RandomPolicy
from collectors.tasks import TaskSpec, resolve_tasks
from core.spaces import Action, Observation
from streams.records import Control, Transition, new_id

log = logging.getLogger(__name__)


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
        return task in self.experts

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
            ex = self.experts.get(task or "")
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


def default_agent_factory(cfg: Any) -> Agent:
    """``collector.policy``: ``expert`` or ``random`` (``latest`` needs a model agent from the caller)."""
    p = cfg.collector.policy
    if p == "expert":
        return ExpertAgent()
    if p == "random":
        return RandomAgent()
    raise ValueError(f"collector.policy={p!r} needs an agent_factory that loads the policy model")


# --- stats -----------------------------------------------------------------------


@dataclass
class CollectorStats:
    collector_id: str = ""
    steps: int = 0
    episodes: int = 0
    successes: int = 0
    episodes_per_task: Counter = field(default_factory=Counter)
    successes_per_task: Counter = field(default_factory=Counter)
    truncated: int = 0
    timeouts: int = 0
    crashes: int = 0
    browser_restarts: int = 0
    blocked_requests: int = 0
    action_errors: int = 0
    reset_errors: int = 0
    published: int = 0
    step_latency_s: deque = field(default_factory=lambda: deque(maxlen=10_000))
    act_latency_s: deque = field(default_factory=lambda: deque(maxlen=10_000))
    started_at: float = field(default_factory=time.time)
    last_step_at: float = 0.0

    def success_rate(self, task: str | None = None) -> float:
        if task is None:
            return self.successes / self.episodes if self.episodes else 0.0
        n = self.episodes_per_task[task]
        return self.successes_per_task[task] / n if n else 0.0

    def steps_per_s(self) -> float:
        dt = time.time() - self.started_at
        return self.steps / dt if dt > 0 else 0.0

    def snapshot(self) -> dict:
        lat = sorted(self.step_latency_s)

        def q(p):
            return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else 0.0

        return {
            "collector_id": self.collector_id,
            "steps": self.steps,
            "episodes": self.episodes,
            "successes": self.successes,
            "success_rate": round(self.success_rate(), 4),
            "truncated": self.truncated,
            "timeouts": self.timeouts,
            "crashes": self.crashes,
            "browser_restarts": self.browser_restarts,
            "blocked_requests": self.blocked_requests,
            "action_errors": self.action_errors,
            "reset_errors": self.reset_errors,
            "published": self.published,
            "steps_per_s": round(self.steps_per_s(), 2),
            "step_latency_p50_s": round(q(0.5), 4),
            "step_latency_p95_s": round(q(0.95), 4),
            "per_task": {
                t: {"episodes": n, "successes": self.successes_per_task[t]}
                for t, n in sorted(self.episodes_per_task.items())
            },
        }


def _call(metrics: Any, name: str, *args: Any) -> None:
    fn = getattr(metrics, name, None) if metrics is not None else None
    if fn is None:
        return
    try:
        fn(*args)
    except Exception:  # metrics never break collection
        log.exception("metrics.%s failed", name)


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

    async def act(self, obs: Observation, hist: list, task: str) -> tuple:
        await self._pace()
        if self.wait <= 0:
            pv, wv = self.versions()
            ((a, lp, nt, ex),) = await self._call([obs], [hist], [task])
            return a, lp, nt, pv, wv, ex
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
                    b[3].set_result((a, lp, nt, pv, wv, ex))

    def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()


def _norm(x: Any) -> tuple[Action, float | None, int, dict]:
    """An agent's answer -> (Action, logprob, ntokens, info); ``info`` (optional 4th element, a policy
    agent's ``candidates_hash`` and ``temperature``, see ``models.policy.PolicyRunner.act_info``)."""
    if isinstance(x, Action):
        return x, None, 0, {}
    a, lp, nt, ex = (tuple(x) + (None, 0, None))[:4]
    return a, (None if lp is None else float(lp)), int(nt or 0), dict(ex or {})


# --- the loop ---------------------------------------------------------------------


def _reachable(url: str, timeout: float = 0.5) -> bool:
    from urllib.parse import urlsplit

    s = urlsplit(url)
    try:
        with socket.create_connection((s.hostname, s.port or 80), timeout=timeout):
            return True
    except OSError:
        return False


class _Schedule:
    """Which (task, seed) each context runs next.

    A context runs ``run_length`` consecutive episodes of one task (so the task
    page is reused, see ``WebEnv``), then moves to the next task; context ``i``
    starts at task ``i``.  Seeds are counted per task across contexts:
    ``seed_start + (offset + n) % (seed_stop - seed_start)`` for the task's n-th episode.
    """

    def __init__(
        self,
        tasks: list[TaskSpec],
        seed_start: int,
        seed_stop: int,
        offset: int,
        limit: int,
        run_length: int,
        group_size: int = 1,
        group_prefix: str = "",
    ):
        self.tasks = tasks
        self.seed_start = seed_start
        self.span = max(1, seed_stop - seed_start)
        self.offset = offset % self.span
        self.limit = limit
        self.run_length = max(1, run_length)
        # group mode (G > 1): the unit of work is a group, G episodes of one (task, seed) handed to
        # whichever context asks next; groups rotate over the tasks
        self.group = max(1, int(group_size))
        self.group_index = 0
        self.group_left = 0
        self.current: tuple[TaskSpec, int] | None = None
        self.group_prefix = group_prefix or new_id()[:8]
        self.group_id = ""  # the group of the episode handed out last ('' without groups)
        self.k = 0
        self.per_task: Counter = Counter()
        self.slots: dict[int, list] = {}

    def next(self, slot: int = 0) -> tuple[TaskSpec, int] | None:
        if self.limit and self.k >= self.limit:
            return None
        self.k += 1
        if self.group > 1:
            if self.group_left == 0:
                t = self.tasks[self.group_index % len(self.tasks)]
                self.group_index += 1
                n = self.per_task[t.name]
                self.per_task[t.name] += 1
                self.current = (t, self.seed_start + (self.offset + n) % self.span)
                self.group_left = self.group
                # named once, here, at the source: every member carries it to the learner
                self.group_id = f"g:{self.group_prefix}:{self.group_index}"
            self.group_left -= 1
            return self.current
        st = self.slots.setdefault(slot, [slot % len(self.tasks), 0])
        if st[1] >= self.run_length:
            st[0], st[1] = (st[0] + 1) % len(self.tasks), 0
        st[1] += 1
        t = self.tasks[st[0]]
        n = self.per_task[t.name]
        self.per_task[t.name] += 1
        return t, self.seed_start + (self.offset + n) % self.span

    def starts_group(self) -> bool:
        """Whether the next episode opens a new group (always, without groups)."""
        return self.group <= 1 or self.group_left == 0


class _Pacer:
    """On-policy pacing (``collector.groups_per_version``): by the time the agent acts with policy
    version ``v`` (``v0``: its first), at most ``max(1, floor(gpv * (v - v0 + 1)))`` groups have
    been started; episodes of a started group never wait.  ``gpv = 1``: collect one group, then
    wait for the trainer's next checkpoint; ``gpv = 0.25``: one group every four versions."""

    def __init__(self, agent: Any, groups_per_version: float, poll_s: float = 0.25):
        self.agent, self.gpv, self.poll_s = agent, float(groups_per_version), poll_s
        self.v0: int | None = None
        self.started = 0
        self.waits = 0

    def allowed(self, version: int) -> int:
        if self.v0 is None:
            self.v0 = version
        return max(1, math.floor(self.gpv * (version - self.v0 + 1) + 1e-9))

    async def turn(self, stop: asyncio.Event, starts_group: Callable[[], bool]) -> bool:
        """Wait until the next episode may start; False if stopped while waiting.  Nothing awaits
        between a True return and the caller's ``schedule.next()``, so the check is atomic."""
        refresh = getattr(self.agent, "refresh", None)
        while not stop.is_set():
            if not starts_group():
                return True
            v = int(getattr(self.agent, "policy_version", 0) or 0)
            if v >= 0 and self.started < self.allowed(v):
                self.started += 1
                return True
            self.waits += 1
            if refresh is not None:
                r = refresh()
                if inspect.isawaitable(r):
                    await r
            if not starts_group():
                continue
            try:
                await asyncio.wait_for(stop.wait(), self.poll_s)
            except TimeoutError:
                pass
        return False


async def run_collector(
    cfg: Any,
    publisher: Any,
    topics: Any,
    agent_factory: Callable | None,
    stop_event: asyncio.Event,
    metrics: Any = None,
    collector_id: str | None = None,
    *,
    base_url: str | None = None,
    stats: CollectorStats | None = None,
    seed_offset: int | None = None,
    browser: Browser | None = None,
    reload_each_episode: bool = False,
    run_length: int | None = None,
) -> CollectorStats:
    """Run until ``stop_event`` is set (or ``collector.max_episodes`` episodes); returns the stats.

    ``publisher`` may be ``None`` (a dry run: nothing is published).  ``base_url``
    defaults to the configured task server (``stack.bind``/``stack.taskserver_port``);
    when that is not reachable an in-process task server is started.
    """
    cc = cfg.collector
    collector_id = collector_id or f"collector-{socket.gethostname()}-{new_id()[:6]}"
    stats = stats if stats is not None else CollectorStats()
    stats.collector_id = collector_id
    factory = agent_factory or default_agent_factory
    agent = factory(cfg) if _arity(factory) else factory()
    source = "expert" if getattr(agent, "source", "real") == "expert" else "real"
    topic = topics.expert if source == "expert" else topics.real
    tasks = resolve_tasks(list(cc.tasks))
    if isinstance(agent, ExpertAgent):
        missing = [t.name for t in tasks if not agent.supports(t.name)]
        if missing:
            log.warning("no expert for %s: left out of this expert collector", ", ".join(missing))
        tasks = [t for t in tasks if agent.supports(t.name)]
    if not tasks:
        raise ValueError("no tasks to collect on (collector.tasks is empty or has no experts)")
    if seed_offset is None and int(getattr(cc, "seed_offset", -1)) >= 0:
        seed_offset = int(cc.seed_offset)
    offset = seed_offset if seed_offset is not None else zlib.crc32(collector_id.encode())
    group = collector_group_size(cfg, source, agent)
    run_length = int(run_length or cc.run_length)  # the default lives in CollectorConfig
    schedule = _Schedule(
        tasks,
        int(cc.seed_start),
        int(cc.seed_stop),
        offset,
        int(cc.max_episodes or 0),
        run_length,
        group,
        group_prefix=f"{collector_id}:{new_id()[:6]}",
    )
    gpv = float(getattr(cc, "groups_per_version", 0.0) or 0.0)
    pacer = _Pacer(agent, gpv) if gpv > 0 else None

    server = None
    if base_url is None:
        url = (
            cfg.stack.taskserver_url.rstrip("/") + "/"
            if cfg.stack.taskserver_url
            else f"http://{cfg.stack.bind}:{cfg.stack.taskserver_port}/"
        )
        if _reachable(url):
            base_url = url
        else:
            from collectors.taskserver import serve

            server, _, base_url = serve(cfg.stack.bind, 0)
            log.info("task server not running at %s; started one at %s", url, base_url)

    def on_block(kind: str, url: str) -> None:
        stats.blocked_requests += 1
        _call(metrics, "on_blocked", kind)

    own_browser = browser is None
    if browser is None:
        browser = Browser(headless=bool(cc.headless), allowed_origins=[base_url], on_block=on_block)
        await browser.start()
    else:
        browser.on_block = browser.on_block or on_block
    acting = _Acting(agent, int(cc.contexts), float(getattr(cc, "max_steps_per_s", 0.0) or 0.0))
    run_id = cfg.run_id

    def publish(rec: Any, key: str) -> None:
        if publisher is None:
            return
        publisher.send(topic, rec, key=key)
        stats.published += 1

    async def slot(i: int) -> None:
        env = WebEnv(browser, base_url, cc, reload_each_episode=reload_each_episode)
        failures = 0
        try:
            await env.open()
            while not stop_event.is_set():
                if pacer is not None and not await pacer.turn(stop_event, schedule.starts_group):
                    return
                job = schedule.next(i)
                if job is None:
                    return
                spec, seed = job
                group_id = schedule.group_id
                try:
                    obs, _info = await env.reset(spec, seed)
                    failures = 0
                except Exception as e:  # noqa: BLE001 - one bad page must not stop the collector
                    stats.reset_errors += 1
                    failures += 1
                    log.warning(
                        "[%s/%d] reset %s seed %s failed: %s", collector_id, i, spec.name, seed, e
                    )
                    if failures >= 5:
                        raise
                    await _restart(env)
                    continue
                episode_id = new_id()
                history: list = []
                step = 0
                reward, term, trunc = 0.0, False, False
                while not stop_event.is_set():
                    t_act = time.perf_counter()
                    action, logp, ntok, pv, wv, pinfo = await acting.act(obs, history, spec.name)
                    stats.act_latency_s.append(time.perf_counter() - t_act)
                    t0 = time.perf_counter()
                    nobs, reward, term, trunc, info = await env.step(action)
                    dt = time.perf_counter() - t0
                    stats.step_latency_s.append(dt)
                    stats.steps += 1
                    stats.last_step_at = time.time()
                    if info.get("error"):
                        stats.action_errors += 1
                    rec = Transition(
                        run_id=run_id,
                        episode_id=episode_id,
                        step=step,
                        task=spec.name,
                        seed=int(seed),
                        source=source,
                        policy_version=pv,
                        world_model_version=wv,
                        obs=obs.to_dict(),
                        action=action.to_text(),
                        next_obs=nobs.to_dict(),
                        reward=float(reward),
                        done=bool(term),
                        truncated=bool(trunc),
                        producer_id=collector_id,
                        group_id=group_id,
                        behaviour_logprob=logp,
                        action_tokens=int(ntok),
                        candidates_hash=str(pinfo.get("candidates_hash") or ""),
                        info={
                            k: info[k]
                            for k in (
                                "reason",
                                "error",
                                "timeout",
                                "crashed",
                                "max_steps",
                                "stopped",
                            )
                            if info.get(k)
                        },
                    )
                    if (
                        pinfo.get("temperature") is not None
                    ):  # the T of behaviour_logprob = log pi_T
                        rec.info["temperature"] = float(pinfo["temperature"])
                    publish(
                        rec, group_id or episode_id
                    )  # a group's episodes reach one stream worker
                    _call(metrics, "on_step", spec.name, dt, source)
                    history.append((obs, action))
                    obs = nobs
                    step += 1
                    if term or trunc:
                        break
                if not (term or trunc):
                    return  # stopped mid-episode: the stream side times it out
                stats.episodes += 1
                stats.episodes_per_task[spec.name] += 1
                ok = term and reward > 0
                if ok:
                    stats.successes += 1
                    stats.successes_per_task[spec.name] += 1
                if trunc:
                    stats.truncated += 1
                if info.get("timeout"):
                    stats.timeouts += 1
                    _call(metrics, "on_timeout", spec.name)
                _call(metrics, "on_episode", spec.name, bool(ok), float(reward), step, bool(trunc))
                if info.get("crashed") or env.crashed:
                    stats.crashes += 1
                    await _restart(env)
        finally:
            await env.close()

    async def _restart(env: WebEnv) -> None:
        launches = browser.launches
        try:
            await env.restart()
        except Exception as e:  # noqa: BLE001
            log.error("restarting the browser context failed: %s; relaunching Chromium", e)
            await browser.restart()
            await env.open()
        if browser.launches != launches:
            stats.browser_restarts += 1
        _call(metrics, "on_restart")

    async def heartbeat() -> None:
        key = getattr(topics, "collectors", None) if topics is not None else None
        period = float(getattr(cc, "heartbeat_s", 2.0) or 2.0)
        while not stop_event.is_set():
            if publisher is not None and key:
                info = stats.snapshot()
                info.pop("per_task", None)
                info.update(tasks=[t.name for t in tasks], contexts=int(cc.contexts), source=source)
                try:
                    publisher.send(
                        key,
                        Control(
                            run_id=run_id,
                            kind="heartbeat",
                            sender=collector_id,
                            value=float(stats.steps),
                            info=info,
                        ),
                        key=collector_id,
                    )
                except Exception as e:  # noqa: BLE001
                    log.warning("heartbeat failed: %s", e)
            try:
                await asyncio.wait_for(stop_event.wait(), period)
            except TimeoutError:
                pass

    hb = asyncio.ensure_future(heartbeat())
    try:
        slots = [asyncio.ensure_future(slot(i)) for i in range(int(cc.contexts))]
        try:
            await asyncio.gather(*slots)
        finally:
            for s in slots:
                s.cancel()
    finally:
        hb.cancel()
        acting.close()
        if own_browser:
            await browser.close()
        if server is not None:
            server.shutdown()
            server.server_close()
    return stats


def collector_group_size(cfg: Any, source: str, agent: Any) -> int:
    """G for this collector: ``collector.group_size``, or with 0 (auto) ``stream.group_size`` for an agent
    that samples from a policy (it has a ``policy_version`` that loads checkpoints: ``latest``) and 1
    for experts and the random policy, whose episodes never reach the GSPO loss."""
    g = int(cfg.collector.group_size)
    if g > 0:
        return g
    samples = source != "expert" and not isinstance(agent, RandomAgent)
    return max(1, int(cfg.stream.group_size)) if samples else 1


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
