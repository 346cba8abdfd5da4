import math

import pytest
import torch

from models.losses import bc_loss, group_advantages, gspo_loss, info_nce, lm_loss, token_logprobs


def test_group_advantages_hand_values():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.5])
    g = ["a", "a", "b", "b", "c", "c", "d"]
    adv = group_advantages(r, g)
    # group a: mean .5, std .5 -> +1 / -1 ; b all success, c all failure, d singleton -> 0
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 0, 0, 0, 0, 0]), atol=1e-5)
    adv3 = group_advantages(torch.tensor([1.0, 0.0, 0.0]), [1, 1, 1])
    std = math.sqrt(2 / 9)
    assert torch.allclose(adv3, torch.tensor([2 / 3 / std, -1 / 3 / std, -1 / 3 / std]), atol=1e-4)


def test_group_advantages_all_equal_zero():
    assert torch.all(group_advantages(torch.ones(8), ["g"] * 8) == 0)
    assert torch.all(group_advantages(torch.zeros(8), ["g"] * 8) == 0)


def _toy(n=4, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(n, t, generator=g) - 0.1
    mask = torch.ones(n, t)
    mask[1, 3:] = 0
    if n > 2:
        mask[2, 1:] = 0
    return logp, mask


def test_ratio_is_one_for_unchanged_model():
    logp, mask = _toy()
    old = (logp * mask).sum(-1)
    loss, st = gspo_loss(logp.clone().requires_grad_(), old, mask, torch.tensor([1.0, -1, 0.5, 0]))
    assert abs(st["ratio_mean"] - 1) < 1e-4 and abs(st["ratio_min"] - 1) < 1e-4
    assert abs(st["ratio_max"] - 1) < 1e-4 and st["clip_frac"] == 0.0 and abs(st["kl"]) < 1e-6
    # loss == -mean(A) at ratio 1
    assert abs(loss.item() + (1 - 1 + 0.5 + 0) / 4) < 1e-6


def test_length_normalised_ratio_hand_value():
    logp = torch.tensor([[-1.0, -2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    old = torch.tensor([-3.0002])  # new sum -3 -> log ratio .0002 / 2 tokens = 1e-4
    loss, st = gspo_loss(logp, old, mask, torch.tensor([1.0]), 3e-4, 4e-4)
    assert abs(st["ratio_mean"] - math.exp(1e-4)) < 1e-7
    assert abs(float(loss) + math.exp(1e-4)) < 1e-6
    # beyond the clip range the clipped (constant) term is active for A > 0
    loss, st = gspo_loss(logp, torch.tensor([-3.01]), mask, torch.tensor([1.0]), 3e-4, 4e-4)
    assert st["clip_frac"] == 1.0 and abs(float(loss) + (1 + 4e-4)) < 1e-6


def test_better_rollout_gets_larger_update():
    logp, mask = _toy(n=2)
    old = (logp * mask).sum(-1)
    x = logp.clone().requires_grad_()
    adv = group_advantages(torch.tensor([1.0, 0.0]), ["g", "g"])
    loss, _ = gspo_loss(x, old, mask, adv)
    loss.backward()
    # gradient descent raises the log-probs of the successful rollout, lowers the other
    assert torch.all(x.grad[0][mask[0] > 0] < 0)
    assert torch.all(x.grad[1][mask[1] > 0] > 0)
    assert torch.all(x.grad[mask == 0] == 0)


def test_shape_asserts():
    logp, mask = _toy()
    with pytest.raises(AssertionError):
        gspo_loss(logp, torch.zeros(3), mask, torch.zeros(4))
    with pytest.raises(AssertionError):
        bc_loss(logp, mask[:, :2])


def test_bc_and_lm_loss():
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 1.0]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    expected = -(math.log(0.5) + math.log(0.25) + math.log(0.5)) / 3
    assert abs(float(bc_loss(logp, mask)) - expected) < 1e-6
    logits = torch.zeros(1, 2, 4)  # uniform over 4
    assert (
        abs(float(lm_loss(logits, torch.tensor([[1, 2]]), torch.ones(1, 2))) - math.log(4)) < 1e-6
    )
    lp = token_logprobs(torch.tensor([[[0.0, math.log(3.0)]]]), torch.tensor([[1]]))
    assert abs(float(lp) - math.log(0.75)) < 1e-6


def test_info_nce_hand_values():
    p = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    t = torch.tensor([[3.0, 0.0], [0.0, 1.0]])
    loss, st = info_nce(p, t, temperature=0.5)
    # cosines: diag 1, off 0 -> logits [[2,0],[0,2]]
    assert abs(float(loss) - (-math.log(math.exp(2) / (math.exp(2) + 1)))) < 1e-6
    assert st["acc"] == 1.0
    loss2, st2 = info_nce(p, t.flip(0), temperature=1.0)
    assert abs(float(loss2) - (-math.log(1 / (1 + math.e)))) < 1e-6 and st2["acc"] == 0.0


def test_lower_clip_with_negative_advantage_stops_the_gradient():
    """Per-decision normaliser: s = exp((sum new - old) / n_decisions).  With A < 0 and s below
    1 - clip_low the clipped (constant) term is the minimum: no gradient; inside the range there is one."""
    mask = torch.ones(1, 2)
    adv = torch.tensor([-1.0])
    old = torch.tensor([-2.0])  # two decisions, behaviour log pi = -1 each
    low = torch.tensor([[-1.2, -1.2]], requires_grad=True)  # s = exp(-0.2) = 0.819 < 1 - 0.15
    loss, st = gspo_loss(low, old, mask, adv, clip_low=0.15, clip_high=0.28)
    loss.backward()
    assert st["clip_frac"] == 1.0 and abs(st["ratio_mean"] - math.exp(-0.2)) < 1e-6
    assert float(low.grad.abs().sum()) == 0.0 and abs(float(loss.detach()) - (1 - 0.15)) < 1e-6
    inside = torch.tensor(
        [[-1.05, -1.05]], requires_grad=True
    )  # s = exp(-0.05) inside [0.85, 1.28]
    loss, st = gspo_loss(inside, old, mask, adv, clip_low=0.15, clip_high=0.28)
    loss.backward()
    assert st["clip_frac"] == 0.0 and float(inside.grad.abs().sum()) > 0
    # gradient descent lowers the log-probs of a trajectory with a negative advantage
    assert torch.all(inside.grad > 0)
    # the defaults are PPO's range with clip-higher (0.2 / 0.28)
    _, st = gspo_loss(torch.tensor([[-1.2, -1.2]]), old, mask, adv)
    assert st["clip_frac"] == 0.0  # 0.819 is inside [0.8, 1.28]


def test_class_balanced_cross_entropy_hand_values_and_micro_batches():
    """World-model reward/done heads: each class weighted by 1 / its count, weights summing to 1."""
    from models.losses import balanced_cross_entropy, class_balanced_weights

    y = torch.tensor([1, 0, 0, 0])
    w = class_balanced_weights(y)
    assert (
        torch.allclose(w, torch.tensor([0.5, 1 / 6, 1 / 6, 1 / 6]))
        and abs(float(w.sum()) - 1.0) < 1e-6
    )
    assert torch.allclose(
        class_balanced_weights(torch.tensor([0, 0])), torch.tensor([0.5, 0.5])
    )  # one class: mean
    logits = torch.tensor([[0.0, 2.0], [1.0, 0.0], [0.0, 1.0], [3.0, 0.0]], requires_grad=True)
    ce = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    loss, st = balanced_cross_entropy(logits, y)
    # = mean over classes of the class's mean CE
    assert abs(float(loss) - 0.5 * (float(ce[0]) + float(ce[1:].mean()))) < 1e-6
    assert (
        abs(st["acc"] - 0.5 * (1.0 + 2 / 3)) < 1e-6
    )  # balanced accuracy: recall 1 (class 1), 2/3 (class 0)
    # micro-batches with the whole batch's weights add up to the whole loss and gradient
    (g_full,) = torch.autograd.grad(loss, logits)
    parts = [balanced_cross_entropy(logits[i], y[i], w[i])[0] for i in ([0, 2], [1], [3])]
    (g_parts,) = torch.autograd.grad(sum(parts), logits)
    assert abs(float(sum(parts)) - float(loss)) < 1e-6 and torch.allclose(g_parts, g_full)
    # the minority class is not drowned: a constant "class 0" guess scores 0.5, not 0.75
    _, st0 = balanced_cross_entropy(torch.tensor([[1.0, 0.0]] * 4), y)
    assert abs(st0["acc"] - 0.5) < 1e-6
