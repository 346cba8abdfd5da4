"""Topics every stream worker reads in full, outside the consumer group.

The consumer group splits the transition topics between the workers of a run,
but each worker needs *all* of: the expert topic (its expert pool is the whole
expert set, so the pool is the same on every worker and after a restart), the
checkpoint announcements (latest policy version) and the control topic (the
trainer's consumed counts, the other workers' produced counts). Those have one
partition (checkpoints, control) or are small (experts), so one consumer with
manual assignment, no group and no commits reads them from the beginning in a
background thread (the checkpoints topic's one watcher,
``streams.checkpoints.CheckpointWatcher``, with the expert and control topics
added) and hands the raw values to the event loop through a thread-safe deque
(``drain``).

Catch-up without high-water marks (broker defect 1): at start a sentinel with
a fresh nonce is produced on every partition; ``caught_up`` is set once all of
them came back, i.e. everything written before the start has been queued.
"""

from __future__ import annotations

import threading
from collections import deque

from kafka import TopicPartition

from core.config import KafkaConfig
from streams import kafka as sk
from streams import records
from streams.checkpoints import CheckpointWatcher


class SideReader:
    """Tails ``topics`` (all partitions, from the beginning) in a daemon thread."""

    def __init__(self, kc: KafkaConfig, topics: list[str], run_id: str, poll_ms: int = 100):
        self.kc = kc
        self.topics = list(topics)
        self.run_id = run_id
        self.poll_ms = poll_ms
        self.queue: deque = deque()  # (topic, partition, offset, raw)
        self.caught_up = threading.Event()
        self.read = 0
        self._nonces: dict[tuple[str, int], str] = {}
        self._watcher = CheckpointWatcher(
            kc,
            self.topics,
            on_value=self._on_value,
            poll_ms=poll_ms,
            max_poll_records=2000,
            on_assigned=self._send_sentinels,
            name="side-reader",
        )

    @property
    def error(self) -> BaseException | None:
        return self._watcher.error

    def start(self, timeout: float = 60.0) -> SideReader:
        self._watcher.start(timeout)
        return self

    def _send_sentinels(self, tps: list[TopicPartition]) -> None:
        prod = sk.make_producer(self.kc, linger_ms=0)
        try:
            for tp in tps:
                s = sk.sentinel(self.run_id, "side-reader")
                self._nonces[(tp.topic, tp.partition)] = s.info["nonce"]
                prod.send(tp.topic, value=records.encode(s), partition=tp.partition)
            prod.flush(timeout=30)
        finally:
            prod.close(timeout=5)

    def _on_value(self, topic: str, partition: int, offset: int, raw: bytes | None) -> None:
        key = (topic, partition)
        nonce = self._nonces.get(key)
        if nonce is not None and sk._is_nonce(raw, nonce):
            del self._nonces[key]
            if not self._nonces:
                self.queue.append((None, -1, -1, None))  # caught-up marker
            return
        self.read += 1
        self.queue.append((topic, partition, offset, raw))

    def drain(self, handle, limit: int = 100_000) -> int:
        """Call ``handle(topic, raw)`` for queued records (event-loop side); returns how many."""
        n = 0
        q = self.queue
        while q and n < limit:
            topic, _p, _o, raw = q.popleft()
            if topic is None:
                self.caught_up.set()
                continue
            handle(topic, raw)
            n += 1
        return n

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"side reader failed: {self.error}") from self.error

    def stop(self) -> None:
        self._watcher.stop()
