"""Chunked backward of the world-model loss: same gradient as the whole batch at once."""

import torch

from core.config import TrainerConfig
from models.world_model.loss import wm_chunks, world_model_batch_loss
from tests.factories import FakeEmbedder, wm_batch, wm_model


def _grads(model, chunked: bool, chunk_rows: int, embedder):
    model.zero_grad(set_to_none=True)
    cfg = TrainerConfig(infonce_weight=0.5)
    loss, m = world_model_batch_loss(
        model, model._tok, wm_batch(), cfg, embedder, 64, backward=chunked, chunk_rows=chunk_rows
    )
    if not chunked:
        loss.backward()
    return (
        {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None},
        float(loss.detach()),
        m,
    )


def test_chunked_gradients_match_the_whole_batch_with_infonce():
    model = wm_model()
    g_full, l_full, m_full = _grads(model, False, 0, FakeEmbedder())
    for rows in (1, 2, 3, 8):
        g, loss, m = _grads(model, True, rows, FakeEmbedder())
        assert m["chunks"] == -(-5 // min(rows, 5))
        assert abs(loss - l_full) < 1e-5 and abs(m["lm_loss"] - m_full["lm_loss"]) < 1e-5
        assert abs(m["infonce"] - m_full["infonce"]) < 1e-5
        for k in (
            "reward_head_loss",
            "done_head_loss",
            "reward_head_acc",
            "done_head_acc",
        ):  # the heads too
            assert abs(m[k] - m_full[k]) < 1e-5, k
        assert set(g) == set(g_full) and any(k.startswith("page_head") for k in g)
        assert any(k.startswith("reward_head") for k in g) and any(
            k.startswith("done_head") for k in g
        )
        for k in g_full:
            assert torch.allclose(g[k], g_full[k], atol=1e-6, rtol=1e-4), k


def test_chunked_gradients_match_for_the_heads_alone():
    """Class weights from the whole batch: chunks of one class still add up to the balanced loss."""
    model = wm_model()
    cfg = TrainerConfig(infonce_weight=0.0, wm_head_weight=3.0)
    grads = []
    for chunked, rows in ((False, 0), (True, 1), (True, 2)):
        model.zero_grad(set_to_none=True)
        loss, m = world_model_batch_loss(
            model, model._tok, wm_batch(), cfg, None, 64, backward=chunked, chunk_rows=rows
        )
        if not chunked:
            loss.backward()
        grads.append(
            (
                {
                    n: p.grad.detach().clone()
                    for n, p in model.named_parameters()
                    if p.grad is not None
                },
                m,
            )
        )
    (g_full, m_full) = grads[0]
    assert m_full["reward_head_loss"] > 0 and abs(m_full["reward_positive_share"] - 0.2) < 1e-6
    for g, m in grads[1:]:
        assert (
            abs(m["loss"] - m_full["loss"]) < 1e-5
            and abs(m["done_head_loss"] - m_full["done_head_loss"]) < 1e-6
        )
        for k in g_full:
            assert torch.allclose(g[k], g_full[k], atol=1e-6, rtol=1e-4), k


def test_chunked_gradients_match_without_infonce():
    model = wm_model()
    g_full, l_full, _ = _grads(model, False, 0, None)
    g, loss, m = _grads(model, True, 2, None)
    assert abs(loss - l_full) < 1e-5 and m["infonce"] == 0.0
    assert set(g) == set(g_full)
    for k in g_full:
        assert torch.allclose(g[k], g_full[k], atol=1e-6, rtol=1e-4), k


def test_chunked_with_dropout_is_deterministic_and_finite():
    model = wm_model()
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.3
    torch.manual_seed(5)
    g1, _, _ = _grads(model, True, 2, FakeEmbedder())
    torch.manual_seed(5)
    g2, _, _ = _grads(model, True, 2, FakeEmbedder())
    for k in g1:  # deterministic given the seed, and finite
        assert torch.equal(g1[k], g2[k]) and torch.isfinite(g1[k]).all()


def test_backward_fn_gets_one_call_per_chunk():
    model = wm_model()
    calls = []

    def bw(x):
        calls.append(float(x.detach()))
        x.backward()

    _, m = world_model_batch_loss(
        model,
        model._tok,
        wm_batch(),
        TrainerConfig(),
        FakeEmbedder(),
        64,
        backward=True,
        chunk_rows=2,
        backward_fn=bw,
    )
    assert len(calls) == m["chunks"] == 3


def test_wm_chunks_sorts_by_length_and_covers_every_row():
    rows = [([1] * 5, [2]), ([1] * 2, [2]), ([1] * 9, [2, 2]), ([1] * 1, [2])]
    ch = wm_chunks(rows, 3)
    assert ch == [[3, 1, 0], [2]]
    assert sorted(i for c in ch for i in c) == [0, 1, 2, 3]
    assert wm_chunks(rows, 0) == [[3], [1], [0], [2]]
