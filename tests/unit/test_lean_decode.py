"""models.lm.lean_decode.LeanStep: the decode step without Hugging Face's module machinery computes
the logits of the model's own forward, and decoding with it writes the same tokens."""

import torch

from core.config import ModelConfig
from models.lm.lean_decode import LeanStep
from models.lm.saved import make_model
from models.world_model.decoding import generate_tokens, preallocated_cache
from models.world_model.model import WorldModel


def _model(**kw):
    torch.manual_seed(0)
    model, tok = make_model(WorldModel, ModelConfig(**{"max_positions": 256, **kw}))
    return model.eval(), tok


def test_step_logits_equal_the_full_forward_over_several_tokens():
    model, _ = _model(layers=3, d_model=64, heads=4)
    step = LeanStep(model.lm)
    B, P = 3, 12
    ids = torch.randint(3, 200, (B, P))
    keep = torch.ones(B, P + 6, dtype=torch.bool)
    keep[0, :4] = False  # a left-padded row
    neg = torch.finfo(torch.float32).min
    caches = [preallocated_cache(P + 6), preallocated_cache(P + 6)]
    pos = (keep[:, :P].long().cumsum(-1) - 1).clamp(min=0)
    pre_mask = torch.where(keep[:, :P], 0.0, neg)[:, None, None, :].expand(B, 1, P, P)
    causal = torch.ones(P, P, dtype=torch.bool).tril()
    pre_mask = pre_mask.masked_fill(~causal, neg)
    with torch.no_grad():
        for c in caches:
            out = model(
                input_ids=ids,
                attention_mask=pre_mask,
                position_ids=pos,
                past_key_values=c,
                use_cache=True,
            )
        nxt = out.logits[:, -1].argmax(-1)
        plen = keep[:, :P].sum(-1)
        for t in range(6):
            L = P + t + 1
            mask = torch.where(keep[:, :L], 0.0, neg)[:, None, None, :]
            full = model(
                input_ids=nxt[:, None],
                attention_mask=mask,
                position_ids=(plen + t)[:, None],
                past_key_values=caches[0],
                use_cache=True,
            ).logits[:, -1]
            lean = step(nxt, mask, plen + t, caches[1])
            assert full.shape == lean.shape
            torch.testing.assert_close(lean, full, rtol=1e-5, atol=1e-5)
            nxt = full.argmax(-1)
        # both caches hold the same keys and values
        for a, b in zip(caches[0].layers, caches[1].layers, strict=True):
            torch.testing.assert_close(a.keys, b.keys, rtol=1e-5, atol=1e-5)


def test_greedy_decoding_writes_the_same_tokens_with_and_without_the_lean_step():
    model, tok = _model()  # the default world model's shape
    g = torch.Generator().manual_seed(1)
    base = torch.randint(3, 2000, (40,), generator=g).tolist()
    prompts = [base + torch.randint(3, 2000, (int(n),), generator=g).tolist() for n in (3, 9, 1)]
    prompts.append(torch.randint(3, 2000, (25,), generator=g).tolist())
    with torch.no_grad():
        a, _ = generate_tokens(model, prompts, 30, 0, 1, 256, ignore_eos=True, lean=True)
        b, _ = generate_tokens(model, prompts, 30, 0, 1, 256, ignore_eos=True, lean=False)
    assert a == b and all(len(r) == 30 for r in a)


def test_supports_only_what_it_computes_exactly():
    model, _ = _model(layers=2, d_model=32, heads=2)
    assert LeanStep.supports(model.lm)
    model.train()
    assert not LeanStep.supports(model.lm)  # dropout may be in use
    model.eval()
    model.config.attention_layers = ["global", "local"]  # a local window is not implemented
    assert not LeanStep.supports(model.lm)
    model.config.attention_layers = ["global", "global"]
    model.lm.transformer.h[1].attn.attention.q_proj.bias = torch.nn.Parameter(torch.zeros(32))
    assert not LeanStep.supports(model.lm)


def test_shared_prefix_attention_equals_attention_over_per_row_copies():
    from models.lm.lean_decode import shared_prefix_attention

    g = torch.Generator().manual_seed(3)
    B, H, hd, G, Pp, L = 5, 4, 8, 2, 7, 3
    q = torch.randn(B, H, 1, hd, generator=g)
    kp, vp = torch.randn(G, H, Pp, hd, generator=g), torch.randn(G, H, Pp, hd, generator=g)
    ks, vs = torch.randn(B, H, L, hd, generator=g), torch.randn(B, H, L, hd, generator=g)
    gi = torch.tensor([0, 1, 0, 1, 1])
    keep_p = torch.ones(G, Pp, dtype=torch.bool)
    keep_p[1, :3] = False  # group 1's prefix is left padded
    keep_s = torch.ones(B, L, dtype=torch.bool)
    keep_s[2, 0] = False
    neg = torch.finfo(torch.float32).min
    # reference: every row with its own copy of its group's prefix
    keys, values = torch.cat([kp[gi], ks], 2), torch.cat([vp[gi], vs], 2)
    ref_mask = torch.where(torch.cat([keep_p[gi], keep_s], 1), 0.0, neg)[:, None, None]
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, keys, values, attn_mask=ref_mask, scale=1.0
    )
    # shared: the G prefix blocks side by side, each row sees its own group's block only
    pre = torch.zeros(B, G, Pp, dtype=torch.bool)
    pre[torch.arange(B), gi] = keep_p[gi]
    mask = torch.where(torch.cat([pre.view(B, G * Pp), keep_s], 1), 0.0, neg)[:, None, None]
    flat = lambda t: t.transpose(0, 1).reshape(H, G * Pp, hd)  # noqa: E731
    out = shared_prefix_attention(q, flat(kp), flat(vp), ks, vs, mask)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_rows_sharing_a_page_decode_over_one_copy_and_write_the_same_tokens(monkeypatch):
    import models.world_model.decoding as wd

    model, _ = _model()
    g = torch.Generator().manual_seed(2)
    page = torch.randint(3, 2000, (120,), generator=g).tolist()
    other = torch.randint(3, 2000, (90,), generator=g).tolist()
    # two groups on two pages (as two dream groups batched together), tails of unequal length
    prompts = [page + torch.randint(3, 2000, (int(n),), generator=g).tolist() for n in (2, 6, 4)]
    prompts += [other + torch.randint(3, 2000, (int(n),), generator=g).tolist() for n in (5, 1)]
    prompts[1:1] = [list(prompts[0]) for _ in range(3)]  # the same history: the same tokens
    with torch.no_grad():
        free, _ = generate_tokens(model, prompts, 24, 0, 1, 256, ignore_eos=True, lean=False)
    # an end token that half of the rows write early: finished rows are dropped from the batch
    eos = free[0][2]
    assert sum(eos in r[:8] for r in free) * 2 >= len(free), free
    made = []
    real = wd._shared_prefix_cache
    monkeypatch.setattr(wd, "_shared_prefix_cache", lambda *a: made.append(1) or real(*a))
    with torch.no_grad():
        a, _ = generate_tokens(model, prompts, 24, 0, eos, 256, lean=True)
        b, _ = generate_tokens(model, prompts, 24, 0, eos, 256, lean=False)
    assert made == [1]  # the lean decode went through the shared-prefix cache
    assert a == b
    assert any(len(r) < 24 for r in a)
