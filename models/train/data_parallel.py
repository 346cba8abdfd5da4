"""A data-parallel trainer's ranks: who leads, how work reaches every rank, how a batch is split
among them and their reports put together, who is lost.

A trainer started with several ranks (``dynaweb train --ranks N``, which starts N local ranks:
``core.launch``; or the ``deepspeed`` launcher / ``torchrun``, which set RANK and WORLD_SIZE) is
one group.  Rank 0 leads: it alone reads Kafka, dedupes, drops stale samples, draws the world
model's batches, decides when to checkpoint, writes checkpoints to S3 and announces them.  Every
decision reaches the other ranks as a command (``RankGroup.send``: a small key in the group's
rendezvous store says that a command follows, then ``broadcast_object_list`` carries it), so
every rank trains the same batches in the same order, and each trains its share of each
(``rank_indices``, below); the gradients are summed over the ranks (``reduce_grads``) before the
optimizer step.  A rank waiting for work waits on the store (``receive``), never inside a
collective, so an idle leader (no data, a long checkpoint upload) never runs a collective into
its timeout.

Liveness: every rank beats (a counter in the rendezvous store, every ``BEAT_S``); the leader
checks its followers' beats at every loop turn (``watch``) and a follower its leader's while it
waits.  A rank that stops beating for ``DEAD_AFTER_S``, a collective that fails (gloo notices a
killed peer at once: "Connection closed by peer") or times out (``trainer.dist_timeout_s``), or a
store that is gone (it lives in rank 0's process) ends the rank with ``RankLost``, naming the
ranks that stopped beating; the launcher then stops the group and the supervisor restarts it as
one component (``core.supervise``), and it resumes from LATEST.

A rank other than 0 loads what rank 0's ``plan`` command names (``models.train.trainer``), then
runs ``follow``: rank 0's ``policy``, ``world_model``, ``checkpoint`` and ``stop`` commands, in
order, handed to its ``models.train.learner.Learner``.

The split: rank ``r`` of ``N`` trains the items at positions ``r, r + N, r + 2N, ...``
(``rank_indices``) of every batch: policy trajectories of a training batch, world-model
transitions of a world-model batch.  Every item goes to exactly one rank, the ranks' shares
together are the batch, and the shares differ in size by at most one item.  The losses take the
share as ``select`` (``models.policy.loss.policy_batch_loss``,
``models.world_model.loss.world_model_batch_loss``) and keep the whole batch's advantages and
normalisers, so a share's loss is its part of the whole batch's loss and the ranks' gradients
summed are the gradient of the whole batch.  ``merge_policy_stats`` / ``merge_wm_stats`` turn the
ranks' loss reports (gathered from every rank) into the report one rank would have made on the
whole batch: the share's parts are added, the ratio extremes taken over the ranks, and what every
rank computed on the whole batch (counts, advantages, per-source groups) taken once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol, TypeVar

import torch

log = logging.getLogger(__name__)

BEAT_S = 0.5  # a rank's heartbeat period
DEAD_AFTER_S = 5.0  # a rank whose beat has not moved for this long is lost
POLL_S = 0.005  # a waiting follower checks for the next command this often
BUCKET_ELEMENTS = 1 << 24  # gradients are summed in flat buckets of at most this many elements
KEEP_COMMAND_KEYS = 64  # command keys kept in the store (older ones are deleted)

T = TypeVar("T")


class RankLost(RuntimeError):
    """A rank of the trainer group is gone (or hung): this rank stops, with the lost ranks named."""

    def __init__(self, rank: int, world: int, lost: list[int], detail: str):
        self.rank, self.world, self.lost = rank, world, lost
        who = (
            ", ".join(f"rank {r}" for r in lost) + (" is" if len(lost) == 1 else " are")
            if lost
            else "a rank (which one could not be told) is"
        )
        super().__init__(
            f"trainer rank {rank} of {world}: {who} lost ({detail}); this rank stops, the group "
            "must restart (it resumes from the last checkpoint)"
        )


def env_world() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment (RANK, WORLD_SIZE); (0, 1) without."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank = int(os.environ.get("RANK", "0") or 0)
    return rank, world


class RankGroup:
    """This process's place in a trainer group of ``world`` > 1 ranks (torch.distributed already
    initialised: ``models.train.engine.setup_distributed``); ``start`` before use."""

    def __init__(
        self, rank: int, world: int, beat_s: float = BEAT_S, dead_after_s: float = DEAD_AFTER_S
    ):
        self.rank, self.world = rank, world
        self.beat_s, self.dead_after_s = beat_s, dead_after_s
        self.seq = 0  # commands sent (leader) / received (follower)
        self.prefix = ""
        self._store: Any = None  # the main thread's store client
        self._beats_seen: dict[int, tuple[int, float]] = {}  # rank -> (count, when it last moved)
        self._stop_beat = threading.Event()
        self._beat_thread: threading.Thread | None = None
        self._last_watch = 0.0

    @property
    def leader(self) -> bool:
        return self.rank == 0

    # --- start and stop -------------------------------------------------------------------
    def _client(self) -> Any:
        import torch.distributed as dist

        return dist.TCPStore(
            os.environ.get("MASTER_ADDR", "127.0.0.1"),
            int(os.environ["MASTER_PORT"]),
            is_master=False,
            timeout=timedelta(seconds=max(5.0, self.dead_after_s)),
            wait_for_workers=False,
        )

    def start(self) -> RankGroup:
        """Agree on this incarnation's key prefix (a store outlives a group under torchrun), then
        beat."""
        token = [uuid.uuid4().hex if self.leader else None]
        self.collective(lambda: torch.distributed.broadcast_object_list(token, src=0))
        self.prefix = f"dynaweb/trainer/{token[0]}"
        self._store = self._client()
        beat_store = self._client()
        self._beat(beat_store)  # the first beat before anyone looks
        self._beat_thread = threading.Thread(
            target=self._beat_loop, args=(beat_store,), name="trainer-rank-beat", daemon=True
        )
        self._beat_thread.start()
        log.info("trainer rank %d of %d started (pid %d)", self.rank, self.world, os.getpid())
        return self

    def close(self) -> None:
        self._stop_beat.set()

    def _beat(self, store: Any) -> None:
        store.add(f"{self.prefix}/beat/{self.rank}", 1)

    def _beat_loop(self, store: Any) -> None:
        while not self._stop_beat.wait(self.beat_s):
            try:
                self._beat(store)
            except Exception as e:  # noqa: BLE001 - the store is gone: the others will tell
                log.warning("trainer rank %d: heartbeat failed: %s", self.rank, e)
                return

    # --- who is alive -----------------------------------------------------------------------
    def _stale(self, ranks: list[int]) -> list[int]:
        """The ranks of ``ranks`` whose beat has not moved for ``dead_after_s`` (store errors are
        the caller's)."""
        now = time.monotonic()
        stale = []
        for r in ranks:
            n = int(self._store.add(f"{self.prefix}/beat/{r}", 0))
            seen = self._beats_seen.get(r)
            if seen is None or seen[0] != n:
                self._beats_seen[r] = (n, now)
            elif now - seen[1] >= self.dead_after_s:
                stale.append(r)
        return stale

    def _others(self) -> list[int]:
        return [r for r in range(self.world) if r != self.rank]

    def watch(self, every_s: float = 1.0) -> None:
        """Raise ``RankLost`` when a rank this one depends on stopped beating (the leader watches
        every follower, a follower its leader); at most once per ``every_s``."""
        now = time.monotonic()
        if now - self._last_watch < every_s:
            return
        self._last_watch = now
        ranks = self._others() if self.leader else [0]
        try:
            stale = self._stale(ranks)
        except Exception as e:  # noqa: BLE001 - the store lives in rank 0's process
            raise RankLost(self.rank, self.world, [0], f"its rendezvous store is gone: {e}") from e
        if stale:
            raise RankLost(
                self.rank, self.world, stale, f"no heartbeat for {self.dead_after_s:.0f} s"
            )

    def lost(self, err: BaseException) -> RankLost:
        """The ``RankLost`` for a failed collective: the ranks whose beat stops within
        ``dead_after_s`` (a killed peer fails a collective at once, before its beat is old)."""
        detail = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
        deadline = time.monotonic() + self.dead_after_s + self.beat_s
        try:
            self._beats_seen.clear()
            while True:
                stale = self._stale(self._others())
                if stale or time.monotonic() >= deadline:
                    return RankLost(self.rank, self.world, stale, detail)
                time.sleep(self.beat_s / 2)
        except Exception as e:  # noqa: BLE001 - the store lives in rank 0's process
            lost = [0] if self.rank != 0 else []
            return RankLost(self.rank, self.world, lost, f"{detail}; rendezvous store gone: {e}")

    def collective(self, fn: Callable[[], T]) -> T:
        """``fn()`` (collectives): a failure becomes ``RankLost``."""
        try:
            return fn()
        except RankLost:
            raise
        except RuntimeError as e:  # gloo/NCCL: a closed connection or a timeout
            raise self.lost(e) from e

    # --- commands: the leader's decisions, in order, to every rank ---------------------------
    def send(self, command: tuple) -> None:
        """Leader: ``command`` to every follower (they wait in ``receive``)."""
        assert self.leader
        self.seq += 1
        try:
            self._store.set(f"{self.prefix}/cmd/{self.seq}", b"1")
            if self.seq > KEEP_COMMAND_KEYS:
                self._store.delete_key(f"{self.prefix}/cmd/{self.seq - KEEP_COMMAND_KEYS}")
        except Exception as e:  # noqa: BLE001 - our own store: a broken process
            raise RankLost(self.rank, self.world, [], f"rendezvous store failed: {e}") from e
        obj = [command]
        self.collective(lambda: torch.distributed.broadcast_object_list(obj, src=0))

    def receive(self) -> tuple:
        """Follower: the leader's next command (waits on the store, watching the leader)."""
        assert not self.leader
        key = f"{self.prefix}/cmd/{self.seq + 1}"
        while True:
            try:
                if self._store.check([key]):
                    break
            except Exception as e:  # noqa: BLE001 - the store lives in rank 0's process
                raise RankLost(
                    self.rank, self.world, [0], f"its rendezvous store is gone: {e}"
                ) from e
            self.watch()
            time.sleep(POLL_S)
        self.seq += 1
        obj: list = [None]
        self.collective(lambda: torch.distributed.broadcast_object_list(obj, src=0))
        return obj[0]

    # --- the data-parallel step ---------------------------------------------------------------
    def gather(self, obj: Any) -> list:
        """Every rank's ``obj``, in rank order (on every rank)."""
        out: list = [None] * self.world
        self.collective(lambda: torch.distributed.all_gather_object(out, obj))
        return out

    def reduce_grads(self, module: torch.nn.Module) -> None:
        """Sum the gradients of ``module`` over the ranks (each rank's loss is its share's part of
        the whole batch's loss, so the sum is the whole batch's gradient).  A parameter no rank has
        a gradient for keeps none (as in a one-rank step); one that only some ranks have gets zeros
        on the others."""
        params = [p for p in module.parameters() if p.requires_grad]
        has = torch.tensor([float(p.grad is not None) for p in params])
        self.collective(lambda: torch.distributed.all_reduce(has))
        todo = [p for p, h in zip(params, has.tolist(), strict=True) if h > 0]
        for bucket in _buckets(todo):
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in bucket]
            flat = torch.cat([g.reshape(-1) for g in grads])
            self.collective(lambda flat=flat: torch.distributed.all_reduce(flat))
            at = 0
            for p in bucket:
                n = p.numel()
                summed = flat[at : at + n].view_as(p)
                if p.grad is None:
                    p.grad = summed.clone()
                else:
                    p.grad.copy_(summed)
                at += n

    def barrier(self) -> None:
        self.collective(lambda: torch.distributed.barrier())


def _buckets(params: list) -> list[list]:
    """``params`` in runs of one dtype and device of at most ``BUCKET_ELEMENTS`` elements."""
    out: list[list] = []
    cur: list = []
    size = 0
    for p in params:
        if cur and (
            size + p.numel() > BUCKET_ELEMENTS
            or p.dtype != cur[0].dtype
            or p.device != cur[0].device
        ):
            out.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += p.numel()
    if cur:
        out.append(cur)
    return out


# --- the split of a batch, and the ranks' reports put together ---------------------------------
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


# --- a rank other than 0 ----------------------------------------------------------------------
class Follower(Protocol):
    """What ``follow`` hands rank 0's commands to (``models.train.learner.Learner``)."""

    def policy_update(self, trajs: list) -> tuple: ...

    def wm_update(self, batch: list) -> tuple: ...

    def save_states(self, dirs: dict[str, str]) -> None: ...


def follow(group: RankGroup, learner: Follower) -> None:
    """A rank other than 0: rank 0's commands, in order, until it sends ``stop`` (a signal to
    this rank alone does not stop it: the group stops with rank 0)."""
    assert not group.leader
    while True:
        cmd = group.receive()
        if cmd[0] == "stop":
            log.info("trainer rank %s: rank 0 stopped the group", group.rank)
            return
        if cmd[0] == "policy":
            learner.policy_update(cmd[1])
        elif cmd[0] == "world_model":
            learner.wm_update(cmd[1])
        elif cmd[0] == "checkpoint":  # ("checkpoint", version, state directories by kind)
            learner.save_states(cmd[2])
        else:
            raise RuntimeError(f"trainer rank {group.rank}: unknown command {cmd[0]!r}")
