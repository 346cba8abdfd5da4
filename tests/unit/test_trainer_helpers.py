"""Pure helpers of the trainer loop and the learner's per-source report."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from core.bounded import BoundedSet
from core.config import Config
from models import metrics as M
from models.checkpoints.store import CheckpointStore
from models.losses import group_advantages, source_stats, task_success_reward
from models.train.learner import Learner
from models.train.report import export_source_stats
from models.train.trainer import LeaderParts, Trainer
from streams.records import Trajectory
from streams.topics import Topics


def _traj(
    group: str, reward: float, source: str = "dream", pv: int = 0, ep: str = ""
) -> Trajectory:
    return Trajectory(
        run_id="r",
        episode_id=ep or f"{group}-{reward}",
        source=source,
        task="t",
        seed=0,
        policy_version=pv,
        world_model_version=0,
        transitions=[{}],
        reward=reward,
        group_id=group,
    )


def test_task_success_reward_is_binary() -> None:
    assert [task_success_reward(r) for r in (-1.0, 0.0, 0.4, 1.0)] == [0.0, 0.0, 1.0, 1.0]


def test_source_stats_count_groups_with_a_nonzero_advantage_per_source() -> None:
    trajs = [
        _traj("a", 1.0, ep="1"),
        _traj("a", 0.0, ep="2"),
        _traj("b", 1.0, ep="3"),
        _traj("b", 1.0, ep="4"),
        _traj("c", 1.0, "real", ep="5"),
        _traj("c", -1.0, "real", ep="6"),
        _traj("d", -1.0, "real", ep="7"),
        _traj("d", 0.0, "real", ep="8"),
    ]
    rewards = torch.tensor([task_success_reward(t.reward) for t in trajs])
    adv = group_advantages(rewards, [t.group_id for t in trajs])
    s = source_stats(trajs, adv)
    assert (
        s["dream"]["groups"] == 2
        and s["dream"]["groups_nonzero"] == 1
        and s["dream"]["trajectories"] == 4
    )
    # -1 and 0 are both failures: group d has no advantage, group c has one
    assert s["real"]["groups"] == 2 and s["real"]["groups_nonzero"] == 1
    assert abs(s["real"]["adv_abs_sum"] - 2.0) < 1e-3


def test_export_source_stats_accumulates_running_totals() -> None:
    run = "export-test"
    stats = {
        "by_source": {
            "real": {
                "trajectories": 4,
                "groups": 2,
                "groups_nonzero": 1,
                "adv_abs_sum": 2.0,
                "ratio_sum": 4.0,
                "clipped": 1,
            }
        },
        "ungrouped": {"real": 3},
    }
    export_source_stats(run, stats)
    export_source_stats(run, stats)
    assert M.GSPO_GROUPS.labels(run, "real")._value.get() == 4
    assert M.GSPO_GROUPS_NONZERO.labels(run, "real")._value.get() == 2
    assert M.TRAINER_UNGROUPED.labels(run, "real")._value.get() == 6
    assert M.TRAINER_SOURCE_NONZERO.labels(run, "real")._value.get() == 0.5


def _trainer(cfg: Config, tmp_path: Path) -> Trainer:
    """A rank-0 ``Trainer`` wired from fake parts (no broker, S3 or model): its loop's state."""
    parts = LeaderParts(Topics(cfg.run_id), SimpleNamespace(), SimpleNamespace(), lambda **kw: None)
    learner = Learner(cfg.trainer, cfg.model, cfg.dream.max_change_tokens, cfg.run_id)
    return Trainer(cfg, learner, CheckpointStore(None, "b", cfg.run_id), tmp_path, parts)


def test_trainer_drops_stale_samples_at_train_time(tmp_path: Path) -> None:
    cfg = Config(run_id="stale-test")
    cfg.stream.max_staleness = 2
    me = _trainer(cfg, tmp_path)
    me.version = 10
    trajs = [
        _traj("a", 1.0, pv=7, ep="old"),
        _traj("a", 1.0, pv=8, ep="ok"),
        _traj("", 1.0, "expert", pv=0, ep="e"),
    ]
    kept = me.drop_stale(trajs)
    assert [t.episode_id for t in kept] == ["ok", "e"]
    assert M.TRAINER_STALE.labels(cfg.run_id, "dream")._value.get() == 1


def test_bounded_set_forgets_oldest() -> None:
    s = BoundedSet(2)
    assert s.add(1) and s.add(2) and not s.add(1)
    assert s.add(3)  # evicts 1
    assert s.add(1)


def test_mixed_batch_with_only_stale_online_samples_is_skipped_whole(tmp_path: Path) -> None:
    from streams.records import TrainingBatch

    cfg = Config(run_id="skip-test")
    cfg.stream.max_staleness = 1
    tr = _trainer(cfg, tmp_path)  # the loop's state only: no broker, S3 or model needed to skip
    tr.version = 5
    trajs = [
        _traj("a", 1.0, pv=2, ep="old1"),
        _traj("a", 0.0, pv=3, ep="old2"),
        _traj("", 1.0, "expert", ep="e1"),
    ]
    batch = TrainingBatch(
        run_id=cfg.run_id,
        batch_id="m-1",
        worker_id="w",
        kind="mixed",
        trajectories=[vars(t) for t in trajs],
        expert_fraction=0.34,
    )
    assert tr.policy_step((batch, "train.policy", 0, 7)) is False
    assert tr.policy_steps == 0 and tr.batches_consumed == 1 and tr.consumed_by_worker == {"w": 1}
    assert tr.offsets == {"train.policy": {0: 7}}  # consumed: a restart does not read it again
    assert M.TRAINER_BATCH_KIND.labels(cfg.run_id, "stale_skipped")._value.get() == 1
    assert M.TRAINER_STALE.labels(cfg.run_id, "dream")._value.get() == 2
