"""The collector: N browser contexts in one process, publishing real transitions.

    await run_collector(cfg, publisher, topics, agent_factory, stop_event)

* ``cfg.collector.contexts`` contexts run concurrently (one asyncio task and one
  ``WebEnv`` each, all in one Chromium; ``_Collector.slot``).
* Episodes cycle over ``cfg.collector.tasks`` (names, ``miniwob/*``, ``experts``)
  and the seeds ``[seed_start, seed_stop)`` (see ``collectors.schedule._Schedule``: runs of
  ``run_length`` episodes of one task per context; the seed offset comes from
  the collector id, so two collectors do not walk the same seeds, unless
  ``seed_offset`` is given).
* Every step becomes a ``streams.records.Transition`` published with
  ``publisher.send(topic, rec, key=group_id or episode_id)`` (keyed by group, so the G episodes of a
  live group reach the same partition, hence one stream worker) (``topics.expert`` when the
  agent's ``source`` is ``"expert"``, else ``topics.real``); ``send`` is
  asynchronous, nothing waits per step.  A failed delivery is the publisher's to
  handle (``streams.delivery``: re-sent on a rebuilt producer); ``PublisherDead``
  (failing past ``kafka.producer_dead_after_s``) ends the run with that error.
* A crashed page or browser is restarted; its episode ends ``truncated``.
* ``stats`` (``CollectorStats``) keeps plain counters for whoever exports
  metrics; an optional ``metrics`` object gets ``on_step(task, latency_s,
  source)``, ``on_episode(task, ok, reward, steps, truncated)``,
  ``on_blocked(kind)``, ``on_restart()`` (a crashed page or browser was
  restarted) and ``on_timeout(task)`` calls, for the methods it has.

The agent protocol (``Agent``), the built-in agents and how the collector calls an agent
(batched, paced): ``collectors.agents``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collectors.agents import ExpertAgent, _Acting, make_agent
from collectors.browser import Browser
from collectors.env import WebEnv
from collectors.schedule import _Pacer, _Schedule, collector_group_size
from collectors.tasks import TaskSpec, resolve_tasks
from collectors.webapps.app import AppUnavailable
from core.config import Config
from core.spaces import Observation
from streams.records import Control, Transition, new_id

log = logging.getLogger(__name__)

# what of a step's ``info`` a transition carries (when set)
_INFO_KEYS = ("reason", "error", "timeout", "crashed", "max_steps", "stopped", "app_failure")


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
    reset_latency_s: deque = field(default_factory=lambda: deque(maxlen=10_000))
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


# --- the loop ---------------------------------------------------------------------


def _reachable(url: str, timeout: float = 0.5) -> bool:
    from urllib.parse import urlsplit

    s = urlsplit(url)
    try:
        with socket.create_connection((s.hostname, s.port or 80), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class _Episode:
    """One episode of one context: what each of its transitions carries, and its history."""

    spec: TaskSpec
    seed: int
    group_id: str
    episode_id: str = field(default_factory=new_id)
    history: list = field(default_factory=list)  # (Observation, Action) pairs so far
    step: int = 0


class _Collector:
    """One collector's run: its agent, schedule, task server, browser and counters.

    ``start`` finds (or starts) the task server and the browser; ``run`` drives one ``slot`` per
    context (each an episode loop on its own ``WebEnv``) plus the heartbeat, then cleans up."""

    def __init__(
        self,
        cfg: Config,
        publisher: Any,
        topics: Any,
        agent: Any,
        stop_event: asyncio.Event,
        metrics: Any,
        collector_id: str,
        stats: CollectorStats,
        *,
        seed_offset: int | None,
        run_length: int | None,
        reload_each_episode: bool,
    ):
        self.cfg, self.cc = cfg, cfg.collector
        self.publisher, self.topics, self.agent = publisher, topics, agent
        self.stop, self.metrics = stop_event, metrics
        self.collector_id, self.stats = collector_id, stats
        self.reload_each_episode = reload_each_episode
        self.source = "expert" if getattr(agent, "source", "real") == "expert" else "real"
        self.topic = topics.expert if self.source == "expert" else topics.real
        self.tasks = self._collectable_tasks()
        self.schedule = self._make_schedule(seed_offset, run_length)
        gpv = float(self.cc.groups_per_version)
        self.pacer = _Pacer(agent, gpv) if gpv > 0 else None
        self.server = None
        self.base_url = ""
        self.browser: Browser | None = None
        self.own_browser = False
        self.acting: _Acting | None = None
        self.run_id = cfg.run_id

    # --- set-up ---------------------------------------------------------------------

    def _collectable_tasks(self) -> list[TaskSpec]:
        """``collector.tasks``; an expert collector leaves out the tasks without an expert."""
        tasks = resolve_tasks(list(self.cc.tasks))
        agent = self.agent
        if isinstance(agent, ExpertAgent):
            missing = [t.name for t in tasks if not agent.supports(t.name)]
            if missing:
                log.warning(
                    "no expert for %s: left out of this expert collector", ", ".join(missing)
                )
            tasks = [t for t in tasks if agent.supports(t.name)]
        if not tasks:
            raise ValueError("no tasks to collect on (collector.tasks is empty or has no experts)")
        return tasks

    def _make_schedule(self, seed_offset: int | None, run_length: int | None) -> _Schedule:
        cc = self.cc
        if seed_offset is None and int(cc.seed_offset) >= 0:
            seed_offset = int(cc.seed_offset)
        offset = seed_offset if seed_offset is not None else zlib.crc32(self.collector_id.encode())
        group = collector_group_size(self.cfg, self.source, self.agent)
        run_length = int(run_length or cc.run_length)  # the default lives in CollectorConfig
        return _Schedule(
            self.tasks,
            int(cc.seed_start),
            int(cc.seed_stop),
            offset,
            int(cc.max_episodes or 0),
            run_length,
            group,
            group_prefix=f"{self.collector_id}:{new_id()[:6]}",
            version=self._agent_version,  # constant for experts: their groups are never cut
            max_staleness=int(self.cfg.stream.max_staleness),
        )

    def _agent_version(self) -> int:
        return int(getattr(self.agent, "policy_version", 0) or 0)

    def _task_server(self) -> str:
        """The configured task server's URL, or (not reachable) an in-process one's."""
        stack = self.cfg.stack
        url = (
            stack.taskserver_url.rstrip("/") + "/"
            if stack.taskserver_url
            else f"http://{stack.bind}:{stack.taskserver_port}/"
        )
        if _reachable(url):
            return url
        from collectors.taskserver import serve

        self.server, _, base_url = serve(stack.bind, 0)
        log.info("task server not running at %s; started one at %s", url, base_url)
        return base_url

    async def start(self, base_url: str | None, browser: Browser | None) -> None:
        self.base_url = base_url if base_url is not None else self._task_server()
        self.own_browser = browser is None
        if browser is None:
            browser = Browser(
                headless=bool(self.cc.headless),
                allowed_origins=[self.base_url],
                on_block=self.on_block,
            )
            await browser.start()
        else:
            browser.on_block = browser.on_block or self.on_block
        self.browser = browser
        self.acting = _Acting(
            self.agent,
            int(self.cc.contexts),
            float(self.cc.max_steps_per_s),
        )

    def on_block(self, kind: str, url: str) -> None:
        self.stats.blocked_requests += 1
        _call(self.metrics, "on_blocked", kind)

    # --- running --------------------------------------------------------------------

    async def run(self) -> None:
        """The contexts and the heartbeat until stopped (or the schedule ends), then clean up."""
        hb = asyncio.ensure_future(self.heartbeat())
        try:
            slots = [asyncio.ensure_future(self.slot(i)) for i in range(int(self.cc.contexts))]
            try:
                await asyncio.gather(*slots)
            finally:
                for s in slots:
                    s.cancel()
        finally:
            hb.cancel()
            self.acting.close()
            if self.own_browser:
                await self.browser.close()
            if self.server is not None:
                self.server.shutdown()
                self.server.server_close()

    async def _next_job(self, i: int) -> tuple[TaskSpec, int, str] | None:
        """(task, seed, group id) of context ``i``'s next episode; None: stop this context.  Nothing
        awaits between the pacer's go and ``schedule.next()`` (see ``_Pacer.turn``)."""
        if self.pacer is not None and not await self.pacer.turn(
            self.stop, self.schedule.starts_group
        ):
            return None
        cut, was = self.schedule.groups_cut, self.schedule.group_version
        job = self.schedule.next(i)
        if self.schedule.groups_cut > cut:
            log.info(
                "[%s] group closed short: it began with policy v%s, the agent acts with v%s",
                self.collector_id,
                was,
                self.schedule.group_version,
            )
            _call(self.metrics, "on_group_cut")
        if job is None:
            return None
        spec, seed = job
        return spec, seed, self.schedule.group_id

    async def slot(self, i: int) -> None:
        """Context ``i``: its own ``WebEnv``, episodes until stopped or the schedule runs out."""
        env = WebEnv(
            self.browser,
            self.base_url,
            self.cc,
            reload_each_episode=self.reload_each_episode,
            app_tokenizer=self.cfg.model.tokenizer,
        )
        failures = 0
        try:
            await env.open()
            while not self.stop.is_set():
                job = await self._next_job(i)
                if job is None:
                    return
                spec, seed, group_id = job
                try:
                    t_reset = time.perf_counter()
                    obs, _info = await env.reset(spec, seed)
                    self.stats.reset_latency_s.append(time.perf_counter() - t_reset)
                    failures = 0
                except AppUnavailable as e:  # the app is down or restarting: wait, not crash
                    self.stats.reset_errors += 1
                    _call(self.metrics, "on_app_failure", spec.name)
                    log.warning("[%s/%d] %s: %s", self.collector_id, i, spec.name, e)
                    await asyncio.sleep(2.0)
                    continue
                except Exception as e:  # noqa: BLE001 - one bad page must not stop the collector
                    self.stats.reset_errors += 1
                    failures += 1
                    log.warning(
                        "[%s/%d] reset %s seed %s failed: %s",
                        self.collector_id,
                        i,
                        spec.name,
                        seed,
                        e,
                    )
                    if failures >= 5:
                        raise
                    await self._restart(env)
                    continue
                if not await self._episode(env, _Episode(spec, seed, group_id), obs):
                    return  # stopped mid-episode: the stream side times it out
        finally:
            await env.close()

    async def _episode(self, env: WebEnv, ep: _Episode, obs: Observation) -> bool:
        """Act and step until the episode ends, publishing every step; False when stopped first."""
        reward, term, trunc, info = 0.0, False, False, {}
        while not self.stop.is_set():
            t_act = time.perf_counter()
            acted = await self.acting.act(obs, ep.history, ep.spec.name)
            self.stats.act_latency_s.append(time.perf_counter() - t_act)
            t0 = time.perf_counter()
            nobs, reward, term, trunc, info = await env.step(acted[0])
            dt = time.perf_counter() - t0
            self._count_step(dt, info)
            rec = self._transition(ep, obs, acted, nobs, reward, term, trunc, info)
            self.publish(rec, ep.group_id or ep.episode_id)  # a group's episodes: one stream worker
            _call(self.metrics, "on_step", ep.spec.name, dt, self.source)
            ep.history.append((obs, acted[0]))
            obs = nobs
            ep.step += 1
            if term or trunc:
                break
        if not (term or trunc):
            return False
        self._count_episode(ep, reward, term, trunc, info)
        if info.get("crashed") or env.crashed:
            self.stats.crashes += 1
            await self._restart(env)
        return True

    def _transition(
        self,
        ep: _Episode,
        obs: Observation,
        acted: tuple,
        nobs: Observation,
        reward: float,
        term: bool,
        trunc: bool,
        info: dict,
    ) -> Transition:
        """The record of one step (``acted``: ``_Acting.act``'s answer)."""
        action, logp, ntok, pv, wv, pinfo = acted
        rec = Transition(
            run_id=self.run_id,
            episode_id=ep.episode_id,
            step=ep.step,
            task=ep.spec.name,
            seed=int(ep.seed),
            source=self.source,
            policy_version=pv,
            world_model_version=wv,
            obs=obs.to_dict(),
            action=action.to_text(),
            next_obs=nobs.to_dict(),
            reward=float(reward),
            done=bool(term),
            truncated=bool(trunc),
            producer_id=self.collector_id,
            group_id=ep.group_id,
            behaviour_logprob=logp,
            action_tokens=int(ntok),
            candidates_hash=str(pinfo.get("candidates_hash") or ""),
            info={k: info[k] for k in _INFO_KEYS if info.get(k)},
        )
        if pinfo.get("perturbed"):  # a near miss of the perturbed expert (collectors/perturbed.py)
            rec.info["perturbed"] = str(pinfo["perturbed"])
        if pinfo.get("temperature") is not None:  # the T of behaviour_logprob = log pi_T
            rec.info["temperature"] = float(pinfo["temperature"])
        return rec

    def publish(self, rec: Any, key: str) -> None:
        if self.publisher is None:
            return
        self.publisher.send(self.topic, rec, key=key)
        self.stats.published += 1

    def _count_step(self, dt: float, info: dict) -> None:
        stats = self.stats
        stats.step_latency_s.append(dt)
        stats.steps += 1
        stats.last_step_at = time.time()
        if info.get("error"):
            stats.action_errors += 1

    def _count_episode(
        self, ep: _Episode, reward: float, term: bool, trunc: bool, info: dict
    ) -> None:
        stats, task = self.stats, ep.spec.name
        stats.episodes += 1
        stats.episodes_per_task[task] += 1
        ok = term and reward > 0
        if ok:
            stats.successes += 1
            stats.successes_per_task[task] += 1
        if trunc:
            stats.truncated += 1
        if info.get("app_failure"):
            _call(self.metrics, "on_app_failure", task)
        if info.get("timeout"):
            stats.timeouts += 1
            _call(self.metrics, "on_timeout", task)
        _call(self.metrics, "on_episode", task, bool(ok), float(reward), ep.step, bool(trunc))

    async def _restart(self, env: WebEnv) -> None:
        """A new context for ``env`` (relaunching Chromium when that fails)."""
        browser = self.browser
        launches = browser.launches
        try:
            await env.restart()
        except Exception as e:  # noqa: BLE001
            log.error("restarting the browser context failed: %s; relaunching Chromium", e)
            await browser.restart()
            await env.open()
        if browser.launches != launches:
            self.stats.browser_restarts += 1
        _call(self.metrics, "on_restart")

    async def heartbeat(self) -> None:
        """A ``heartbeat`` Control (the stats snapshot) on ``topics.collectors`` every period."""
        key = getattr(self.topics, "collectors", None) if self.topics is not None else None
        period = float(self.cc.heartbeat_s or 2.0)
        while not self.stop.is_set():
            if self.publisher is not None and key:
                self._send_heartbeat(key)
            try:
                await asyncio.wait_for(self.stop.wait(), period)
            except TimeoutError:
                pass

    def _send_heartbeat(self, key: str) -> None:
        stats = self.stats
        info = stats.snapshot()
        info.pop("per_task", None)
        info.update(
            tasks=[t.name for t in self.tasks], contexts=int(self.cc.contexts), source=self.source
        )
        try:
            self.publisher.send(
                key,
                Control(
                    run_id=self.run_id,
                    kind="heartbeat",
                    sender=self.collector_id,
                    value=float(stats.steps),
                    info=info,
                ),
                key=self.collector_id,
            )
        except Exception as e:  # noqa: BLE001 - PublisherDead too: the contexts' publish raises it
            log.warning("heartbeat failed: %s", e)


async def run_collector(
    cfg: Config,
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
    collector_id = collector_id or f"collector-{socket.gethostname()}-{new_id()[:6]}"
    stats = stats if stats is not None else CollectorStats()
    stats.collector_id = collector_id
    agent = make_agent(cfg, agent_factory)
    run = _Collector(
        cfg,
        publisher,
        topics,
        agent,
        stop_event,
        metrics,
        collector_id,
        stats,
        seed_offset=seed_offset,
        run_length=run_length,
        reload_each_episode=reload_each_episode,
    )
    await run.start(base_url, browser)
    await run.run()
    return stats
