"""Loss functions (pure: tensors in, tensors out; shapes asserted).

Shapes: N = sequences (trajectories), T = padded tokens, V = vocabulary,
B = batch, D = embedding size.  ``mask`` is 1.0 for real tokens, 0.0 for padding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

EPS = 1e-6


def group_advantages(rewards: torch.Tensor, group_ids: list, eps: float = EPS) -> torch.Tensor:
    """Group-normalised advantages (GRPO/GSPO): ``(r - mean_g) / (std_g + eps)``.

    ``rewards``: (N,), ``group_ids``: N hashables.  The std is the population std
    of the group; groups whose rewards are all equal (incl. singletons) get 0.
    """
    assert rewards.dim() == 1 and rewards.shape[0] == len(group_ids), (
        rewards.shape,
        len(group_ids),
    )
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    index: dict = {}
    for i, g in enumerate(group_ids):
        index.setdefault(g, []).append(i)
    for idx in index.values():
        r = rewards[idx].float()
        std = r.std(unbiased=False)
        if len(idx) < 2 or float(r.max() - r.min()) == 0.0:
            continue
        adv[idx] = (r - r.mean()) / (std + eps)
    return adv


def cap_dream_share(
    adv: torch.Tensor, dreamed: list[bool], cap: float
) -> tuple[torch.Tensor, float, float]:
    """Dreamed trajectories' share of the summed |advantage| held at most ``cap``: returns the
    advantages (the dreamed ones scaled by ``scale`` <= 1 where their share was over the cap), the
    share before, and the scale.  With real mass ``R`` and dreamed mass ``D`` the scale is
    ``cap * R / ((1 - cap) * D)``, so the dreamed share after is exactly ``cap``.  No real mass
    (``R = 0``), no dreamed mass or ``cap >= 1``: unchanged (scale 1)."""
    is_dream = torch.tensor(dreamed, dtype=torch.bool)
    mag = adv.abs()
    d = float(mag[is_dream].sum()) if len(dreamed) else 0.0
    r = float(mag[~is_dream].sum()) if len(dreamed) else 0.0
    share = d / (d + r) if d + r > 0 else 0.0
    if cap >= 1.0 or d == 0.0 or r == 0.0 or share <= cap:
        return adv, share, 1.0
    scale = cap * r / ((1.0 - cap) * d)
    out = adv.clone()
    out[is_dream] = adv[is_dream] * scale
    return out, share, scale


def task_success_reward(raw_reward: float) -> float:
    """The reward RL trains on: task success, 1.0 if MiniWoB's raw reward is > 0 else 0.0.

    The same for live and dreamed rollouts (a dream's raw reward is the world model's predicted
    reward: its reward head, trained on this very target, or the text's reward line without one).
    A wrong attempt (raw -1) and quitting with ``stop`` (raw 0) are both failures, so stopping
    early never beats trying; the raw reward stays on the record for reporting."""
    return 1.0 if float(raw_reward) > 0 else 0.0


def sequence_logprob(logp_tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of masked token log-probs per sequence: (N, T) -> (N,)."""
    assert logp_tokens.shape == mask.shape and logp_tokens.dim() == 2, (
        logp_tokens.shape,
        mask.shape,
    )
    return (logp_tokens * mask).sum(-1)


def gspo_loss(
    logp_new_tokens: torch.Tensor,
    logp_old_seq: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
) -> tuple[torch.Tensor, dict]:
    """GSPO (Zheng et al. 2025) clipped sequence-level surrogate.

    ``logp_new_tokens``: (N, T) log-probs of the T units of each sequence under
    the model being trained (with grad) -- for the policy (``models.policy.loss``) one
    unit per *decision*: ``log pi_T(a_t|s_t)`` over the step's candidate set, so T
    = steps of the trajectory; ``logp_old_seq``: (N,) their sum under the
    behaviour policy; ``mask``: (N, T); ``advantages``: (N,).

    ``s_i = exp((sum_t logp_new - logp_old_seq) / |y_i|)`` (length-normalised by
    the number of units |y_i|, i.e. the geometric mean of the per-decision
    ratios), and
    ``loss = -mean_i min(s_i A_i, clip(s_i, 1 - clip_low, 1 + clip_high) A_i)``.
    Defaults 0.2 / 0.28: with 1-6 decisions per trajectory ``s_i`` is close to a
    per-action PPO ratio, so PPO's range with DAPO's clip-higher
    (``docs/method.md``, "Policy losses").

    Stats: ``clip_frac`` (share of sequences whose clipped term is the active
    one), ``ratio_mean/min/max``, ``kl`` (k3 estimate per unit of
    KL(behaviour || new) from the length-normalised log-ratio), ``adv_abs``.
    """
    assert logp_new_tokens.dim() == 2 and logp_new_tokens.shape == mask.shape, (
        logp_new_tokens.shape,
        mask.shape,
    )
    n = logp_new_tokens.shape[0]
    assert logp_old_seq.shape == (n,) and advantages.shape == (n,), (
        logp_old_seq.shape,
        advantages.shape,
    )
    lengths = mask.sum(-1).clamp(min=1.0)
    log_ratio = (sequence_logprob(logp_new_tokens, mask) - logp_old_seq.detach()) / lengths
    ratio = torch.exp(log_ratio)
    adv = advantages.detach().to(ratio.dtype)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    objective = torch.minimum(unclipped, clipped)
    loss = -objective.mean()
    with torch.no_grad():
        lr = log_ratio.detach()
        stats = {
            "clip_frac": float((clipped < unclipped).float().mean()) if n else 0.0,
            "ratio_mean": float(ratio.mean()) if n else 1.0,
            "ratio_min": float(ratio.min()) if n else 1.0,
            "ratio_max": float(ratio.max()) if n else 1.0,
            "kl": float((torch.exp(-lr) - 1.0 + lr).mean()) if n else 0.0,
            "adv_abs": float(adv.abs().mean()) if n else 0.0,
            # per sequence, for per-source reporting by the caller
            "ratio_seq": [float(x) for x in ratio.detach()],
            "clipped_seq": [bool(x) for x in (clipped < unclipped)],
        }
    return loss, stats


def bc_loss(logp_tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Behaviour cloning: mean negative log-likelihood per masked token. (N, T) -> ()."""
    assert logp_tokens.shape == mask.shape and logp_tokens.dim() == 2, (
        logp_tokens.shape,
        mask.shape,
    )
    return -(logp_tokens * mask).sum() / mask.sum().clamp(min=1.0)


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] per position: (N, T, V), (N, T) -> (N, T).

    ``logits[:, t]`` must already be the prediction for ``labels[:, t]`` (shifted
    by the caller).  Padding labels may be any valid id (mask them afterwards).
    """
    assert logits.dim() == 3 and labels.shape == logits.shape[:2], (logits.shape, labels.shape)
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token likelihood (mean NLL over masked target tokens) for the world model.

    ``logits``: (N, T, V) already aligned with ``labels``: (N, T); ``mask``: (N, T).
    """
    assert labels.shape == mask.shape, (labels.shape, mask.shape)
    return bc_loss(token_logprobs(logits, labels), mask.float())


def info_nce(
    pooled: torch.Tensor, target_embeddings: torch.Tensor, temperature: float = 0.1
) -> tuple[torch.Tensor, dict]:
    """InfoNCE of predicted page embeddings against the real next pages in the batch.

    ``pooled``: (B, D) predicted embeddings (with grad), ``target_embeddings``:
    (B, D) frozen embeddings of the real next pages; row i's positive is target i,
    the other B-1 targets are its negatives.  Both are L2-normalised, logits are
    cosine / temperature, loss = mean cross-entropy.  Stats: ``acc`` (top-1).
    Callers should de-duplicate identical target pages (they are not negatives).
    """
    assert pooled.dim() == 2 and pooled.shape == target_embeddings.shape, (
        pooled.shape,
        target_embeddings.shape,
    )
    assert temperature > 0
    p = F.normalize(pooled.float(), dim=-1)
    t = F.normalize(target_embeddings.detach().float(), dim=-1)
    logits = p @ t.T / temperature
    labels = torch.arange(p.shape[0], device=p.device)
    loss = F.cross_entropy(logits, labels)
    acc = float((logits.argmax(-1) == labels).float().mean())
    return loss, {"acc": acc}


def class_balanced_weights(labels: torch.Tensor, n_classes: int = 2) -> torch.Tensor:
    """Per-row weights of a class-balanced mean: (N,) int labels -> (N,) float, summing to 1.

    Row i gets ``1 / (K * n_{y_i})`` with ``n_c`` the count of class c in ``labels`` and K the
    number of classes present, so every present class carries the same total weight 1/K
    (a batch of one class is a plain mean).  Computed once on a whole batch and sliced per
    micro-batch, the micro-batches' weighted sums add up to the whole batch's loss.
    """
    assert labels.dim() == 1, labels.shape
    counts = torch.bincount(labels.long(), minlength=n_classes).float()
    present = int((counts > 0).sum())
    if labels.numel() == 0:
        return torch.zeros(0, device=labels.device)
    return 1.0 / (present * counts[labels.long()])


def balanced_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict]:
    """Class-balanced cross-entropy: ``sum_i w_i CE(logits_i, y_i)`` with ``w = class_balanced_weights``.

    ``logits``: (N, C), ``labels``: (N,).  ``weights`` (N,): this slice of weights computed on a
    whole batch (``class_balanced_weights(all labels)[rows]``), so a micro-batch returns its share of
    the whole batch's loss; default: the weights of these rows alone (the loss is then the mean over
    present classes of each class's mean CE).  Stats: ``acc``, the same weighted sum of correct rows
    (with the default weights: balanced accuracy, the mean per-class recall).
    """
    assert logits.dim() == 2 and labels.shape == logits.shape[:1], (logits.shape, labels.shape)
    w = class_balanced_weights(labels, logits.shape[1]) if weights is None else weights
    assert w.shape == labels.shape, (w.shape, labels.shape)
    w = w.to(logits.device).float().detach()
    ce = F.cross_entropy(logits.float(), labels.long().to(logits.device), reduction="none")
    loss = (w * ce).sum()
    acc = float((w * (logits.detach().argmax(-1) == labels.to(logits.device)).float()).sum())
    return loss, {"acc": acc}


def source_stats(trajs: list, adv: torch.Tensor) -> dict[str, dict]:
    """Per source (``real``, ``dream``): trajectories, groups, groups with a nonzero advantage and the
    sum of |advantage| of the GSPO trajectories; ``ratio_sum`` and ``clipped`` are filled in by the loss."""
    out: dict[str, dict] = {}
    groups: dict[tuple, bool] = {}
    for tr, a in zip(trajs, adv.tolist(), strict=True):
        s = out.setdefault(
            tr.source,
            {
                "trajectories": 0,
                "groups": 0,
                "groups_nonzero": 0,
                "adv_abs_sum": 0.0,
                "ratio_sum": 0.0,
                "clipped": 0,
            },
        )
        s["trajectories"] += 1
        s["adv_abs_sum"] += abs(a)
        key = (tr.source, tr.group_id)
        groups[key] = groups.get(key, False) or a != 0.0
    for (src, _), nonzero in groups.items():
        out[src]["groups"] += 1
        out[src]["groups_nonzero"] += int(nonzero)
    return out
