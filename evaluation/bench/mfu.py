"""Model FLOPs utilisation (MFU) of the trainer's updates: ``dynaweb bench train``'s ``mfu_*``.

Numerator: the FLOPs the model's maths needs for the tokens it was given, counted on
unpadded, unique tokens (``FlopMeter``): the policy's rows are already packed (all the
candidates of a step share one prompt, shared candidate prefixes are one trie node,
``models.lm.scoring.continuation_logprobs``), so a token the loss computes once is counted
once; padding is never counted.  Per forward token: ``2 x`` the weights of every linear
layer (attention and MLP projections and the LM head; embeddings are a lookup) plus
``4 x d_model`` per attended position per layer (``QK^T`` and ``AV``), the attended
positions read from the forward's own mask (the policy's tree mask) or the causal
triangle (the world model's rows).  A forward under autograd counts three times (forward
and backward), one without it once.

Denominator: the machine's peak at the same thread count, the best ``float32`` GEMM rate
(``sgemm_peak``) over the model's own GEMM shapes and a 1024^3 GEMM.
"""

from __future__ import annotations

import time
from typing import Any

import torch


def linear_weights(model: Any) -> int:
    """Weights in ``nn.Linear`` layers (a tied LM head counts: its matmul runs on every token), but
    not the policy's element head (``models/policy/element_head.py``: one read-out per candidate, not
    per token)."""
    seen, n = set(), 0
    for name, mod in model.named_modules():
        if name.startswith("element_head"):
            continue
        if isinstance(mod, torch.nn.Linear) and id(mod.weight) not in seen:
            seen.add(id(mod.weight))
            n += mod.weight.numel()
    return n


def _row_lengths(ids: torch.Tensor, pad: int) -> list[int]:
    """Per row, the index after its last non-pad token (rows are right-padded)."""
    out = []
    for row in ids.tolist():
        n = len(row)
        while n and row[n - 1] == pad:
            n -= 1
        out.append(n)
    return out


def attended_pairs(ids: torch.Tensor, mask: Any, pad: int) -> tuple[int, int]:
    """(unpadded tokens, attended (query, key) pairs) of one forward's inputs.

    ``mask``: ``None`` or 2D (causal over each row's real tokens), or the 4D additive mask the
    policy passes (0 where a query sees a key)."""
    lens = _row_lengths(ids, pad)
    tokens = sum(lens)
    if mask is not None and getattr(mask, "dim", lambda: 0)() == 4:
        seen = mask[:, 0] == 0
        pairs = 0
        for r, n in enumerate(lens):
            pairs += int(seen[r, :n, :n].sum())
        return tokens, pairs
    return tokens, sum(n * (n + 1) // 2 for n in lens)


class FlopMeter:
    """Counts the model FLOPs of every forward of ``model`` while active (a forward pre-hook)."""

    def __init__(self, model: Any, pad: int):
        cfg = model.config
        self.model, self.pad = model, pad
        self.weights = linear_weights(model)
        # the LM head: counted with every token of a whole forward; after a backbone-only forward
        # (``lm_head=False``) on the rows it is applied to (``LanguageModel.logits_at``)
        self.head = model.lm.get_output_embeddings()
        self.head_weights = int(self.head.weight.numel())
        self._whole = 0  # whole forwards in progress (the head's own call inside is counted there)
        self.layers = int(cfg.num_hidden_layers)
        self.width = int(getattr(cfg, "num_attention_heads", 1)) * int(
            getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        )
        self.flops = 0.0
        self.tokens = 0
        self.forwards = 0
        self._h = None

    def _hook(self, _mod: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        whole = kwargs.get("lm_head", True) is not False
        self._whole += int(whole)
        if ids is None:
            return
        tokens, pairs = attended_pairs(ids, kwargs.get("attention_mask"), self.pad)
        weights = self.weights - (0 if whole else self.head_weights)
        fwd = 2.0 * weights * tokens + 4.0 * self.width * self.layers * pairs
        self.flops += fwd * (3.0 if torch.is_grad_enabled() else 1.0)
        self.tokens += tokens
        self.forwards += 1

    def _done(self, _mod: Any, _args: tuple, kwargs: dict, _out: Any) -> None:
        self._whole -= int(kwargs.get("lm_head", True) is not False)

    def _head_hook(self, _mod: Any, args: tuple) -> None:
        if self._whole or not args:
            return
        rows = int(args[0].numel() // args[0].shape[-1])
        self.flops += 2.0 * self.head_weights * rows * (3.0 if torch.is_grad_enabled() else 1.0)

    def __enter__(self) -> FlopMeter:
        self._h = [
            self.model.register_forward_pre_hook(self._hook, with_kwargs=True),
            self.model.register_forward_hook(self._done, with_kwargs=True),
            self.head.register_forward_pre_hook(self._head_hook),
        ]
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._h or []:
            h.remove()
        self._h = None


def model_gemm_shapes(model: Any, rows: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of the model's linear layers for ``rows`` tokens per forward, distinct."""
    shapes = set()
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            shapes.add((rows, mod.in_features, mod.out_features))
    return sorted(shapes)


def gemm_rate(m: int, k: int, n: int, seconds: float = 0.3) -> float:
    """Best float32 FLOP/s of ``(m x k) @ (k x n)`` over repeats for about ``seconds``."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    torch.mm(a, b, out=out)  # warm-up
    best, t_end = 0.0, time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        dt = time.perf_counter() - t0
        best = max(best, 2.0 * m * k * n / max(dt, 1e-9))
        if time.perf_counter() > t_end:
            return best


def sgemm_peak(models: list[Any], rows: int = 2048, seconds: float = 0.3) -> dict:
    """The machine's peak at the current thread count: the best rate over the models' GEMM shapes
    and a 1024^3 GEMM; each rate reported (GFLOP/s) so the denominator can be checked."""
    rates: dict[str, float] = {"1024x1024x1024": gemm_rate(1024, 1024, 1024, seconds)}
    for model in models:
        for m, k, n in model_gemm_shapes(model, rows):
            key = f"{m}x{k}x{n}"
            if key not in rates:
                rates[key] = gemm_rate(m, k, n, seconds)
    best = max(rates.values())
    return {
        "peak_flops": best,
        "peak_shape": max(rates, key=rates.get),
        "gemm_gflops": {k: round(v / 1e9, 2) for k, v in rates.items()},
        "threads": torch.get_num_threads(),
    }


def mfu(meter: FlopMeter, seconds: float, peak: float) -> dict:
    """The meter's figures over ``seconds`` of wall time against ``peak`` FLOP/s."""
    achieved = meter.flops / max(seconds, 1e-9)
    return {
        "model_flops": meter.flops,
        "model_flops_per_s": achieved,
        "tokens": meter.tokens,
        "tokens_per_s": meter.tokens / max(seconds, 1e-9),
        "forwards": meter.forwards,
        "peak_flops": peak,
        "mfu": achieved / peak if peak else 0.0,
    }
