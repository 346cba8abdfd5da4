"""The trainer's prepare thread: the next policy batch's CPU work overlaps the current step.

Before a policy batch reaches the model, the loss validates its trajectories (``batch.trajs()``)
and builds every step's decision: the page's candidate actions and their tokens
(``models.policy.decisions.prepare_decisions``).  ``BatchPreparer.prepare`` starts that for the first
waiting batch on one background thread while the trainer's step runs (torch releases the GIL in
its kernels); ``take`` hands the result to the step (or ``None``: the step builds it itself).
``dynaweb bench train --stream`` reports the gain (``prepare_overlap_speedup``).  On rank ``r``
of a trainer group only the rank's share is built (``models.train.data_parallel``; the leader's share:
the other ranks build theirs when the batch reaches them).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from models.lm.types import Tokenizer


class BatchPreparer:
    def __init__(
        self,
        tokenizer: Tokenizer,
        max_positions: int,
        default_temperature: float,
        rank: int = 0,
        world: int = 1,
    ):
        self.tokenizer = tokenizer
        self.rank, self.world = rank, world
        self.max_positions = int(max_positions)
        self.default_temperature = float(default_temperature or 1.0)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="trainer-prepare")
        self._futures: dict[str, Future] = {}

    def prepare(self, pending: Any) -> None:
        """Start building the first waiting batch of ``pending`` (items ``(batch | None, ...)``)."""
        for item in pending:
            batch = item[0]
            if batch is None:
                continue
            if batch.batch_id not in self._futures:
                self._futures[batch.batch_id] = self._pool.submit(self._build, batch)
            return

    def _build(self, batch: Any) -> tuple[list, dict]:
        from models.policy.decisions import prepare_decisions
        from models.train.data_parallel import rank_share

        trajs = batch.trajs()
        return trajs, prepare_decisions(
            self.tokenizer,
            rank_share(trajs, self.rank, self.world),
            self.max_positions,
            self.default_temperature,
        )

    def take(self, batch: Any) -> tuple[list, dict | None]:
        """``(trajectories, decisions by id)`` of ``batch``: built ahead (waiting for it if it
        is still being built), else ``(batch.trajs(), None)``."""
        fut = self._futures.pop(batch.batch_id, None)
        return fut.result() if fut is not None else (batch.trajs(), None)

    def clear(self) -> None:
        for f in self._futures.values():
            f.cancel()
        self._futures.clear()

    def close(self) -> None:
        self.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
