"""Faust agents of the stream worker (the data plane); the logic is in
streams.state.StreamState, this module wires it to Faust.

``register(app, cfg, topics, state, side)`` adds:

- one agent on the real/expert/dream transition topics, declared with
  ``acks=False``: Faust never commits them. The worker commits itself (every
  ``_COMMIT_S``, after flushing the producer) the offset of the oldest message
  still held by an episode in progress (``StreamState.commit_points``), so a
  crash loses nothing (streams.recovery explains the whole scheme).
  The records are delivered in bulk: ``streams.bulk.BulkConsumer`` hands
  every fetched list of records of these topics to ``Runner.on_records``
  (synchronously), then awaits ``Runner.after`` once (emit, hand the output
  to the producer). The agent itself processes whatever reaches it through
  Faust's usual per-message path (none when the app is a ``streams.bulk.App``).
- a timer: the side reader's queue (experts, checkpoints, control, read in
  full by every worker: streams.side), idle/group timeouts, cold-start
  batches, back-pressure, metrics, commits and the ``ready`` file.
- rebalance hooks: on revoke the agent stops processing; on assignment the
  state is reset and the episodes already emitted since the new commit
  points are loaded (``streams.recovery``), so several workers can share the
  topics (each batch is made by one worker) and partitions can move.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import faust

from core.config import Config
from streams import metrics as M
from streams import records, recovery
from streams.app import app_id
from streams.side import SideReader
from streams.state import StreamState
from streams.topics import Topics

log = logging.getLogger(__name__)

_TICK_S = 0.25
_COMMIT_S = 1.0


class _Sender:
    """Duck-typed ``streams.kafka.Publisher`` over Faust's aiokafka producer.

    ``send`` only queues (it is called from synchronous code, e.g.
    ``DeadLetters.route``); ``drain`` hands the queue to the producer. Our
    commits flush the producer first, so the output of a message is on the
    broker before its offset is committed (at-least-once).
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
        send = self.app.producer.send
        done = self._done
        for topic, key, value, headers in batch:
            fut = await send(topic, key, value, None, None, headers)
            fut.add_done_callback(done)
        self.sent += len(batch)


class Runner:
    """Glue between Faust and the state: processing, commits, rebalances, readiness."""

    def __init__(
        self,
        app: faust.App,
        cfg: Config,
        topics: Topics,
        state: StreamState,
        side: SideReader | None,
        ready_file: Path | None,
    ):
        self.app, self.cfg, self.topics, self.state, self.side = app, cfg, topics, state, side
        self.ready_file = ready_file
        self.sender = _Sender(app, on_error=lambda _e: state.m(M.publish_errors).inc())
        state.attach(self.sender)
        self.frozen = True  # until the first assignment was prepared
        self.early: list = []
        self.assigned_once = False
        self._committed_at = 0.0
        self._ready = False
        self.on_caught_up = None
        self.state_file = ready_file.with_name("state.json") if ready_file is not None else None
        self._state_at = 0.0

    def process(self, events) -> None:
        """Faust events (the agent's per-message path)."""
        if self.frozen:  # rebalancing: kept until the new assignment is prepared
            self.early.append(("events", events))
            return
        gen = self.app.consumer_generation_id
        on = self.state.on_transition
        for ev in events:
            msg = ev.message
            if msg.generation_id != gen:
                continue  # from an earlier assignment; re-read from the commit point
            on(msg.topic, ev.value, msg.offset, msg.tp)

    def on_records(self, tp, recs: list, generation_id: int) -> None:
        """aiokafka records of one partition, fetched under ``generation_id`` (the bulk path)."""
        if self.frozen:
            self.early.append(("records", (tp, recs, generation_id)))
            return
        if generation_id != self.app.consumer_generation_id:
            return  # from an earlier assignment; re-read from the commit point
        on, topic = self.state.on_transition, tp.topic
        for r in recs:
            on(topic, r.value, r.offset, tp)

    async def after(self) -> None:
        st = self.state
        seen = st.last_at
        st.emit()
        await self.sender.drain()
        st.settle()
        if seen is not None and st.last_at == seen:
            st.done_at = time.time()  # the output of every message processed is with the producer

    async def tick(self) -> None:
        st = self.state
        if self.side is not None:
            self.side.check()
            was = self.side.caught_up.is_set()
            self.side.drain(st.on_side)
            if not was and self.side.caught_up.is_set() and self.on_caught_up:
                self.on_caught_up()
        seen = st.last_at
        st.tick()
        stale = seen is not None and (st.done_at or 0) < seen
        if stale:  # the last fetch's after() raced more records in: do its emit once more
            st.emit()
        await self.sender.drain()
        st.settle()
        if stale and st.last_at == seen:
            st.done_at = time.time()
        now = time.monotonic()
        if not self.frozen and not self.app.rebalancing and now - self._committed_at >= _COMMIT_S:
            self._committed_at = now
            await self.commit()
        if self.state_file is not None and now - self._state_at >= 1.0:
            self._state_at = now  # for operators and tests: what this worker holds now
            self.state_file.write_text(json.dumps({**st.snapshot(), **st.side_snapshot()}))
        if (
            not self._ready
            and self.assigned_once
            and (self.side is None or self.side.caught_up.is_set())
        ):
            self._ready = True
            if self.ready_file is not None:
                self.ready_file.write_text(st.worker_id)

    async def commit(self) -> None:
        points = self.state.commit_points()
        if not points:
            return
        await self.app.producer.flush()
        assignment = self.app.consumer.assignment()
        points = {tp: o for tp, o in points.items() if tp in assignment}
        if points and await self.app.consumer._commit(points):
            self.state.committed.update(points)

    async def on_revoked(self, revoked) -> None:
        self.frozen = True
        log.info("partitions revoked (%d): processing paused", len(revoked))

    async def on_assigned(self, assigned) -> None:
        src = set(self.topics.transitions) - {self.topics.expert}
        tps = [
            recovery.TopicPartition(tp.topic, tp.partition) for tp in assigned if tp.topic in src
        ]
        kc, run = self.cfg.kafka, self.cfg.run_id
        loop = asyncio.get_running_loop()

        def load() -> tuple[set, dict]:
            since = recovery.replay_start_ms(kc, run, app_id(self.cfg.run_id), tps)
            return recovery.emitted_since(kc, run, self.topics.policy_batches, since)

        await self.sender.drain()
        emitted, info = await loop.run_in_executor(None, load)
        info.update(self.state.reset(emitted))
        info["assigned"] = sorted(f"{tp.topic.rsplit('.', 1)[-1]}[{tp.partition}]" for tp in tps)
        self.last_assignment = info
        info["faust_acks"] = [self.app.topics.acks_enabled_for(t) for t in self.topics.transitions]
        log.info("assignment prepared: %s", info)
        self.assigned_once = True
        self.frozen = False
        early, self.early = self.early, []
        for kind, item in early:  # those of an earlier generation are skipped: they are re-read
            if kind == "records":
                self.on_records(*item)
            else:
                self.process(item)


def register(
    app: faust.App,
    cfg: Config,
    topics: Topics,
    state: StreamState | None = None,
    side: SideReader | None = None,
    ready_file: Path | None = None,
    take: int = 2000,
    within: float = 0.02,
) -> Runner:
    """Register the worker's agent, timer and rebalance hooks on ``app``."""
    state = state or StreamState(cfg, topics)
    r = Runner(app, cfg, topics, state, side, ready_file)
    src = app.topic(*topics.transitions, value_serializer="raw", key_serializer="raw", acks=False)
    r.bulk_topics = frozenset(topics.transitions)
    r.bulk_max = take
    if hasattr(app, "bulk_handler"):  # streams.bulk.App: records come in lists to on_records
        app.bulk_handler = r
        within = max(within, 1.0)  # nothing reaches the agent: do not wake it 50 times a second

    @app.agent(src, name=f"dynaweb-{cfg.run_id}-transitions")
    async def transitions(stream):
        async for events in stream.take_events(take, within=within):
            r.process(events)
            await r.after()

    @app.timer(interval=_TICK_S, name=f"dynaweb-{cfg.run_id}-tick")
    async def tick():
        await r.tick()

    @app.on_partitions_revoked.connect
    async def _revoked(sender, revoked, **_kw):  # noqa: ARG001
        await r.on_revoked(revoked)

    @app.on_partitions_assigned.connect
    async def _assigned(sender, assigned, **_kw):  # noqa: ARG001
        await r.on_assigned(assigned)

    r.agents = (transitions, tick)
    return r
