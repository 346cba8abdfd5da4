"""What a stream worker must not emit again after a crash or a rebalance.

The worker holds the Faust ack of every real/dream transition until the
trajectory it belongs to has been placed in an emitted training batch (or
dropped), so the committed offset of a partition is the first message of the
oldest episode still in progress: a restart (or the next owner after a
rebalance) re-reads every such episode from its first step and nothing is lost.

Episodes that were *already* emitted but whose messages lie after that commit
point are re-read too. If they were simply assembled again they could land in
differently composed batches (new batch ids the trainer cannot dedupe), so on
every assignment ``emitted_since`` collects the non-expert episode ids of the
training batches emitted since then and the worker drops those episodes.

Which batches: every batch that could hold a message at or after a commit
point ``c`` was emitted after that message was produced. So ``T`` is the
smallest producer timestamp of the first record at ``c`` over the assigned
partitions, minus a clock-skew margin; the batch topic is binary-searched by
record timestamp for the first batch at ``T`` and read from there up to a
sentinel. No high-water mark is used (broker defect 1): the end of each
partition is the offset the broker returned for the sentinel we produced.
"""

from __future__ import annotations

import json
import logging
import time

from kafka import TopicPartition

from core.config import KafkaConfig
from streams import kafka as sk
from streams import records

log = logging.getLogger(__name__)


def _sentinels(kc: KafkaConfig, run_id: str, tps: list[TopicPartition]) -> dict:
    """Produce one sentinel per partition; returns {tp: its offset} (the true end)."""
    prod = sk.make_producer(kc, linger_ms=0)
    try:
        futs = {}
        for tp in tps:
            futs[tp] = prod.send(
                tp.topic,
                value=records.encode(sk.sentinel(run_id, "recovery")),
                partition=tp.partition,
            )
        prod.flush(timeout=30)
        return {tp: f.get(timeout=30).offset for tp, f in futs.items()}
    finally:
        prod.close(timeout=5)


def _first_at(consumer, tp: TopicPartition, offset: int, end: int, timeout: float):
    """The first record of ``tp`` at or after ``offset`` (``end`` is a sentinel, so one exists)."""
    consumer.assign([tp])
    consumer.seek(tp, offset)
    deadline = time.time() + timeout
    while time.time() < deadline:
        for msgs in consumer.poll(timeout_ms=500, max_records=1).values():
            for m in msgs:
                if m.offset >= offset:
                    return m
    raise TimeoutError(f"no record at {tp.topic}[{tp.partition}]@{offset} (end {end})")


def replay_start_ms(
    kc: KafkaConfig, run_id: str, group: str, tps: list[TopicPartition], timeout: float = 30.0
) -> float:
    """Smallest producer timestamp (ms) of what the group will re-read on ``tps``
    (0 = from the very beginning; +inf = nothing to re-read)."""
    if not tps:
        return float("inf")
    ends = _sentinels(kc, run_id, tps)
    c = sk.make_consumer(kc, group=group, max_poll_records=1)
    try:
        start = float("inf")
        for tp in tps:
            committed = c.committed(tp)
            if committed is None:
                return 0.0
            if committed >= ends[tp]:
                continue  # only our sentinel lies after the commit point
            m = _first_at(c, tp, committed, ends[tp], timeout)
            if m.offset >= ends[tp]:
                continue
            start = min(start, max(0, m.timestamp))
        return start
    finally:
        c.close(autocommit=False)


def emitted_since(
    kc: KafkaConfig,
    run_id: str,
    topic: str,
    since_ms: float,
    margin_s: float = 30.0,
    timeout: float = 60.0,
) -> tuple[set[str], dict]:
    """Non-expert episode ids in the batches of ``topic`` stamped at or after
    ``since_ms - margin_s``; returns (ids, info)."""
    info = {"since_ms": since_ms, "batches": 0, "episodes": 0, "probes": 0}
    if since_ms == float("inf"):
        return set(), info
    t0 = time.time()
    c = sk.make_consumer(kc)
    try:
        parts = c.partitions_for_topic(topic) or {0}
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        ends = _sentinels(kc, run_id, tps)
        bound = since_ms - margin_s * 1000.0
        ids: set[str] = set()
        for tp in tps:
            lo, hi = 0, ends[tp]
            while lo < hi and bound > 0:  # first offset whose record is stamped >= bound
                mid = (lo + hi) // 2
                m = _first_at(c, tp, mid, ends[tp], timeout)
                info["probes"] += 1
                if m.offset >= hi or m.timestamp >= bound:
                    hi = mid
                else:
                    lo = m.offset + 1
            c.assign([tp])
            c.seek(tp, lo)
            deadline = time.time() + timeout
            done = lo >= ends[tp]
            while not done:
                if time.time() > deadline:
                    raise TimeoutError(f"could not read {topic} up to {ends[tp]} in {timeout}s")
                for msgs in c.poll(timeout_ms=500).values():
                    for m in msgs:
                        if m.offset >= ends[tp]:
                            done = True
                            break
                        if m.value and b'"training_batch"' in m.value[-200:]:
                            info["batches"] += 1
                            ids.update(_non_expert_ids(m.value))
        info.update(episodes=len(ids), seconds=round(time.time() - t0, 3))
        return ids, info
    finally:
        c.close()


def _non_expert_ids(raw: bytes) -> list[str]:
    try:
        d = json.loads(raw)
        return [t["episode_id"] for t in d.get("trajectories", []) if t.get("source") != "expert"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []
