"""How a data-parallel trainer splits a batch among its ranks, and puts the ranks' reports together.

Every rank of a trainer group gets the same batch (rank 0 reads it and broadcasts it:
``models.train.ranks``); rank ``r`` of ``N`` trains the items at positions ``r, r + N, r + 2N, ...``
(``rank_indices``): policy trajectories of a training batch, world-model transitions of a
world-model batch.  Every item goes to exactly one rank, the ranks' shares together are the batch,
and the shares differ in size by at most one item.  The losses take the share as ``select``
(``models.policy.loss.policy_batch_loss``, ``models.world_model.loss.world_model_batch_loss``) and
keep the whole batch's advantages and normalisers, so a share's loss is its part of the whole
batch's loss and the ranks' gradients summed are the gradient of the whole batch.

``merge_policy_stats`` / ``merge_wm_stats`` turn the ranks' loss reports (gathered from every rank)
into the report one rank would have made on the whole batch: the share's parts are added, the
ratio extremes taken over the ranks, and what every rank computed on the whole batch (counts,
advantages, per-source groups) taken once.
"""

from __future__ import annotations

from typing import Any


def rank_indices(n: int, rank: int, world: int) -> list[int]:
    """The positions of a batch of ``n`` items that rank ``rank`` of ``world`` trains."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} of {world}")
    return list(range(rank, max(0, int(n)), world))


def rank_share(items: list, rank: int, world: int) -> list:
    """The items of ``items`` rank ``rank`` of ``world`` trains (``rank_indices``)."""
    return [items[i] for i in rank_indices(len(items), rank, world)]


# the policy report (models.policy.loss._policy_metrics): the share's parts, added over the ranks
POLICY_SUM = (
    "loss",
    "gspo_loss",
    "bc_loss",
    "clip_frac",  # GSPO aggregates weighted by the share of GSPO trajectories
    "kl",
    "ratio_mean",
    "cand_mismatch",
    "cand_missing",
    "cand_unhashed",
    "bc_not_candidate",
    "cand_rows",
    "decisions",
)
SOURCE_SUM = ("ratio_sum", "clipped")  # per source; the other per-source counts are whole-batch


def merge_policy_stats(parts: list[dict]) -> dict:
    """The ranks' ``policy_batch_loss`` reports (rank order) -> the whole batch's."""
    if len(parts) == 1:
        return parts[0]
    out: dict[str, Any] = dict(parts[0])  # whole-batch figures: the same on every rank
    for k in POLICY_SUM:
        if k in out:
            out[k] = sum(p[k] for p in parts)
    if out.get("n_gspo", 0):
        out["ratio_min"] = min(p["ratio_min"] for p in parts)
        out["ratio_max"] = max(p["ratio_max"] for p in parts)
    else:  # no GSPO trajectory: every rank reported the neutral 1.0
        out["ratio_mean"] = parts[0].get("ratio_mean", 1.0)
    if "cand_per_step" in out:
        dec = sum(p.get("decisions", 0) for p in parts)
        out["cand_per_step"] = sum(p["cand_per_step"] * p.get("decisions", 0) for p in parts) / max(
            1, dec
        )
    if "log_ratios" in out:  # a trajectory's entry is set by the rank that scored it, else 0.0
        out["log_ratios"] = [sum(v) for v in zip(*(p["log_ratios"] for p in parts), strict=True)]
    if "by_source" in out:
        by = {src: dict(s) for src, s in parts[0]["by_source"].items()}
        for src, s in by.items():
            for k in SOURCE_SUM:
                s[k] = sum(p["by_source"][src][k] for p in parts)
        out["by_source"] = by
    return out


def merge_wm_stats(parts: list[dict]) -> dict:
    """The ranks' ``world_model_batch_loss`` reports (rank order) -> the whole batch's: ``lm_loss``,
    ``loss``, ``chunks`` and the heads' ``*_head_loss`` / ``*_head_acc`` added, the rest (InfoNCE,
    batch size, token and page shares, positive shares) the whole batch's already."""
    if len(parts) == 1:
        return parts[0]
    out: dict[str, Any] = dict(parts[0])
    for k in out:
        if k in ("lm_loss", "loss", "chunks") or k.endswith(("_head_loss", "_head_acc")):
            out[k] = sum(p.get(k, 0) for p in parts)
    return out
