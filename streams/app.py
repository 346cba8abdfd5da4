"""Builds the Faust app of the stream worker (agents live in streams.agents).

Settings chosen for the broker (see docs/broker.md):
- ``processing_guarantee="at_least_once"`` (Tansu transactions are broken);
  consumers downstream dedupe by ids.
- ``broker_session_timeout=6.0`` (Tansu group joins take about half of it).
- ``consumer_auto_offset_reset="earliest"`` (``latest`` relies on the broken
  high-water mark).
- no Tables anywhere (their recovery reads to the wrong high-water mark);
  the worker's state is rebuilt from topics up to a sentinel instead.
- ``stream_wait_empty=False``: the transition topics are consumed with
  ``acks=False`` and committed by the worker itself (streams.agents).
- the app is ``streams.bulk.App``: its consumer hands the fetched records of
  the transition topics to the worker in lists, not one by one through
  Faust's per-message stream path (which capped the worker's throughput).
- web server off; data dir unique per run and worker under ``cfg.home``.
"""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path
from typing import Any

import faust

from core.config import Config, KafkaConfig, StreamConfig
from streams.kafka import client_kwargs


def worker_id(stream: StreamConfig) -> str:
    return stream.worker_id or f"{socket.gethostname()}-{os.getpid()}"


def app_id(run_id: str) -> str:
    """Consumer-group id: every stream worker of a run shares it (partitions are split)."""
    return f"dynaweb-{run_id}-stream"


def broker_url(kafka: KafkaConfig) -> str:
    kw = client_kwargs(kafka)
    return ";".join(f"kafka://{hp}" for hp in kw["bootstrap_servers"])


def credentials(kafka: KafkaConfig) -> faust.auth.Credentials | None:
    """Map the kafka-python security settings (streams.kafka.client_kwargs) to Faust."""
    kw = client_kwargs(kafka)
    proto = kw.get("security_protocol", "PLAINTEXT").upper()
    ctx = None
    if proto in ("SSL", "SASL_SSL"):
        ctx = ssl.create_default_context(
            purpose=ssl.Purpose.SERVER_AUTH, cafile=kw.get("ssl_cafile") or None
        )
    if proto.startswith("SASL"):
        return faust.SASLCredentials(
            username=kw.get("sasl_plain_username"),
            password=kw.get("sasl_plain_password"),
            mechanism=kw.get("sasl_mechanism") or "PLAIN",
            ssl_context=ctx,
        )
    if proto == "SSL":
        return faust.SSLCredentials(ctx)
    return None


def compression() -> str | None:
    """lz4 when aiokafka can do it (it needs ``cramjam``), else none (CPU-bound on loopback)."""
    try:
        from aiokafka.codec import has_lz4

        return "lz4" if has_lz4() else None
    except ImportError:  # pragma: no cover
        return None


def datadir(home: Path, run_id: str, stream: StreamConfig) -> Path:
    """This worker's own directory under the state directory (created)."""
    p = home / "streams" / run_id / worker_id(stream)
    p.mkdir(parents=True, exist_ok=True)
    return p


PRODUCER_BATCH_BYTES = 256 * 1024


def _short_fetch_wait(ms: int) -> None:
    """Faust hard-codes aiokafka's ``fetch_max_wait_ms=1500``; Tansu answers an empty fetch
    only after that wait even when records arrive meanwhile (docs/broker.md), which made the
    worker's median latency over a second.  Set it to ``stream.fetch_wait_ms``."""
    from faust.transport.drivers import aiokafka as drv

    cls = drv.AIOKafkaConsumerThread
    cls._dynaweb_fetch_wait_ms = int(ms)
    if getattr(cls, "_dynaweb_fetch_wait", False):
        return
    orig = cls._create_worker_consumer

    def create(self, transport):
        return with_fetch_wait(orig(self, transport))

    cls._create_worker_consumer = create
    cls._dynaweb_fetch_wait = True


def with_fetch_wait(consumer: Any) -> Any:
    """The aiokafka consumer Faust built, with the configured fetch wait."""
    from faust.transport.drivers import aiokafka as drv

    consumer._fetch_max_wait_ms = drv.AIOKafkaConsumerThread._dynaweb_fetch_wait_ms
    return consumer


def make_app(cfg: Config) -> faust.App:
    from streams.bulk import App

    _short_fetch_wait(cfg.stream.fetch_wait_ms)
    max_bytes = cfg.kafka.max_message_bytes
    return App(
        app_id(cfg.run_id),
        broker=broker_url(cfg.kafka),
        broker_credentials=credentials(cfg.kafka),
        processing_guarantee="at_least_once",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        consumer_auto_offset_reset="earliest",
        topic_partitions=cfg.kafka.partitions,
        topic_replication_factor=cfg.kafka.replication_factor,
        topic_allow_declare=True,
        value_serializer="raw",
        key_serializer="raw",
        store="memory://",
        web_enabled=False,
        web_host="127.0.0.1",
        datadir=str(datadir(cfg.home_path, cfg.run_id, cfg.stream)),
        consumer_max_fetch_size=max_bytes + 64 * 1024,
        producer_max_request_size=2 * max_bytes + 64 * 1024,
        producer_linger_ms=cfg.kafka.linger_ms,
        # aiokafka keeps one open batch per partition and a send into a full one waits for
        # the batch before it to be sent: Faust's 16 KiB default made every training batch
        # (~200 KB) and every few forwarded transitions a broker round trip of their own.
        # 256 KiB, as our kafka-python producers (streams.kafka.make_producer). No Tables, so
        # broker defect 2 (which wants batches of one record) does not apply.
        producer_max_batch_size=PRODUCER_BATCH_BYTES,
        producer_acks=-1,
        producer_compression_type=compression(),
        stream_buffer_maxsize=8192,
        # messages held by open episodes are never acked (streams.agents commits itself):
        # do not wait for them on rebalance or stop
        stream_wait_empty=False,
        worker_redirect_stdouts=False,
    )
