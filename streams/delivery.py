"""Publishing that survives a broken producer: every record is acknowledged, re-sent or counted lost.

``Publisher.send`` never waits for a broker round trip.  Every record stays in a ledger
(``streams.ledger.Ledger``) until the broker acknowledges it (``acks="all"``):

- a failed delivery puts the record in a re-send queue (bounded by ``resend_buffer_bytes``: past
  it the oldest records are dropped and counted lost, reason ``resend_buffer_full``), re-sent on
  the same producer; a record the broker will never take (too large, invalid topic, not
  authorised) is counted lost at once;
- a producer in kafka-python's fatal state (an idempotent producer after a broker
  ``UnknownError``: docs/broker.md), or one whose deliveries keep failing (3 failures or more)
  with no acknowledgement for ``REBUILD_AFTER_S`` (10 s), is marked for a rebuild;
- the next ``send``/``check``/``flush`` (in the caller's thread, never in the producer's I/O
  thread) rebuilds it: a new producer from ``factory``; the records the old one still held go to
  the re-send queue, and the queue is sent on the new one.  Rebuilds back off (0.5 s doubling
  to 10 s) until an acknowledgement shows one worked;
- the publisher is *healthy* while nothing fails and no record waits longer than ``stall_s``
  without any acknowledgement; it is *dead* once that trouble has lasted ``dead_after_s``
  (``kafka.producer_dead_after_s``): ``send``/``check``/``flush`` then raise ``PublisherDead``
  and the process exits non-zero, so its supervisor restarts it.

Re-sending is at-least-once: a record whose acknowledgement was lost may arrive twice, and a
re-sent record may arrive after records sent later.  Every consumer dedupes by ids and the
episode assembler waits for every step (docs/broker.md, defect 4).

Lost records are never silent: they are counted (``lost``, ``dynaweb_client_lost_records_total``
by reason), logged, and ``check``/``flush`` raise ``PublishLost`` once for them.  With ``client``
and ``run`` given, the publisher exports ``dynaweb_client_*`` (``streams.metrics``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kafka.errors import (
    InvalidTopicError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    TopicAuthorizationFailedError,
)

from streams import metrics as SM
from streams import records
from streams.ledger import Ledger, PendingRecord

log = logging.getLogger(__name__)

# errors of one record that no producer will ever deliver: counted lost, never re-sent
RECORD_ERRORS = (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    InvalidTopicError,
    TopicAuthorizationFailedError,
)
# a producer failing this long, this often, with no acknowledgement is replaced (a stalled broker
# fails few requests, and a new producer would stall the same way)
REBUILD_AFTER_S, REBUILD_AFTER_FAILURES = 10.0, 3
REBUILD_BACKOFF_S = (0.5, 10.0)  # first and longest wait between two rebuild attempts
LOG_EVERY_S = 10.0  # one log line per this many seconds of repeated failures


class PublisherDead(RuntimeError):
    """Publishing failed for longer than ``kafka.producer_dead_after_s``: exit, be restarted."""


class PublishLost(RuntimeError):
    """Records were given up (counted in ``lost``); raised once by ``check``/``flush``."""


def _is_fatal(producer: Any) -> bool:
    """kafka-python's producer-wide fatal state (it fails every later send until replaced)."""
    tm = getattr(producer, "_transaction_manager", None)
    try:
        return bool(tm is not None and tm.has_fatal_error())
    except Exception:  # noqa: BLE001 - a client without that state is never fatal here
        return False


def _discard(producer: Any) -> None:
    """Close a producer given up on, at once (what it still holds is already re-queued)."""
    sender = getattr(producer, "_sender", None)
    try:
        if sender is not None and hasattr(sender, "force_close"):
            sender.force_close()  # kafka-python: fail its batches instead of flushing them
            sender.join(2.0)
        producer.close(timeout=0)
    except Exception as e:  # noqa: BLE001 - the old producer is gone either way
        log.debug("closing the abandoned producer: %s", e)


class Publisher:
    """Asynchronous, batched publishing that re-sends what failed and rebuilds a broken producer.

    ``producer``: a kafka-python ``KafkaProducer`` (or anything with ``send``/``flush``/``close``);
    ``factory``: builds a new one (``streams.kafka.make_publisher`` passes ``make_producer``);
    without it a failing producer is kept and its records are re-sent on it.  ``on_error(exc)``
    is called for every failed delivery (the collector counts them).  ``clock``: for tests.
    """

    def __init__(
        self,
        producer: Any,
        on_error: Callable[[BaseException], None] | None = None,
        *,
        factory: Callable[[], Any] | None = None,
        client: str = "",
        run: str = "",
        dead_after_s: float = 300.0,
        stall_s: float = 30.0,
        resend_buffer_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.producer = producer
        self._on_error = on_error
        self._factory = factory
        self.dead_after_s = dead_after_s
        self.stall_s = stall_s
        self._clock = clock
        self._ledger = Ledger(resend_buffer_bytes)
        self._generation = 0
        self._rebuild_due = False
        self._rebuild_streak = 0  # rebuild attempts since the last acknowledgement
        self._producer_failing: tuple[float | None, int] = (None, 0)  # (since, failures)
        self._next_rebuild_at = 0.0
        self._maintaining = threading.RLock()
        self._closed = False
        self.rebuilds = 0
        # (topic, partition) -> 1 + the highest offset acknowledged there: where an independent
        # reader of what was acknowledged stops (streams.offsets; no high-water mark needed)
        self.acked_ends: dict[tuple[str, int], int] = {}
        self._last_log_at = -LOG_EVERY_S
        self._last_dead_check = float("-inf")
        self._unlogged = 0
        self._labels = (run, client) if client else None
        if self._labels:  # export 0 before the first event
            for m in (SM.client_publish_errors, SM.client_rebuilds, SM.client_resent):
                m.labels(*self._labels)
            SM.client_healthy.labels(*self._labels).set_function(lambda: float(self.healthy))

    # --- counts and state ----------------------------------------------------------------
    sent = property(lambda self: self._ledger.sent)
    acked = property(lambda self: self._ledger.acked)
    errors = property(lambda self: self._ledger.errors)
    resent = property(lambda self: self._ledger.resent)
    lost = property(lambda self: self._ledger.lost)
    outstanding = property(lambda self: self._ledger.outstanding)

    def trouble_since(self) -> float | None:
        return self._ledger.trouble_since(self._clock(), self.stall_s)

    @property
    def healthy(self) -> bool:
        """Nothing failed since the last acknowledgement and nothing waits longer than ``stall_s``."""
        return self.trouble_since() is None

    @property
    def dead(self) -> bool:
        since = self.trouble_since()
        return since is not None and self._clock() - since > self.dead_after_s

    # --- publishing ------------------------------------------------------------------------
    def send(
        self, topic: str, rec: Any, key: str | None = None, headers: list | None = None
    ) -> None:
        value = rec if isinstance(rec, bytes) else records.encode(rec)
        self._maintain()
        with self._ledger.lock:
            self._ledger.sent += 1
        self._dispatch(
            PendingRecord(topic, value, key.encode() if key else None, headers, self._clock())
        )

    def _dispatch(self, rec: PendingRecord) -> bool:
        """Hand ``rec`` to the producer; False if it went to the re-send queue instead."""
        if self._rebuild_due and self._factory is not None:  # known broken: wait for the new one
            dropped = self._ledger.requeue(rec)
            if dropped:
                self._lose(len(dropped), "resend_buffer_full", None)
            return False
        gen = self._generation
        try:
            fut = self.producer.send(rec.topic, value=rec.value, key=rec.key, headers=rec.headers)
        except RECORD_ERRORS as e:
            self._lose(1, type(e).__name__, e)
            raise  # the caller's record can never be sent (as before: raised at once)
        except Exception as e:  # noqa: BLE001 - a refused send is a failed delivery
            self._failed(rec, e)
            return False
        token = self._ledger.track(rec, gen)
        fut.add_callback(self._ok, token)
        fut.add_errback(self._err, token)
        return True

    def _ok(self, token: int, metadata: Any) -> None:
        where = (getattr(metadata, "topic", None), getattr(metadata, "partition", None))
        offset = getattr(metadata, "offset", None)
        if None not in where and isinstance(offset, int) and offset >= 0:
            self.acked_ends[where] = max(self.acked_ends.get(where, 0), offset + 1)
        if self._ledger.ack(token, self._clock()):
            self._rebuild_streak = 0
            self._producer_failing = (None, 0)
            if self._labels:
                SM.client_acked.labels(*self._labels, getattr(metadata, "topic", "?")).inc()

    def _err(self, token: int, exc: BaseException) -> None:
        item = self._ledger.fail(token, self._clock())
        if item is not None:
            gen, rec = item
            if gen == self._generation:
                self._note_producer_failure()
            self._count_failure(exc)
            self._route_failed(rec, exc)

    def _note_producer_failure(self) -> None:
        since, n = self._producer_failing
        self._producer_failing = (self._clock() if since is None else since, n + 1)

    def _failed(self, rec: PendingRecord, exc: BaseException) -> None:
        """A send the producer refused at once (counted like a failed delivery)."""
        with self._ledger.lock:
            self._ledger.note_failure(self._clock())
        self._note_producer_failure()
        self._count_failure(exc)
        self._route_failed(rec, exc)

    def _route_failed(self, rec: PendingRecord, exc: BaseException) -> None:
        if isinstance(exc, RECORD_ERRORS):
            self._lose(1, type(exc).__name__, exc)
            return
        dropped = self._ledger.requeue(rec)
        if dropped:
            self._lose(len(dropped), "resend_buffer_full", exc)

    def _count_failure(self, exc: BaseException) -> None:
        if self._labels:
            SM.client_publish_errors.labels(*self._labels).inc()
        if self._on_error is not None:
            try:
                self._on_error(exc)
            except Exception:  # noqa: BLE001 - a metrics hook never breaks publishing
                log.exception("on_error hook failed")
        now = self._clock()
        self._unlogged += 1
        if now - self._last_log_at >= LOG_EVERY_S:
            log.error(
                "publish failed (%d failure(s) since the last report; queued for re-sending): %s",
                self._unlogged,
                exc,
            )
            self._last_log_at, self._unlogged = now, 0

    def _lose(self, n: int, reason: str, exc: BaseException | None) -> None:
        self._ledger.lose(n, reason)
        if self._labels:
            SM.client_lost.labels(*self._labels, reason).inc(n)
        log.error("%d record(s) lost (%s): %s", n, reason, exc)

    # --- upkeep: rebuild and re-send -------------------------------------------------------
    def _maintain(self) -> None:
        """Rebuild a broken producer (when its back-off allows), re-send the queue, and raise
        ``PublisherDead`` once trouble has lasted ``dead_after_s``."""
        if self._closed:
            return
        with self._maintaining:
            if not self._rebuild_due and self._factory is not None:
                self._rebuild_due = self._broken()
            if self._rebuild_due and self._clock() >= self._next_rebuild_at:
                self._rebuild()
            if not self._rebuild_due:
                self._resend()
        now = self._clock()
        if now - self._last_dead_check < 1.0:
            return  # the health scan is not needed on every send
        self._last_dead_check = now
        if self.dead:
            raise PublisherDead(
                f"Kafka publishing has failed for more than {self.dead_after_s:.0f}s "
                f"(kafka.producer_dead_after_s; {self.outstanding} records waiting, "
                f"{self.rebuilds} producer rebuilds): exiting so the supervisor restarts this "
                "component"
            )

    def _broken(self) -> bool:
        """The producer is to be replaced: fatal, or failing repeatedly with no acknowledgement
        for ``REBUILD_AFTER_S`` (a single failure is re-sent on the same producer)."""
        if _is_fatal(self.producer):
            log.error("the Kafka producer is in a fatal state; rebuilding it")
            return True
        since, n = self._producer_failing  # this producer's failures since an acknowledgement
        if (
            since is not None
            and n >= REBUILD_AFTER_FAILURES
            and self._clock() - since >= REBUILD_AFTER_S
        ):
            log.error(
                "Kafka deliveries have failed for %.0fs; rebuilding the producer", REBUILD_AFTER_S
            )
            return True
        return False

    def _rebuild(self) -> None:
        # attempts back off (0.5 s doubling to 10 s) until an acknowledgement shows one worked, so
        # neither a broker that is down nor one that fails every new producer makes a storm
        self._rebuild_streak += 1
        first, longest = REBUILD_BACKOFF_S
        wait = min(longest, first * 2 ** (self._rebuild_streak - 1))
        self._next_rebuild_at = self._clock() + wait
        try:
            new = self._factory()
        except Exception as e:  # noqa: BLE001 - broker down: try again after the back-off
            log.warning("rebuilding the Kafka producer failed (%s); next try in %.1fs", e, wait)
            return
        old, old_gen = self.producer, self._generation
        self.producer, self._generation = new, old_gen + 1
        self._rebuild_due = False
        self._producer_failing = (None, 0)
        dropped = self._ledger.requeue_generation(old_gen)
        if dropped:
            self._lose(len(dropped), "resend_buffer_full", None)
        self.rebuilds += 1
        if self._labels:
            SM.client_rebuilds.labels(*self._labels).inc()
        log.warning(
            "Kafka producer rebuilt (rebuild %d); %d records to re-send",
            self.rebuilds,
            self._ledger.outstanding,
        )
        _discard(old)

    def _resend(self) -> None:
        queued = self._ledger.take_queue()
        for i, rec in enumerate(queued):
            try:
                handed = self._dispatch(rec)
            except RECORD_ERRORS:
                continue  # counted lost by _dispatch
            if not handed:  # refused (it blocked, or the producer broke): keep the rest queued
                for later in queued[i + 1 :]:
                    dropped = self._ledger.requeue(later)
                    if dropped:
                        self._lose(len(dropped), "resend_buffer_full", None)
                queued = queued[: i + 1]
                break
        if queued:
            with self._ledger.lock:
                self._ledger.resent += len(queued)
            if self._labels:
                SM.client_resent.labels(*self._labels).inc(len(queued))

    # --- waiting -----------------------------------------------------------------------------
    def check(self) -> None:
        """Upkeep (rebuild, re-send); raises ``PublisherDead``, or ``PublishLost`` once for
        records lost since the last check."""
        self._maintain()
        self._raise_lost()

    def _raise_lost(self) -> None:
        reasons = self._ledger.take_unreported()
        if reasons:
            by = ", ".join(f"{r} x{n}" for r, n in Counter(reasons).items())
            raise PublishLost(
                f"Kafka publish: records lost ({by}); {self.lost} lost in all, {self.errors} "
                "failed deliveries"
            )

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every record sent so far is acknowledged (re-sent ones included); raises
        ``KafkaTimeoutError`` after ``timeout``, ``PublishLost``/``PublisherDead`` as ``check``."""
        self._wait_acknowledged(timeout)
        self._raise_lost()

    def _wait_acknowledged(self, timeout: float) -> None:
        deadline = self._clock() + timeout
        while True:
            self._maintain()
            if not self.outstanding:
                return
            left = deadline - self._clock()
            if left <= 0:
                raise KafkaTimeoutError(
                    f"{self.outstanding} records not acknowledged within {timeout:.0f}s "
                    f"({self.errors} failed deliveries, {self.rebuilds} producer rebuilds)"
                )
            try:
                self.producer.flush(timeout=min(left, 1.0))
            except KafkaTimeoutError:
                continue
            # acknowledgements land just after the producer's flush; a rebuild waits its back-off
            time.sleep(min(left, 0.05 if self._rebuild_due else 0.005))

    def close(self, timeout: float = 10.0) -> None:
        """Flush (records still unacknowledged after ``timeout`` are counted lost, reason
        ``unsent_at_close``), then close the producer; a later ``check`` raises ``PublishLost``
        for every record lost."""
        try:
            self._wait_acknowledged(timeout)
        except Exception as e:  # noqa: BLE001 - closing: count what is left, raise it in check()
            left = self.outstanding
            if left:
                self._lose(left, "unsent_at_close", e)
        finally:
            self._closed = True
            self.producer.close(timeout=5)
