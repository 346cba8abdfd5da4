"""GSPO on the policy's own distribution: the term of grouped on-policy and dreamed trajectories.

A trajectory trained here has every step's behaviour log-prob (the ``log pi_T(a|s)`` acting
recorded, ``models.policy.runner``) and a group id, named once at the source (the collector or
dream generator that ran the group; the learner never invents one).  Its reward is task success of
its terminal raw reward (``models.losses.task_success_reward``); advantages are normalised within
each group (``advantages``, ``models.losses.group_advantages``).  Per trajectory the sequence is
its *decisions*: the log ratio is ``(sum log pi_T - sum behaviour log-prob) / n_decisions``, and
the loss is ``models.losses.gspo_loss`` (clipped to ``[1 - clip_low, 1 + clip_high]``).

``gspo_part`` is a micro-batch's share of the batch's GSPO loss (its trajectories / all of them),
so micro-batches with gradient accumulation give the gradient of the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.losses import group_advantages, gspo_loss, task_success_reward
from models.policy.decisions import pad_decisions


def advantages(trajectories: list) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, group-normalised advantages), one per trajectory, in order."""
    rewards = torch.tensor([task_success_reward(tr.reward) for tr in trajectories])
    adv = (
        group_advantages(rewards, [tr.group_id for tr in trajectories])
        if trajectories
        else torch.zeros(0)
    )
    return rewards, adv


@dataclass
class GspoPart:
    """A micro-batch's share of the GSPO loss."""

    loss: torch.Tensor  # weight x the micro-batch's GSPO loss (with grad)
    weight: float  # its GSPO trajectories / all of the batch's
    value: float  # the micro-batch's GSPO loss (unweighted)
    stats: dict  # ``gspo_loss``'s statistics
    log_ratios: list[float]  # per trajectory: (sum log pi_T - sum behaviour) / n_decisions


def gspo_part(
    per_traj: list[torch.Tensor],
    steps: list[list],
    adv: torch.Tensor,
    n_gspo: int,
    clip_low: float,
    clip_high: float,
) -> GspoPart:
    """The GSPO share of a micro-batch's trajectories: ``per_traj`` their ``log pi_T`` per decision
    (with grad), ``steps`` their steps (the behaviour log-probs), ``adv`` their advantages,
    ``n_gspo`` the batch's GSPO trajectories."""
    lp, mask = pad_decisions(per_traj)
    dev = lp.device
    old = torch.tensor([sum(float(s.behaviour_logprob) for s in st) for st in steps], device=dev)
    loss_g, st = gspo_loss(lp, old, mask, adv.to(dev), clip_low, clip_high)
    with torch.no_grad():
        lr = ((lp * mask).sum(-1) - old) / mask.sum(-1).clamp(min=1.0)
    w = len(per_traj) / n_gspo
    return GspoPart(
        w * loss_g, w, float(loss_g.detach()), st, [float(lr[j]) for j in range(len(per_traj))]
    )
