"""A trainer restart resumes the learning-rate schedule where the checkpoint left it (the
scheduler's step count travels in the DeepSpeed state), and the trainer exports the lr."""

from __future__ import annotations

import math
from dataclasses import replace

from prometheus_client import REGISTRY

from core.config import Config
from models.train.engine import current_lr, lr_factor
from models.train.run import build_trainer
from streams.kafka import Publisher, ensure_topics, make_producer
from tests.factories import small_trainer, training_batch


def test_trainer_restart_restores_the_lr_schedule(run_cfg: Config) -> None:
    cfg = small_trainer(run_cfg)
    cfg.trainer.warmup_steps, cfg.trainer.decay_steps, cfg.trainer.min_lr_ratio = 4, 6, 0.2
    cfg.trainer.train_world_model = False  # the policy's schedule alone: its step count is exact
    topics = ensure_topics(cfg)
    pub = Publisher(make_producer(cfg.kafka))
    for i in range(2):
        b = training_batch(cfg)
        pub.send(topics.policy_batches, replace(b, batch_id=f"b{i}"))
    pub.flush()
    pub.close()
    tc = cfg.trainer
    tc.max_steps = 2
    tr = build_trainer(cfg)
    try:
        tr.setup()
        assert math.isclose(current_lr(tr.learner.p_engine), tc.lr * lr_factor(0, 4, 6, 0.2))
        tr.loop()  # two policy steps, a checkpoint after each
        assert tr.policy_steps == 2 and tr.learner.p_engine.lr_scheduler.last_epoch == 2
        lr2 = tc.lr * lr_factor(2, 4, 6, 0.2)
        assert math.isclose(current_lr(tr.learner.p_engine), lr2)
        exported = REGISTRY.get_sample_value(
            "dynaweb_trainer_learning_rate", {"run": cfg.run_id, "model": "policy"}
        )
        assert exported is not None and math.isclose(exported, lr2)
    finally:
        tr.close()
    again = build_trainer(cfg)  # a restart: resumes from LATEST (v2)
    try:
        again.setup()
        assert again.version == 2 and again.policy_steps == 2
        assert again.learner.p_engine.lr_scheduler.last_epoch == 2
        assert math.isclose(current_lr(again.learner.p_engine), lr2)
        # the world model was never stepped: its schedule is still at step 0
        assert math.isclose(current_lr(again.learner.w_engine), tc.wm_lr * lr_factor(0, 4, 6, 0.2))
    finally:
        again.close()
