"""The MFU counter of ``dynaweb bench train`` (evaluation/bench/mfu.py) against torch's own FLOP counter."""

import torch
from torch.utils.flop_counter import FlopCounterMode

from core.config import ModelConfig
from evaluation.bench.mfu import (
    FlopMeter,
    attended_pairs,
    gemm_rate,
    linear_weights,
    mfu,
    sgemm_peak,
)
from models.lm.saved import make_model
from models.policy.model import Policy


def _model():
    torch.manual_seed(0)
    return make_model(Policy, ModelConfig(layers=2, d_model=64, heads=2, max_positions=128))


def test_attended_pairs_causal_rows_ignore_right_padding():
    ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    assert attended_pairs(ids, None, pad=0) == (8, 6 + 15)


def test_attended_pairs_reads_a_4d_tree_mask():
    neg = torch.finfo(torch.float32).min
    allowed = torch.tensor(
        [[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool
    )  # prompt + 2 siblings
    mask = torch.where(allowed, 0.0, neg)[None, None]
    assert attended_pairs(torch.tensor([[4, 5, 6]]), mask, pad=0) == (3, 5)


def test_meter_matches_torch_flop_counter_on_one_unpadded_row():
    model, tok = _model()
    T = 40
    ids = torch.randint(3, 200, (1, T))
    meter = FlopMeter(model, pad=-1)
    with torch.no_grad(), meter, FlopCounterMode(display=False) as fc:
        model(input_ids=ids, use_cache=False)
    assert meter.tokens == T and meter.forwards == 1
    # torch's counter sees every linear matmul of this model (q/k/v/out, MLP, LM head) but not
    # GPT-Neo's 4D attention products: the meter's count is torch's + the causal triangle's
    width, layers = model.config.hidden_size, model.config.num_hidden_layers
    assert fc.get_total_flops() == 2 * linear_weights(model) * T
    attention = 4 * width * layers * T * (T + 1) // 2
    assert meter.flops == fc.get_total_flops() + attention


def test_a_forward_under_autograd_counts_forward_and_backward():
    model, _ = _model()
    ids = torch.randint(3, 200, (2, 16))
    with torch.no_grad(), FlopMeter(model, pad=-1) as inference:
        model(input_ids=ids, use_cache=False)
    with FlopMeter(model, pad=-1) as training:
        model(input_ids=ids, use_cache=False).logits.sum().backward()
    assert abs(training.flops - 3 * inference.flops) < 1e-6 * training.flops
    # the hook is removed on exit: nothing more is counted
    model(input_ids=ids, use_cache=False)
    assert training.forwards == 1


def test_peak_is_the_best_measured_gemm_and_mfu_is_the_ratio():
    model, _ = _model()
    peak = sgemm_peak([model], rows=64, seconds=0.02)
    assert peak["peak_flops"] == max(peak["gemm_gflops"].values()) * 1e9 or (
        abs(peak["peak_flops"] / 1e9 - max(peak["gemm_gflops"].values())) < 0.01
    )
    assert "1024x1024x1024" in peak["gemm_gflops"] and len(peak["gemm_gflops"]) >= 3
    assert gemm_rate(32, 32, 32, seconds=0.01) > 0
    meter = FlopMeter(model, pad=-1)
    meter.flops = 1e9
    out = mfu(meter, 2.0, 1e9)
    assert out["model_flops_per_s"] == 5e8 and out["mfu"] == 0.5


def test_a_backbone_pass_and_the_head_on_some_rows_count_what_runs():
    """The learners run the backbone without its LM head and the head on the positions their loss
    reads (``LanguageModel.logits_at``): the meter counts exactly those matmuls, as torch's counter
    does (plus the causal triangle it does not see)."""
    model, tok = _model()
    T, rows = 40, 7
    ids = torch.randint(3, 200, (1, T))
    meter = FlopMeter(model, pad=-1)
    with torch.no_grad(), meter, FlopCounterMode(display=False) as fc:
        h = model.base(ids, use_cache=False).last_hidden_state
        model.logits_at(h[0, :rows])
    head = model.lm.get_output_embeddings().weight.numel()
    assert fc.get_total_flops() == 2 * (linear_weights(model) - head) * T + 2 * head * rows
    width, layers = model.config.hidden_size, model.config.num_hidden_layers
    assert meter.flops == fc.get_total_flops() + 4 * width * layers * T * (T + 1) // 2
    assert meter.tokens == T and meter.forwards == 1
