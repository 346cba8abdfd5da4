"""Behaviour cloning of the policy's own distribution: the term of expert trajectories.

An expert step trains ``-log pi_T(a*|s)``, the cross-entropy over the rebuilt candidate set C(s)
(``models.policy.log_pi``), the mean over the batch's expert steps, weighted by
``TrainerConfig.bc_weight``.  An expert action that is not a candidate (counted as
``bc_not_candidate``) is trained by its mean token negative log-likelihood instead
(``outside_logprob``).

``bc_part`` is a micro-batch's share of the batch's BC loss (its expert steps / all of them), so
micro-batches with gradient accumulation give the gradient of the whole batch.
"""

from __future__ import annotations

import torch

from models.losses import bc_loss
from models.policy.decisions import pad_decisions


def outside_logprob(token_logprobs: torch.Tensor) -> torch.Tensor:
    """What an expert action outside C(s) trains in place of ``log pi_T``: the mean log-likelihood
    of its tokens (text + eos)."""
    return token_logprobs.mean()


def bc_part(per_traj: list[torch.Tensor], bc_steps: int) -> tuple[torch.Tensor, float]:
    """(the micro-batch's BC loss, its weight: its expert steps / the batch's ``bc_steps``);
    ``per_traj``: each expert trajectory's ``log pi_T`` per decision (with grad)."""
    lp, mask = pad_decisions(per_traj)
    w = float(mask.sum()) / max(1, bc_steps)
    return bc_loss(lp, mask), w
