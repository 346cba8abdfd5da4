"""Helpers shared by the integration, fault and end-to-end tests (real services only): the
embedded stack's config, the environment of a child ``dynaweb`` process, waits, and the stream
worker driven as a subprocess with a producer and a reader on the broker."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from kafka import TopicPartition

from core.config import Config, load_config
from core.net import free_port_block
from core.waiting import wait_until
from streams import kafka as sk
from streams import records
from streams.records import Transition
from streams.topics import Topics

ROOT = Path(__file__).resolve().parents[1]  # the repository


def stack_config(home: str) -> Config:
    s3, broker, prom, task = free_port_block(4)
    aux = free_port_block(5)[0]
    return load_config(
        env={},
        overrides={
            "home": home,
            "run_id": "tests",
            "stack.s3_port": s3,
            "s3.endpoint": f"127.0.0.1:{s3}",
            "stack.broker_port": broker,
            "kafka.bootstrap": f"127.0.0.1:{broker}",
            "stack.prometheus_port": prom,
            "stack.taskserver_port": task,
            "stack.s3_aux_port_base": aux,
            "stack.scrape_interval_s": 1.0,
        },
    )


def fresh_run(cfg: Config, prefix: str = "t") -> Config:
    c = copy.deepcopy(cfg)
    c.run_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return c


def env_for(cfg: Config, **extra: str) -> dict:
    """Environment that makes a child `dynaweb` process use this config."""
    # not this process's config, nor its torch.distributed rendezvous (an in-process trainer
    # test leaves MASTER_PORT bound; a child must pick its own)
    dist = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAWEB_") and k not in dist}
    env.update(
        {
            "DYNAWEB_HOME": cfg.home,
            "DYNAWEB_RUN_ID": cfg.run_id,
            "DYNAWEB_KAFKA__BOOTSTRAP": cfg.kafka.bootstrap,
            "DYNAWEB_S3__ENDPOINT": cfg.s3.endpoint,
            "DYNAWEB_STACK__S3_PORT": str(cfg.stack.s3_port),
            "DYNAWEB_STACK__BROKER_PORT": str(cfg.stack.broker_port),
            "DYNAWEB_STACK__PROMETHEUS_PORT": str(cfg.stack.prometheus_port),
            "DYNAWEB_STACK__TASKSERVER_PORT": str(cfg.stack.taskserver_port),
            "DYNAWEB_STACK__S3_AUX_PORT_BASE": str(cfg.stack.s3_aux_port_base),
            "DYNAWEB_STACK__SCRAPE_INTERVAL_S": str(cfg.stack.scrape_interval_s),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def wait_for(cond: Callable[[], object], timeout: float, what: str, every: float = 0.1) -> object:
    """``core.waiting.wait_until`` for tests: a time-out is a test failure."""
    return wait_until(cond, timeout, what, every=every, error=AssertionError)


# --- the stream worker (tests/integration/test_stream_*.py, tests/faults) -----------------------


class Worker:
    """The stream worker as a subprocess (``python -m streams.worker``) configured through the
    environment: ``stream`` settings by name, another section's as ``section__name``."""

    def __init__(self, bootstrap: str, home: Path, run_id: str, **stream: object):
        self.run_id = run_id
        self.home = home
        self.worker_id = "w-" + run_id[-6:]
        self.env = dict(os.environ)
        self.env.update(
            {
                "DYNAWEB_HOME": str(home),
                "DYNAWEB_RUN_ID": run_id,
                "DYNAWEB_KAFKA__BOOTSTRAP": bootstrap,
                "DYNAWEB_STREAM__WORKER_ID": self.worker_id,
                "PYTHONPATH": str(ROOT),
            }
        )
        for k, v in stream.items():
            sec, _, name = k.partition("__") if "__" in k else ("stream", "", k)
            self.env[f"DYNAWEB_{sec.upper()}__{name.upper()}"] = str(v)
        self.dir = home / "streams" / run_id / self.worker_id
        self.proc: subprocess.Popen | None = None
        self.log = home / f"worker-{run_id}.log"

    def rename(self, worker_id: str) -> Worker:
        """Another worker of the same run (same consumer group)."""
        self.worker_id = self.env["DYNAWEB_STREAM__WORKER_ID"] = worker_id
        self.dir = self.home / "streams" / self.run_id / worker_id
        self.log = self.home / f"worker-{self.run_id}-{worker_id}.log"
        return self

    def state(self) -> dict | None:
        try:
            return json.loads((self.dir / "state.json").read_text())
        except (OSError, ValueError):
            return None

    def topics_name(self, key: str) -> str:
        return Topics(self.run_id).name(key)

    def start(self, timeout: float = 60) -> Worker:
        (self.dir / "ready").unlink(missing_ok=True)
        self._fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *(os.environ.get("DYNAWEB_WORKER_CMD", "-m streams.worker").split()),
                "--loglevel",
                os.environ.get("DYNAWEB_TEST_WORKER_LOGLEVEL", "warning"),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
        )

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited {self.proc.returncode}: {self.tail()}")
            return (self.dir / "ready").exists()

        wait_for(ready, timeout, "the stream worker to be ready")
        return self

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def metrics(self) -> dict[str, float]:
        port = int((self.dir / "metrics_port").read_text())
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("dynaweb_stream_"):
                name, _, val = line.rpartition(" ")
                out[name] = float(val)
        return out

    def metric(self, prefix: str, **labels: str) -> float:
        total = 0.0
        for name, v in self.metrics().items():
            if name.split("{")[0] == prefix and all(
                f'{k}="{val}"' in name for k, val in labels.items()
            ):
                total += v
        return total

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if getattr(self, "_fh", None):
            self._fh.close()


class Reader:
    """Reads a topic from the beginning (no group, no high-water marks)."""

    def __init__(self, bootstrap: str, topic: str):
        cfg = load_config(env={"DYNAWEB_KAFKA__BOOTSTRAP": bootstrap})
        self.c = sk.make_consumer(cfg.kafka)
        parts = wait_for(lambda: self.c.partitions_for_topic(topic), 20, f"partitions of {topic}")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        self.c.assign(tps)
        self.c.seek_to_beginning(*tps)
        self.records: list = []

    def poll(self) -> list:
        for msgs in self.c.poll(timeout_ms=200).values():
            # catch-up sentinels (streams.side, streams.recovery) are not data
            self.records.extend(
                m for m in msgs if not (m.value and b'"kind":"sentinel"' in m.value[:400])
            )
        return self.records

    def until(self, cond: Callable[[list], bool], timeout: float, what: str) -> list:
        return wait_for(lambda: cond(self.poll()) and self.records, timeout, what, every=0.0)

    def close(self) -> None:
        self.c.close()


class Producer:
    """Publishes records to a run's topics (transitions keyed by episode)."""

    def __init__(self, bootstrap: str, run: str):
        cfg = load_config(env={"DYNAWEB_KAFKA__BOOTSTRAP": bootstrap})
        self.t = Topics(run, cfg.kafka.partitions)
        self.p = sk.make_producer(cfg.kafka, linger_ms=5)

    def send(self, key: str, rec, raw: bytes | None = None) -> None:
        topic = self.t.name(key)
        k = rec.episode_id.encode() if isinstance(rec, Transition) else None
        self.p.send(topic, value=raw if raw is not None else records.encode(rec), key=k)

    def episodes(self, key: str, eps: list[list[Transition]]) -> None:
        for ep in eps:
            for t in ep:
                self.send(key, t)
        self.p.flush()

    def close(self) -> None:
        self.p.close()
