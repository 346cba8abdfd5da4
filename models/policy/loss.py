"""Trajectories -> the policy's loss (model forward passes only; no Kafka, S3 or DeepSpeed here).

``policy_batch_loss`` trains the policy's own distribution, ``pi_T(a|s)`` = softmax over the
page's candidate actions C(s) of score/T (``models.policy.log_pi``).  Every trajectory step is
rebuilt as the runner saw it (``models.policy.decisions``), every candidate scored with grad
(``LogPi.batched``), and the batch splits by use:

* on-policy / dream trajectories (every step has ``behaviour_logprob``) with a group id: GSPO
  (``models.policy.gspo``).  A trajectory without a group id is counted (``ungrouped``, per
  source) and used for nothing else;
* expert trajectories (``source == "expert"``): behaviour cloning of the same distribution
  (``models.policy.bc``), weighted by ``TrainerConfig.bc_weight``;
* anything else (real steps without log-probs): skipped and counted.

A rebuilt set whose hash differs from the transition's ``candidates_hash`` is counted
(``cand_mismatch``) and trained with the rebuilt set (a GSPO action missing from it is added:
``cand_missing``); T is the temperature recorded on the transition (``info["temperature"]``) or
``TrainerConfig.policy_temperature``.  GSPO's loss is a mean of per-trajectory terms and BC a mean
over expert steps, so the batch can be processed in trajectory chunks with ``backward=True``
(gradient accumulation; pass the engine's backward as ``backward_fn``) without changing the
gradient.  Per micro-batch the steps are: plan the rows (``_plan_chunk``), score them
(``_decision_logprobs``), then the GSPO and BC parts; ``_policy_metrics`` assembles the report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import torch

from core.config import ModelConfig, TrainerConfig
from models.lm.tokenizer import pad_id
from models.lm.types import Tokenizer
from models.losses import cap_dream_share, source_stats
from models.policy.bc import bc_part, outside_logprob
from models.policy.decisions import Decision, Rows, StepPlan, plan_step, trajectory_decisions
from models.policy.gspo import advantages, gspo_part
from models.policy.log_pi import LogPi, candidate_logprobs
from models.policy.model import Policy


@dataclass
class _Split:
    """The batch by use (see the module doc): GSPO and expert trajectories with their steps, the
    rest counted."""

    gspo: list[tuple[Any, list]] = field(default_factory=list)
    bc: list[tuple[Any, list]] = field(default_factory=list)
    skipped: int = 0
    ungrouped: Counter = field(default_factory=Counter)
    mine: set[int] | None = None  # the ``id`` of the trajectories scored (default all)


def _split_batch(trajectories: list, select: Collection[int] | None = None) -> _Split:
    out = _Split(mine=None if select is None else {id(trajectories[i]) for i in select})
    for tr in trajectories:
        steps = tr.steps()
        if tr.source == "expert":
            out.bc.append((tr, steps))
        elif not (steps and all(s.behaviour_logprob is not None for s in steps)):
            out.skipped += 1
        elif not tr.group_id:  # counted, never trained on (a group of one has no advantage)
            out.ungrouped[tr.source] += 1
        else:
            out.gspo.append((tr, steps))
    return out


def _chunk_items(split: _Split, backward: bool, chunk_rows: int) -> list[list[tuple]]:
    """Work items ``(kind, index within its kind, trajectory, steps)``, GSPO ones first: with
    ``backward`` in micro-batches of at least ``chunk_rows`` steps (the last one smaller), else one."""
    items = [("gspo", i, tr, st) for i, (tr, st) in enumerate(split.gspo)] + [
        ("bc", i, tr, st) for i, (tr, st) in enumerate(split.bc)
    ]
    items = [it for it in items if split.mine is None or id(it[2]) in split.mine]
    chunks, cur, n_rows = [], [], 0
    for it in items:
        cur.append(it)
        n_rows += len(it[3])
        if backward and n_rows >= chunk_rows:
            chunks.append(cur)
            cur, n_rows = [], 0
    if cur:
        chunks.append(cur)
    if not backward and chunks:
        chunks = [[it for c in chunks for it in c]]
    return chunks


def _new_agg() -> dict:
    return {
        "clip_frac": 0.0,
        "kl": 0.0,
        "ratio_mean": 0.0,
        "ratio_min": float("inf"),
        "ratio_max": -float("inf"),
    }


def _new_counts() -> dict:
    return {
        "cand_mismatch": 0,
        "cand_missing": 0,
        "cand_unhashed": 0,
        "bc_not_candidate": 0,
        "cand_rows": 0,
        "cand_total": 0,
        "decisions": 0,
    }


@dataclass
class _Totals:
    """What the micro-batches add up: per-GSPO-trajectory log ratios, per-source stats
    (``source_stats``), the GSPO aggregates (each micro-batch weighted by its share of the GSPO
    trajectories), candidate counters and the two loss terms' values."""

    log_ratios: list[float]
    by_source: dict[str, dict]
    agg: dict = field(default_factory=_new_agg)
    cnt: dict = field(default_factory=_new_counts)
    g_loss: float = 0.0
    b_loss: float = 0.0


def _plan_chunk(
    tokenizer: Tokenizer,
    chunk: list[tuple],
    max_pos: int,
    t_default: float,
    cnt: dict,
    prepared: dict[int, list[Decision]] | None = None,
) -> tuple[Rows, list[list[StepPlan]]]:
    """The micro-batch's distinct rows to score and, per item, the ``plan_step`` of each step
    (decisions from ``prepared`` where the trajectory is there, else built now)."""
    rows = Rows()
    plan = []
    for kind, _, tr, st in chunk:
        ds = prepared.get(id(tr)) if prepared else None
        if ds is None:
            ds = trajectory_decisions(tokenizer, st, max_pos, t_default)
        plan.append([plan_step(rows, d, kind == "gspo", cnt) for d in ds])
    cnt["cand_rows"] += len(rows)
    return rows, plan


def _decision_logprobs(log_pi: LogPi, rows: Rows, plan: list[list[StepPlan]]) -> list[torch.Tensor]:
    """Per item, ``log pi_T(a|s)`` of each decision (with grad): ``candidate_logprobs`` of the
    candidates' scores, or, for an expert action outside C(s), ``bc.outside_logprob``."""
    scores, tokens = log_pi.batched(rows.prompts, rows.conts)
    per_traj = []
    for steps_plan in plan:
        vals = []
        for ids, k, fb, temp in steps_plan:
            if k >= 0:
                s = torch.stack([scores[b][j] for b, j in ids])
                vals.append(candidate_logprobs(s, temp)[k])
            else:
                assert fb is not None
                vals.append(outside_logprob(tokens[fb[0]][fb[1]]))
        per_traj.append(torch.stack(vals))
    return per_traj


def _gspo_term(
    chunk: list[tuple],
    per_traj: list[torch.Tensor],
    adv: torch.Tensor,
    n_gspo: int,
    cfg: TrainerConfig,
    tot: _Totals,
) -> torch.Tensor | None:
    """The micro-batch's share of the GSPO loss (``gspo.gspo_part``), None without GSPO items;
    records their ratios per source, their log ratios and the weighted aggregates."""
    gi = [k for k, it in enumerate(chunk) if it[0] == "gspo"]
    if not gi:
        return None
    part = gspo_part(
        [per_traj[k] for k in gi],
        [chunk[k][3] for k in gi],
        adv[[chunk[k][1] for k in gi]],
        n_gspo,
        cfg.clip_low,
        cfg.clip_high,
    )
    st = part.stats
    for k, r, c in zip(gi, st["ratio_seq"], st["clipped_seq"], strict=True):
        src = tot.by_source[chunk[k][2].source]
        src["ratio_sum"] += r
        src["clipped"] += int(c)
    for j, k in enumerate(gi):
        tot.log_ratios[chunk[k][1]] = part.log_ratios[j]
    w = part.weight
    tot.g_loss += w * part.value
    for key in ("clip_frac", "kl", "ratio_mean"):
        tot.agg[key] += w * st[key]
    tot.agg["ratio_min"] = min(tot.agg["ratio_min"], st["ratio_min"])
    tot.agg["ratio_max"] = max(tot.agg["ratio_max"], st["ratio_max"])
    return part.loss


def _bc_term(
    chunk: list[tuple],
    per_traj: list[torch.Tensor],
    bc_steps: int,
    bc_weight: float,
    tot: _Totals,
) -> torch.Tensor | None:
    """``bc_weight`` x the micro-batch's share of the BC loss (``bc.bc_part``), None without expert
    items."""
    bi = [k for k, it in enumerate(chunk) if it[0] == "bc"]
    if not bi:
        return None
    loss_b, w = bc_part([per_traj[k] for k in bi], bc_steps)
    tot.b_loss += w * float(loss_b.detach())
    return bc_weight * w * loss_b


def _policy_metrics(
    total: torch.Tensor, split: _Split, rewards: torch.Tensor, adv: torch.Tensor, tot: _Totals
) -> dict:
    agg = dict(tot.agg)
    if not split.gspo:
        agg.update(ratio_min=1.0, ratio_max=1.0, ratio_mean=1.0)
    cnt = dict(tot.cnt)
    n_dec = cnt["decisions"]
    return {
        "loss": float(total.detach()),
        "gspo_loss": tot.g_loss,
        "bc_loss": tot.b_loss,
        "n_gspo": len(split.gspo),
        "n_bc": len(split.bc),
        "n_skipped": split.skipped,
        "adv_abs": float(adv.abs().mean()) if len(adv) else 0.0,
        "reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
        **agg,
        "cand_per_step": cnt.pop("cand_total") / max(1, n_dec),
        **cnt,
        "log_ratios": tot.log_ratios,
        "by_source": tot.by_source,
        "ungrouped": dict(split.ungrouped),
    }


def policy_batch_loss(
    model: Policy,
    tokenizer: Tokenizer,
    trajectories: list,
    cfg: TrainerConfig,
    model_cfg: ModelConfig,
    backward: bool = False,
    chunk_rows: int = 32,
    backward_fn: Callable | None = None,
    prepared: dict[int, list[Decision]] | None = None,
    select: Collection[int] | None = None,
) -> tuple[torch.Tensor, dict]:
    """GSPO on trajectories with behaviour log-probs + bc_weight * BC on expert ones (see module doc).

    ``select``: positions to score (a trainer rank's share), with the whole batch's normalisers.
    Both train ``log pi_T(a|s)`` over the rebuilt candidate sets.  Extra metrics:
    ``log_ratios`` (per GSPO trajectory, in batch order: ``(sum log pi - sum
    behaviour) / n_decisions``), ``cand_mismatch`` (GSPO steps whose rebuilt
    candidate hash differs from the recorded one; trained with the rebuilt set),
    ``cand_missing`` (GSPO steps whose action is not in the rebuilt set: added to
    it), ``cand_unhashed`` (GSPO steps without a recorded hash), ``bc_not_candidate``
    (expert steps whose action is not a candidate: token NLL instead),
    ``cand_per_step``, ``cand_rows`` (distinct candidate rows scored) and ``decisions`` (steps scored).
    """
    max_pos = int(model_cfg.max_positions)
    t_default = float(cfg.policy_temperature or 1.0)
    split = _split_batch(trajectories, select)
    gspo = split.gspo
    rewards, adv = advantages([tr for tr, _ in gspo])
    # dreams weighted no more than reality: the dreamed share of the summed |advantage| capped
    adv, share_raw, scale = cap_dream_share(
        adv, [tr.source == "dream" for tr, _ in gspo], cfg.dream_adv_cap
    )
    tot = _Totals([0.0] * len(gspo), source_stats([tr for tr, _ in gspo], adv))
    share = share_raw if scale == 1.0 else cfg.dream_adv_cap
    tot.agg.update(dream_adv_share=share, dream_adv_share_raw=share_raw, dream_adv_scale=scale)
    bc_steps = sum(len(st) for _, st in split.bc)
    total = torch.zeros(())
    dev = next(model.parameters()).device
    log_pi = LogPi(model, pad_id(tokenizer), max_pos)
    for chunk in _chunk_items(split, backward, chunk_rows):
        rows, plan = _plan_chunk(tokenizer, chunk, max_pos, t_default, tot.cnt, prepared)
        per_traj = _decision_logprobs(log_pi, rows, plan)
        part = torch.zeros((), device=dev)
        g_term = _gspo_term(chunk, per_traj, adv, len(gspo), cfg, tot)
        if g_term is not None:
            part = part + g_term
        b_term = _bc_term(chunk, per_traj, bc_steps, cfg.bc_weight, tot)
        if b_term is not None:
            part = part + b_term
        if backward:
            (backward_fn or (lambda x: x.backward()))(part)
            total = total + float(part.detach())
        else:
            total = total + part
    return total, _policy_metrics(total, split, rewards, adv, tot)
