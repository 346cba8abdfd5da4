"""The heads' view of the page lines the instruction names (``ModelConfig.wm_head_lines``).

What it is: ``model.match_lines``, a linear layer (d_model -> d_model, zero at init) on the mean of
the last layer's hidden states over every page line that holds a word of the instruction
(``models.wm_match.match_line_positions``: the whole line, so its state words, ``checked``,
``selected``, a ``value``, are in it).  The reward, done and change heads read the mean over the
acted element's line and the action (``models.world_model.head_positions``) *plus* this.

Why: on the steps that decide a task by a click on "Submit", the acted element's line says
nothing about what was asked: whether the asked option is the selected one (choose-list), whether
the asked boxes are the checked ones (click-checkboxes).  With the exact-match feature those
tasks stayed at a terminal reward balanced accuracy of 0.54-0.65 while the others rose above
0.90; the lines the instruction names are where the answer is.  A learned pool over the whole
prompt (4 queries, session 17) did not find them (0.52-0.62).

**Every page line, one at a time** (``ModelConfig.wm_head_page_lines``, ``model.page_lines``): a
small network (d -> d, GELU, d -> d; its output layer zero at init) applied to each page line's
mean hidden state, then averaged over the lines, added to the heads' input beside the named
lines' term.  Why: some tasks are decided by a count over lines, not by one line.
click-checkboxes' reward is MiniWoB's own (boxes right - boxes wrong) / boxes, success when it is
above 0, so a box wrongly ticked (a line the instruction does not name) counts as much as an
asked box left unticked; the named lines' mean (a linear map of one average) sees neither the
unnamed lines nor a per-line verdict.  A per-line nonlinearity before the average can say "this
line is right" per line and the average then is the count's sign.

Compatibility: each layer starts at zero, so attaching it changes nothing until it is trained; a
model saved without it (no ``match_lines.*`` weights, ``config.wm_head_lines`` unset) loads without
it and behaves as before.
"""

from __future__ import annotations

from typing import Any

import torch

from models.wm_match import page_line_tokens, token_pieces


class Lines(list):
    """One row's page-line token positions (a plain list of ints to the callers, which gather
    hidden states at them), with each position's line (``line_of``, from 0) and whether its line
    holds an instruction word (``named``): ``models.wm_match.page_line_tokens``."""

    def __init__(self, positions: list[int], line_of: list[int], named: list[bool]) -> None:
        super().__init__(positions)
        self.line_of, self.named = line_of, named


class MatchLines(torch.nn.Module):
    """``proj`` (d -> d, zero at init) of the mean over the named lines; ``pieces``: the
    tokenizer's token texts (``models.wm_match.token_pieces``)."""

    def __init__(self, dim: int, pieces: list[str]) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        with torch.no_grad():
            self.proj.weight.zero_()
            self.proj.bias.zero_()
        self.pieces = pieces

    def forward(
        self, vecs: list[torch.Tensor], like: torch.Tensor, lines: list[Lines]
    ) -> torch.Tensor:
        """(B, d): per row the projected mean of its named lines' vectors (``vecs[b]``: (n_b, d)
        at ``lines[b]``); a row with none gets the projection of zeros (the bias)."""
        zero = torch.zeros(like.shape[-1], dtype=like.dtype, device=like.device)
        rows = []
        for v, ln in zip(vecs, lines, strict=True):
            keep = [i for i, n in enumerate(ln.named) if n]
            rows.append(v[keep].mean(0) if keep else zero)
        return self.proj(torch.stack(rows).to(self.proj.weight.dtype)).to(like.dtype)


class PageLines(torch.nn.Module):
    """``mlp`` (d -> d, GELU, d -> d; output layer zero at init) on each page line's mean vector,
    averaged over the row's lines; a row with no line gets zeros."""

    def __init__(self, dim: int, pieces: list[str]) -> None:
        super().__init__()
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, dim), torch.nn.GELU(), torch.nn.Linear(dim, dim)
        )
        with torch.no_grad():
            self.mlp[2].weight.zero_()
            self.mlp[2].bias.zero_()
        self.pieces = pieces

    def forward(
        self, vecs: list[torch.Tensor], like: torch.Tensor, lines: list[Lines]
    ) -> torch.Tensor:
        d = like.shape[-1]
        means, owner = [], []
        for b, (v, ln) in enumerate(zip(vecs, lines, strict=True)):
            if not len(v):
                continue
            idx = torch.tensor(ln.line_of, dtype=torch.long, device=v.device)
            n = int(idx.max()) + 1
            sums = v.new_zeros(n, d).index_add_(0, idx, v)
            means.append(sums / torch.bincount(idx, minlength=n).clamp(min=1).unsqueeze(1))
            owner += [b] * n
        out = like.new_zeros(len(vecs), d)
        if not means:
            return out
        w = self.mlp[0].weight
        per_line = self.mlp(torch.cat(means).to(w.dtype)).to(like.dtype)
        own = torch.tensor(owner, dtype=torch.long, device=like.device)
        out = out.index_add(0, own, per_line)
        count = torch.bincount(own, minlength=len(vecs)).clamp(min=1).unsqueeze(1)
        return out / count.to(out.dtype)


def lines_term(
    model: Any, vecs: list[torch.Tensor], like: torch.Tensor, lines: list[Lines]
) -> torch.Tensor:
    """The heads' extra input from the page lines: the named lines' layer plus the per-line
    network, whichever ``model`` has (``vecs[b]``: the hidden states at ``lines[b]``)."""
    out = torch.zeros_like(like)
    for name in ("match_lines", "page_lines"):
        layer = getattr(model, name, None)
        if layer is not None:
            out = out + layer(vecs, like, lines)
    return out


def attach_match_lines(model: Any, tokenizer: Any) -> Any:
    """Give ``model`` the layer (idempotent) and mark ``model.config.wm_head_lines``."""
    if getattr(model, "match_lines", None) is None:
        feat = getattr(model, "wm_match", None)
        pieces = feat.pieces if feat is not None else token_pieces(tokenizer)
        dev = next(model.parameters()).device
        model.match_lines = MatchLines(int(model.config.hidden_size), pieces).to(dev)
    model.config.wm_head_lines = True
    return model


def attach_page_lines(model: Any, tokenizer: Any) -> Any:
    """Give ``model`` the per-line network (idempotent) and mark ``config.wm_head_page_lines``."""
    if getattr(model, "page_lines", None) is None:
        feat = getattr(model, "wm_match", None)
        pieces = feat.pieces if feat is not None else token_pieces(tokenizer)
        dev = next(model.parameters()).device
        model.page_lines = PageLines(int(model.config.hidden_size), pieces).to(dev)
    model.config.wm_head_page_lines = True
    return model


def line_positions(model: Any, prompts: list[list[int]]) -> list[Lines] | None:
    """Each prompt's page lines (``Lines``); None for a model with neither line layer."""
    layer = getattr(model, "match_lines", None) or getattr(model, "page_lines", None)
    return None if layer is None else [Lines(*page_line_tokens(p, layer.pieces)) for p in prompts]
