"""Unit tests for streams.mixer.HybridMixer (pure logic, no Kafka)."""

from __future__ import annotations

import random

import pytest

from streams.records import Trajectory
from tests.factories import make_mixer as mixer
from tests.factories import mixer_trajectory as mk


def group(g: int, pv: int = 0) -> list[Trajectory]:
    gid = f"g{random.random()}"
    return [mk("dream", pv, gid) for _ in range(g)]


def counts(b) -> tuple[int, int]:
    ts = b.trajs()
    n_e = sum(t.source == "expert" for t in ts)
    return n_e, len(ts) - n_e


@pytest.mark.parametrize("f", [0.5, 0.25, 0.3, 0.75, 0.0])
@pytest.mark.parametrize("gsize", [8, 3, 5])
def test_fraction_within_one_trajectory_every_batch(f, gsize):
    rng = random.Random(7)
    m = mixer(expert_fraction=f, batch_trajectories=16)
    for _ in range(40):
        m.add_expert(mk("expert"))
    now = 0.0
    batches = []
    for _ in range(200):  # many windows with varied incomplete group sizes
        m.add_group(group(rng.randint(1, gsize)), now)
        if rng.random() < 0.3:
            m.add_expert(mk("expert"))
        now += rng.random()
        batches += m.poll(now)
    batches += m.poll(now + 100)
    mixed = [b for b in batches if b.kind == "mixed"]
    assert len(mixed) > 10
    for b in mixed:
        n_e, n_d = counts(b)
        assert abs(n_e - f * (n_e + n_d)) <= 1.0, (n_e, n_d)
        assert b.expert_fraction == pytest.approx(n_e / (n_e + n_d))
    assert m.pending_trajectories == 0


def test_default_batch_is_half_expert_and_random_order():
    m = mixer()
    for _ in range(20):
        m.add_expert(mk("expert"))
    m.add_group(group(8), 0)
    (b,) = m.poll(0)
    assert b.kind == "mixed" and counts(b) == (8, 8) and b.expert_fraction == 0.5
    order = [t.source for t in b.trajs()]
    assert order != ["dream"] * 8 + ["expert"] * 8 and order != ["expert"] * 8 + ["dream"] * 8
    assert b.latest_policy_version == 0 and b.batch_id.startswith("m-")


def test_group_never_split():
    m = mixer(batch_trajectories=8)  # target 4 non-expert per batch
    for _ in range(50):
        m.add_expert(mk("expert"))
    groups = [group(3), group(3), group(6), group(1)]
    for g in groups:
        m.add_group(g, 0)
    batches = m.poll(10)
    where = {}
    for b in batches:
        for t in b.trajs():
            if t.source != "expert":
                where.setdefault(t.group_id, set()).add(b.batch_id)
    assert len(where) == 4 and all(len(v) == 1 for v in where.values())
    # a group bigger than the target still goes out whole, with its matching experts
    big = [b for b in batches if counts(b)[1] == 6]
    assert big and counts(big[0]) == (6, 6)


def test_partial_batch_waits_then_flushes():
    m = mixer(batch_trajectories=16, batch_wait_s=1.0)
    for _ in range(20):
        m.add_expert(mk("expert"))
    m.add_group(group(3), 0)
    assert m.poll(0.5) == []
    (b,) = m.poll(1.1)
    assert counts(b) == (3, 3)


def test_staleness_drop_on_new_version():
    m = mixer(max_staleness=2)
    for _ in range(20):
        m.add_expert(mk("expert", pv=0))
    m.set_latest_version(3)
    assert m.add_group(group(8, pv=0), 0) == 0  # 0 < 3 - 2: stale at insert
    assert m.drops["stale"] == 8
    m.add_group(group(8, pv=1), 0)  # 1 >= 1: fresh now
    assert m.set_latest_version(4) == 8  # queued group becomes stale when v4 is announced
    assert m.drops["stale"] == 16 and m.pending_trajectories == 0
    m.add_group(group(8, pv=2), 0)
    m.set_latest_version(4)  # not newer: no-op
    (b,) = m.poll(0)
    assert b.kind == "mixed" and b.latest_policy_version == 4
    # experts are exempt (their policy_version is 0)
    assert counts(b) == (8, 8)


def test_mixed_staleness_within_group_drops_only_stale_members():
    m = mixer()
    for _ in range(20):
        m.add_expert(mk("expert"))
    m.set_latest_version(5)
    gid = "gx"
    kept = m.add_group([mk("dream", 5, gid), mk("dream", 1, gid), mk("dream", 3, gid)], 0)
    assert kept == 2 and m.drops["stale"] == 1


def test_reuse_bound_waits_then_fraction_wins():
    m = mixer(samples_per_insert=2, reuse_wait_s=5.0, batch_trajectories=8)
    for _ in range(4):
        m.add_expert(mk("expert"))
    now = 0.0
    out = []
    for _i in range(2):  # 2 batches x 4 experts = 8 samples = 4 experts x spi 2
        m.add_group(group(4), now)
        out += m.poll(now)
    assert len(out) == 2
    uses = [e.uses for e in m.pool.values()]
    assert max(uses) <= 2 and m.realised_reuse == pytest.approx(2.0)
    m.add_group(group(4), now)
    assert m.poll(now + 1) == []  # pool exhausted within the bound: the batch waits
    assert m.stats["waiting_reuse_bound"] >= 1
    m.add_expert(mk("expert"))  # one new expert is not enough (4 needed)
    assert m.poll(now + 2) == []
    (b,) = m.poll(now + 6)  # after reuse_wait_s the fraction wins over the bound
    assert counts(b) == (4, 4) and m.stats["reuse_over_bound"] == 3


def test_reuse_bound_prefers_fresh_experts():
    m = mixer(samples_per_insert=3, batch_trajectories=4)
    first = [mk("expert") for _ in range(2)]
    for e in first:
        m.add_expert(e)
    m.add_group(group(2), 0)
    m.poll(0)
    fresh = [mk("expert") for _ in range(2)]
    for e in fresh:
        m.add_expert(e)
    m.add_group(group(2), 0)
    (b,) = m.poll(0)
    ids = {t.episode_id for t in b.trajs() if t.source == "expert"}
    assert ids == {e.episode_id for e in fresh}


def test_expert_pool_bounded_and_deduped():
    m = mixer(expert_pool_size=5)
    e = mk("expert")
    assert m.add_expert(e) and not m.add_expert(e)
    for _ in range(10):
        m.add_expert(mk("expert"))
    assert len(m.pool) == 5 and m.stats["experts_evicted"] == 6


def test_cold_start_expert_only_rate_limited():
    m = mixer(cold_start_batch_s=2.0, batch_trajectories=16)
    assert m.poll(0) == []  # nothing at all yet
    for _ in range(5):
        m.add_expert(mk("expert"))
    assert m.poll(1.0) == []  # timed from the first poll: dreams get a chance first
    (b,) = m.poll(2.0)
    assert b.kind == "expert_only" and counts(b) == (5, 0) and b.expert_fraction == 1.0
    assert m.poll(3.0) == []  # at most every cold_start_batch_s
    (b2,) = m.poll(4.0)
    assert b2.kind == "expert_only" and b2.batch_id != b.batch_id
    assert m.poll(10.0, allow_expert_only=False) == []  # paused (back-pressure)
    # dreams arrive: mixed batches take over, no expert-only while a group is queued
    m.add_group(group(4), 10.5)
    out = m.poll(10.6)
    assert all(x.kind == "mixed" for x in out)


def test_cold_start_respects_reuse_bound():
    m = mixer(samples_per_insert=1, cold_start_batch_s=0.0)
    for _ in range(3):
        m.add_expert(mk("expert"))
    assert len(m.poll(0)) == 1
    assert m.poll(1) == []  # every expert used once
    assert m.stats["expert_only_reuse_bound"] == 1


def test_no_experts_groups_wait_bounded():
    m = mixer(max_pending_groups=3)
    for _ in range(5):
        m.add_group(group(8), 0)
    assert m.poll(100) == []
    assert m.drops["queue_full"] == 16 and len(m.pending) == 3


def test_batch_id_deterministic_for_same_groups():
    g = group(8)
    ids = []
    for seed in (1, 2):
        m = mixer(seed=seed)
        for i in range(20):
            m.add_expert(mk("expert", ep=f"x{i}"))
        m.add_group(list(g), 0)
        ids.append(m.poll(0)[0].batch_id)
    assert ids[0] == ids[1]


def test_expert_fraction_one_refuses_dreams():
    m = mixer(expert_fraction=1.0)
    m.add_expert(mk("expert"))
    assert m.add_group(group(4), 0) == 0 and m.drops["fraction_one"] == 4
