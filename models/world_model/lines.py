"""The heads' view of the page lines the instruction names (``WorldModelSpec.head_lines``, on
with ``model.instruction_match``).

What it is: ``WorldModel.lines`` (``MatchLines``), a linear layer (d_model -> d_model, zero at init) on the mean of
the last layer's hidden states over every page line that holds a word of the instruction
(``models.lm.match.match_line_positions``: the whole line, so its state words, ``checked``,
``selected``, a ``value``, are in it).  The reward, done and change heads read the mean over the
acted element's line and the action (``models.world_model.heads.head_positions``) *plus* this.

Why: on the steps that decide a task by a click on "Submit", the acted element's line says
nothing about what was asked: whether the asked option is the selected one (choose-list), whether
the asked boxes are the checked ones (click-checkboxes).  With the exact-match feature those
tasks stayed at a terminal reward balanced accuracy of 0.54-0.65 while the others rose above
0.90; the lines the instruction names are where the answer is.  A learned pool over the whole
prompt (4 queries, `a300028`, reverted) did not find them (0.52-0.62).

**Counts** (``WorldModelSpec.head_counts``, on by default): a mean says which share of the named
lines is in a state, not how many, and says nothing of the lines the instruction does not name.
click-checkboxes' success is MiniWoB's partial credit, (boxes right - boxes wrong) / boxes > 0,
where an unasked box that is ticked counts against: a linear function of four counts (asked and
ticked, asked, unasked and ticked, unasked).  So the layer also counts lines: per page line the
element-wise max of its tokens' hidden states, summed over the named lines and over the other
lines (each divided by ``COUNT_SCALE``), each sum through its own linear layer (zero at init).  A
linear head on these can compute the count's sign.  Why the max and not the mean: a word that
marks a line (``checked``, a flagged label) is one token of 6-12, so a mean carries it at a
strength that varies with the label's length and is drowned by the label's own tokens, which are
random strings; the max keeps a feature that fires on any token of the line at full strength
(the PointNet / DeepSets pooling).  Measured on the three-file held-out set
(docs/results/world-model, rows 13 and 18): click-checkboxes 0.97 with the max, 0.84 with the
mean, the same data and steps.

**The acted line** (``WorldModelSpec.head_acted``, on by default): the element-wise max over the
acted element's page line (``models.lm.match.page_lines``: the first line starting with ``[k]``,
k the element the action names), through its own linear layer (zero at init).  On click-link the
page is the same whatever is clicked, so only the acted line tells a right click from a wrong
one; the heads' mean over that line and the action's tokens carries the asked word's mark as one
token of about 12.  Measured (docs/results/world-model, rows 20-21): click-link 0.95 / 0.98 on two
seeds with it, 0.85 / 0.76 without.

Compatibility: the layer starts at zero, so adding it changes nothing until it is trained; a model
saved without it (its spec's ``head_lines`` off; in the legacy layout no ``match_lines.*``
weights and no ``wm_head_lines`` flag) loads without it and behaves as before; one saved without
the counts or the acted line (``head_counts``, ``head_acted`` off) loads without them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from models.lm.match import named_positions, page_lines

# the line sums are divided by this (pages hold 3-40 lines; a mean's scale at about 8)
COUNT_SCALE = 8.0


@dataclass(frozen=True)
class RowLines:
    """One prompt's lines for the layer: ``named``, the positions of the named lines' tokens;
    ``page``, per page line (named, its positions), for a layer with counts (else None);
    ``acted``, the positions of the acted element's line, for a layer with ``acted`` (else None;
    empty when the page does not show that element)."""

    named: list[int]
    page: list[tuple[bool, list[int]]] | None = None
    acted: list[int] | None = None


# gather(b, positions) -> (len(positions), d): row b's last-layer hidden states there
Gather = Callable[[int, list[int]], torch.Tensor]


def _zero_linear(dim: int) -> torch.nn.Linear:
    lin = torch.nn.Linear(dim, dim)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.zero_()
    return lin


class MatchLines(torch.nn.Module):
    """``proj`` (d -> d, zero at init) of the mean over the named lines; with ``counts``,
    ``named_count`` and ``other_count`` (zero at init) of the sums of the per-line maxima over the
    named and the other page lines; ``pieces``: the tokenizer's token texts
    (``models.lm.match.token_pieces``)."""

    def __init__(
        self, dim: int, pieces: list[str], counts: bool = False, acted: bool = False
    ) -> None:
        super().__init__()
        self.proj = _zero_linear(dim)
        self.counts = counts
        if counts:
            self.named_count = _zero_linear(dim)
            self.other_count = _zero_linear(dim)
        self.acted = acted
        if acted:
            self.acted_max = _zero_linear(dim)
        self.pieces = pieces

    def forward(self, gather: Gather, rows: list[RowLines], like: torch.Tensor) -> torch.Tensor:
        """(B, d) for the rows' ``RowLines`` (``line_positions``); a row with no named line gets
        the projection of zeros (the bias), one with no page line the count layers' biases."""
        d = like.shape[-1]
        zero = torch.zeros(d, dtype=like.dtype, device=like.device)
        means = torch.stack(
            [gather(b, r.named).mean(0) if r.named else zero for b, r in enumerate(rows)]
        )
        out = self.proj(means.to(self.proj.weight.dtype))
        if self.counts:
            sums = torch.stack(
                [self._sums(gather, b, r.page or [], zero) for b, r in enumerate(rows)]
            )
            sums = sums.to(self.proj.weight.dtype) / COUNT_SCALE
            out = out + self.named_count(sums[:, 0]) + self.other_count(sums[:, 1])
        if self.acted:
            maxes = torch.stack(
                [gather(b, r.acted).amax(0) if r.acted else zero for b, r in enumerate(rows)]
            )
            out = out + self.acted_max(maxes.to(self.proj.weight.dtype))
        return out.to(like.dtype)

    @staticmethod
    def _sums(
        gather: Gather, b: int, page: list[tuple[bool, list[int]]], zero: torch.Tensor
    ) -> torch.Tensor:
        """(2, d): the sums of the per-line maxima (element-wise, over each line's tokens) over
        the named lines and over the others."""
        page = [(n, q) for n, q in page if q]
        if not page:
            return torch.stack([zero, zero])
        flat = [p for _, q in page for p in q]
        seg = torch.tensor([i for i, (_, q) in enumerate(page) for _ in q], device=zero.device)
        vecs = gather(b, flat)
        per = torch.zeros(len(page), vecs.shape[-1], dtype=vecs.dtype, device=vecs.device)
        idx = seg.unsqueeze(1).expand_as(vecs)
        per = per.scatter_reduce(0, idx, vecs, "amax", include_self=False)
        named = torch.tensor([n for n, _ in page], device=vecs.device)
        return torch.stack([per[named].sum(0), per[~named].sum(0)])


def line_positions(ml: MatchLines | None, prompts: list[list[int]]) -> list[RowLines] | None:
    """Each prompt's ``RowLines`` (the named lines' positions, ``match_line_positions``; for a
    layer with counts the lines themselves, ``page_line_positions``; for one with ``acted`` the
    acted element's line); None without the layer (``ml`` None)."""
    if ml is None:
        return None
    out = []
    for p in prompts:
        pg, k = page_lines(p, ml.pieces)  # one scan of each prompt
        acted = (pg[k][1] if k >= 0 else []) if ml.acted else None
        out.append(RowLines(named_positions(pg), pg if ml.counts else None, acted))
    return out
