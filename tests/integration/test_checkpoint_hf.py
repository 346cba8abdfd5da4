"""Checkpoints are plain Hugging Face directories: what the trainer writes to S3 loads with
``AutoModelForCausalLM.from_pretrained`` + ``AutoTokenizer.from_pretrained`` alone (no dynaweb
code) and gives the trainer's log-probabilities."""

from __future__ import annotations

from pathlib import Path

import torch

from core.config import Config
from core.s3 import make_client
from models.checkpoints.store import CheckpointStore
from models.train.run import build_trainer
from streams.kafka import Publisher, ensure_topics, make_producer
from tests.factories import small_trainer, training_batch

TEXT = 'Task: Click on the "OK" button.\nPage:\n[1] button "OK"\nHistory: none\nAction: click(1)'


def _logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_trainer_checkpoint_is_a_plain_hf_directory(run_cfg: Config, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = small_trainer(run_cfg)
    topics = ensure_topics(cfg)
    pub = Publisher(make_producer(cfg.kafka))
    pub.send(topics.policy_batches, training_batch(cfg))
    pub.flush()
    pub.close()
    tr = build_trainer(cfg)
    try:
        tr.setup()
        tr.loop()  # one step -> v1 (trained weights, not the initial ones)
        store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
        for kind, engine, tok in (
            ("policy", tr.learner.p_engine, tr.learner.tokenizer),
            ("world_model", tr.learner.w_engine, tr.learner.wm_tokenizer),
        ):
            lat = store.latest(kind)
            assert lat["version"] == 1
            dest = tmp_path / kind
            store.download(kind, 1, dest, lat["manifest_sha256"])
            model = AutoModelForCausalLM.from_pretrained(str(dest / "hf"), local_files_only=True)
            hf_tok = AutoTokenizer.from_pretrained(str(dest / "hf"), local_files_only=True)
            ids = hf_tok(TEXT, add_special_tokens=False).input_ids + [hf_tok.eos_token_id]
            assert ids[:-1] == tok(TEXT, add_special_tokens=False).input_ids
            ours = _logprobs(engine.module, ids)
            plain = _logprobs(model, ids)  # eager attention, stock transformers code
            assert torch.allclose(ours, plain, atol=1e-4), (kind, (ours - plain).abs().max())
    finally:
        tr.close()
