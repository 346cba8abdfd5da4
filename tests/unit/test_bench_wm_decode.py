"""``dynaweb bench wm-decode``: the head-first decode predicts the same pages as generating every
row's text first, and the benchmark reports both side by side."""

from __future__ import annotations

import argparse

import pytest
import torch

from core.config import Config, ModelConfig, TrainerConfig
from evaluation.bench.wm_decode import bench_wm_decode, main
from evaluation.eval.sources import read_jsonl
from evaluation.studies.sample_efficiency.wm import corpus_path
from models.lm.saved import make_model
from models.world_model.loss import world_model_batch_loss
from models.world_model.model import WorldModel


def test_head_first_and_text_then_head_predict_the_same_pages(tmp_path):
    torch.manual_seed(0)
    data = read_jsonl(str(corpus_path("docs/results/world-model/heldout.jsonl.gz")))[:24]
    model, tok = make_model(
        WorldModel, ModelConfig(layers=1, d_model=32, heads=2, max_positions=640)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(3):
        opt.zero_grad()
        world_model_batch_loss(model, tok, data[:8], TrainerConfig(infonce_weight=0.0))[
            0
        ].backward()
        opt.step()
        model.mark_heads_trained(change_head=True)  # as the trainer does after a step
    assert model.state.change_head_trained
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    cfg = Config()
    cfg.dream.max_change_tokens = 12
    res = bench_wm_decode(cfg, str(tmp_path), data, n=24)
    assert res["pairs"] == 24 and res["same_pages"] == 1.0, res
    for k in ("head_first_steps_per_s", "text_then_head_steps_per_s", "greedy_steps_per_s"):
        assert res[k] > 0, res
    assert 0.0 <= res["text_rows_share"] <= 1.0
    assert res["exact_match"]["head_first"] == res["exact_match"]["text_then_head"]


def test_wm_decode_names_what_it_needs():
    args = argparse.Namespace(world_model=None, data=None, pairs=8, json=True)
    with pytest.raises(ValueError, match="--world-model"):
        main(args, Config())
