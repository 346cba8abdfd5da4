"""A restarted trainer shows the version it resumed from at once (``dynaweb up`` and ``dynaweb
status`` read its checkpoint-version gauge), not only after its next checkpoint."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import REGISTRY

from core.config import Config
from models import metrics as M
from models.train.run import build_trainer
from streams.kafka import Publisher, ensure_topics, make_producer
from tests.factories import small_trainer, training_batch


def _gauge(cfg: Config, kind: str) -> float | None:
    return REGISTRY.get_sample_value(
        "dynaweb_trainer_checkpoint_version", {"run": cfg.run_id, "kind": kind}
    )


def test_resumed_trainer_publishes_its_version_at_start(run_cfg: Config) -> None:
    cfg = small_trainer(run_cfg)
    cfg.trainer.train_world_model = False
    topics = ensure_topics(cfg)
    pub = Publisher(make_producer(cfg.kafka))
    pub.send(topics.policy_batches, replace(training_batch(cfg), batch_id="b0"))
    pub.flush()
    pub.close()
    cfg.trainer.max_steps = 1
    tr = build_trainer(cfg)
    try:
        tr.setup()
        tr.loop()  # one policy step: v1
    finally:
        tr.close()
    assert tr.version == 1
    for kind in ("policy", "world_model"):  # as a fresh process: nothing exported yet
        M.TRAINER_VERSION.labels(cfg.run_id, kind).set(-1)
    again = build_trainer(cfg)
    try:
        again.setup()  # resumes from LATEST; no step, no checkpoint
        assert again.version == 1
        assert _gauge(cfg, "policy") == 1
        assert _gauge(cfg, "world_model") == 1
    finally:
        again.close()
