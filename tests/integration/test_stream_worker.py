"""Integration tests of the stream worker on a real Kafka-protocol broker (Tansu).

The broker (the ``bootstrap`` fixture of tests/integration/conftest.py):
DYNAWEB_TEST_BOOTSTRAP if set, else a Tansu (memory storage) started for this
module on a free port. With CI=true a broker that cannot start fails the tests
(never skips). The worker runs as a subprocess (``python -m streams.worker``,
``tests.support.Worker``) configured through the environment; each test
uses its own run id (topic prefix). Waits are conditions with deadlines.

Throughput is measured by ``dynaweb bench streams`` (evaluation/bench/streams.py), not by a test.
"""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from streams import records
from streams.records import CheckpointAnnouncement, Control, Transition
from streams.topics import Topics
from tests.factories import transition
from tests.support import Producer, Reader, Worker, wait_for

pytestmark = pytest.mark.integration


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
