"""Topics every stream worker reads in full, outside the consumer group.

The consumer group splits the transition topics between the workers of a run,
but each worker needs *all* of: the expert topic (its expert pool is the whole
expert set, so the pool is the same on every worker and after a restart), the
checkpoint announcements (latest policy version) and the control topic (the
trainer's consumed counts, the other workers' produced counts). Those have one
partition (checkpoints, control) or are small (experts), so a consumer with
manual assignment, no group and no commits reads them from the beginning in a
background thread and hands the raw values to the event loop through a
thread-safe deque (``drain``).

Catch-up without high-water marks (broker defect 1): at start a sentinel with
a fresh nonce is produced on every partition; ``caught_up`` is set once all of
them came back, i.e. everything written before the start has been queued.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from core.config import KafkaConfig
from streams import kafka as sk
from streams import records

log = logging.getLogger(__name__)


class SideReader:
    """Tails ``topics`` (all partitions, from the beginning) in a daemon thread."""

    def __init__(self, kc: KafkaConfig, topics: list[str], run_id: str, poll_ms: int = 100):
        self.kc = kc
        self.topics = list(topics)
        self.run_id = run_id
        self.poll_ms = poll_ms
        self.queue: deque = deque()  # (topic, partition, offset, raw)
        self.caught_up = threading.Event()
        self.error: BaseException | None = None
        self.read = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nonces: dict[tuple[str, int], str] = {}

    def start(self, timeout: float = 60.0) -> SideReader:
        consumer = sk.make_consumer(self.kc, max_poll_records=2000)
        try:
            tps = sk.assignable(consumer, self.topics, timeout)
        except TimeoutError:
            consumer.close()
            raise
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        prod = sk.make_producer(self.kc, linger_ms=0)
        try:
            for tp in tps:
                s = sk.sentinel(self.run_id, "side-reader")
                self._nonces[(tp.topic, tp.partition)] = s.info["nonce"]
                prod.send(tp.topic, value=records.encode(s), partition=tp.partition)
            prod.flush(timeout=30)
        finally:
            prod.close(timeout=5)
        self._thread = threading.Thread(
            target=self._run, args=(consumer,), name="side-reader", daemon=True
        )
        self._thread.start()
        return self

    def _run(self, consumer) -> None:
        try:
            while not self._stop.is_set():
                for tp, msgs in consumer.poll(timeout_ms=self.poll_ms).items():
                    for m in msgs:
                        key = (tp.topic, tp.partition)
                        nonce = self._nonces.get(key)
                        if nonce is not None and sk._is_nonce(m.value, nonce):
                            del self._nonces[key]
                            if not self._nonces:
                                self.queue.append((None, -1, -1, None))  # caught-up marker
                            continue
                        self.read += 1
                        self.queue.append((tp.topic, tp.partition, m.offset, m.value))
        except Exception as e:  # noqa: BLE001 - surfaced by check()
            self.error = e
            log.exception("side reader failed")
        finally:
            consumer.close()

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
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
