"""The policy loss's report as the trainer's metrics (``models/metrics.py``)."""

from __future__ import annotations

from models import metrics as M


def export_source_stats(run: str, stats: dict) -> None:
    """What the policy loss learned from, per source (``models.policy.loss.source_stats``): running totals
    and the last batch's nonzero-advantage share; trajectories without a group are counted only."""
    groups = nonzero = 0
    for src, s in stats.get("by_source", {}).items():
        M.GSPO_TRAJ.labels(run, src).inc(s["trajectories"])
        M.GSPO_GROUPS.labels(run, src).inc(s["groups"])
        M.GSPO_GROUPS_NONZERO.labels(run, src).inc(s["groups_nonzero"])
        M.GSPO_ADV_ABS.labels(run, src).inc(s["adv_abs_sum"])
        M.GSPO_CLIPPED.labels(run, src).inc(s["clipped"])
        M.GSPO_RATIO_SUM.labels(run, src).inc(s["ratio_sum"])
        if s["groups"]:
            M.TRAINER_SOURCE_NONZERO.labels(run, src).set(s["groups_nonzero"] / s["groups"])
        groups += s["groups"]
        nonzero += s["groups_nonzero"]
    if groups:
        M.TRAINER_NONZERO_ADV.labels(run).set(nonzero / groups)
    for src, n in stats.get("ungrouped", {}).items():
        M.TRAINER_UNGROUPED.labels(run, src).inc(n)


def export_policy_stats(run: str, stats: dict) -> None:
    """Map ``models.policy.loss.policy_batch_loss`` stats onto the declared trainer metrics."""
    for k, v in stats.items():
        if not isinstance(v, int | float) or isinstance(v, bool):
            continue
        if k.startswith("ratio_"):
            M.TRAINER_RATIO.labels(run, k.removeprefix("ratio_")).set(v)
        elif k == "clip_frac":
            M.TRAINER_CLIP_FRAC.labels(run).set(v)
        elif k == "kl":
            M.TRAINER_KL.labels(run).set(v)
        elif k in ("dream_adv_share", "dream_adv_share_raw", "dream_adv_scale"):
            M.TRAINER_DREAM_ADV.labels(run, k.removeprefix("dream_adv_")).set(v)
        elif k == "nonzero_adv_share":
            M.TRAINER_NONZERO_ADV.labels(run).set(v)
        elif k.endswith("_loss"):
            M.TRAINER_LOSS.labels(run, "policy", k.removesuffix("_loss")).set(v)
