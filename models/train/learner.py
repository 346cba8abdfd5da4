"""Batches -> one optimiser step of the policy or the world model (no Kafka or S3 here).

The losses live in their own modules: ``models.policy.loss.policy_batch_loss`` (GSPO on grouped
on-policy/dream trajectories + behaviour cloning on expert ones, both over the policy's own
distribution ``pi_T(a|s)`` on the rebuilt candidate sets) and
``models.world_model.loss.world_model_batch_loss`` (change-text likelihood + InfoNCE + the reward/done
heads); the pure loss functions they use are in ``models.losses``.  ``policy_update`` and
``world_model_update`` run one of them and the DeepSpeed engine's step (``models.train.engine``), for
the trainer and ``dynaweb bench train``: where the engine allows it (ZeRO stage 0) the loss runs
in micro-batches, each calling ``engine.backward``, so only one micro-batch's graph is alive.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from core.config import ModelConfig, TrainerConfig
from models.policy.loss import policy_batch_loss
from models.train.engine import chunked_backward_ok, engine_step
from models.world_model.loss import world_model_batch_loss


def policy_update(
    engine: Any,
    tokenizer: Any,
    trajectories: list,
    cfg: TrainerConfig,
    model_cfg: ModelConfig,
    prepared: dict | None = None,
) -> tuple:
    """``policy_batch_loss`` + the engine's step; in micro-batches of ``cfg.chunk_rows`` step rows
    (each one forward + ``engine.backward``) where the engine allows it; ``prepared``: the
    trajectories' decisions built ahead (``models.policy.loss.prepare_decisions``).  Returns
    ``(loss, stats, grad_norm, time the loss was done)``."""
    chunked = cfg.chunk_rows > 0 and chunked_backward_ok(engine, cfg.zero_stage)
    loss, stats = policy_batch_loss(
        engine.module,
        tokenizer,
        trajectories,
        cfg,
        model_cfg,
        backward=chunked,
        chunk_rows=max(1, cfg.chunk_rows),
        backward_fn=engine.backward if chunked else None,
        prepared=prepared,
    )
    t1 = time.time()
    return loss, stats, engine_step(engine, None if chunked else loss), t1


def world_model_update(
    engine: Any,
    tokenizer: Any,
    transitions: list,
    cfg: TrainerConfig,
    embedder: Any,
    max_change_tokens: int,
) -> tuple:
    """``world_model_batch_loss`` + the engine's step, chunked by ``cfg.wm_chunk_rows`` where the
    engine allows it.  Returns ``(loss, stats, grad_norm)``."""
    chunked = cfg.wm_chunk_rows > 0 and chunked_backward_ok(engine, cfg.zero_stage)
    loss, stats = world_model_batch_loss(
        engine.module,
        tokenizer,
        transitions,
        cfg,
        embedder,
        max_change_tokens,
        backward=chunked,
        chunk_rows=max(1, cfg.wm_chunk_rows),
        backward_fn=engine.backward if chunked else None,
    )
    return loss, stats, engine_step(engine, None if chunked else loss)


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
