"""A trainer with LoRA adapters on the policy (``model.policy_lora_rank``) uploads checkpoints that
hold the adapters and parts only, naming the base by its sha256; a reader's slot hot-reloads them
onto the base it already holds; a restarted trainer resumes from them."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from core.config import Config
from core.s3 import make_client
from models.checkpoints.reader import ModelSlot
from models.checkpoints.store import CheckpointStore
from models.lm.backbone import make_causal_lm
from models.lm.lora import ADAPTERS, base_digest
from models.train.run import build_trainer
from streams.kafka import Publisher, ensure_topics, make_producer
from tests.factories import small_trainer, training_batch


def _trained(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_a_lora_trainer_uploads_adapters_only_and_the_slot_hot_reloads_them(
    run_cfg: Config, tmp_path: Path
) -> None:
    cfg = small_trainer(run_cfg)
    lm, tok = make_causal_lm(cfg.model)  # the base: a tiny GPT-Neo as a Hugging Face directory
    base = tmp_path / "base"
    lm.save_pretrained(base)
    tok.save_pretrained(base)
    base_size = (base / "model.safetensors").stat().st_size
    cfg.model.policy_path, cfg.model.policy_lora_rank = str(base), 4
    topics = ensure_topics(cfg)
    pub = Publisher(make_producer(cfg.kafka))
    pub.send(topics.policy_batches, training_batch(cfg))
    pub.flush()
    pub.close()
    tr = build_trainer(cfg)
    try:
        tr.setup()  # v0
        store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
        (tmp_path / "work").mkdir()
        slot = ModelSlot(store, "policy", tmp_path / "work", cfg.run_id)
        assert slot.refresh() and slot.version == 0
        v0 = slot.model
        tr.loop()  # one step -> v1
        assert tr.policy_steps == 1 and store.latest("policy")["version"] == 1
        manifest, _ = store.manifest("policy", 1)
        files = manifest["files"]
        assert f"hf/{ADAPTERS}" in files and "hf/model.safetensors" not in files
        # neither the readers' hf/ nor the trainer's state/ holds the base's weights
        weights = sum(m["size"] for r, m in files.items() if r.endswith((".safetensors", ".pt")))
        assert weights < base_size / 2, (weights, base_size, sorted(files))
        meta = json.loads(
            make_client(cfg)
            .get_object(cfg.s3.bucket, store.prefix("policy", 1) + "hf/dynaweb.json")
            .read()
        )
        assert meta["base"] == {"path": str(base), "sha256": base_digest(str(base))}
        assert slot.refresh() and slot.version == 1
        v1 = slot.model
        # hot reload of the adapters: the base tensors are the ones v0 brought
        assert v1.lm.transformer.wte.weight is v0.lm.transformer.wte.weight
        trained = _trained(tr.learner.p_engine.module)
        got = _trained(v1)
        assert trained.keys() == got.keys() and any(".lora_" in k for k in got)
        assert all(torch.equal(got[k], trained[k].cpu()) for k in trained)  # the trainer's weights
        assert any(not torch.equal(got[k], p) for k, p in _trained(v0).items())  # that moved
    finally:
        tr.close()
    again = build_trainer(
        cfg
    )  # a restart resumes from v1: the base from its path, state/ not strict
    try:
        again.setup()
        assert again.version == 1 and again.policy_steps == 1
        resumed = _trained(again.learner.p_engine.module)
        assert all(torch.equal(resumed[k].cpu(), trained[k].cpu()) for k in trained)
    finally:
        again.close()
