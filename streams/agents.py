"""Faust agents of the stream worker (the data plane).

``register(app, cfg, topics)`` wires:

- one agent on the real/expert/dream transition topics (``value_serializer=
  "raw"``; we decode ourselves). Invalid messages go to the dead-letter topic
  with their reason and original bytes (``streams.kafka.DeadLetters``) and the
  agent keeps running. Valid ones are deduplicated by ``(episode_id, step)``,
  assembled into episodes, grouped (dreams by ``group_id``) and handed to the
  ``HybridMixer``; training batches go to ``topics.policy_batches``. Every
  real and expert transition (never a dream) is forwarded as its original
  bytes to ``topics.world_model``, except a held-out share of episodes
  (stable hash of the episode id < ``heldout_fraction``) which goes to
  ``topics.world_model_eval``.
- one agent on ``topics.checkpoints``: the latest ``policy`` version.
- one agent on ``topics.control``: the trainer's ``consumed`` counts.
- a timer: idle/group timeouts, cold-start batches, back-pressure, metrics.

State is plain Python (no Faust Tables). ``StreamState.rebuild`` refills the
expert pool and the latest policy version at start by reading the expert and
checkpoint topics from the beginning up to a sentinel (never a high-water
mark). All state is touched from the event loop only.

Back-pressure: the trainer publishes ``Control(kind="consumed", value=N,
sender="trainer")`` (N = batches consumed so far; optionally
``info={"by_worker": {worker_id: N}}``). When ``produced - consumed >
lag_bound`` the worker publishes ``Control(kind="backpressure", value=factor,
sender=worker_id)`` with ``factor = max(0.05, lag_bound / lag)`` (repeated
every ``_BP_REPEAT_S`` while throttled), and ``value=1.0`` once the lag is
back within the bound. While throttled, cold-start expert-only batches pause.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from typing import Any

import faust

from infra.config import Config
from streams import kafka as sk
from streams import metrics as M
from streams import records
from streams.app import worker_id as default_worker_id
from streams.assembly import Deduper, EpisodeAssembler, GroupAssembler
from streams.mixer import HybridMixer
from streams.records import Control, RecordError, Trajectory
from streams.topics import Topics

log = logging.getLogger(__name__)

_BP_REPEAT_S = 5.0
_TICK_S = 0.25
_TOPIC_SOURCE = {"real": "real", "expert": "expert", "dream": "dream"}


def heldout(episode_id: str, fraction: float) -> bool:
    """Stable per-episode split: the same episode always lands on the same side."""
    if fraction <= 0:
        return False
    h = int.from_bytes(hashlib.sha1(episode_id.encode()).digest()[:8], "big") / 2**64
    return h < fraction


class _Sender:
    """Duck-typed ``streams.kafka.Publisher`` over Faust's aiokafka producer.

    ``send`` only queues (it is called from synchronous code, e.g.
    ``DeadLetters.route``); ``drain`` hands the queue to the producer. The
    transition agent drains before its events are acked, and Faust flushes the
    producer before it commits offsets, so the output of a processed message
    is on the broker before its offset is committed (at-least-once). Faust's
    own ``send_soon`` buffer holds 100 messages (it logged "producer buffer
    full" on every burst); this path batches in aiokafka's accumulator.
    """

    def __init__(self, app: faust.App, on_error: Any = None):
        self.app = app
        self.pending: list[tuple] = []
        self.sent = 0
        self.errors = 0
        self._on_error = on_error

    def send(
        self, topic: str, rec: Any, key: str | bytes | None = None, headers: list | None = None
    ) -> None:
        value = rec if isinstance(rec, bytes) else records.encode(rec)
        if isinstance(key, str):
            key = key.encode()
        self.pending.append((topic, key, value, headers))

    def _done(self, fut) -> None:
        exc = fut.exception() if not fut.cancelled() else None
        if exc is not None:
            self.errors += 1
            if self._on_error:
                self._on_error(exc)
            log.error("publish failed: %s", exc)

    async def drain(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        producer = self.app.producer
        for topic, key, value, headers in batch:
            fut = await producer.send(topic, key, value, None, None, headers)
            fut.add_done_callback(self._done)
            self.sent += 1


class StreamState:
    """Everything the worker knows; driven by the agents, testable without Kafka."""

    def __init__(self, cfg: Config, topics: Topics, clock=time.monotonic):
        s = cfg.stream
        self.cfg = cfg
        self.topics = topics
        self.clock = clock
        self.worker_id = default_worker_id(cfg)
        self.run_id = cfg.run_id
        self.m = M.Bound(cfg.run_id, self.worker_id)
        self.dedupe = Deduper(capacity=int(getattr(s, "dedupe_capacity", 200_000)))
        self.episodes = EpisodeAssembler(s.episode_idle_timeout_s, deduper=self.dedupe)
        self.groups = GroupAssembler(s.group_size, s.group_timeout_s, s.emit_incomplete_groups)
        self.mixer = HybridMixer(
            run_id=cfg.run_id, worker_id=self.worker_id, expert_fraction=s.expert_fraction,
            batch_trajectories=s.batch_trajectories, max_staleness=s.max_staleness,
            samples_per_insert=s.samples_per_insert, expert_pool_size=s.expert_pool_size,
            cold_start_batch_s=s.cold_start_batch_s, reuse_wait_s=float(getattr(s, "reuse_wait_s", 5.0)),
        )  # fmt: skip
        self.topic_source = {topics.name(k): v for k, v in _TOPIC_SOURCE.items()}
        self.out: _Sender | None = None
        self.dead: sk.DeadLetters | None = None
        self.produced = 0
        self.consumed = 0
        self.throttled = False
        self.rate = 1.0
        self._bp_sent_at = 0.0
        self.counts: Counter = Counter()  # transitions_<source>, forwarded_<dest>, invalid

    # --- wiring -------------------------------------------------------------

    def attach(self, app: faust.App) -> None:
        self.out = _Sender(app, on_error=lambda _e: self.m(M.publish_errors).inc())
        self.dead = sk.DeadLetters(self.out, self.topics.deadletter, f"stream-worker:{self.worker_id}",
                                   counter=self.m.dead_letter_counter())  # fmt: skip

    # --- recovery -----------------------------------------------------------

    def rebuild(self, timeout: float = 120.0) -> dict:
        """Refill the expert pool and the latest policy version from their topics
        (from the beginning up to a sentinel we produce now)."""
        kc = self.cfg.kafka
        dd = Deduper(capacity=10_000_000)
        asm = EpisodeAssembler(idle_timeout_s=float("inf"), max_open=1_000_000, deduper=dd)
        n = 0
        for _m, raw in sk.read_until_sentinel(kc, self.topics.expert, self.run_id, timeout=timeout):
            if sk.is_control(raw):
                continue
            try:
                t = records.decode(raw, expect="transition", max_bytes=kc.max_message_bytes)
            except RecordError:
                continue  # dead-lettered when it was first processed
            if t.source != "expert" or t.run_id != self.run_id or not dd.accept(t):
                continue
            n += 1
            traj = asm.add(t, 0.0)
            if traj is not None:
                self.mixer.add_expert(traj)
        # episodes still open continue with the live stream (dedupe makes the overlap harmless)
        now = self.clock()
        for eid, ep in asm.open.items():
            ep.last_seen = now
            self.episodes.open[eid] = ep
        latest = 0
        for _m, raw in sk.read_until_sentinel(
            kc, self.topics.checkpoints, self.run_id, timeout=timeout
        ):
            if sk.is_control(raw):
                continue
            try:
                c = records.decode(raw, expect="checkpoint")
            except RecordError:
                continue
            if c.kind == "policy":
                latest = max(latest, c.version)
        self.mixer.set_latest_version(latest)
        info = {"expert_transitions": n, "expert_pool": len(self.mixer.pool),
                "open_expert_episodes": len(asm.open), "latest_policy_version": latest}  # fmt: skip
        log.info("stream worker state rebuilt: %s", info)
        return info

    # --- hot path -----------------------------------------------------------

    def on_transition(
        self, topic: str, raw: bytes | None, offset: int = -1, now: float | None = None
    ) -> None:
        if raw is not None and sk.is_control(raw):
            return  # sentinels and other control records are not data
        try:
            t = records.decode(raw, expect="transition", max_bytes=self.cfg.kafka.max_message_bytes)
            want = self.topic_source.get(topic)
            if want is not None and t.source != want:
                raise RecordError("source_mismatch", f"source {t.source!r} on the {want} topic")
            if t.run_id != self.run_id:
                raise RecordError("wrong_run", f"run_id {t.run_id!r} != {self.run_id!r}")
        except RecordError as e:
            self.counts["invalid"] += 1
            self.dead.route(raw, e, topic, offset)
            return
        if not self.dedupe.accept(t):
            self.m(M.duplicates).inc()
            return
        self.m(M.transitions, source=t.source).inc()
        if t.source != "dream":
            dest = (
                self.topics.world_model_eval
                if heldout(t.episode_id, self.cfg.stream.heldout_fraction)
                else self.topics.world_model
            )
            self.out.send(dest, raw, key=t.episode_id)
            self.m(
                M.forwarded, dest="eval" if dest == self.topics.world_model_eval else "train"
            ).inc()
        now = self.clock() if now is None else now
        traj = self.episodes.add(t, now)
        if traj is not None:
            self.on_trajectory(traj, now)

    def on_trajectory(self, traj: Trajectory, now: float) -> None:
        self.m(
            M.trajectories,
            source=traj.source,
            outcome="truncated" if traj.truncated else "complete",
        ).inc()
        if traj.source == "expert":
            self.mixer.add_expert(traj)
            return
        if traj.source == "dream":  # generators run a hot-reloaded checkpoint: its version exists
            self.set_latest(traj.policy_version)
        group = self.groups.add(traj, now)
        if group is not None:
            self.mixer.add_group(group, now)

    def set_latest(self, version: int) -> None:
        self.mixer.set_latest_version(version)

    def on_checkpoint(self, raw: bytes | None) -> None:
        if raw is not None and sk.is_control(raw):
            return  # catch-up sentinels
        try:
            c = records.decode(raw, expect="checkpoint")
        except RecordError as e:
            self.dead.route(raw, e, self.topics.checkpoints)
            return
        if c.kind == "policy" and c.run_id == self.run_id:
            self.set_latest(c.version)

    def on_control(self, raw: bytes | None) -> None:
        try:
            c = records.decode(raw, expect="control")
        except RecordError as e:
            self.dead.route(raw, e, self.topics.control)
            return
        if c.kind != "consumed" or c.run_id != self.run_id:
            return
        by_worker = c.info.get("by_worker") if isinstance(c.info, dict) else None
        value = by_worker.get(self.worker_id) if isinstance(by_worker, dict) else None
        value = c.value if value is None else value
        try:
            self.consumed = max(self.consumed, int(value))
        except (TypeError, ValueError):
            pass

    def emit(self, now: float | None = None) -> int:
        """Send every batch the mixer can form now."""
        now = self.clock() if now is None else now
        n = 0
        for b in self.mixer.poll(now, allow_expert_only=not self.throttled):
            # == records.encode(b), without asdict's deep copy of every observation
            raw = json.dumps(vars(b), ensure_ascii=False, separators=(",", ":")).encode()
            self.out.send(self.topics.policy_batches, raw, key=b.batch_id)
            self.m(M.batches, kind=b.kind).inc()
            self.m(M.last_expert_fraction).set(b.expert_fraction)
            n += 1
        self.produced += n
        return n

    # --- timer --------------------------------------------------------------

    def tick(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        for traj in self.episodes.sweep(now):
            self.on_trajectory(traj, now)
        for group in self.groups.sweep(now):
            self.mixer.add_group(group, now)
        self.emit(now)
        self.backpressure(now)
        self.sync_metrics()

    def backpressure(self, now: float) -> None:
        lag = max(0, self.produced - self.consumed)
        bound = max(1, int(self.cfg.stream.lag_bound))
        self.m(M.lag).set(lag)
        if lag > bound:
            rate = max(0.05, round(bound / lag, 3))
            changed = not self.throttled or abs(rate - self.rate) > 0.1 * self.rate
            if changed or now - self._bp_sent_at >= _BP_REPEAT_S:
                self._publish_rate(rate, lag, now)
            self.throttled = True
        elif self.throttled:
            self.throttled = False
            self._publish_rate(1.0, lag, now)

    def _publish_rate(self, rate: float, lag: int, now: float) -> None:
        self.rate = rate
        self._bp_sent_at = now
        msg = Control(run_id=self.run_id, kind="backpressure", sender=self.worker_id, value=rate,
                      info={"lag": lag, "produced": self.produced, "consumed": self.consumed,
                            "lag_bound": self.cfg.stream.lag_bound})  # fmt: skip
        self.out.send(self.topics.control, msg, key=self.worker_id)
        self.m(M.backpressure_msgs).inc()
        self.m(M.rate_factor).set(rate)
        log.info(
            "back-pressure: lag %d (bound %d) -> rate %.3f", lag, self.cfg.stream.lag_bound, rate
        )

    def sync_metrics(self) -> None:
        mx, m = self.mixer, self.m
        m.sync(M.dropped, mx.drops, label="reason")
        m.sync_value(M.stale_dropped, mx.drops["stale"])
        m.sync(M.groups, self.groups.stats, label="outcome")
        m.sync(M.episodes, self.episodes.stats, label="outcome")
        m.sync(M.batch_trajectories, mx.emitted_by_source, label="source")
        m.sync_value(M.reuse_over_bound, mx.stats["reuse_over_bound"])
        closed = sum(self.groups.stats.values())
        m(M.group_completeness).set(self.groups.stats["complete"] / closed if closed else 1.0)
        m(M.expert_fraction).set(mx.realised_mixed_fraction)
        m(M.pool_size).set(len(mx.pool))
        m(M.reuse).set(mx.realised_reuse)
        m(M.pending).set(mx.pending_trajectories)
        m(M.open_episodes).set(len(self.episodes))
        m(M.open_groups).set(len(self.groups))
        m(M.latest_version).set(mx.latest_version)

    def snapshot(self) -> dict:
        mx = self.mixer
        return {
            "produced": self.produced, "consumed": self.consumed, "throttled": self.throttled,
            "pool": len(mx.pool), "pending": mx.pending_trajectories, "latest": mx.latest_version,
            "duplicates": self.dedupe.duplicates, "drops": dict(mx.drops), "groups": dict(self.groups.stats),
            "reuse": mx.realised_reuse, "mixed_fraction": mx.realised_mixed_fraction,
            "dead_letters": self.dead.count if self.dead else 0,
        }  # fmt: skip


def register(app: faust.App, cfg: Config, topics: Topics, state: StreamState | None = None,
             take: int = 1000, within: float = 0.05) -> StreamState:  # fmt: skip
    """Register the worker's agents and timer on ``app``; returns the shared state."""
    state = state or StreamState(cfg, topics)
    state.attach(app)
    src = app.topic(*topics.transitions, value_serializer="raw", key_serializer="raw")
    ckpt = app.topic(topics.checkpoints, value_serializer="raw", key_serializer="raw")
    ctrl = app.topic(topics.control, value_serializer="raw", key_serializer="raw")

    @app.agent(src, name=f"dynaweb-{cfg.run_id}-transitions")
    async def transitions(stream):
        async for events in stream.take_events(take, within=within):
            for ev in events:
                msg = ev.message
                state.on_transition(msg.topic, ev.value, msg.offset)
            state.emit()
            await state.out.drain()

    @app.agent(ckpt, name=f"dynaweb-{cfg.run_id}-checkpoints")
    async def checkpoints(stream):
        async for events in stream.take_events(100, within=0.1):
            for ev in events:
                state.on_checkpoint(ev.value)
            await state.out.drain()

    @app.agent(ctrl, name=f"dynaweb-{cfg.run_id}-control")
    async def control(stream):
        async for events in stream.take_events(100, within=0.1):
            for ev in events:
                state.on_control(ev.value)
            await state.out.drain()

    @app.timer(interval=_TICK_S, name=f"dynaweb-{cfg.run_id}-tick")
    async def tick():
        state.tick()
        await state.out.drain()

    state.agents = (transitions, checkpoints, control, tick)
    return state
