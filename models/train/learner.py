"""Batches -> one optimiser step of the policy or the world model (no Kafka or S3 here).

The losses live in their own modules: ``models.policy.loss.policy_batch_loss`` (GSPO on grouped
on-policy/dream trajectories + behaviour cloning on expert ones, both over the policy's own
distribution ``pi_T(a|s)`` on the rebuilt candidate sets) and
``models.world_model.loss.world_model_batch_loss`` (change-text likelihood + InfoNCE + the reward/done
heads); the pure loss functions they use are in ``models.losses``.  ``policy_update`` and
``world_model_update`` run one of them and the DeepSpeed engine's step (``models.train.engine``), for
the trainer and ``dynaweb bench train``: where the engine allows it (ZeRO stage 0) the loss runs
in micro-batches, each calling ``engine.backward``, so only one micro-batch's graph is alive.

With a trainer group of several ranks (``group``: ``models.train.ranks.RankGroup``) every rank
calls the update with the same batch; each trains its share (``models.train.shard.rank_indices``:
the losses' ``select``), the gradients are summed over the ranks before the step (or averaged by
the engine under ZeRO 1-3, each share's loss then scaled by the world size: ``engine.loss_scale``),
and the returned loss and report are the whole batch's (``merge_policy_stats`` /
``merge_wm_stats`` of every rank's).  One such step equals the one-rank step on the whole batch
up to float rounding (``dynaweb bench train --ranks 2``: ``rank_update_max_abs_diff``).
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch

from core.config import ModelConfig, TrainerConfig
from models.policy.loss import policy_batch_loss
from models.train.engine import chunked_backward_ok, engine_step, loss_scale, own_reduce
from models.train.ranks import RankGroup
from models.train.shard import merge_policy_stats, merge_wm_stats, rank_indices
from models.world_model.loss import world_model_batch_loss


def _share(n: int, group: RankGroup | None) -> list[int] | None:
    return None if group is None else rank_indices(n, group.rank, group.world)


def _backward_fn(engine: Any, scale: float) -> Callable:
    return engine.backward if scale == 1.0 else (lambda x: engine.backward(x * scale))


def _to_backward(
    engine: Any, loss: torch.Tensor, scale: float, cfg: TrainerConfig, group: RankGroup | None
) -> torch.Tensor | None:
    """The (unchunked) loss to back-propagate, scaled.  A rank whose share is empty (a batch with
    fewer items than ranks) has nothing to back-propagate when the learner sums the gradients.
    Where the engine reduces them (ZeRO 1-3), every rank must give it a gradient for the same
    parameters (its buckets must match the others'), so a zero touching every trainable parameter
    is added: a parameter no item of the share reached gets a zero gradient."""
    if group is None or own_reduce(cfg.zero_stage):
        if not loss.requires_grad:
            return None if group is not None else loss
        return loss * scale if scale != 1.0 else loss
    params = [p for p in engine.module.parameters() if p.requires_grad]
    zero = sum((p.sum() * 0.0 for p in params), torch.zeros(()))
    return zero + (loss * scale if loss.requires_grad else 0.0)


def _step(
    engine: Any, loss: torch.Tensor | None, cfg: TrainerConfig, group: RankGroup | None
) -> float:
    if group is None:
        return engine_step(engine, loss)
    if own_reduce(cfg.zero_stage):
        return group.collective(lambda: engine_step(engine, loss, group.reduce_grads))
    return group.collective(lambda: engine_step(engine, loss, coalesce=True))


def policy_update(
    engine: Any,
    tokenizer: Any,
    trajectories: list,
    cfg: TrainerConfig,
    model_cfg: ModelConfig,
    prepared: dict | None = None,
    group: RankGroup | None = None,
) -> tuple:
    """``policy_batch_loss`` + the engine's step; in micro-batches of ``cfg.chunk_rows`` step rows
    (each one forward + ``engine.backward``) where the engine allows it; ``prepared``: the
    trajectories' decisions built ahead (``models.policy.loss.prepare_decisions``); ``group``: this
    rank's trainer group (see the module doc).  Returns ``(loss, stats, grad_norm, time the loss
    was done)``."""
    chunked = cfg.chunk_rows > 0 and chunked_backward_ok(engine, cfg.zero_stage)
    scale = loss_scale(cfg.zero_stage)
    loss, stats = policy_batch_loss(
        engine.module,
        tokenizer,
        trajectories,
        cfg,
        model_cfg,
        backward=chunked,
        chunk_rows=max(1, cfg.chunk_rows),
        backward_fn=_backward_fn(engine, scale) if chunked else None,
        prepared=prepared,
        select=_share(len(trajectories), group),
    )
    t1 = time.time()
    gn = _step(
        engine, None if chunked else _to_backward(engine, loss, scale, cfg, group), cfg, group
    )
    if group is not None:
        stats = merge_policy_stats(group.gather(stats))
        loss = torch.tensor(stats["loss"])
    return loss, stats, gn, t1


def world_model_update(
    engine: Any,
    tokenizer: Any,
    transitions: list,
    cfg: TrainerConfig,
    embedder: Any,
    max_change_tokens: int,
    group: RankGroup | None = None,
) -> tuple:
    """``world_model_batch_loss`` + the engine's step, chunked by ``cfg.wm_chunk_rows`` where the
    engine allows it; ``group`` as for ``policy_update``.  With ``cfg.wm_head_weight`` above 0 the
    step trains the heads, and the model is marked so (``WorldModel.mark_heads_trained``: the
    runner's ``predict`` then reads reward and done from them).  Returns ``(loss, stats,
    grad_norm)``."""
    chunked = cfg.wm_chunk_rows > 0 and chunked_backward_ok(engine, cfg.zero_stage)
    scale = loss_scale(cfg.zero_stage)
    loss, stats = world_model_batch_loss(
        engine.module,
        tokenizer,
        transitions,
        cfg,
        embedder,
        max_change_tokens,
        backward=chunked,
        chunk_rows=max(1, cfg.wm_chunk_rows),
        backward_fn=_backward_fn(engine, scale) if chunked else None,
        select=_share(len(transitions), group),
    )
    gn = _step(
        engine, None if chunked else _to_backward(engine, loss, scale, cfg, group), cfg, group
    )
    if cfg.wm_head_weight > 0:  # the step trained the heads: predict uses them from now on
        engine.module.mark_heads_trained(change_head=True)
    if group is not None:
        stats = merge_wm_stats(group.gather(stats))
        loss = torch.tensor(stats["loss"])
    return loss, stats, gn


def world_model_batch(
    fresh: deque,
    buffer: Sequence,
    terminal: Sequence,
    n: int,
    terminal_share: float = 0.0,
    rng: Any = random,
) -> list:
    """The trainer's world-model batch of ``n``: the newest transitions first (up to half, taken
    off ``fresh``), ``round(n * terminal_share)`` drawn from ``terminal`` (the steps that end an
    episode, where the reward heads learn success from failure: a few percent of the data;
    ``trainer.wm_terminal_share``, as ``wm_study.terminal_share`` offline), the rest drawn from
    ``buffer``.  Fewer when the buffers hold fewer."""
    got = [fresh.popleft() for _ in range(min(len(fresh), n // 2 or 1))]
    k = min(len(terminal), round(n * terminal_share), n - len(got)) if terminal_share > 0 else 0
    got += rng.sample(list(terminal), k) if k else []
    return got + rng.sample(list(buffer), min(len(buffer), n - len(got)))
