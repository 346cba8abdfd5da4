"""Batched KV-cached decoding of a causal LM (the world model's ``generate_texts``).

A plain decoding loop instead of ``model.generate``: the KV cache is preallocated
(``preallocated_cache``: ``PreallocatedLayer`` writes in place, no copy of the whole cache per
token as ``DynamicCache``'s concatenation does); prompts that share a prefix
(``models.lm.scoring.prefix_groups``: the rollouts of a dream group on the same page) prefill it once
and copy its keys to their rows once, then only their own tails run; the lean decode
(``models.lm.lean_decode``) then reads each shared prefix once for all its rows
(``SharedPrefixCache``, up to ``MAX_SHARED_GROUPS`` prefix groups); the 4D mask is built from
one boolean row mask, and rows that reached eos are dropped from the batch once they are at least
half of it.  Same model, same argmax as ``model.generate``.

``generate_tokens`` runs the steps: ``_layout`` (prefix groups, each row's tail), ``_prefill_prefixes``
(the shared prefixes, left padded, into the cache), ``_prefill_tails`` (every row's own tail after
its prefix: the first logits), ``_head_hidden`` (on request, the mean last-layer hidden state over
given prompt positions, read from those two passes: the reward/done heads' input) and
``_decode_loop`` (greedy or sampled tokens until eos or the budget).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from core.waiting import Aborted
from models.lm.lean_decode import LeanStep, SharedPrefixCache
from models.lm.match import left_padded
from models.lm.scoring import prefix_groups
from models.world_model.heads import HeadPlaces
from models.world_model.model import WorldModel


class PreallocatedLayer:
    """A KV-cache layer written in place into buffers of a fixed capacity (grows by doubling)."""

    is_sliding = False
    is_croppable = True
    is_compileable = False

    def __init__(self, capacity: int):
        self.capacity = max(1, int(capacity))
        self.n = 0
        self.is_initialized = False
        self.keys = self.values = None

    def lazy_initialization(self, k: torch.Tensor, v: torch.Tensor, *args: Any) -> None:
        shape = (k.shape[0], k.shape[1], max(self.capacity, k.shape[-2]), k.shape[-1])
        self._k, self._v = k.new_empty(shape), v.new_empty((*shape[:3], v.shape[-1]))
        self.dtype, self.device = k.dtype, k.device
        self.is_initialized = True

    def _views(self) -> None:
        self.keys, self.values = self._k[..., : self.n, :], self._v[..., : self.n, :]

    def update(self, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any) -> tuple:
        if not self.is_initialized:
            self.lazy_initialization(k, v)
        t = k.shape[-2]
        if self.n + t > self._k.shape[-2]:
            cap = max(2 * self._k.shape[-2], self.n + t)
            k2, v2 = (
                self._k.new_empty((*self._k.shape[:2], cap, self._k.shape[-1])),
                self._v.new_empty((*self._v.shape[:2], cap, self._v.shape[-1])),
            )
            k2[..., : self.n, :], v2[..., : self.n, :] = (
                self._k[..., : self.n, :],
                self._v[..., : self.n, :],
            )
            self._k, self._v = k2, v2
        self._k[..., self.n : self.n + t, :] = k
        self._v[..., self.n : self.n + t, :] = v
        self.n += t
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.n

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.n + query_length, 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:  # legacy: absolute length
            tokens_to_remove = tokens_to_remove - self.n if tokens_to_remove < self.n else 0
        self.n = max(0, self.n - abs(tokens_to_remove))
        if self.is_initialized:
            self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._k, self._v = self._k[indices], self._v[indices]
            self._views()

    def reset(self) -> None:
        self.n = 0
        if self.is_initialized:
            self._views()


def preallocated_cache(capacity: int) -> Any:
    """A ``DynamicCache`` whose layers are ``PreallocatedLayer(capacity)``."""
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.layers = []
    cache.layer_class_to_replicate = functools.partial(PreallocatedLayer, capacity)
    return cache


@dataclass
class _Layout:
    """Where each row's prompt sits in the cache: the prefix groups (``(shared length, member
    rows)``), the shared-prefix block of ``Pp`` positions (left padded), then each row's own tail
    in a block of ``S`` positions (left padded)."""

    groups: list[tuple[int, list[int]]]
    Pp: int
    gi: torch.Tensor  # per row: its prefix group
    plen_b: torch.Tensor  # per row: the length of its shared prefix
    tails: list[list[int]]
    S: int


def _layout(prompts: list[list[int]], new: int, max_positions: int) -> _Layout:
    """Prefix groups of ``prompts``; none shared (one group per row, ``Pp`` 0) when the prefix block
    + the longest tail + ``new`` tokens would not fit in ``max_positions``."""
    B = len(prompts)
    groups = prefix_groups(prompts)
    Pp = max(L for L, _ in groups)
    if (
        Pp + max(len(p) - L for L, mem in groups for p in (prompts[b] for b in mem)) + new
        > max_positions
    ):
        # prefixes and tails of very unequal length: no sharing
        groups, Pp = [(0, [b]) for b in range(B)], 0
    gi = torch.zeros(B, dtype=torch.long)
    plen_b = torch.zeros(B, dtype=torch.long)
    for g, (L, mem) in enumerate(groups):
        for b in mem:
            gi[b], plen_b[b] = g, L
    tails = [prompts[b][int(plen_b[b]) :] for b in range(B)]
    return _Layout(groups, Pp, gi, plen_b, tails, max(len(t) for t in tails))


def _prefill_prefixes(
    model: WorldModel,
    prompts: list[list[int]],
    lay: _Layout,
    cache: Any,
    keep: torch.Tensor,
    pad: int,
    return_hidden: bool = False,
    flags: list[list[bool]] | None = None,
) -> tuple[torch.Tensor | None, list[tuple[torch.Tensor, torch.Tensor]]]:
    """One row per prefix group (left padded) into the cache, then one copy of each group's keys to
    its members' rows; marks the prefix positions each row attends to in ``keep``.  Returns, with
    ``return_hidden``, the pass's last hidden layer (one row per prefix group), else None; and
    each layer's prefix keys and values before the copy, (G, H, Pp, hd) each."""
    dev = next(model.parameters()).device
    neg = torch.finfo(torch.float32).min
    Pp = lay.Pp
    ids = torch.full((len(lay.groups), Pp), pad, dtype=torch.long)
    kp = torch.zeros(len(lay.groups), Pp, dtype=torch.bool)
    for g, (L, mem) in enumerate(lay.groups):
        if L:
            ids[g, Pp - L :] = torch.tensor(prompts[mem[0]][:L])
            kp[g, Pp - L :] = True
    causal = torch.ones(Pp, Pp, dtype=torch.bool).tril()
    allowed = (causal[None] & kp[:, None, :]) | torch.eye(Pp, dtype=torch.bool)[None]
    given = None if flags is None else left_padded([flags[m[0]][:L] for L, m in lay.groups], Pp)
    pre = model(
        match_flags=given,
        input_ids=ids.to(dev),
        attention_mask=torch.where(allowed, 0.0, neg)[:, None].to(dev),
        position_ids=((kp.long().cumsum(-1) - 1).clamp(min=0)).to(dev),
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=return_hidden,
    )
    once = [(layer.keys, layer.values) for layer in cache.layers]  # kept by the copy below
    cache.batch_select_indices(lay.gi.to(dev))  # one copy: prefix group -> its members' rows
    keep[:, :Pp] = kp[lay.gi]
    return (pre.hidden_states[-1] if return_hidden else None), once


MAX_SHARED_GROUPS = 4  # more prefix groups than this: every row decodes over its own copy


def _shared_prefix_cache(
    cache: Any, lay: _Layout, keep: torch.Tensor, once: list, new: int
) -> tuple[SharedPrefixCache, torch.Tensor]:
    """The decode cache that holds each prefix group's keys once (``SharedPrefixCache``) from the
    prefill's per-row cache, and its keep mask: the G prefix blocks side by side (a row sees its
    own group's), then each row's own positions."""
    Pp, S, G = lay.Pp, lay.S, len(lay.groups)
    prefix = []
    for k, v in once:  # (G, H, Pp, hd) -> (H, G * Pp, hd)
        H, hd = k.shape[1], k.shape[-1]
        prefix.append(
            (
                k.transpose(0, 1).reshape(H, G * Pp, hd).contiguous(),
                v.transpose(0, 1).reshape(H, G * Pp, v.shape[-1]).contiguous(),
            )
        )
    own = []
    for layer in cache.layers:
        mine = PreallocatedLayer(S + new)
        mine.update(layer.keys[..., Pp : Pp + S, :], layer.values[..., Pp : Pp + S, :])
        own.append(mine)
    B = keep.shape[0]
    pre = torch.zeros(B, G, Pp, dtype=torch.bool)
    pre[torch.arange(B), lay.gi] = keep[:, :Pp]
    return SharedPrefixCache(prefix, own), torch.cat([pre.view(B, G * Pp), keep[:, Pp:]], 1)


def _head_hidden(
    lay: _Layout,
    hp: torch.Tensor | None,
    ht: torch.Tensor,
    model: WorldModel,
    places: HeadPlaces,
) -> torch.Tensor:
    """(B, d): the heads' input at ``places`` (``WorldModel.head_input``: row b's mean last-layer
    hidden state over ``places.positions[b]``, plus the named lines' layer on ``places.lines``);
    a position inside the row's shared prefix is read from its prefix group's row of the prefix
    pass (``hp``), the others from the row's own tail pass (``ht``)."""

    def at(b: int, qs: list[int]) -> torch.Tensor:
        L, off, g = int(lay.plen_b[b]), lay.S - len(lay.tails[b]), int(lay.gi[b])
        q = torch.tensor(qs, dtype=torch.long, device=ht.device)
        pre = q < L
        if bool(pre.all()):
            return hp[g, lay.Pp - L + q]  # type: ignore[index]
        if not bool(pre.any()):
            return ht[b, off + q - L]
        out = ht.new_empty(len(qs), ht.shape[-1])
        out[pre] = hp[g, lay.Pp - L + q[pre]]  # type: ignore[index]
        out[~pre] = ht[b, off + q[~pre] - L]
        return out

    return model.head_input(at, places)


def _prefill_tails(
    model: WorldModel,
    lay: _Layout,
    cache: Any,
    keep: torch.Tensor,
    pad: int,
    return_hidden: bool,
    flags: list[list[bool]] | None = None,
) -> Any:
    """Every row's own tail (left padded inside its block), after its prefix: the model's output
    (its last position is each row's last prompt token)."""
    dev = next(model.parameters()).device
    neg = torch.finfo(torch.float32).min
    Pp, S, B = lay.Pp, lay.S, len(lay.tails)
    ids = torch.full((B, S), pad, dtype=torch.long)
    pos = torch.zeros(B, S, dtype=torch.long)
    for b, t in enumerate(lay.tails):
        ids[b, S - len(t) :] = torch.tensor(t)
        keep[b, Pp + S - len(t) : Pp + S] = True
        pos[b, S - len(t) :] = lay.plen_b[b] + torch.arange(len(t))
    causal = torch.ones(S, Pp + S, dtype=torch.bool).tril(diagonal=Pp)
    allowed = causal[None] & keep[:, None, : Pp + S]
    allowed[:, torch.arange(S), Pp + torch.arange(S)] = True  # pad rows see themselves: no NaN
    given = None
    if flags is not None:
        given = left_padded([flags[b][int(lay.plen_b[b]) :] for b in range(B)], S)
    return model(
        match_flags=given,
        input_ids=ids.to(dev),
        attention_mask=torch.where(allowed, 0.0, neg)[:, None].to(dev),
        position_ids=pos.to(dev),
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=return_hidden,
    )


ABORT_EVERY = 8  # tokens between two calls of ``abort`` in the decode loop


def _next_tokens(logits: torch.Tensor, sample: bool, temperature: float) -> torch.Tensor:
    """Argmax, or a draw at ``temperature`` (top_k = 0), per row (on the CPU)."""
    if sample:
        probs = torch.softmax(logits.float() / max(temperature, 1e-6), -1)
        return torch.multinomial(probs, 1)[:, 0].cpu()
    return logits.argmax(-1).cpu()


def _decode_loop(
    model: WorldModel,
    logits: torch.Tensor,
    cache: Any,
    keep: torch.Tensor,
    P: int,
    plen: torch.Tensor,
    new: int,
    eos: int,
    sample: bool,
    temperature: float,
    ignore_eos: bool,
    step: LeanStep | None = None,
    abort: Callable[[], bool] | None = None,
) -> list[list[int]]:
    """Up to ``new`` tokens per row from the prefill's ``logits`` (each row's eos included; with
    ``ignore_eos`` every row runs the whole budget); finished rows are dropped from the batch once
    they are at least half of it (and more than 8 tokens remain).  ``step``: a
    ``models.lm.lean_decode.LeanStep`` of ``model`` (the same logits without the module machinery), or
    None for the model's own forward.  ``abort``: asked every ``ABORT_EVERY`` tokens; when it says
    so, ``Aborted`` is raised (a dream round given up for a new checkpoint does not finish the
    world model's call in flight)."""
    dev = next(model.parameters()).device
    neg = torch.finfo(torch.float32).min
    B = len(plen)
    # per-token bookkeeping in Python lists (a handful of tensor ops per token was a tenth of a
    # small batch's decode time): the original row of each active batch row, finished rows
    rows = list(range(B))
    done = [False] * B
    gen: list[list[int]] = [[] for _ in range(B)]
    pos = plen.clone()  # the next position of each active row, at t = 0
    # the additive mask of the active rows, kept up to date in place (each step opens one
    # position for every active row) instead of rebuilt from ``keep`` per token
    fmask = torch.where(keep, 0.0, neg)
    for t in range(new):
        if abort is not None and t % ABORT_EVERY == ABORT_EVERY - 1 and abort():
            raise Aborted(f"after {t} of {new} tokens")
        nxt = _next_tokens(logits, sample, temperature)
        for r, tok in zip(rows, nxt.tolist(), strict=True):
            if not done[r]:
                gen[r].append(tok)
                done[r] = tok == eos and not ignore_eos
        if t == new - 1:
            break
        active = [i for i, r in enumerate(rows) if not done[r]]
        if not active:
            break
        if len(active) * 2 <= len(rows) and new - t > 8:  # compact: drop finished rows
            idx = torch.tensor(active)
            cache.batch_select_indices(idx.to(dev))
            rows = [rows[i] for i in active]
            nxt, fmask, pos = nxt[idx], fmask[idx], pos[idx]
        fmask[:, P + t] = 0.0
        mask = fmask[:, None, None, : P + t + 1]
        if step is not None:
            logits = step(nxt.to(dev), mask.to(dev), (pos + t).to(dev), cache)
            continue
        out = model(
            input_ids=nxt[:, None].to(dev),
            attention_mask=mask.to(dev),
            position_ids=(pos + t)[:, None].to(dev),
            past_key_values=cache,
            use_cache=True,
        )
        logits = out.logits[:, -1]
    return gen


class _Phases:
    """Running totals of the generation's two phases in this process (``dynaweb bench dream``
    reads them): seconds and tokens in the prefill (every prompt token, shared prefixes once in
    compute but counted per row here) and in the decode loop (tokens generated)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.prefill_s = self.decode_s = 0.0
        self.prefill_tokens = self.decode_tokens = 0
        self.calls = 0

    def add(
        self, prefill_s: float, decode_s: float, prefill_tokens: int, decode_tokens: int
    ) -> None:
        self.prefill_s += prefill_s
        self.decode_s += decode_s
        self.prefill_tokens += prefill_tokens
        self.decode_tokens += decode_tokens
        self.calls += 1


PHASES = _Phases()


def generate_tokens(
    model: WorldModel,
    prompts: list[list[int]],
    new: int,
    pad: int,
    eos: int,
    max_positions: int,
    sample: bool = False,
    temperature: float = 1.0,
    return_hidden: bool = False,
    ignore_eos: bool = False,
    heads: HeadPlaces | None = None,
    lean: bool = True,
    abort: Callable[[], bool] | None = None,
) -> tuple[list[list[int]], torch.Tensor | None]:
    """Up to ``new`` generated token ids per prompt (greedy, or sampled at ``temperature``), and with
    ``return_hidden`` the heads' input at ``heads`` (``WorldModel.head_input``; default: each
    row's last prompt token), (B, d), read from the prefill passes
    (``output_hidden_states`` on them, no extra forward; else None).  Call under
    ``torch.no_grad()``.  ``lean``: decode with ``models.lm.lean_decode.LeanStep`` where it supports
    the model (the same logits, about 1.3x faster per token), else the model's own forward.
    ``abort``: see ``_decode_loop`` (raises ``Aborted``)."""
    t0 = time.perf_counter()
    lay = _layout(prompts, new, max_positions)
    cache = preallocated_cache(lay.Pp + lay.S + new)
    keep = torch.zeros(len(prompts), lay.Pp + lay.S + new, dtype=torch.bool)
    hp, once = None, []  # the prefix pass's last hidden layer, its keys and values
    flags = model.prompt_flags(prompts)  # the world model's match feature (None: none)
    if lay.Pp:
        hp, once = _prefill_prefixes(model, prompts, lay, cache, keep, pad, return_hidden, flags)
    out = _prefill_tails(model, lay, cache, keep, pad, return_hidden, flags)
    last_hidden = None
    if return_hidden:
        places = heads or HeadPlaces([[len(p) - 1] for p in prompts])
        last_hidden = _head_hidden(lay, hp, out.hidden_states[-1], model, places)
    plen = torch.tensor([len(p) for p in prompts])
    step = LeanStep(model.lm) if lean and LeanStep.supports(model.lm) else None
    P = lay.Pp + lay.S
    G = len(lay.groups)
    if step is not None and once and G < len(prompts) and G <= MAX_SHARED_GROUPS:
        cache, keep = _shared_prefix_cache(cache, lay, keep, once, new)  # each prefix read once
        P = G * lay.Pp + lay.S
    t1 = time.perf_counter()
    gen = _decode_loop(
        model,
        out.logits[:, -1],
        cache,
        keep,
        P,
        plen,
        new,
        eos,
        sample,
        temperature,
        ignore_eos,
        step,
        abort,
    )
    PHASES.add(t1 - t0, time.perf_counter() - t1, sum(len(p) for p in prompts), sum(map(len, gen)))
    return gen, last_hidden
