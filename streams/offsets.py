"""Reading a topic by offsets: every record below known end offsets, in parallel, bounded in time.

An independent check of what was acknowledged (the soak's and the fault suite's probe) knows where
its records went: the producer's acknowledgements carry each record's partition and offset, so
the reader needs no high-water mark (wrong on the embedded broker, defect 1) and no sentinel
produced at the end (a produce that itself waits on the broker's store).  ``read_offsets`` reads
partition ``p`` from offset 0 up to ``ends[p]`` (exclusive), the range split into chunks read by
``workers`` consumers at once (each assigned by hand and seeking to its chunk's start), so a read
whose time is the broker's round trips per batch (one record per batch on the probe's topic; the
store is S3) overlaps them instead of queueing them; the whole read stops at ``timeout_s`` with
``ReadTimeout``, which says what was read and which ranges were not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka import TopicPartition

from core.config import KafkaConfig


class ReadTimeout(TimeoutError):
    """The read did not finish in time; ``read`` records were read, ``unread`` ranges were not."""

    def __init__(self, topic: str, timeout_s: float, read: int, unread: list[tuple[int, int, int]]):
        self.read, self.unread = read, unread
        left = sum(hi - lo for _p, lo, hi in unread)
        super().__init__(
            f"{topic}: {left} offsets in {len(unread)} ranges not read within {timeout_s:.0f}s "
            f"({read} records read; unread (partition, from, to): {unread[:5]})"
        )


def chunks(ends: dict[int, int], size: int) -> list[tuple[int, int, int]]:
    """(partition, first, end) ranges of at most ``size`` offsets covering ``0 .. ends[p]``."""
    out = []
    for p, end in sorted(ends.items()):
        out += [(p, lo, min(end, lo + size)) for lo in range(0, max(0, end), max(1, size))]
    return out


def read_range(
    consumer: Any, topic: str, part: int, lo: int, hi: int, deadline: float, stop: threading.Event
) -> tuple[list[tuple[int, bytes]], int]:
    """(offset, value) of the records of ``topic``/``part`` in ``[lo, hi)`` and the offset where
    the read stopped (``hi`` when complete; less at the deadline or on ``stop``)."""
    tp = TopicPartition(topic, part)
    consumer.assign([tp])
    consumer.seek(tp, lo)
    got: list[tuple[int, bytes]] = []
    pos = lo
    while pos < hi and time.time() < deadline and not stop.is_set():
        for m in consumer.poll(timeout_ms=500).get(tp, []):
            if m.offset >= hi:
                pos = hi
                break
            if m.offset >= pos:
                got.append((m.offset, m.value))
                pos = m.offset + 1
        else:
            # an offset with no record (a transaction marker, a compacted gap): the position moves
            pos = max(pos, consumer.position(tp) or pos)
    return got, min(pos, hi)


def read_offsets(
    kc: KafkaConfig,
    topic: str,
    ends: dict[int, int],
    timeout_s: float = 600.0,
    *,
    workers: int = 4,
    chunk: int = 2000,
    consumer_factory: Callable[[], Any] | None = None,
) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` below ``ends`` (partition -> end offset), as (partition, offset,
    value) sorted by partition and offset; ``ReadTimeout`` after ``timeout_s``."""
    if consumer_factory is None:
        from streams.kafka import make_consumer

        def consumer_factory() -> Any:
            return make_consumer(kc)

    todo = chunks(ends, chunk)
    deadline = time.time() + timeout_s
    stop = threading.Event()
    local = threading.local()
    made: list[Any] = []
    lock = threading.Lock()

    def one(r: tuple[int, int, int]) -> tuple[tuple[int, int, int], list, int]:
        c = getattr(local, "consumer", None)
        if c is None:
            c = local.consumer = consumer_factory()
            with lock:
                made.append(c)
        got, pos = read_range(c, topic, r[0], r[1], r[2], deadline, stop)
        return r, got, pos

    out: list[tuple[int, int, bytes]] = []
    unread: list[tuple[int, int, int]] = []
    try:
        with ThreadPoolExecutor(max(1, min(workers, len(todo) or 1))) as pool:
            for (p, _lo, hi), got, pos in pool.map(one, todo):
                out += [(p, off, v) for off, v in got]
                if pos < hi:
                    unread.append((p, pos, hi))
    finally:
        stop.set()
        for c in made:
            c.close()
    if unread:
        raise ReadTimeout(topic, timeout_s, len(out), sorted(unread))
    return sorted(out, key=lambda x: (x[0], x[1]))
