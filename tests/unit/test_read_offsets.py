"""Reading a topic by offsets (``streams.offsets.read_offsets``): every record below the
acknowledged ends, ranges read at once by several consumers, bounded in time, gaps passed."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from core.config import Config
from streams.offsets import ReadTimeout, chunks, read_offsets

pytestmark = pytest.mark.unit


class FakeLog:
    """A topic: partition -> {offset: value}; offsets without a record are gaps."""

    def __init__(self, parts: dict[int, dict[int, bytes]], poll_s: float = 0.0):
        self.parts, self.poll_s = parts, poll_s
        self.polls = self.active = self.most_at_once = 0
        self.lock = threading.Lock()


class FakeConsumer:
    """One batch of one record per poll after ``poll_s`` (the broker's round trip), as the probe's
    topic is written; a gap is skipped the way a fetch skips it."""

    def __init__(self, log: FakeLog):
        self.log, self.tp, self.pos, self.closed = log, None, 0, False

    def assign(self, tps):
        (self.tp,) = tps

    def seek(self, tp, offset):
        self.pos = offset

    def position(self, tp):
        return self.pos

    def poll(self, timeout_ms=0):
        with self.log.lock:
            self.log.polls += 1
            self.log.active += 1
            self.log.most_at_once = max(self.log.most_at_once, self.log.active)
        time.sleep(self.log.poll_s)
        with self.log.lock:
            self.log.active -= 1
        part = self.log.parts[self.tp.partition]
        nxt = [o for o in sorted(part) if o >= self.pos][:1]
        if not nxt:
            return {}
        self.pos = nxt[0] + 1
        return {self.tp: [SimpleNamespace(offset=nxt[0], value=part[nxt[0]])]}

    def close(self):
        self.closed = True


def _log(n: int, poll_s: float = 0.0) -> FakeLog:
    return FakeLog(
        {
            0: {o: f"p0-{o}".encode() for o in range(n) if o != 5},  # offset 5: a gap
            1: {o: f"p1-{o}".encode() for o in range(n + 10)},  # beyond the end: not read
        },
        poll_s,
    )


def test_chunks_cover_every_partition_up_to_its_end() -> None:
    assert chunks({0: 5, 1: 0, 2: 3}, 2) == [(0, 0, 2), (0, 2, 4), (0, 4, 5), (2, 0, 2), (2, 2, 3)]


def test_every_record_below_the_ends_and_nothing_beyond() -> None:
    log = _log(30)
    made: list[FakeConsumer] = []

    def factory() -> FakeConsumer:
        made.append(FakeConsumer(log))
        return made[-1]

    got = read_offsets(
        Config().kafka, "t", {0: 30, 1: 30}, 10, workers=3, chunk=7, consumer_factory=factory
    )
    assert [(p, o) for p, o, _v in got] == [(0, o) for o in range(30) if o != 5] + [
        (1, o) for o in range(30)
    ]
    assert got[0][2] == b"p0-0"
    assert 1 <= len(made) <= 3 and all(c.closed for c in made)


def _most_at_once(workers: int) -> int:
    log = _log(40, poll_s=0.02)
    read_offsets(Config().kafka, "t", {0: 40, 1: 40}, 60, workers=workers, chunk=20,
                 consumer_factory=lambda: FakeConsumer(log))  # fmt: skip
    return log.most_at_once


def test_ranges_are_read_at_once() -> None:
    assert _most_at_once(1) == 1
    assert _most_at_once(4) > 1  # the broker's round trips overlap


def test_the_read_is_bounded_and_says_what_it_did_not_read() -> None:
    log = _log(200, poll_s=0.01)
    t0 = time.time()
    with pytest.raises(ReadTimeout) as e:
        read_offsets(Config().kafka, "t", {0: 200, 1: 200}, 0.5, workers=2, chunk=50,
                     consumer_factory=lambda: FakeConsumer(log))  # fmt: skip
    assert time.time() - t0 < 3
    assert 0 < e.value.read < 400 and e.value.unread
    assert all(lo < hi for _p, lo, hi in e.value.unread)
    assert "not read within" in str(e.value)
