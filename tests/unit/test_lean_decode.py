"""models.lean_decode.LeanStep: the decode step without Hugging Face's module machinery computes
the logits of the model's own forward, and decoding with it writes the same tokens."""

import torch

from core.config import ModelConfig
from models.lean_decode import LeanStep
from models.wm_decoding import generate_tokens, preallocated_cache
from models.world_model import make_world_model


def _model(**kw):
    torch.manual_seed(0)
    model, tok = make_world_model(ModelConfig(**{"max_positions": 256, **kw}))
    return model.eval(), tok


def test_step_logits_equal_the_full_forward_over_several_tokens():
    model, _ = _model(layers=3, d_model=64, heads=4)
    step = LeanStep(model)
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
    assert LeanStep.supports(model)
    model.train()
    assert not LeanStep.supports(model)  # dropout may be in use
    model.eval()
    model.config.attention_layers = ["global", "local"]  # a local window is not implemented
    assert not LeanStep.supports(model)
    model.config.attention_layers = ["global", "global"]
    model.transformer.h[1].attn.attention.q_proj.bias = torch.nn.Parameter(torch.zeros(32))
    assert not LeanStep.supports(model)
