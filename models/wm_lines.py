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

Compatibility: the layer starts at zero, so attaching it changes nothing until it is trained; a
model saved without it (no ``match_lines.*`` weights, ``config.wm_head_lines`` unset) loads without
it and behaves as before.
"""

from __future__ import annotations

from typing import Any

import torch

from models.wm_match import match_line_positions, token_pieces


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

    def forward(self, vecs: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
        """(B, d): per row the projected mean of its line vectors ``vecs[b]`` (n_b, d); a row with
        none gets the projection of zeros (the bias)."""
        zero = torch.zeros(like.shape[-1], dtype=like.dtype, device=like.device)
        means = torch.stack([v.mean(0) if len(v) else zero for v in vecs])
        return self.proj(means.to(self.proj.weight.dtype)).to(like.dtype)


def attach_match_lines(model: Any, tokenizer: Any) -> Any:
    """Give ``model`` the layer (idempotent) and mark ``model.config.wm_head_lines``."""
    if getattr(model, "match_lines", None) is None:
        feat = getattr(model, "wm_match", None)
        pieces = feat.pieces if feat is not None else token_pieces(tokenizer)
        dev = next(model.parameters()).device
        model.match_lines = MatchLines(int(model.config.hidden_size), pieces).to(dev)
    model.config.wm_head_lines = True
    return model


def line_positions(model: Any, prompts: list[list[int]]) -> list[list[int]] | None:
    """Each prompt's ``match_line_positions``; None for a model without the layer."""
    ml = getattr(model, "match_lines", None)
    return None if ml is None else [match_line_positions(p, ml.pieces) for p in prompts]
