"""Kafka clients (plain Kafka protocol: Tansu here, Apache Kafka in production).

Correctness never relies on broker high-water marks, compaction or
transactions (see docs/broker.md): catching up on a topic means reading
until a sentinel record we produced ourselves arrives.  Publishing goes through
``streams.delivery.Publisher`` (re-exported here): ``make_publisher`` gives one that
rebuilds a broken producer and re-sends what was not acknowledged.
"""

from __future__ import annotations

import functools
import json
import logging
import socket
import time
from collections.abc import Iterable, Iterator
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
)

from core.config import Config, KafkaConfig
from streams import records
from streams.delivery import Publisher, PublisherDead, PublishLost
from streams.topics import Topics

log = logging.getLogger(__name__)


class ServiceUnavailable(RuntimeError):
    """A required service is down; the message names it and how to start it."""


def broker_hint(bootstrap: str) -> str:
    return (
        f"Kafka broker at {bootstrap} is not reachable. Start the embedded stack with "
        f"`dynaweb infra up` (or point DYNAWEB_KAFKA__BOOTSTRAP at your cluster)."
    )


def check_broker(kc: KafkaConfig, timeout: float = 3.0) -> None:
    host, _, port = kc.bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return
    except OSError:
        raise ServiceUnavailable(broker_hint(kc.bootstrap)) from None


def client_kwargs(kc: KafkaConfig) -> dict[str, Any]:
    """Security settings passed through to kafka-python (and mapped for aiokafka)."""
    kw: dict[str, Any] = {
        "bootstrap_servers": kc.bootstrap.split(","),
        "security_protocol": kc.security_protocol,
        # kafka-python backs off up to 30 s between reconnects: clients then lag a broker restart
        "reconnect_backoff_max_ms": kc.reconnect_backoff_max_ms,
    }
    if kc.sasl_mechanism:
        kw.update(
            sasl_mechanism=kc.sasl_mechanism,
            sasl_plain_username=kc.sasl_username,
            sasl_plain_password=kc.sasl_password,
        )
    if kc.ssl_cafile:
        kw["ssl_cafile"] = kc.ssl_cafile
    return kw


def ensure_topics(cfg: Config, topics: Topics | None = None) -> Topics:
    """Create every topic of the run (idempotent), with retention settings."""
    topics = topics or Topics(cfg.run_id, cfg.kafka.partitions)
    kc = cfg.kafka
    check_broker(kc)
    try:
        admin = KafkaAdminClient(
            **client_kwargs(kc), client_id="dynaweb-admin", request_timeout_ms=15000
        )
    except (KafkaConnectionError, KafkaTimeoutError):
        raise ServiceUnavailable(broker_hint(kc.bootstrap)) from None
    try:
        existing = set(admin.list_topics())
        new = []
        for key, name in topics.all().items():
            if name in existing:
                continue
            new.append(
                NewTopic(
                    name,
                    topics.partitions(key),
                    kc.replication_factor,
                    topic_configs={
                        "retention.ms": str(kc.retention_ms),
                        "retention.bytes": str(kc.retention_bytes),
                    },
                )
            )
        for t in new:
            try:
                admin.create_topics([t])
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()
    return topics


@functools.cache
def _warn_idempotence() -> None:
    """Once per process: an idempotent producer is unsafe on the embedded broker."""
    log.warning(
        "kafka.idempotence is on: safe on Apache Kafka, but on the embedded Tansu broker an "
        "idempotent producer can lose an acknowledged record after its S3 store stalls "
        "(broker defect 7, docs/broker.md)"
    )


def make_producer(kc: KafkaConfig, **overrides: Any) -> KafkaProducer:
    """A producer with ``acks="all"``; idempotence is ``kafka.idempotence`` (explicit: kafka-python
    3.x turns it on by default, and on Tansu a broker ``UnknownError`` then makes the producer
    fatal for good; docs/broker.md)."""
    check_broker(kc)
    if kc.idempotence:
        _warn_idempotence()
    kw = dict(
        acks="all",
        enable_idempotence=kc.idempotence,
        linger_ms=kc.linger_ms,
        batch_size=256 * 1024,
        compression_type="lz4",
        max_request_size=kc.max_message_bytes + 1024 * 64,
        retries=10,
    )
    kw.update(overrides)
    return KafkaProducer(**client_kwargs(kc), **kw)


def make_publisher(
    kc: KafkaConfig,
    *,
    client: str = "",
    run: str = "",
    on_error: Any = None,
    **overrides: Any,
) -> Publisher:
    """A ``Publisher`` that rebuilds its producer (``make_producer(kc, **overrides)``) when it
    goes fatal or keeps failing, re-sends what was not acknowledged, and raises
    ``PublisherDead`` after ``kafka.producer_dead_after_s`` of failure; with ``client`` and
    ``run`` it exports ``dynaweb_client_*`` (``streams.metrics``)."""
    return Publisher(
        make_producer(kc, **overrides),
        on_error,
        factory=lambda: make_producer(kc, **overrides),
        client=client,
        run=run,
        dead_after_s=kc.producer_dead_after_s,
        resend_buffer_bytes=kc.resend_buffer_bytes,
    )


def make_consumer(
    kc: KafkaConfig, *topics: str, group: str | None = None, **overrides: Any
) -> KafkaConsumer:
    check_broker(kc)
    kw = dict(
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=kc.session_timeout_ms,
        heartbeat_interval_ms=1000,
        max_partition_fetch_bytes=kc.max_message_bytes + 1024 * 64,
        fetch_max_bytes=max(52428800, kc.max_message_bytes * 2),
    )
    kw.update(overrides)
    return KafkaConsumer(*topics, **client_kwargs(kc), **kw)


class DeadLetters:
    """Routes an invalid message to the dead-letter topic with reason + original bytes."""

    def __init__(self, publisher: Publisher, topic: str, component: str, counter: Any = None):
        self.publisher = publisher
        self.topic = topic
        self.component = component
        self.counter = counter
        self.count = 0

    def route(
        self,
        raw: bytes | None,
        err: records.RecordError,
        source_topic: str,
        offset: int = -1,
        partition: int = -1,
    ) -> None:
        """Headers: ``reason``, ``detail``, ``source_topic``, ``source_partition`` and
        ``source_offset`` (together they locate the original record; -1 when unknown) and
        ``component``."""
        self.count += 1
        if self.counter is not None:
            self.counter.labels(reason=err.reason).inc()
        headers = [
            ("reason", err.reason.encode()),
            ("detail", err.detail[:500].encode()),
            ("source_topic", source_topic.encode()),
            ("source_partition", str(partition).encode()),
            ("source_offset", str(offset).encode()),
            ("component", self.component.encode()),
        ]
        self.publisher.send(self.topic, raw if raw is not None else b"", headers=headers)
        log.warning(
            "dead-lettered message from %s[%s]@%s: %s", source_topic, partition, offset, err
        )


def sentinel(run_id: str, sender: str) -> records.Control:
    return records.Control(
        run_id=run_id, kind="sentinel", sender=sender, info={"nonce": records.new_id()}
    )


def assignable(
    consumer: KafkaConsumer, topics: Iterable[str], timeout: float = 30.0
) -> list[TopicPartition]:
    """Every partition of ``topics`` once the consumer's metadata knows them (a topic just
    created may take a moment); raises ``TimeoutError`` naming the topic and the fix."""
    tps: list[TopicPartition] = []
    deadline = time.time() + timeout
    for t in topics:
        parts = consumer.partitions_for_topic(t)
        while not parts and time.time() < deadline:
            time.sleep(0.2)
            parts = consumer.partitions_for_topic(t)
        if not parts:
            raise TimeoutError(
                f"topic {t} has no partitions after {timeout:.0f}s; was it created "
                "(`dynaweb infra up`, or any component of the run)?"
            )
        tps += [TopicPartition(t, p) for p in sorted(parts)]
    return tps


def read_until_sentinel(
    kc: KafkaConfig, topic: str, run_id: str, timeout: float = 60.0
) -> Iterator[tuple[Any, bytes]]:
    """Yield (ConsumerRecord, raw) for every record of ``topic`` from the start
    up to a sentinel we produce now on every partition (not a high-water mark)."""
    prod = make_producer(kc, linger_ms=0)
    consumer = make_consumer(kc)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        deadline = time.time() + timeout
        while not parts and time.time() < deadline:
            time.sleep(0.2)
            parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        nonces = {}
        for tp in tps:
            s = sentinel(run_id, "catch-up")
            nonces[tp.partition] = s.info["nonce"]
            prod.send(topic, value=records.encode(s), partition=tp.partition)
        prod.flush()
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        pending = set(nonces)
        while pending:
            if time.time() > deadline:
                raise TimeoutError(
                    f"sentinel not seen on {topic} partitions {sorted(pending)} within {timeout}s"
                )
            batch = consumer.poll(timeout_ms=500)
            for tp, msgs in batch.items():
                for m in msgs:
                    if tp.partition in pending and _is_nonce(m.value, nonces[tp.partition]):
                        pending.discard(tp.partition)
                        continue
                    if tp.partition in pending:
                        yield m, m.value
    finally:
        consumer.close()
        prod.close()


def _is_nonce(raw: bytes, nonce: str) -> bool:
    if not raw or b"sentinel" not in raw:
        return False
    try:
        d = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return False
    return d.get("kind") == "sentinel" and d.get("info", {}).get("nonce") == nonce


def is_control(raw: bytes) -> bool:
    return raw is not None and raw.find(b'"type":"control"', 0, 200) >= 0


__all__ = [
    "KafkaError",
    "ServiceUnavailable",
    "Publisher",
    "PublisherDead",
    "PublishLost",
    "DeadLetters",
    "make_producer",
    "make_publisher",
    "make_consumer",
    "ensure_topics",
    "read_until_sentinel",
    "client_kwargs",
    "check_broker",
    "is_control",
]
