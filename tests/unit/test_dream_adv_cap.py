"""Dreams weighted no more than reality (``trainer.dream_adv_cap``): the dreamed share of a policy
batch's summed |GSPO advantage| is capped, in the pure function and at the real loss."""

from __future__ import annotations

import torch

from core.config import TrainerConfig
from models.lm.saved import make_model
from models.losses import cap_dream_share
from models.policy.loss import policy_batch_loss
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from tests.factories import POLICY_CFG, POLICY_OBS, policy_rollout, policy_trajectory


def test_the_dreamed_share_is_scaled_down_to_the_cap_exactly() -> None:
    adv = torch.tensor([1.0, -1.0, 2.0, -2.0, 0.5, -0.5])  # dreamed: the first four (mass 6)
    dreamed = [True, True, True, True, False, False]  # real mass 1
    out, before, scale = cap_dream_share(adv, dreamed, 0.5)
    assert abs(before - 6 / 7) < 1e-6 and abs(scale - 1 / 6) < 1e-6
    d, r = float(out[:4].abs().sum()), float(out[4:].abs().sum())
    assert abs(d / (d + r) - 0.5) < 1e-6 and torch.equal(out[4:], adv[4:])
    assert torch.equal(torch.sign(out), torch.sign(adv))  # directions kept, magnitudes scaled


def test_nothing_changes_under_the_cap_without_reality_or_when_off() -> None:
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    assert cap_dream_share(adv, [True, True, False, False], 0.5)[2] == 1.0  # share 0.5: at the cap
    assert cap_dream_share(adv, [True] * 4, 0.5)[2] == 1.0  # no real advantage to weigh against
    assert cap_dream_share(adv, [True, True, True, False], 1.0)[2] == 1.0  # off


def test_the_cap_reaches_the_loss_and_its_report() -> None:
    """The real loss on a batch of two dreamed groups and one real group: with the cap at 0.5 the
    report's dreamed share is 0.5 (raw 2/3) and the loss differs from the uncapped one."""
    torch.manual_seed(0)
    model, tok = make_model(Policy, POLICY_CFG)
    r = PolicyRunner(model, tok, POLICY_CFG, seed=3)
    trajs = []
    for source, group in (("dream", "d1"), ("dream", "d2"), ("real", "r1")):
        for k in range(2):
            steps, lps = policy_rollout(r, POLICY_OBS[k], 1)
            trajs.append(policy_trajectory(steps, source, group, float(k), lps))
    capped_loss, capped = policy_batch_loss(
        model, tok, trajs, TrainerConfig(dream_adv_cap=0.5), POLICY_CFG
    )
    free_loss, free = policy_batch_loss(
        model, tok, trajs, TrainerConfig(dream_adv_cap=1.0), POLICY_CFG
    )
    assert abs(capped["dream_adv_share_raw"] - 2 / 3) < 1e-6
    assert (
        abs(capped["dream_adv_share"] - 0.5) < 1e-6 and abs(capped["dream_adv_scale"] - 0.5) < 1e-6
    )
    assert free["dream_adv_scale"] == 1.0 and abs(free["dream_adv_share"] - 2 / 3) < 1e-6
    by = capped["by_source"]  # the per-source |advantage| the trainer's counters add up
    assert abs(by["dream"]["adv_abs_sum"] - by["real"]["adv_abs_sum"]) < 1e-5
    assert float(capped_loss.detach()) != float(free_loss.detach())
