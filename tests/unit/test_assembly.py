"""Unit tests for streams.assembly (pure logic, no Kafka)."""

from __future__ import annotations

from core.bounded import BoundedSet
from streams.assembly import Deduper, EpisodeAssembler, GroupAssembler, check_group
from streams.records import Trajectory, Transition


def tr(
    ep: str,
    step: int,
    done: bool = False,
    source: str = "expert",
    truncated: bool = False,
    group: str = "",
    pv: int = 0,
) -> Transition:
    obs = {"instruction": "click", "tree": f"page {step}"}
    return Transition(
        run_id="r",
        episode_id=ep,
        step=step,
        task="miniwob/click-button",
        seed=1,
        source=source,
        policy_version=pv,
        world_model_version=0,
        obs=obs,
        action="click(1)",
        next_obs=obs,
        reward=1.0 if done else 0.0,
        done=done,
        truncated=truncated,
        group_id=group,
    )


def traj(ep: str, group: str = "g", pv: int = 0) -> Trajectory:
    return Trajectory.from_transitions([tr(ep, 0, done=True, source="dream", group=group, pv=pv)])


def test_bounded_set_forgets_oldest():
    s = BoundedSet(3)
    assert all(s.add(i) for i in range(5))
    assert len(s) == 3 and 0 not in s and 4 in s
    assert not s.add(4)


def test_dedupe_by_episode_and_step():
    d = Deduper(capacity=100)
    assert d.accept(tr("a", 0)) and d.accept(tr("a", 1)) and d.accept(tr("b", 0))
    assert not d.accept(tr("a", 0))
    assert d.duplicates == 1
    d.close("a")
    assert not d.accept(tr("a", 5))  # late step of a finished episode
    assert d.late == 1


def test_dedupe_memory_is_bounded():
    d = Deduper(capacity=10, closed_capacity=10)
    for i in range(1000):
        d.accept(tr(f"e{i}", 0))
        d.close(f"e{i}")
    assert len(d.seen) == 10 and len(d.closed) == 10


def test_episode_emitted_on_done_in_step_order():
    a = EpisodeAssembler(idle_timeout_s=10)
    assert a.add(tr("a", 1), 0) is None
    assert a.add(tr("a", 0), 0) is None
    t = a.add(tr("a", 2, done=True), 0)
    assert t is not None and [s["step"] for s in t.transitions] == [0, 1, 2]
    assert not t.truncated and t.reward == 1.0 and len(a) == 0


def test_done_before_earlier_steps_waits_for_them():
    a = EpisodeAssembler(idle_timeout_s=10)
    assert a.add(tr("a", 1, done=True), 0) is None
    t = a.add(tr("a", 0), 0)
    assert t is not None and len(t.transitions) == 2 and not t.truncated


def test_truncated_flag_closes_episode():
    a = EpisodeAssembler(idle_timeout_s=10)
    t = a.add(tr("a", 0, truncated=True), 0)
    assert t is not None and t.truncated


def test_idle_timeout_emits_truncated():
    d = Deduper()
    a = EpisodeAssembler(idle_timeout_s=5, deduper=d)
    a.add(tr("a", 0), 0)
    a.add(tr("a", 1), 1)
    assert a.sweep(5.5) == []
    out = a.sweep(6.1)
    assert len(out) == 1 and out[0].truncated and len(out[0].transitions) == 2
    assert a.stats["idle_timeout"] == 1
    assert not d.accept(tr("a", 2))  # a late step does not reopen it


def test_idle_timeout_keeps_contiguous_prefix():
    a = EpisodeAssembler(idle_timeout_s=1)
    a.add(tr("a", 0), 0)
    a.add(tr("a", 1), 0)
    a.add(tr("a", 3), 0)
    (t,) = a.sweep(2)
    assert [s["step"] for s in t.transitions] == [0, 1]


def test_open_episodes_bounded():
    a = EpisodeAssembler(idle_timeout_s=100, max_open=3)
    for i in range(5):
        a.add(tr(f"e{i}", 0), i)
    assert len(a) == 3
    out = a.sweep(5)
    assert sorted(t.episode_id for t in out) == ["e0", "e1"] and all(t.truncated for t in out)


def test_group_complete_when_all_arrive():
    g = GroupAssembler(group_size=3, timeout_s=10)
    assert g.add(traj("a"), 0) is None
    assert g.add(traj("b"), 0) is None
    out = g.add(traj("c"), 0)
    assert [t.episode_id for t in out] == ["a", "b", "c"]
    assert g.stats["complete"] == 1 and len(g) == 0


def test_group_member_redelivery_does_not_complete_group():
    g = GroupAssembler(group_size=3, timeout_s=10)
    g.add(traj("a"), 0)
    assert g.add(traj("a"), 0) is None
    assert g.add(traj("b"), 0) is None


def test_incomplete_group_emitted_with_its_size_after_timeout():
    g = GroupAssembler(group_size=8, timeout_s=5, emit_incomplete=True)
    g.add(traj("a", "g1"), 0)
    g.add(traj("b", "g1"), 1)
    assert g.sweep(4.9) == []
    (out,) = g.sweep(5.0)
    assert len(out) == 2 and g.stats["incomplete_emitted"] == 1 and g.sizes[2] == 1


def test_incomplete_group_dropped_when_configured():
    g = GroupAssembler(group_size=8, timeout_s=5, emit_incomplete=False)
    g.add(traj("a", "g1"), 0)
    assert g.sweep(6) == []
    assert g.stats["incomplete_dropped"] == 1 and len(g) == 0


def test_trajectory_without_group_id_is_counted_never_grouped():
    g = GroupAssembler(group_size=2, timeout_s=1)
    assert g.add(traj("a", group=""), 0) is None
    assert g.add(traj("b", group=""), 0) is None
    assert len(g) == 0 and g.stats["ungrouped"] == 2
    assert g.sweep(10) == []  # nothing was kept to emit later either


def _member(
    ep: str, task: str = "miniwob/click-button", seed: int = 1, page: str = "page 0", pv: int = 0
):
    t = traj(ep, group="g", pv=pv)
    t.task, t.seed = task, seed
    t.transitions[0]["obs"] = {"instruction": "click", "tree": page}
    return t


def test_check_group_rejects_members_that_disagree():
    members = [
        _member("a"),
        _member("b"),
        _member("c", seed=2),
        _member("d", task="miniwob/other"),
        _member("e", page="another page"),
        _member("f", pv=-3),
    ]
    kept, rejected = check_group(members, max_staleness=2)
    assert [t.episode_id for t in kept] == ["a", "b"]
    assert rejected == {"seed": 1, "task": 1, "start_page": 1, "version": 1}


def test_check_group_keeps_versions_within_staleness():
    kept, rejected = check_group(
        [_member("a", pv=5), _member("b", pv=3), _member("c", pv=2)], max_staleness=2
    )
    assert [t.policy_version for t in kept] == [5, 3] and rejected == {"version": 1}


def test_disagreeing_members_are_dropped_and_counted_on_emission():
    g = GroupAssembler(group_size=3, timeout_s=10, max_staleness=1)
    g.add(_member("a", pv=4), 0)
    g.add(_member("b", pv=4), 0)
    out = g.add(_member("c", pv=1), 0)
    assert [t.episode_id for t in out] == ["a", "b"]
    assert g.stats["mismatch_version"] == 1 and g.sizes[2] == 1


def test_idle_episode_without_first_step_is_dropped():
    a = EpisodeAssembler(idle_timeout_s=1)
    a.add(tr("a", 2), 0)
    a.add(tr("a", 3), 0)
    assert a.sweep(2) == [] and a.stats["headless"] == 1
