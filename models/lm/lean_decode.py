"""One decoding step of a GPT-Neo causal LM as plain tensor ops (the world model's decode loop).

``model(input_ids=..., past_key_values=...)`` for one new token per row goes through about 60
``nn.Module`` calls, Hugging Face's mask and cache plumbing and three separate q/k/v projections.
At the world model's size (4 layers of 256) and a dream batch of 8, that machinery cost as much as
the matrix products themselves: a decode forward took 7.5 ms, 3.3 ms of it in ``linear``.
``LeanStep`` computes the same step from the same weights with about a dozen ops per layer:

- q, k and v in one product (their weights concatenated once per ``generate_tokens`` call, so a
  model that trains between calls, as the trainer's fidelity check does, is always read fresh);
- keys and values written into the same ``models.world_model.decoding.PreallocatedLayer`` cache that the
  prefill (Hugging Face's forward) filled;
- attention as one ``F.scaled_dot_product_attention`` with the additive mask and ``scale=1.0``
  (GPT-Neo does not scale by 1/sqrt(d)), without its causal bias (the one new position may see
  every cached one): one op instead of two products, an add and a softmax;
- the same layer norms and tied head; the activation as one fused op where the model's is one
  torch has (``gelu_new``, GPT-Neo's default, is ``F.gelu(approximate="tanh")``: the same
  formula, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in one kernel instead of seven
  Python-level ops).

Measured at B = 1 over a 500-token cache, 160 tokens, one thread, the same tokens written: 2.15
-> 1.70 ms per token (the fused activation 1.91, then attention); at B = 8, 9.5 -> 8.7 ms (a
loaded machine; the ratios are what carry over).

Rows that share a prompt prefix (a dream group's rollouts on one page) decode over a
``SharedPrefixCache``: each prefix group's keys and values once, each row's own tail apart.
Attention then reads a shared prefix once for all its rows (one batched product over the heads)
instead of once per row from a per-row copy: at 8 rows on a 400-token page that copy was half of
a decode step.

``LeanStep.supports(model)`` says whether a model is one it computes exactly: a GPT-Neo with
global attention only (local attention windows are not implemented), no dropout in use.  LoRA
adapters on its linear layers (``models.lm.lora``) are folded into the weights it reads
(``_weight``: W + the adapters' delta, once per call), so an adapted model decodes lean too.
Other models (a local Hugging Face directory of another architecture) keep the full forward.
``tests/unit/test_lean_decode.py`` checks the logits against the full forward and that greedy
decoding writes the same tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Hugging Face activation names (``config.activation_function``) computed by one torch op
_FUSED_ACT = {
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "relu": F.relu,
}


class SharedPrefixCache:
    """The decode cache of rows that share prompt prefixes (``models.world_model.decoding``).

    ``prefix[i]``: layer i's keys and values of every prefix group once, (H, N, hd) each, the G
    groups' blocks side by side (N = G x the prefix block); ``layers[i]``: a cache layer of each
    active row's own positions after the prefix (its tail, then what it generates).  The decode
    mask of a row covers the N prefix positions (its own group's block open, the others closed)
    and then its own positions.  ``batch_select_indices`` keeps rows (finished ones dropped)."""

    def __init__(self, prefix: list[tuple[torch.Tensor, torch.Tensor]], layers: list[Any]):
        self.prefix, self.layers = prefix, layers

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        for layer in self.layers:
            layer.batch_select_indices(indices)


def shared_prefix_attention(
    q: torch.Tensor,
    kp: torch.Tensor,
    vp: torch.Tensor,
    ks: torch.Tensor,
    vs: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Unscaled attention of one query per row over shared prefix keys and the row's own keys.

    ``q``: (B, H, 1, hd); ``kp``, ``vp``: (H, N, hd), shared by every row; ``ks``, ``vs``:
    (B, H, L, hd), the row's own; ``mask``: (B, 1, 1, N + L) additive.  Returns (B, H, 1, hd),
    softmax(q k^T + mask) v over the N + L positions, as if each row held a copy of the prefix."""
    B, H, _, hd = q.shape
    n = kp.shape[1]
    sp = torch.matmul(q.view(B, H, hd).transpose(0, 1), kp.transpose(1, 2))  # (H, B, N)
    ss = torch.matmul(q, ks.transpose(2, 3))  # (B, H, 1, L)
    p = torch.softmax(torch.cat([sp.permute(1, 0, 2).unsqueeze(2), ss], -1) + mask, -1)
    shared = torch.matmul(p[:, :, 0, :n].transpose(0, 1), vp)  # (H, B, hd)
    return torch.matmul(p[..., n:], vs) + shared.transpose(0, 1).unsqueeze(2)


def _adapted(mod: torch.nn.Module) -> bool:
    """A peft LoRA layer (its base layer and adapters inside)."""
    return hasattr(mod, "get_delta_weight") and hasattr(mod, "lora_A")


def _linears(blk: Any) -> list[torch.nn.Module]:
    att = blk.attn.attention
    return [att.q_proj, att.k_proj, att.v_proj, att.out_proj, blk.mlp.c_fc, blk.mlp.c_proj]


def _weight(mod: Any) -> torch.Tensor:
    """The weight a linear layer applies: its own, or for a LoRA layer the base layer's plus the
    active adapters' delta (scale x B A; already in the weight once merged)."""
    if not _adapted(mod):
        return mod.weight
    w = mod.get_base_layer().weight
    if mod.merged:
        return w
    for name in mod.active_adapters:
        if name in mod.lora_A:
            w = w + mod.get_delta_weight(name)
    return w


class LeanStep:
    """``step(ids, mask, positions, cache) -> logits`` for one token per row (call under no_grad).

    ``ids``, ``positions``: (B,) long; ``mask``: (B, 1, 1, L) additive float (0 keep, -inf-like
    drop) over the cache's L positions after this token is written (a ``SharedPrefixCache``: its
    N shared prefix positions, then the row's own); returns (B, vocab) logits."""

    def __init__(self, model: PreTrainedModel):
        tr = model.transformer
        self.wte, self.wpe = tr.wte.weight, tr.wpe.weight
        self.head = model.lm_head.weight
        self.ln_f = (tr.ln_f.weight, tr.ln_f.bias, tr.ln_f.eps)
        self.layers = []
        act_fn = _FUSED_ACT.get(str(getattr(model.config, "activation_function", "")))
        for blk in tr.h:
            att = blk.attn.attention
            qkv = torch.cat([_weight(att.q_proj), _weight(att.k_proj), _weight(att.v_proj)], 0)
            self.layers.append(
                (
                    (blk.ln_1.weight, blk.ln_1.bias, blk.ln_1.eps),
                    qkv,
                    _weight(att.out_proj),
                    att.out_proj.bias,
                    (blk.ln_2.weight, blk.ln_2.bias, blk.ln_2.eps),
                    _weight(blk.mlp.c_fc),
                    blk.mlp.c_fc.bias,
                    act_fn or blk.mlp.act,
                    _weight(blk.mlp.c_proj),
                    blk.mlp.c_proj.bias,
                )
            )
        self.heads = tr.h[0].attn.attention.num_heads
        self.d = self.wte.shape[1]

    @staticmethod
    def supports(model: PreTrainedModel) -> bool:
        """A GPT-Neo language model with global attention only, not training."""
        if type(model).__name__ != "GPTNeoForCausalLM" or model.training:
            return False
        cfg = model.config
        if any(t != "global" for t in getattr(cfg, "attention_layers", ["local"])):
            return False
        tr = model.transformer
        if not all(
            getattr(blk.attn, "attention", None) is not None
            and blk.attn.attention.q_proj.bias is None
            and blk.attn.attention.k_proj.bias is None
            and blk.attn.attention.v_proj.bias is None
            for blk in tr.h
        ) or not bool(getattr(cfg, "tie_word_embeddings", True) or model.lm_head.bias is None):
            return False
        # no adapters where ``_weight`` does not read them (the embeddings, the head)
        folded = {id(m) for blk in tr.h for m in _linears(blk)}
        return not any(_adapted(m) and id(m) not in folded for m in model.modules())

    def __call__(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        B, d, H = ids.shape[0], self.d, self.heads
        hd = d // H
        h = self.wte[ids] + self.wpe[positions]  # (B, d)
        shared = cache.prefix if isinstance(cache, SharedPrefixCache) else None
        for i, (ln1, qkv_w, o_w, o_b, ln2, fc_w, fc_b, act, pr_w, pr_b) in enumerate(self.layers):
            x = F.layer_norm(h, (d,), ln1[0], ln1[1], ln1[2])
            q, k, v = F.linear(x, qkv_w).view(B, 3, H, 1, hd).unbind(1)  # each (B, H, 1, hd)
            keys, values = cache.layers[i].update(k, v)  # (B, H, L, hd)
            if shared is not None:
                a = shared_prefix_attention(q, *shared[i], keys, values, mask)
            else:
                a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=1.0)
            a = a.reshape(B, d)
            h = h + F.linear(a, o_w, o_b)
            x = F.layer_norm(h, (d,), ln2[0], ln2[1], ln2[2])
            h = h + F.linear(act(F.linear(x, fc_w, fc_b)), pr_w, pr_b)
        h = F.layer_norm(h, (d,), self.ln_f[0], self.ln_f[1], self.ln_f[2])
        return F.linear(h, self.head)
