"""The pure learner: batches in, optimiser steps of the policy or the world model out (no Kafka,
no S3 here; the trainer's I/O loop, ``models.train.trainer``, feeds it).

The losses live in their own modules: ``models.policy.loss.policy_batch_loss`` (GSPO on grouped
on-policy/dream trajectories + behaviour cloning on expert ones, both over the policy's own
distribution ``pi_T(a|s)`` on the rebuilt candidate sets) and
``models.world_model.loss.world_model_batch_loss`` (change-text likelihood + InfoNCE + the reward/done
heads); the pure loss functions they use are in ``models.losses``.  ``policy_update`` and
``world_model_update`` run one of them and the DeepSpeed engine's step (``models.train.engine``;
the step both share: ``_update``), for the trainer and ``dynaweb bench train``: where the engine
allows it (ZeRO stage 0) the loss runs in micro-batches, each calling ``engine.backward``, so only
one micro-batch's graph is alive.  ``Learner`` is one trainer rank's pair of engines with those
updates, their counts and this rank's metrics.

With a trainer group of several ranks (``group``: ``models.train.data_parallel.RankGroup``) every rank
calls the update with the same batch; each trains its share (``models.train.data_parallel.rank_indices``:
the losses' ``select``), the gradients are summed over the ranks before the step (or averaged by
the engine under ZeRO 1-3, each share's loss then scaled by the world size: ``engine.loss_scale``),
and the returned loss and report are the whole batch's (``merge_policy_stats`` /
``merge_wm_stats`` of every rank's).  One such step equals the one-rank step on the whole batch
up to float rounding (``dynaweb bench train --ranks 2``: ``rank_update_max_abs_diff``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from core.config import ModelConfig, TrainerConfig
from models import metrics as M
from models.checkpoints.writer import save_engine_state
from models.lm.embedder import PageEmbedder
from models.lm.types import Tokenizer
from models.policy.loss import policy_batch_loss
from models.policy.model import Policy
from models.train.data_parallel import (
    RankGroup,
    merge_policy_stats,
    merge_wm_stats,
    rank_indices,
    rank_share,
)
from models.train.engine import (
    Engine,
    chunked_backward_ok,
    engine_step,
    loss_scale,
    own_reduce,
    trainer_engine,
)
from models.world_model.loss import world_model_batch_loss
from models.world_model.model import WorldModel

T = TypeVar("T")


def _share(n: int, group: RankGroup | None) -> list[int] | None:
    return None if group is None else rank_indices(n, group.rank, group.world)


def _backward_fn(engine: Engine, scale: float) -> Callable:
    return engine.backward if scale == 1.0 else (lambda x: engine.backward(x * scale))


def _to_backward(
    engine: Engine, loss: torch.Tensor, scale: float, cfg: TrainerConfig, group: RankGroup | None
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
    engine: Engine, loss: torch.Tensor | None, cfg: TrainerConfig, group: RankGroup | None
) -> float:
    if group is None:
        return engine_step(engine, loss)
    if own_reduce(cfg.zero_stage):
        return group.collective(lambda: engine_step(engine, loss, group.reduce_grads))
    return group.collective(lambda: engine_step(engine, loss, coalesce=True))


def _update(
    engine: Engine,
    batch_loss: Callable[..., tuple],
    n: int,
    chunk_rows: int,
    merge: Callable[[list[dict]], dict],
    cfg: TrainerConfig,
    group: RankGroup | None,
) -> tuple:
    """The step both updates share: ``batch_loss`` (a batch's loss over ``n`` items, called with
    the micro-batching and the rank's share) + the engine's step; in micro-batches of
    ``chunk_rows`` rows (each one forward + ``engine.backward``) where the engine allows it; with
    a ``group``, the whole batch's loss and report (``merge`` of every rank's).  Returns
    ``(loss, stats, grad_norm, time the loss was done)``."""
    chunked = chunk_rows > 0 and chunked_backward_ok(engine, cfg.zero_stage)
    scale = loss_scale(cfg.zero_stage)
    loss, stats = batch_loss(
        backward=chunked,
        chunk_rows=max(1, chunk_rows),
        backward_fn=_backward_fn(engine, scale) if chunked else None,
        select=_share(n, group),
    )
    t1 = time.time()
    gn = _step(
        engine, None if chunked else _to_backward(engine, loss, scale, cfg, group), cfg, group
    )
    if group is not None:
        stats = merge(group.gather(stats))
        loss = torch.tensor(stats["loss"])
    return loss, stats, gn, t1


def policy_update(
    engine: Engine,
    tokenizer: Tokenizer,
    trajectories: list,
    cfg: TrainerConfig,
    model_cfg: ModelConfig,
    prepared: dict | None = None,
    group: RankGroup | None = None,
) -> tuple:
    """``policy_batch_loss`` + the engine's step (``_update``), chunked by ``cfg.chunk_rows``;
    ``prepared``: the trajectories' decisions built ahead
    (``models.policy.decisions.prepare_decisions``); ``group``: this rank's trainer group (see the
    module doc).  Returns ``(loss, stats, grad_norm, time the loss was done)``."""

    def batch_loss(**kw: Any) -> tuple:
        return policy_batch_loss(
            engine.module, tokenizer, trajectories, cfg, model_cfg, prepared=prepared, **kw
        )

    return _update(
        engine, batch_loss, len(trajectories), cfg.chunk_rows, merge_policy_stats, cfg, group
    )


def world_model_update(
    engine: Engine,
    tokenizer: Tokenizer,
    transitions: list,
    cfg: TrainerConfig,
    embedder: PageEmbedder | None,
    max_change_tokens: int,
    group: RankGroup | None = None,
) -> tuple:
    """``world_model_batch_loss`` + the engine's step (``_update``), chunked by
    ``cfg.wm_chunk_rows``; ``group`` as for ``policy_update``.  With ``cfg.wm_head_weight`` above
    0 the step trains the heads, and the model is marked so (``WorldModel.mark_heads_trained``:
    the runner's ``predict`` then reads reward and done from them).  Returns ``(loss, stats,
    grad_norm)``."""

    def batch_loss(**kw: Any) -> tuple:
        return world_model_batch_loss(
            engine.module, tokenizer, transitions, cfg, embedder, max_change_tokens, **kw
        )

    loss, stats, gn, _ = _update(
        engine, batch_loss, len(transitions), cfg.wm_chunk_rows, merge_wm_stats, cfg, group
    )
    if cfg.wm_head_weight > 0:  # the step trained the heads: predict uses them from now on
        engine.module.mark_heads_trained(change_head=True)
    return loss, stats, gn


class Learner:
    """One trainer rank's learner: its two engines (``start``), their updates on the batches it
    is given (each rank trains its share; the loss and report returned are the whole batch's),
    the steps counted, its engine states saved for a checkpoint, and the metrics of its own work
    (labelled with its ``rank``).  It reads no topic and writes nothing to S3: the trainer's loop
    (rank 0) or ``models.train.data_parallel.follow`` (the other ranks) hands it its batches."""

    def __init__(
        self,
        trainer_cfg: TrainerConfig,
        model_cfg: ModelConfig,
        max_change_tokens: int,
        run: str,
        group: RankGroup | None = None,
        embedder: PageEmbedder | None = None,
    ):
        self.tc, self.model_cfg = trainer_cfg, model_cfg
        self.max_change_tokens = int(max_change_tokens)  # dream.max_change_tokens
        self.run = run
        self.group = group  # several ranks: this rank's place (None: the only rank)
        self.rank = str(group.rank if group is not None else 0)  # the per-rank metrics' label
        self.embedder = embedder  # the world model's InfoNCE text encoder (None: no InfoNCE)
        self.policy_steps = 0
        self.wm_steps = 0
        self.policy_model: Policy | None = None  # set by start
        self.wm_model: WorldModel | None = None
        self.tokenizer: Tokenizer | None = None
        self.wm_tokenizer: Tokenizer | None = None
        self.p_engine: Engine | None = None  # the engines around the two models
        self.w_engine: Engine | None = None

    def start(
        self, policy: tuple[Policy, Tokenizer], world_model: tuple[WorldModel, Tokenizer]
    ) -> None:
        """Both engines, for ``policy`` and ``world_model`` (each ``(model, tokenizer)``): the lr
        schedule is restored by ``load_checkpoint``; with several ranks the engine broadcasts rank
        0's weights at its start (a collective, as are the checkpoint saves)."""
        (self.policy_model, self.tokenizer), (self.wm_model, self.wm_tokenizer) = (
            policy,
            world_model,
        )
        tc, pm, wm = self.tc, self.policy_model, self.wm_model
        self.p_engine = self.collective(lambda: trainer_engine(pm, tc, "policy"))
        self.w_engine = self.collective(lambda: trainer_engine(wm, tc, "world_model"))

    def engines(self) -> tuple[tuple[str, Engine | None], tuple[str, Engine | None]]:
        return (("policy", self.p_engine), ("world_model", self.w_engine))

    def collective(self, fn: Callable[[], T]) -> T:
        """``fn()``, which is a collective with several ranks (a failure: ``RankLost``)."""
        return fn() if self.group is None else self.group.collective(fn)

    def save_states(self, dirs: dict[str, str]) -> None:
        """Every rank: both engines' states (DeepSpeed's ``save_checkpoint``, a collective) into
        ``dirs`` (by kind; rank 0's directories, on the same host)."""
        for kind, engine in self.engines():
            if kind not in dirs:  # no state for this kind (version 0: nothing but the weights)
                continue
            self.collective(
                lambda e=engine, d=dirs[kind]: save_engine_state(e, d)  # without a frozen base
            )

    def policy_update(
        self, trajs: list, prepared: dict | None = None, t0: float | None = None
    ) -> tuple:
        """Every rank: one policy update on the batch ``trajs`` and this rank's own metrics (the
        samples of its share, its phase times).  Returns ``(loss, stats, grad_norm)``."""
        t0 = time.time() if t0 is None else t0
        self.p_engine.train()
        loss, stats, gn, t1 = policy_update(
            self.p_engine, self.tokenizer, trajs, self.tc, self.model_cfg, prepared, self.group
        )
        t2 = time.time()
        self.policy_steps += 1
        for t in self._share(trajs):
            M.TRAINER_SAMPLES.labels(self.run, "policy", t.source, self.rank).inc()
        M.TRAINER_PHASE.labels(self.run, "policy_forward", self.rank).observe(t1 - t0)
        M.TRAINER_PHASE.labels(self.run, "policy_backward_step", self.rank).observe(t2 - t1)
        return loss, stats, gn

    def wm_update(self, batch: list) -> tuple:
        """Every rank: one world-model update on ``batch`` (as ``policy_update``)."""
        t0 = time.time()
        self.w_engine.train()
        loss, stats, gn = world_model_update(
            self.w_engine,
            self.wm_tokenizer,
            batch,
            self.tc,
            self.embedder,
            self.max_change_tokens,
            self.group,
        )
        self.wm_steps += 1
        for t in self._share(batch):
            M.TRAINER_SAMPLES.labels(self.run, "world_model", t.source, self.rank).inc()
        M.TRAINER_PHASE.labels(self.run, "world_model_step", self.rank).observe(time.time() - t0)
        return loss, stats, gn

    def _share(self, items: list) -> list:
        """This rank's share of a batch (``models.train.data_parallel.rank_share``)."""
        g = self.group
        return items if g is None else rank_share(items, g.rank, g.world)
