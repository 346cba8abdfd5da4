"""Rank 0's batch source: the trainer's two consumers, what they deliver, and the offsets consumed.

The trainer reads ``train.policy`` (TrainingBatch records from the stream workers) through a
consumer of its own, polled only while fewer than ``PENDING_BATCHES`` polled batches wait to be
trained (``Intake.poll_into``), and ``train.world_model`` / ``eval.world_model`` through another,
on every turn of the loop: the transitions enter the world model's replay
(``models.train.replay``; dreams never do).  Both consumers are assigned by hand (no consumer
group) at the offsets of the checkpoint the trainer resumed from, or at the beginning; records
are decoded and deduplicated by id (the broker may deliver one again).  Invalid records are
counted and skipped.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from core.bounded import BoundedSet
from models import metrics as M
from models.parts import ConsumerFactory
from models.train.replay import WorldModelReplay
from streams import records
from streams.kafka import assignable, is_control
from streams.topics import Topics

log = logging.getLogger(__name__)

PENDING_BATCHES = 4  # policy batches polled ahead of training (Intake.poll_into)
WM_MAX_POLL_RECORDS = 64  # the world-model topics' consumer's records per poll


class Intake:
    """The consumers (``open``), their records decoded into policy-batch items and the replay
    (``poll``, ``poll_into``), the offsets consumed (``advance``)."""

    def __init__(
        self,
        topics: Topics | None,
        open_consumer: ConsumerFactory | None,
        run: str,
        replay: WorldModelReplay,
    ):
        """``topics`` and ``open_consumer``: rank 0's (None on the other ranks, which read no
        topic); ``replay``: where world-model transitions go."""
        self.topics, self.open_consumer, self.run = topics, open_consumer, run
        self.replay = replay
        self.offsets: dict[str, dict[int, int]] = {}  # topic -> partition -> next offset
        self.seen_batches = BoundedSet()
        self.consumer: Any = None  # world-model and evaluation topics; opened by open()
        self.batch_consumer: Any = None  # the policy-batch topic, polled only when there is room

    def open(self) -> None:
        """Two consumers assigned by hand at the checkpoint's offsets (or the beginning): the
        world-model topics', and the policy batches' (``poll_into`` says when each is polled)."""
        assert self.open_consumer is not None and self.topics is not None, "rank 0's intake"
        self.consumer = self.open_consumer(max_poll_records=WM_MAX_POLL_RECORDS)
        self.batch_consumer = self.open_consumer(max_poll_records=PENDING_BATCHES)
        self._assign(self.consumer, (self.topics.world_model, self.topics.world_model_eval))
        self._assign(self.batch_consumer, (self.topics.policy_batches,))

    def _assign(self, consumer: Any, topics: tuple) -> None:
        tps = assignable(consumer, topics)
        consumer.assign(tps)
        for tp in tps:
            off = self.offsets.get(tp.topic, {}).get(tp.partition)
            if off is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, off)

    def poll(self, timeout_ms: int, consumer: Any = None, max_records: int | None = None) -> list:
        """New training batches as (batch, topic, partition, next offset).

        The offset of a policy batch only counts as consumed once the batch is trained
        (``models.train.trainer.Trainer.policy_step`` calls ``advance``), so a checkpoint's
        offsets never skip a batch that was polled but not yet trained.  World-model transitions
        count when they enter the replay.
        """
        batches = []
        kw = {} if max_records is None else {"max_records": max_records}
        polled = (consumer or self.consumer).poll(timeout_ms=timeout_ms, **kw)
        for tp, msgs in polled.items():
            for m in msgs:
                is_batch = tp.topic == self.topics.policy_batches
                if not is_batch:
                    self.offsets.setdefault(tp.topic, {})[tp.partition] = m.offset + 1
                skip = (
                    None,
                    tp.topic,
                    tp.partition,
                    m.offset + 1,
                )  # consumed in order, nothing to train
                if m.value is None or is_control(m.value):
                    if is_batch:
                        batches.append(skip)
                    continue
                try:
                    if is_batch:
                        b = records.decode(m.value, expect="training_batch")
                        if self.seen_batches.add(b.batch_id):
                            batches.append((b, tp.topic, tp.partition, m.offset + 1))
                        else:
                            M.TRAINER_DUPES.labels(self.run, "policy").inc()
                            batches.append(skip)
                    else:
                        t = records.decode(m.value, expect="transition")
                        if t.source == "dream":
                            continue  # the world model never trains on dreams
                        if tp.topic == self.topics.world_model_eval:
                            self.replay.add_eval(t)
                        elif not self.replay.add(t, m.value):
                            M.TRAINER_DUPES.labels(self.run, "world_model").inc()
                except records.RecordError as e:  # the stream worker validated; count and go on
                    log.warning("skipping invalid record on %s@%d: %s", tp.topic, m.offset, e)
                    M.CLIENT_ERRORS.labels(self.run, "trainer", "decode").inc()
                    if is_batch:
                        batches.append(skip)
        return batches

    def advance(self, topic: str, partition: int, offset: int) -> None:
        """A polled record of ``topic`` is consumed up to ``offset`` (never moves back)."""
        parts = self.offsets.setdefault(topic, {})
        parts[partition] = max(parts.get(partition, 0), offset)

    def poll_into(self, pending: deque) -> None:
        """Poll on every iteration: the world-model topics always, the policy batches only while
        fewer than ``PENDING_BATCHES`` wait in ``pending`` (a lagging trainer leaves its backlog in
        Kafka, not in memory).

        Two consumers, not one with pause/resume: a kafka-python consumer on the embedded broker
        never fetched a resumed partition again (the soak: no policy step for 20 minutes after a
        broker restart; docs/reliability.md); and one consumer hands out one partition's records
        before the next's, so a backlog starved world-model training (test_trainer_interleaving)."""
        room = PENDING_BATCHES - len(pending)
        idle = not (pending or self.replay)
        if room > 0:
            pending.extend(
                self.poll(250 if idle else 0, consumer=self.batch_consumer, max_records=room)
            )
        idle = not (pending or self.replay)
        pending.extend(self.poll(timeout_ms=250 if idle else 0))
