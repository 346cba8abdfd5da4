"""The publisher's ledger (``streams.delivery.Publisher``): the records handed to a producer and
not yet acknowledged, the bounded re-send queue, and the counts (sent, acknowledged, failed,
re-sent, lost by reason), with since when deliveries fail or stall."""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass


@dataclass
class PendingRecord:
    topic: str
    value: bytes
    key: bytes | None
    headers: list | None
    first_sent_at: float

    @property
    def size(self) -> int:
        return len(self.value) + len(self.key or b"") + 64


class Ledger:
    """Records handed to a producer and not yet acknowledged, the re-send queue, the counts.

    Thread-safe: the producer's I/O thread acknowledges and fails records, the caller's thread
    sends, re-sends and rebuilds.  Times are the caller's clock (``now``)."""

    def __init__(self, resend_buffer_bytes: int):
        self.limit = resend_buffer_bytes
        self.lock = threading.Lock()
        self.inflight: dict[
            int, tuple[int, PendingRecord]
        ] = {}  # token -> (producer generation, record)
        self.queue: deque[PendingRecord] = deque()
        self.queued_bytes = 0
        self._token = 0
        self.sent = self.acked = self.errors = self.resent = self.lost = 0
        self.lost_by_reason: Counter = Counter()
        self.unreported: list[str] = []  # lost-record reasons not yet raised by check/flush
        self.failing_since: float | None = None  # first failure since the last acknowledgement
        self.last_ack_at: float | None = None

    def track(self, rec: PendingRecord, generation: int) -> int:
        with self.lock:
            self._token += 1
            self.inflight[self._token] = (generation, rec)
            return self._token

    def ack(self, token: int, now: float) -> bool:
        with self.lock:
            if self.inflight.pop(token, None) is None:
                return False  # already moved to the re-send queue by a rebuild
            self.acked += 1
            self.last_ack_at = now
            self.failing_since = None
            return True

    def fail(self, token: int, now: float) -> tuple[int, PendingRecord] | None:
        """The failed record and its producer generation (None: no longer in flight, moved away
        by a rebuild)."""
        with self.lock:
            item = self.inflight.pop(token, None)
            if item is not None:
                self.note_failure(now)
            return item

    def note_failure(self, now: float) -> None:
        """Count a failed delivery (the caller holds ``lock``)."""
        self.errors += 1
        if self.failing_since is None:
            self.failing_since = now

    def requeue(self, rec: PendingRecord) -> list[PendingRecord]:
        """Queue ``rec`` for re-sending; returns the oldest records dropped to stay in bounds."""
        with self.lock:
            self.queue.append(rec)
            self.queued_bytes += rec.size
            dropped = []
            while self.queued_bytes > self.limit and len(self.queue) > 1:
                old = self.queue.popleft()
                self.queued_bytes -= old.size
                dropped.append(old)
            return dropped

    def requeue_generation(self, generation: int) -> list[PendingRecord]:
        """Move every in-flight record of an abandoned producer to the re-send queue."""
        with self.lock:
            tokens = [t for t, (g, _r) in self.inflight.items() if g == generation]
            moved = [self.inflight.pop(t)[1] for t in tokens]
        dropped = []
        for rec in moved:
            dropped += self.requeue(rec)
        return dropped

    def take_queue(self) -> list[PendingRecord]:
        with self.lock:
            out = list(self.queue)
            self.queue.clear()
            self.queued_bytes = 0
            return out

    def lose(self, n: int, reason: str) -> None:
        with self.lock:
            self.lost += n
            self.lost_by_reason[reason] += n
            self.unreported.append(reason)

    def take_unreported(self) -> list[str]:
        with self.lock:
            out, self.unreported = self.unreported, []
            return out

    @property
    def outstanding(self) -> int:
        with self.lock:
            return len(self.inflight) + len(self.queue)

    def trouble_since(self, now: float, stall_s: float) -> float | None:
        """Since when deliveries fail (no acknowledgement since the first failure) or stall (a
        record waits longer than ``stall_s`` and nothing was acknowledged for as long); None: fine."""
        with self.lock:
            since = self.failing_since
            stalled = self.last_ack_at is None or now - self.last_ack_at > stall_s
            if stalled:
                pending = [r.first_sent_at for _g, r in self.inflight.values()]
                pending += [r.first_sent_at for r in self.queue]
                oldest = min(pending, default=None)
                if oldest is not None and now - oldest > stall_s:
                    start = max(oldest, self.last_ack_at or oldest)
                    since = start if since is None else min(since, start)
            return since
