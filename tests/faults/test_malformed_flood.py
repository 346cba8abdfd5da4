"""A flood of malformed records into the real-transitions topic, under a real stream worker.

1,000 invalid records (half not JSON, half JSON that is no transition), each carrying its id,
are published (and acknowledged) into ``transitions.real`` while a stream worker
(``python -m streams.worker``) consumes it: every one is dead-lettered with a reason and its
source topic, partition and offset, the worker stays up, a valid transition sent after the flood
is forwarded within ``RECOVERY_S`` (progress), and a full read of the topic from offset 0
completes (``streams.kafka.read_until_sentinel``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from core.config import Config
from infra.chaos import bad_record
from streams.kafka import ensure_topics, is_control, make_publisher, read_until_sentinel
from tests.factories import transition
from tests.faults.harness import RECOVERY_S, report
from tests.support import env_for, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]
FLOOD = 1000


def flood_id(raw: bytes) -> int:
    if raw.startswith(b"\x00"):
        return int(raw.rsplit(b" ", 1)[1])
    return int(json.loads(raw)["flood"])


@pytest.fixture
def worker(run_cfg: Config, tmp_path: Path):
    wid = "w-flood"
    env = env_for(run_cfg, DYNAWEB_STREAM__WORKER_ID=wid, PYTHONPATH=str(ROOT))
    ready = Path(run_cfg.home) / "streams" / run_cfg.run_id / wid / "ready"
    log = tmp_path / "worker.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams.worker", "--loglevel", "warning"],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )

    def is_ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"worker exited {proc.returncode}: {log.read_text()[-3000:]}")
        return ready.exists()

    try:
        wait_for(is_ready, 120, "the stream worker to be ready", every=0.5)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_malformed_flood_is_dead_lettered(run_cfg: Config, worker: subprocess.Popen) -> None:
    cfg = run_cfg
    topics = ensure_topics(cfg)
    pub = make_publisher(cfg.kafka, client="fault-flood", run=cfg.run_id)
    for i in range(FLOOD):
        pub.send(topics.real, bad_record(i), key=f"flood-{i % 7}")
    pub.flush(timeout=120)
    flooded_at = time.time()
    assert pub.acked == FLOOD and pub.lost == 0 and pub.outstanding == 0
    good = transition(cfg.run_id, "e-after-flood", 0, "real", True)
    pub.send(topics.real, good, key=good.episode_id)
    pub.flush(timeout=60)
    pub.close()

    dead: Counter = Counter()
    reasons: Counter = Counter()

    def all_dead_lettered() -> bool:
        assert worker.poll() is None, f"the stream worker exited {worker.returncode}"
        dead.clear()
        reasons.clear()
        for m, raw in read_until_sentinel(cfg.kafka, topics.deadletter, cfg.run_id, 60):
            if is_control(raw):
                continue
            h = {k: v.decode() for k, v in m.headers}
            assert h["reason"] and h["source_topic"] == topics.real, h
            assert int(h["source_partition"]) >= 0 and int(h["source_offset"]) >= 0, h
            dead[flood_id(raw)] += 1
            reasons[h["reason"]] += 1
        return set(dead) >= set(range(FLOOD))

    wait_for(all_dead_lettered, 180, f"{FLOOD} dead letters", every=2)
    dead_at = time.time()

    def forwarded() -> bool:
        for _m, raw in read_until_sentinel(cfg.kafka, topics.world_model, cfg.run_id, 60):
            if not is_control(raw) and b"e-after-flood" in raw:
                return True
        for _m, raw in read_until_sentinel(cfg.kafka, topics.world_model_eval, cfg.run_id, 60):
            if not is_control(raw) and b"e-after-flood" in raw:
                return True
        return False

    wait_for(forwarded, RECOVERY_S, "the valid transition after the flood forwarded", every=2)
    progress_s = time.time() - dead_at
    assert worker.poll() is None, "the stream worker exited"
    found = Counter()
    t0 = time.time()
    for _m, raw in read_until_sentinel(cfg.kafka, topics.real, cfg.run_id, 120):
        if not is_control(raw):
            found["good" if b"e-after-flood" in raw else "bad"] += 1
    assert found["bad"] >= FLOOD and found["good"] >= 1, found
    report(
        "malformed flood",
        published=FLOOD,
        dead_lettered=len(dead),
        duplicates=sum(dead.values()) - len(dead),
        reasons=dict(reasons),
        dead_letter_s=round(dead_at - flooded_at, 1),
        progress_s=round(progress_s, 1),
        full_read_s=round(time.time() - t0, 1),
    )
