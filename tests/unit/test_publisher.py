"""Unit tests for streams.delivery.Publisher with a fault injected at the producer (no broker):
a fatal or failing producer is rebuilt and what it did not acknowledge is re-sent; a rebuild that
keeps failing makes the publisher dead; lost records are counted and raised, never silent."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, UnknownError
from kafka.future import Future

from streams import metrics as SM
from streams.delivery import Publisher, PublisherDead, PublishLost


class Clock:
    def __init__(self, step: float = 0.0):
        self.t, self.step = 1000.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


class FakeProducer:
    """Records every send; ``flush`` acknowledges (or fails with ``fail_with``) what is pending;
    ``fatal`` mimics kafka-python's fatal transaction-manager state."""

    def __init__(self, name: str = "p", fail_with: BaseException | None = None):
        self.name = name
        self.fail_with = fail_with
        self.fatal = False
        self.values: list[bytes] = []
        self.pending: list[Future] = []
        self.closed = False
        self._transaction_manager = SimpleNamespace(has_fatal_error=lambda: self.fatal)

    def send(self, topic, value=None, key=None, headers=None):
        if len(value) > 1000:
            raise MessageSizeTooLargeError("too large")
        f = Future()
        self.values.append(value)
        self.pending.append(f)
        return f

    def resolve(self, exc: BaseException | None = None) -> None:
        pending, self.pending = self.pending, []
        for f in pending:
            if exc is None:
                f.success(SimpleNamespace(offset=0))
            else:
                f.failure(exc)

    def flush(self, timeout=None):
        self.resolve(self.fail_with)

    def close(self, timeout=None):
        self.closed = True


def _factory(*producers):
    made = list(producers)

    def make():
        item = made.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    return make


def test_fatal_producer_is_rebuilt_and_unacknowledged_records_resent() -> None:
    p1, p2 = FakeProducer("p1"), FakeProducer("p2")
    errors: list = []
    pub = Publisher(p1, errors.append, factory=_factory(p2), clock=Clock())
    for i in range(5):
        pub.send("t", f"r{i}".encode())
    p1.fatal = True
    p1.resolve(UnknownError("broker said UnknownError"))  # every in-flight record fails
    assert pub.errors == 5 and len(errors) == 5 and not pub.healthy
    pub.send("t", b"r5")  # the next send rebuilds first, re-sends the five, then sends r5
    assert pub.rebuilds == 1 and p1.closed
    assert p2.values == [b"r0", b"r1", b"r2", b"r3", b"r4", b"r5"]
    pub.flush(timeout=5)
    assert pub.acked == 6 and pub.resent == 5 and pub.lost == 0 and pub.outstanding == 0
    assert pub.healthy


def test_fatal_state_seen_before_any_error_moves_in_flight_records_to_the_new_producer() -> None:
    p1, p2 = FakeProducer("p1"), FakeProducer("p2")
    pub = Publisher(p1, factory=_factory(p2), clock=Clock())
    pub.send("t", b"a")
    pub.send("t", b"b")
    p1.fatal = True  # the producer went fatal; its batches have not failed yet
    pub.check()
    assert pub.rebuilds == 1 and p2.values == [b"a", b"b"]
    p1.resolve(UnknownError("late"))  # the abandoned producer's late failures change nothing
    assert pub.errors == 0
    pub.flush(timeout=5)
    assert pub.acked == 2 and pub.lost == 0


def test_a_failing_rebuild_is_retried_then_the_publisher_dies() -> None:
    clock = Clock()
    p1, p2 = FakeProducer("p1"), FakeProducer("p2")
    down = ConnectionError("broker down")
    pub = Publisher(
        p1, factory=_factory(down, down, down, p2), clock=clock, dead_after_s=60.0, stall_s=5.0
    )
    pub.send("t", b"a")
    p1.fatal = True
    p1.resolve(UnknownError("fatal"))
    pub.check()  # rebuild 1 fails (back-off 0.5 s)
    clock.t += 1
    pub.send("t", b"b")  # rebuild 2 fails; b waits in the re-send queue, not on the broken one
    assert pub.rebuilds == 0 and p1.values == [b"a"] and not pub.healthy
    clock.t += 2
    pub.check()  # rebuild 3 fails
    clock.t += 5
    pub.check()  # rebuild 4 works: both records go out on the new producer
    assert pub.rebuilds == 1 and p2.values == [b"a", b"b"]
    p2.resolve()
    assert pub.healthy and pub.outstanding == 0
    # now the broker stays away: once trouble lasted dead_after_s, send/check raise
    p3_down = Publisher(FakeProducer(), factory=_factory(*[down] * 50), clock=clock)
    p3_down.dead_after_s = 60.0
    p3_down.send("t", b"x")
    p3_down.producer.fatal = True
    p3_down.producer.resolve(UnknownError("fatal"))
    for _ in range(5):
        clock.t += 10
        p3_down.check()
    clock.t += 30
    with pytest.raises(PublisherDead, match="producer_dead_after_s"):
        p3_down.send("t", b"y")
    assert p3_down.dead


def test_a_record_no_broker_takes_is_lost_counted_and_raised_once() -> None:
    p = FakeProducer(fail_with=None)
    pub = Publisher(p, factory=_factory(FakeProducer()), clock=Clock())
    with pytest.raises(MessageSizeTooLargeError):
        pub.send("t", b"x" * 2000)  # refused at once, as before
    pub.send("t", b"ok")
    p.pending[0].failure(MessageSizeTooLargeError("broker says too large"))
    assert pub.lost == 2 and pub.rebuilds == 0
    with pytest.raises(PublishLost, match="MessageSizeTooLargeError x2"):
        pub.check()
    pub.check()  # raised once


def test_resend_buffer_overflow_drops_the_oldest_and_counts_them() -> None:
    SM.client_lost.labels("r-overflow", "unit", "resend_buffer_full")
    p1 = FakeProducer()
    p1.fatal = True
    pub = Publisher(
        p1,
        factory=_factory(ConnectionError("down")),
        clock=Clock(),
        resend_buffer_bytes=3 * (10 + 64),
        client="unit",
        run="r-overflow",
    )
    for i in range(5):
        pub.send("t", f"record-{i:03d}".encode())
    p1.resolve(KafkaTimeoutError("delivery timeout"))
    assert pub.lost == 2 and pub.outstanding == 3
    lost = SM.client_lost.labels("r-overflow", "unit", "resend_buffer_full")._value.get()
    assert lost == 2
    with pytest.raises(PublishLost, match="resend_buffer_full x"):
        pub.check()


def test_stalled_deliveries_make_the_publisher_unhealthy_until_acknowledged() -> None:
    clock = Clock()
    p = FakeProducer()
    pub = Publisher(p, clock=clock, stall_s=30.0, client="unit", run="r-stall")
    pub.send("t", b"a")
    assert pub.healthy
    clock.t += 31  # no acknowledgement, no error: the broker hangs
    assert not pub.healthy
    assert SM.client_healthy.labels("r-stall", "unit")._child_samples()[0][2] == 0.0
    p.resolve()
    assert pub.healthy and pub.outstanding == 0


def test_one_failure_is_resent_on_the_same_producer_a_lasting_one_rebuilds_it() -> None:
    clock = Clock()
    p1, p2 = FakeProducer("p1"), FakeProducer("p2")
    pub = Publisher(p1, factory=_factory(p2), clock=clock)
    pub.send("t", b"a")
    p1.resolve(UnknownError("one batch"))  # not fatal (idempotence off): only this batch failed
    pub.send("t", b"b")
    assert pub.rebuilds == 0 and p1.values == [b"a", b"a", b"b"]
    p1.resolve()
    assert pub.acked == 2 and pub.healthy
    # failing on and on (3 failures, no acknowledgement) for REBUILD_AFTER_S: replaced
    pub.send("t", b"c")
    for _ in range(2):
        p1.resolve(UnknownError("again"))
        clock.t += 4
        pub.check()  # re-sent on p1: not yet 3 failures over 10 s
    assert pub.rebuilds == 0
    p1.resolve(UnknownError("again"))
    clock.t += 4
    pub.check()
    assert pub.rebuilds == 1 and p2.values == [b"c"]
    pub.flush(timeout=5)
    assert pub.acked == 3 and pub.lost == 0


def test_flush_waits_for_resent_records_and_times_out_when_nothing_is_acknowledged() -> None:
    p1, p2 = FakeProducer("p1", fail_with=UnknownError("x")), FakeProducer("p2")
    pub = Publisher(p1, factory=_factory(p2), clock=Clock(step=0.01))
    pub.send("t", b"a")
    p1.fatal = True
    pub.flush(timeout=5)  # p1 fails it at flush and is fatal; rebuilt; p2 acknowledges it
    assert pub.acked == 1 and pub.resent == 1 and p2.values == [b"a"]
    hung = FakeProducer()
    hung.flush = lambda timeout=None: None  # never answers
    pub2 = Publisher(hung, clock=Clock(step=0.05))
    pub2.send("t", b"b")
    with pytest.raises(KafkaTimeoutError, match="1 records not acknowledged"):
        pub2.flush(timeout=1)


def test_close_counts_what_is_left_and_check_raises_it() -> None:
    hung = FakeProducer()
    hung.flush = lambda timeout=None: None
    pub = Publisher(hung, clock=Clock(step=0.05))
    pub.send("t", b"a")
    pub.close(timeout=0.5)
    assert hung.closed and pub.lost == 1
    with pytest.raises(PublishLost, match="unsent_at_close x1"):
        pub.check()


def test_without_a_factory_failed_records_are_resent_on_the_same_producer() -> None:
    p = FakeProducer()
    pub = Publisher(p, clock=Clock())
    pub.send("t", b"a")
    p.resolve(KafkaTimeoutError("once"))
    pub.flush(timeout=5)
    assert p.values == [b"a", b"a"] and pub.acked == 1 and pub.lost == 0
