"""Checkpoint announcements on Kafka: the one sender and the one watcher of the topic.

S3 is the truth (``models.checkpoints.store``); a ``CheckpointAnnouncement`` on the
checkpoints topic (one partition) only says that ``kind``/``version`` is
``LATEST`` now.  ``send_announcement`` is the only place one is built and sent:
the trainer (version 0, and every version when ungated) and
``models.checkpoints.store.announce`` (the gate's promotions, ``dynaweb checkpoint
promote/rollback``) both call it.  ``CheckpointWatcher`` is the only loop that
reads the topic: the dream generator (``models.dream.dreamer``) and the ``latest``
collector policy (``collectors.policy_agent``) re-read ``LATEST`` and reload
their weights (``models.checkpoints.reader.ModelSlot``) on what it reports; the stream
worker's side reader (``streams.side``) tails the expert and control topics
with it in the same consumer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from kafka import TopicPartition

from core.config import KafkaConfig
from streams import records
from streams.kafka import Publisher, assignable, make_consumer
from streams.records import CheckpointAnnouncement

log = logging.getLogger(__name__)

OnAnnouncement = Callable[[CheckpointAnnouncement], None]
OnValue = Callable[[str, int, int, "bytes | None"], None]  # topic, partition, offset, raw value


def send_announcement(
    pub: Publisher,
    topic: str,
    run_id: str,
    kind: str,
    version: int,
    uri: str,
    manifest_sha256: str,
) -> CheckpointAnnouncement:
    """Announce that ``kind``/``version`` (at ``uri``, manifest ``manifest_sha256``) is LATEST.

    Not flushed: the caller flushes once after its announcements (the trainer announces both kinds
    of a version, then flushes)."""
    rec = CheckpointAnnouncement(run_id, kind, version, uri, manifest_sha256)
    pub.send(topic, rec)
    return rec


def announcement_of(
    raw: bytes | None, kinds: Iterable[str] | None = None
) -> CheckpointAnnouncement | None:
    """``raw`` as an announcement of one of ``kinds`` (None: any kind), or None: an empty value,
    a control record (a sentinel), a corrupt or foreign record, or another kind."""
    try:
        rec = records.decode(raw, expect="checkpoint")
    except records.RecordError:
        return None
    if kinds is not None and rec.kind not in kinds:
        return None
    return rec


# The embedded broker answers an empty fetch only after the consumer's whole fetch wait, even
# when a record arrives meanwhile (docs/broker.md): kafka-python's default 500 ms would delay
# every announcement by up to that; 100 ms costs ten small fetches a second per watcher.
WATCH_FETCH_WAIT_MS = 100


class CheckpointWatcher:
    """Reads the checkpoints topic from the beginning in a daemon thread, with its own consumer
    (manual assignment, no consumer group, no commits, no dedupe: a reader re-reads ``LATEST``
    in S3 and loads only a version it does not have).

    Every reader of the topic uses this loop; where the readers differ, it is a parameter:

    - what it hands over, exactly one of:

      - ``on_announcement(rec)``: each value that decodes as an announcement of one of
        ``kinds`` (None: any kind), in the watcher's thread; anything else is skipped
        (``announcement_of``).  The dream generator watches every kind, the ``latest``
        collector policy ``("policy",)``.
      - ``on_value(topic, partition, offset, raw)``: every raw value, undecoded (the stream
        worker's side reader: its event loop decodes them, ``streams.state``).

    - ``topics``: the checkpoints topic; the side reader adds the expert and control topics,
      read by the same consumer.
    - ``partitions``: None assigns every partition the broker reports, waiting up to
      ``start(timeout)`` for the metadata (``streams.kafka.assignable``: the side reader);
      a tuple assigns exactly those partitions of each topic without asking (the dream
      generator and the collector policy: ``(0,)``, the topic's one partition).
    - ``poll_ms`` (collector policy 1000, dream generator 500, side reader 100) and
      ``max_poll_records`` (None: the client's default; side reader 2000).  The fetch wait is
      ``WATCH_FETCH_WAIT_MS`` for all of them: a poll returns within that of a record's arrival.
    - ``connect_in_thread``: False opens, assigns and seeks in ``start`` so a broker that is
      down or a missing topic raises there (dream generator, side reader); True does it in
      the thread (collector policy: its constructor never fails on Kafka, a watcher that
      could not connect just ends and the agent's ``wait_ready`` times out).
    - ``on_assigned(tps)``: called once the partitions are assigned and sought to the
      beginning, before the first poll (the side reader produces its catch-up sentinels).
    - ``stop``: the event that ends the thread (the collector policy passes its own, so the
      watcher ends with the agent); None: a fresh one, set by ``stop()``.

    An exception in the thread ends it; it is logged and kept in ``error``, and ``check()``
    re-raises it in the caller's thread (the dream generator and the side reader check every
    round; the collector policy does not: it keeps the weights it has, as before).
    """

    def __init__(
        self,
        kc: KafkaConfig,
        topics: Sequence[str],
        *,
        on_announcement: OnAnnouncement | None = None,
        kinds: Iterable[str] | None = None,
        on_value: OnValue | None = None,
        partitions: Sequence[int] | None = None,
        poll_ms: int = 1000,
        max_poll_records: int | None = None,
        connect_in_thread: bool = False,
        on_assigned: Callable[[list[TopicPartition]], None] | None = None,
        stop: threading.Event | None = None,
        name: str = "checkpoint-watch",
    ):
        if (on_announcement is None) == (on_value is None):
            raise ValueError("give exactly one of on_announcement and on_value")
        self.kc = kc
        self.topics = list(topics)
        self.on_announcement = on_announcement
        self.kinds = None if kinds is None else frozenset(kinds)
        self.on_value = on_value
        self.partitions = None if partitions is None else tuple(partitions)
        self.poll_ms = poll_ms
        self.max_poll_records = max_poll_records
        self.connect_in_thread = connect_in_thread
        self.on_assigned = on_assigned
        self.name = name
        self.error: BaseException | None = None
        self._stop = stop or threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 60.0) -> CheckpointWatcher:
        consumer = None if self.connect_in_thread else self._connect(timeout)
        self._thread = threading.Thread(
            target=self._run, args=(consumer, timeout), name=self.name, daemon=True
        )
        self._thread.start()
        return self

    def _connect(self, timeout: float):
        kw = {} if self.max_poll_records is None else {"max_poll_records": self.max_poll_records}
        consumer = make_consumer(self.kc, fetch_max_wait_ms=WATCH_FETCH_WAIT_MS, **kw)
        try:
            if self.partitions is None:
                tps = assignable(consumer, self.topics, timeout)
            else:
                tps = [TopicPartition(t, p) for t in self.topics for p in self.partitions]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            if self.on_assigned is not None:
                self.on_assigned(tps)
        except BaseException:
            consumer.close()
            raise
        return consumer

    def _run(self, consumer, timeout: float) -> None:
        try:
            if consumer is None:
                consumer = self._connect(timeout)
            while not self._stop.is_set():
                for tp, msgs in consumer.poll(timeout_ms=self.poll_ms).items():
                    for m in msgs:
                        self._hand_over(tp, m)
        except Exception as e:  # noqa: BLE001 - kept in ``error``, re-raised by check()
            self.error = e
            log.exception("%s failed", self.name)
        finally:
            if consumer is not None:
                consumer.close()

    def _hand_over(self, tp: TopicPartition, m) -> None:
        if self.on_value is not None:
            self.on_value(tp.topic, tp.partition, m.offset, m.value)
            return
        rec = announcement_of(m.value, self.kinds)
        if rec is not None:
            self.on_announcement(rec)

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"{self.name} failed: {self.error}") from self.error

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
