"""HybridMixer._pick_experts: the least used experts first, ties broken at random."""

from __future__ import annotations

from collections import Counter

from tests.unit.test_mixer import mixer, mk


def test_least_used_first_and_ties_at_random() -> None:
    m = mixer(samples_per_insert=0)
    for i in range(10):
        m.add_expert(mk("expert", ep=f"x{i}"))
    uses = {f"x{i}": u for i, u in enumerate([0, 0, 1, 1, 1, 1, 5, 5, 9, 9])}
    for e in m.pool.values():
        e.uses = uses[e.traj.episode_id]
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
