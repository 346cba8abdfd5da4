"""A trainer step writes a checkpoint that the generator then loads (hot reload),
and a checkpoint whose sha256 does not match is refused with the old weights kept."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch

from core.config import Config
from core.s3 import make_client
from models.checkpoints.reader import ModelSlot
from models.checkpoints.store import CheckpointStore
from models.train.run import build_trainer
from streams.kafka import Publisher, ensure_topics, make_producer
from tests.factories import small_trainer, training_batch


def _params(model: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_trainer_checkpoint_is_hot_loaded_and_corrupt_one_refused(
    run_cfg: Config, tmp_path: Path
) -> None:
    cfg = small_trainer(run_cfg)
    topics = ensure_topics(cfg)
    pub = Publisher(make_producer(cfg.kafka))
    pub.send(topics.policy_batches, training_batch(cfg))
    pub.flush()
    tr = build_trainer(cfg)
    try:
        tr.setup()  # publishes v0 before the first step
        store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
        assert store.latest("policy")["version"] == 0
        slot = ModelSlot(store, "policy", tmp_path, cfg.run_id)
        assert slot.refresh() and slot.version == 0
        v0 = _params(slot.model)
        tr.loop()  # one step -> v1
        assert tr.policy_steps == 1 and store.latest("policy")["version"] == 1
        assert slot.refresh() and slot.version == 1
        v1 = _params(slot.model)
        trained = _params(tr.learner.p_engine.module)
        assert all(torch.equal(v1[k], trained[k]) for k in trained)  # exactly the trainer's weights
        assert any(not torch.equal(v0[k], v1[k]) for k in v0)  # and they moved
        # a tampered v2: LATEST moves, but the file no longer matches the manifest -> refused
        tr.version = 2
        tr.checkpoint()
        key = store.prefix("policy", 2) + "hf/model.safetensors"
        client = make_client(cfg)
        client.put_object(cfg.s3.bucket, key, io.BytesIO(b"garbage"), 7)
        assert not slot.refresh()
        assert slot.version == 1
        kept = _params(slot.model)
        assert all(torch.equal(kept[k], v1[k]) for k in v1)
        m = json.loads(
            client.get_object(cfg.s3.bucket, store.prefix("policy", 1) + "manifest.json").read()
        )
        creds = json.loads((Path(cfg.home) / "s3" / "credentials.json").read_text())
        assert (
            m["config"]["run_id"] == cfg.run_id
        )  # the resolved config travels with the checkpoint
        assert creds["secret_key"] not in json.dumps(m)  # ... without secrets
        assert m["offsets"][topics.policy_batches] == {"0": 1}
    finally:
        tr.close()


def test_checkpoints_uploaded_in_background_are_announced_in_order_v0_without_state(
    run_cfg: Config,
) -> None:
    cfg = small_trainer(run_cfg)
    cfg.trainer.upload_in_background = True
    topics = ensure_topics(cfg)
    pub = Publisher(make_producer(cfg.kafka))
    pub.send(topics.policy_batches, training_batch(cfg))
    pub.flush()
    tr = build_trainer(cfg)
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    try:
        tr.setup()  # v0 saved locally, its upload in the upload thread
        assert tr.pending_upload is not None and tr.pending_upload[0] == 0
        tr.loop()  # announces v0 when its upload is done; one step -> v1, uploading
        assert tr.policy_steps == 1
    finally:
        tr.close()  # v1 announced before the trainer closes
    assert tr.pending_upload is None and store.latest("policy")["version"] == 1
    v0 = store.manifest("policy", 0)[0]["files"]
    v1 = store.manifest("policy", 1)[0]["files"]
    # version 0 is the weights alone (no update: the engine state holds nothing more)
    assert v0 and not [f for f in v0 if f.startswith("state/")]
    assert [f for f in v1 if f.startswith("state/")]
