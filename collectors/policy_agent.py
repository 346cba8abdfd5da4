"""The ``latest`` collector policy: the newest policy checkpoint, hot-reloaded.

A background thread watches the checkpoint topic (the topic's one watcher,
``streams.checkpoints.CheckpointWatcher``); on a policy announcement, and every
``s3.latest_poll_s`` in any case (an announcement may be lost), the agent
re-reads ``LATEST`` in S3, verifying sha256 (``models.checkpoints.reader.ModelSlot``),
and swaps the model between two ``act`` calls, never in the middle of one.  An
announced version is downloaded and loaded in a thread of its own while the agent
keeps acting (``models.checkpoints.reader.Prefetcher``); the swap itself is then instant.  The trainer publishes version 0
before its first step, so ``act`` only waits at the very start of a run.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from core.config import Config
from core.s3 import make_client
from core.spaces import Observation
from models.checkpoints.reader import ModelSlot, Prefetcher, ReloadClock, reader_workdir
from models.checkpoints.store import CheckpointStore
from streams.checkpoints import CheckpointWatcher
from streams.topics import Topics

log = logging.getLogger(__name__)


class LatestPolicyAgent:
    """The policy agent over a model slot (``models.parts.Slot``).  The constructor opens nothing;
    ``start`` starts the prefetch thread and the announcement watcher, ``latest_policy_agent``
    builds the real parts from the config."""

    def __init__(
        self,
        cfg: Config,
        slot: Any,
        stop: threading.Event | None = None,
        producer_id: str = "",
        work: Any = None,
    ):
        from models.policy.runner import sampler_generator

        self.cfg = cfg
        # one random stream per sampler for its whole life: a hot reload must not replay earlier draws
        self.generator = sampler_generator(
            cfg.run_id, producer_id or f"policy-agent-{uuid.uuid4().hex}"
        )
        self.stop = stop or threading.Event()
        self.slot = slot
        self.work = work  # the slot's download folder
        self._dirty = (
            threading.Event()
        )  # re-read LATEST at the next act (installs a prefetched one)
        self._dirty.set()
        self.reload_clock = ReloadClock(cfg.run_id, "collector")
        self._runner: Any = None
        self._lock = threading.Lock()
        self.prefetcher: Prefetcher | None = None
        self._watcher: CheckpointWatcher | None = None

    def start(self) -> LatestPolicyAgent:
        """An announced version is downloaded and loaded while episodes go on, then installed;
        the watcher reads the checkpoint topic from the beginning (the newest announcement before
        this agent started counts too)."""
        cfg = self.cfg
        self.prefetcher = Prefetcher(
            [self.slot], self._dirty.set, self.stop, name="collector-prefetch"
        ).start()
        self._watcher = CheckpointWatcher(
            cfg.kafka,
            [Topics(cfg.run_id, cfg.kafka.partitions).checkpoints],
            on_announcement=self._on_announcement,
            kinds=("policy",),
            partitions=(0,),
            poll_ms=1000,
            connect_in_thread=True,
            stop=self.stop,
        ).start()
        return self

    def _on_announcement(self, rec: Any) -> None:
        self.reload_clock.announced(rec.version)
        if not self.slot.known(rec.version):
            self.prefetcher.want()

    @property
    def policy_version(self) -> int:
        return -1 if self.slot.version is None else int(self.slot.version)

    world_model_version = 0

    def _refresh(self) -> None:
        """Re-read LATEST after an announcement (or before the first model), else when its poll
        is due (``ModelSlot.poll``: a lost announcement delays a reload, never prevents it)."""
        announced = self._dirty.is_set() or self._runner is None
        if not announced and not self.slot.poll_due():
            return
        self._dirty.clear()
        with self._lock:
            loaded = self.slot.refresh() if announced else self.slot.poll()
            if loaded or self._runner is None and self.slot.model is not None:
                from models.policy.runner import PolicyRunner

                self._runner = PolicyRunner(
                    self.slot.model, self.slot.tokenizer, self.cfg.model, generator=self.generator
                )
                self._runner.policy_version = self.slot.version

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = threading.Event()
        waited = 0.0
        while self._runner is None and not self.stop.is_set():
            self._dirty.set()
            self._refresh()
            if self._runner is None:
                deadline.wait(1.0)
                waited += 1.0
                if waited >= timeout:
                    raise TimeoutError(
                        f"no policy checkpoint for run {self.cfg.run_id!r} after {timeout:.0f}s; "
                        "is the trainer running (`dynaweb train`)?"
                    )

    def act(self, observations: list[Observation], histories: list[list[str]]) -> list[tuple]:
        """(Action, log pi_T, ntokens, info with candidates_hash and temperature) per observation."""
        self._refresh()
        if self._runner is None:
            self.wait_ready()
        runner = self._runner  # the pacer's refresh (another thread) may replace it meanwhile
        self.reload_clock.used(runner.policy_version)
        out = runner.act_info(observations, histories, temperature=self.cfg.dream.temperature)
        for _a, _lp, _nt, info in out:  # the version that acted (collectors.agents._Acting)
            info["policy_version"] = int(runner.policy_version)
        return out


def latest_policy_agent(
    cfg: Config, stop: threading.Event | None = None, producer_id: str = ""
) -> LatestPolicyAgent:
    """The ``latest`` agent with its real parts (the run's checkpoint store in S3, a model slot
    in a reader folder of its own), started."""
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    work = reader_workdir("collector-policy", cfg.s3.reader_dir)
    slot = ModelSlot(
        store,
        "policy",
        work,
        cfg.run_id,
        poll_s=cfg.s3.latest_poll_s,
        component="collector",
        model_config=cfg.model,
    )
    return LatestPolicyAgent(cfg, slot, stop, producer_id, work).start()
