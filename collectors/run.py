"""``dynaweb collect``: a collector process that can join a running system.

It creates the run's topics if needed (idempotent), announces itself on the
collectors topic, registers its metrics endpoint for Prometheus discovery and
runs ``collectors.collector.run_collector`` until SIGTERM/Ctrl-C or
``collector.max_episodes``.  Its heartbeat gauge moves only while its publisher
delivers (``liveness_beat``); a publisher dead for ``kafka.producer_dead_after_s``
(its producer rebuilt in vain, ``streams.delivery``) stops it with an error, so
the supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any

import torch

from collectors import metrics as M
from core.config import Config
from core.metrics import MetricsEndpoint
from streams import records
from streams.kafka import PublisherDead, ensure_topics, make_publisher

if TYPE_CHECKING:
    from collectors.policy_agent import LatestPolicyAgent

log = logging.getLogger(__name__)


class PromMetrics:
    """Receives the collector's callbacks and exports them (``collectors.metrics``)."""

    def __init__(self, run: str, collector: str, policy: str):
        self.run, self.collector, self.policy = run, collector, policy
        self.recent: dict[str, deque] = defaultdict(lambda: deque(maxlen=50))
        self.agent: Any = None
        # exported as 0 before the first increment
        for m in (M.BLOCKED, M.RESTARTS, M.PUBLISH_ERRORS, M.GROUPS_CUT):
            m.labels(run, collector)

    def on_step(self, task: str, latency_s: float, source: str) -> None:
        M.STEPS.labels(self.run, self.collector, self.policy, task).inc()
        M.STEP_LATENCY.labels(self.run, self.collector, self.policy).observe(latency_s)
        if self.agent is not None:
            M.POLICY_VERSION.labels(self.run, self.collector).set(
                getattr(self.agent, "policy_version", 0)
            )

    def on_episode(self, task: str, ok: bool, reward: float, steps: int, truncated: bool) -> None:
        outcome = "success" if ok else ("truncated" if truncated else "failure")
        M.EPISODES.labels(self.run, self.collector, self.policy, task, outcome).inc()
        self.recent[task].append(1.0 if ok else 0.0)
        r = self.recent[task]
        M.SUCCESS_RATE.labels(self.run, self.collector, self.policy, task).set(sum(r) / len(r))

    def on_app_failure(self, task: str) -> None:
        M.APP_FAILURES.labels(self.run, self.collector, task).inc()

    def on_timeout(self, task: str) -> None:
        M.TIMEOUTS.labels(self.run, self.collector, task).inc()

    def on_blocked(self, kind: str) -> None:
        M.BLOCKED.labels(self.run, self.collector).inc()

    def on_restart(self) -> None:
        M.RESTARTS.labels(self.run, self.collector).inc()

    def on_group_cut(self) -> None:
        M.GROUPS_CUT.labels(self.run, self.collector).inc()


class LatestAgentAdapter:
    """Collector Agent protocol over ``LatestPolicyAgent`` (model calls off the event loop)."""

    source = "real"

    def __init__(self, inner: LatestPolicyAgent):
        self.inner = inner

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    world_model_version = 0

    async def refresh(self) -> None:
        """Pick up a newer checkpoint now (the on-policy pacer waits on the version)."""
        await asyncio.to_thread(self.inner._refresh)

    async def act(self, obs_list: list, histories: list[list]) -> list:
        texts = [[a.to_text() for _, a in h] for h in histories]
        return await asyncio.to_thread(self.inner.act, obs_list, texts)


def liveness_beat(pub: Any, run: str, collector_id: str) -> bool:
    """One heartbeat tick: the heartbeat gauge moves only while the publisher delivers (a
    collector whose records fail is not alive: ``dynaweb status`` shows the heartbeat's age and
    ``DynawebCollectorSilent`` fires). False once the publisher is dead: stop the collector."""
    if pub.healthy:
        M.HEARTBEAT.labels(run, collector_id).set(time.time())
        return True
    if pub.dead:
        log.error("publishing has failed too long (%d records waiting): stopping", pub.outstanding)
        return False
    log.warning(
        "publishes failing (%d errors, %d records waiting): heartbeat withheld",
        pub.errors,
        pub.outstanding,
    )
    return True


def agent_factory(cfg: Config) -> Any:
    from collectors.agents import default_agent_factory

    if cfg.collector.policy == "latest":
        from collectors.policy_agent import latest_policy_agent

        return LatestAgentAdapter(latest_policy_agent(cfg))
    return default_agent_factory(cfg)


def main_collect(cfg: Config, collector_id: str) -> int:
    from collectors.collector import run_collector

    torch.set_num_threads(cfg.threads)
    # app suites (collectors.webapps) find the stack's app under this home
    os.environ.setdefault("DYNAWEB_HOME", str(cfg.home_path))
    topics = ensure_topics(cfg)
    pub = make_publisher(
        cfg.kafka,
        client="collector",
        run=cfg.run_id,
        on_error=lambda e: M.PUBLISH_ERRORS.labels(cfg.run_id, collector_id).inc(),
    )
    MetricsEndpoint(cfg, "collector", collector_id)
    pm = PromMetrics(cfg.run_id, collector_id, cfg.collector.policy)
    pub.send(
        topics.collectors,
        records.Control(
            cfg.run_id,
            "announce",
            collector_id,
            info={
                "tasks": list(cfg.collector.tasks),
                "policy": cfg.collector.policy,
                "contexts": cfg.collector.contexts,
            },
        ),
        key=collector_id,
    )

    def make_agent(c: Config) -> Any:
        pm.agent = agent_factory(c)
        return pm.agent

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        beat = threading.Event()
        dead = threading.Event()

        def heartbeat() -> None:
            while not beat.wait(cfg.collector.heartbeat_s):
                if not liveness_beat(pub, cfg.run_id, collector_id):
                    dead.set()
                    loop.call_soon_threadsafe(stop.set)
                    return

        threading.Thread(target=heartbeat, daemon=True).start()
        try:
            stats = await run_collector(
                cfg, pub, topics, make_agent, stop, metrics=pm, collector_id=collector_id
            )
            log.info("collector %s done: %s", collector_id, stats.snapshot())
        finally:
            beat.set()
        if dead.is_set():
            raise PublisherDead(
                f"collector {collector_id}: publishing failed for more than "
                f"{cfg.kafka.producer_dead_after_s:.0f}s (kafka.producer_dead_after_s); exiting "
                "non-zero so the supervisor restarts it"
            )

    try:
        asyncio.run(main())
    finally:
        pub.close()
    pub.check()
    return 0
