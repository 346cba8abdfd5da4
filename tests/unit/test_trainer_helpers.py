"""Pure helpers of the trainer loop."""

from __future__ import annotations

from models.trainer import BoundedSet, nonzero_advantage_share
from streams.records import Trajectory


def _traj(group: str, reward: float, source: str = "dream") -> Trajectory:
    return Trajectory(run_id="r", episode_id=f"{group}-{reward}", source=source, task="t", seed=0,
                      policy_version=0, world_model_version=0, transitions=[{}], reward=reward,
                      group_id=group)  # fmt: skip


def test_nonzero_advantage_share_counts_groups_with_different_rewards() -> None:
    trajs = [_traj("a", 1.0), _traj("a", 0.0), _traj("b", 1.0), _traj("b", 1.0), _traj("", 1.0, "expert")]
    assert nonzero_advantage_share(trajs) == 0.5
    assert nonzero_advantage_share([_traj("", 1.0, "expert")]) is None


def test_bounded_set_forgets_oldest() -> None:
    s = BoundedSet(2)
    assert s.add(1) and s.add(2) and not s.add(1)
    assert s.add(3)  # evicts 1
    assert s.add(1)
