"""One rank's part of the trainer: its updates, its engine states, and (ranks other than 0) the
commands it follows.

``TrainerRank`` holds what every rank of a trainer group does with the batches rank 0 sends
(``models.train.ranks``): ``policy_update`` / ``wm_update`` (each rank trains its share of the
batch, ``models.train.shard``; the gradients are summed over the ranks; the loss and report come
back the whole batch's), ``save_states`` (every rank saves its engine states for a checkpoint)
and, on ranks other than 0, ``follow``: rank 0's commands, in order, until it stops the group.
``models.train.trainer.Trainer`` is that and rank 0's part: the topics, the checkpoints in S3,
the loop.  The metrics a rank exports of its own work carry its ``rank`` label.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from core.config import Config
from models import metrics as M
from models.checkpoints.writer import save_engine_state
from models.train.ranks import RankGroup
from models.train.shard import rank_share
from streams import records

log = logging.getLogger(__name__)

T = TypeVar("T")


class TrainerRank:
    """The per-rank state the updates use (set up by ``Trainer.setup``)."""

    cfg: Config
    run: str
    group: RankGroup | None = None  # the only rank (a trainer built without its __init__ too)
    leader: bool = True
    rank: str = "0"  # the per-rank metrics' label
    version: int
    policy_steps: int
    wm_steps: int
    p_engine: Any
    w_engine: Any
    tokenizer: Any
    wm_tokenizer: Any
    embedder: Any

    def _collective(self, fn: Callable[[], T]) -> T:
        """``fn()``, which is a collective with several ranks (a failure: ``RankLost``)."""
        return fn() if self.group is None else self.group.collective(fn)

    def save_states(self, dirs: dict[str, str]) -> None:
        """Every rank: both engines' states (DeepSpeed's ``save_checkpoint``, a collective) into
        ``dirs`` (by kind; rank 0's directories, on the same host)."""
        for kind, engine in (("policy", self.p_engine), ("world_model", self.w_engine)):
            self._collective(
                lambda e=engine, d=dirs[kind]: save_engine_state(e, d)  # without a frozen base
            )

    def policy_update(
        self, trajs: list[records.Trajectory], prepared: dict | None = None, t0: float | None = None
    ) -> tuple:
        """Every rank: one policy update on the batch ``trajs`` (each rank trains its share; the
        loss and report returned are the whole batch's) and this rank's own metrics (the samples
        of its share, its phase times).  Returns ``(loss, stats, grad_norm)``."""
        from models.train.learner import policy_update

        t0 = time.time() if t0 is None else t0
        self.p_engine.train()
        loss, stats, gn, t1 = policy_update(
            self.p_engine,
            self.tokenizer,
            trajs,
            self.cfg.trainer,
            self.cfg.model,
            prepared,
            self.group,
        )
        t2 = time.time()
        self.policy_steps += 1
        for t in self._share(trajs):
            M.TRAINER_SAMPLES.labels(self.run, "policy", t.source, self.rank).inc()
        M.TRAINER_PHASE.labels(self.run, "policy_forward", self.rank).observe(t1 - t0)
        M.TRAINER_PHASE.labels(self.run, "policy_backward_step", self.rank).observe(t2 - t1)
        return loss, stats, gn

    def _share(self, items: list) -> list:
        """This rank's share of a batch (``models.train.shard``)."""
        g = self.group
        return items if g is None else rank_share(items, g.rank, g.world)

    def wm_update(self, batch: list[records.Transition]) -> tuple:
        """Every rank: one world-model update on ``batch`` (as ``policy_update``)."""
        from models.train.learner import world_model_update

        t0 = time.time()
        self.w_engine.train()
        loss, stats, gn = world_model_update(
            self.w_engine,
            self.wm_tokenizer,
            batch,
            self.cfg.trainer,
            self.embedder,
            self.cfg.dream.max_change_tokens,
            self.group,
        )
        self.wm_steps += 1
        for t in self._share(batch):
            M.TRAINER_SAMPLES.labels(self.run, "world_model", t.source, self.rank).inc()
        M.TRAINER_PHASE.labels(self.run, "world_model_step", self.rank).observe(time.time() - t0)
        return loss, stats, gn

    def follow(self) -> None:
        """A rank other than 0: rank 0's commands, in order, until it sends ``stop`` (a signal to
        this rank alone does not stop it: the group stops with rank 0)."""
        assert self.group is not None and not self.leader
        while True:
            cmd = self.group.receive()
            if cmd[0] == "stop":
                log.info("trainer rank %s: rank 0 stopped the group", self.rank)
                return
            if cmd[0] == "policy":
                self.policy_update(cmd[1])
            elif cmd[0] == "world_model":
                self.wm_update(cmd[1])
            elif cmd[0] == "checkpoint":
                self.version = int(cmd[1])
                self.save_states(cmd[2])
            else:
                raise RuntimeError(f"trainer rank {self.rank}: unknown command {cmd[0]!r}")
