"""The trainer's interleaving of policy and world-model steps with a backlog of policy batches.

A restarted trainer's replay is empty, and the consumer (kafka-python) hands out the records it
fetched for one partition before the next one's: with a backlog in the policy-batch topic, a
poll returns policy batches only, up to ``max_poll_records`` (64).  The rule
(``models.train.intake.Intake.poll_into``): the trainer polls the world-model topics on every
iteration and the policy batches, through a consumer of their own, only while fewer than
``PENDING_BATCHES`` wait, so world-model transitions reach the replay behind at most that many
policy steps, and world-model steps follow.  The consumers here are fakes with kafka-python's
order; the trainer's real ``loop`` and ``poll`` run, the steps themselves are counted."""

from __future__ import annotations

from collections import deque
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

from kafka import TopicPartition

from core.config import load_config
from models.checkpoints.store import CheckpointStore
from models.train.intake import PENDING_BATCHES
from models.train.learner import Learner
from models.train.trainer import LeaderParts, Trainer
from streams import records
from streams.topics import Topics

BACKLOG = 120
MAX_POLL_RECORDS = 64


class FakeConsumer:
    """A poll returns the records of the first partition that has some (up to 64), as
    kafka-python drains one partition's fetched records before the next; paused partitions
    return nothing until resumed."""

    def __init__(self, queues: dict[TopicPartition, deque], max_records: int = MAX_POLL_RECORDS):
        self.queues = queues
        self.paused: set[TopicPartition] = set()
        self.polls = 0
        self.max_records = max_records

    def assignment(self) -> set[TopicPartition]:
        return set(self.queues)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def assign(self, tps: list[TopicPartition]) -> None:
        pass

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        pass

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict:
        self.polls += 1
        n = min(self.max_records, max_records or self.max_records)
        for tp, q in self.queues.items():
            if q and tp not in self.paused:
                return {tp: [q.popleft() for _ in range(min(n, len(q)))]}
        return {}


def _transition(run: str, i: int) -> records.Transition:
    obs = {"instruction": "i", "tree": f"p{i}"}
    return records.Transition(
        run_id=run,
        episode_id=f"e{i}",
        step=0,
        task="miniwob/click-button",
        seed=1,
        source="real",
        policy_version=0,
        world_model_version=0,
        obs=obs,
        action="click(1)",
        next_obs=obs,
        reward=0.0,
        done=True,
    )


def _backlog(run: str, topics: Topics) -> dict[TopicPartition, deque]:
    batches = deque()
    for i in range(BACKLOG):
        traj = records.Trajectory.from_transitions([_transition(run, 10_000 + i)])
        b = records.TrainingBatch(
            run_id=run,
            batch_id=f"b{i}",
            worker_id="w",
            kind="expert_only",
            trajectories=[asdict(traj)],
            expert_fraction=1.0,
        )
        batches.append(SimpleNamespace(offset=i, value=records.encode(b)))
    wm = deque(
        SimpleNamespace(offset=i, value=records.encode(_transition(run, i))) for i in range(200)
    )
    # the batch topic first: its fetched records are handed out first
    return {
        TopicPartition(topics.policy_batches, 0): batches,
        TopicPartition(topics.world_model, 0): wm,
    }


def _trainer(tmp_path: Path, **trainer: object) -> Trainer:
    """A ``Trainer`` wired from fake parts (consumers with kafka-python's order, a publisher and
    a checkpoint sink that do nothing, no S3 client): the loop's bookkeeping only."""
    env = {"DYNAWEB_RUN_ID": "u", "DYNAWEB_TRAINER__MAX_STEPS": str(BACKLOG)}
    env.update({f"DYNAWEB_TRAINER__{k.upper()}": str(v) for k, v in trainer.items()})
    cfg = load_config(env=env)
    topics = Topics(cfg.run_id)
    queues = _backlog(cfg.run_id, topics)
    batches = TopicPartition(topics.policy_batches, 0)
    consumers = {  # by max_poll_records: the policy batches' consumer, the world model's
        PENDING_BATCHES: FakeConsumer({batches: queues.pop(batches)}, max_records=PENDING_BATCHES),
        MAX_POLL_RECORDS: FakeConsumer(queues),
    }
    parts = LeaderParts(
        topics,
        pub=SimpleNamespace(check=lambda: None),
        writer=SimpleNamespace(),
        open_consumer=lambda max_poll_records: consumers[max_poll_records],
    )
    learner = Learner(cfg.trainer, cfg.model, cfg.dream.max_change_tokens, cfg.run_id)
    tr = Trainer(cfg, learner, CheckpointStore(None, "b", cfg.run_id), tmp_path, parts)
    tr.intake.open()  # no engines: batches are not prepared ahead (no preparer)
    tr.order = []

    def policy_step(item: tuple) -> bool:
        if item[0] is None:
            return False
        learner.policy_steps += 1
        tr.order.append("p")
        return True

    def wm_step() -> None:
        learner.wm_steps += 1
        tr.order.append("w")

    tr.policy_step, tr.wm_step = policy_step, wm_step
    tr.pending_seen = []
    poll_into = tr.intake.poll_into

    def counted(pending):
        poll_into(pending)
        tr.pending_seen.append(len(pending))

    tr.intake.poll_into = counted
    tr.checkpoint = tr.report_fidelity = tr.publish_progress = tr.judge_trust = lambda: None
    return tr


def test_world_model_steps_start_behind_a_few_policy_steps_of_a_backlog(tmp_path: Path) -> None:
    tr = _trainer(tmp_path, checkpoint_every=10_000)
    tr.loop()
    assert tr.policy_steps == BACKLOG  # the whole backlog trained: paused partitions resumed
    first_wm = tr.order.index("w")
    assert tr.order[:first_wm].count("p") <= PENDING_BATCHES + 1, "".join(tr.order[:80])
    # from then on one world-model step per policy step (wm_steps_per_policy_step 0: always-on)
    assert tr.wm_steps >= BACKLOG - PENDING_BATCHES - 1
    # the batches stayed in the broker: never more than PENDING_BATCHES polled ahead, no pausing
    assert max(tr.pending_seen) <= PENDING_BATCHES and not tr.intake.batch_consumer.paused


def test_the_fixed_ratio_still_holds(tmp_path: Path) -> None:
    tr = _trainer(tmp_path, checkpoint_every=10_000, wm_steps_per_policy_step=0.5)
    tr.loop()
    assert tr.policy_steps == BACKLOG
    assert tr.wm_steps == BACKLOG // 2
