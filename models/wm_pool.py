"""The world model's attention-pooling head input (``ModelConfig.wm_head_pool``).

What it is: ``model.head_pool``, a small module that reads the last layer's hidden states of the
*whole* prompt (instruction, page, action) with ``QUERIES`` learned queries (softmax attention over
the prompt's positions, one distribution per query), and maps the ``QUERIES`` pooled vectors to
d_model with a linear layer that starts at zero.  The reward, done and change heads read the mean
over the acted element's line and the action (``models.world_model.head_positions``) *plus* this.

Why: the mean over the acted element's line and the action cannot see the rest of the page, and a
task's last step is often decided there: the option that is selected, the boxes that are checked,
when the action is a click on "Submit" (terminal reward balanced accuracy 0.56-0.64 on
choose-list and click-checkboxes, against 0.90-1.00 on the tasks whose last action names the
element that decides).  The plain mean over every page token (tried in session 16) dilutes the
few tokens that matter among hundreds (0.790 against 0.847); a learned query can pick them out.

Compatibility: the output layer starts at zero, so attaching the pool to a model changes nothing
until it is trained; a model saved without it (no ``head_pool.*`` weights,
``config.wm_head_pool`` unset) loads without it and behaves as before.
"""

from __future__ import annotations

from typing import Any

import torch

QUERIES = 4


class AttentionPool(torch.nn.Module):
    """``QUERIES`` attention distributions over a row's positions -> (d,)."""

    def __init__(self, dim: int, seed: int = 4711) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.query = torch.nn.Linear(dim, QUERIES)
        self.out = torch.nn.Linear(QUERIES * dim, dim)
        with torch.no_grad():
            self.query.weight.copy_(torch.randn(self.query.weight.shape, generator=g) * 0.02)
            self.query.bias.zero_()
            self.out.weight.zero_()
            self.out.bias.zero_()

    def forward(self, vecs: torch.Tensor) -> torch.Tensor:
        """``vecs`` (n, d): one row's hidden states -> (d,)."""
        v = vecs.to(self.query.weight.dtype)
        att = torch.softmax(self.query(v).float(), 0).to(v.dtype)  # (n, Q)
        return self.out((att.transpose(0, 1) @ v).reshape(-1))


def attach_head_pool(model: Any) -> Any:
    """Give ``model`` the pool (idempotent) and mark ``model.config.wm_head_pool``."""
    if getattr(model, "head_pool", None) is None:
        dev = next(model.parameters()).device
        model.head_pool = AttentionPool(int(model.config.hidden_size)).to(dev)
    model.config.wm_head_pool = True
    return model


def pooled(model: Any, rows: list[torch.Tensor]) -> torch.Tensor | None:
    """(B, d): the pool of each row's prompt hidden states (``rows[b]``: (n_b, d)); None for a
    model without the pool."""
    pool = getattr(model, "head_pool", None)
    if pool is None:
        return None
    return torch.stack([pool(r) for r in rows])
