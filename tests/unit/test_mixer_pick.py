"""HybridMixer._pick_experts: the least used experts first, ties broken at random."""

from __future__ import annotations

from collections import Counter

from tests.factories import make_mixer as mixer
from tests.factories import mixer_trajectory as mk


def test_least_used_first_and_ties_at_random() -> None:
    m = mixer(samples_per_insert=0)
    for i in range(10):
        m.add_expert(mk("expert", ep=f"x{i}"))
    uses = {f"x{i}": u for i, u in enumerate([0, 0, 1, 1, 1, 1, 5, 5, 9, 9])}
    for e in m.pool.values():
        m.index.remove(e)
        e.uses = uses[e.traj.episode_id]
        m.index.add(e)
    picked_ties: Counter = Counter()
    for _ in range(400):
        got = [e.traj.episode_id for e in m._pick_experts(4, bound=False)]
        assert len(set(got)) == 4
        assert {"x0", "x1"} <= set(got)  # every expert used less than the cut
        ties = set(got) - {"x0", "x1"}
        assert ties <= {"x2", "x3", "x4", "x5"}  # then those used as often as the cut
        picked_ties.update(ties)
    assert set(picked_ties) == {"x2", "x3", "x4", "x5"}  # at random among the tied
    assert min(picked_ties.values()) > 100
    assert m._pick_experts(11, bound=False) is None
    assert m._pick_experts(0, bound=False) == []


def test_the_use_index_follows_uses_and_evictions() -> None:
    m = mixer(samples_per_insert=2, expert_pool_size=6)
    for i in range(8):  # two evicted
        m.add_expert(mk("expert", ep=f"x{i}"))
    assert sorted(m.pool) == [f"x{i}" for i in range(2, 8)]
    for _ in range(5):
        got = m._pick_experts(4, bound=True)
        if got is None:
            break
        for e in got:
            m.index.bump(e)
    # the index holds exactly the pool, each entry in the bucket of its use count
    held = {id(e): u for u, b in m.index.buckets.items() for e in b}
    assert held == {id(e): e.uses for e in m.pool.values()}
    assert all(b[e.slot] is e for b in m.index.buckets.values() for e in b)
    assert max(e.uses for e in m.pool.values()) <= 2  # the bound: 6 experts x 2 uses = 3 picks
    assert sum(e.uses for e in m.pool.values()) == 12 and m._pick_experts(1, bound=True) is None
    assert len(m._pick_experts(6, bound=False)) == 6
