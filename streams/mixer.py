"""HybridMixer: the ONE place where expert and dreamed/on-policy data are mixed.

Pure logic (no Kafka, no clock of its own: callers pass ``now``).

Inputs
- ``add_expert(traj)``: an expert trajectory; kept in a bounded pool (oldest
  evicted) and reused across batches.
- ``add_group(trajs)``: a group of non-expert trajectories (a dream group, or
  live rollouts of the same seed). A group counts as its G trajectories and is
  never split across batches.
- ``set_latest_version(v)``: the latest policy version (from checkpoint
  announcements of kind ``policy``; also learned from on-policy data).

Output: ``poll(now)`` returns ``TrainingBatch`` records.

Rules, in priority order when they collide:
1. Staleness: a non-expert trajectory with ``policy_version < latest -
   max_staleness`` is dropped and counted (at insert, and again for queued
   groups whenever a newer version is learned). Experts are exempt.
2. Fraction: in every ``mixed`` batch the number of experts ``n_e`` satisfies
   ``|n_e - f * (n_e + n_d)| <= 1`` (in fact <= 0.5): ``n_e = round(f * n_d /
   (1 - f))`` for the ``n_d`` non-expert trajectories of the whole groups taken.
   A mixed batch is never emitted with fewer experts than that.
3. Reuse: an expert trajectory is sampled at most ``samples_per_insert`` times
   (0 = unlimited); least-used experts are taken first. When the pool cannot
   supply enough experts within that bound, the batch waits (its groups stay
   queued, still subject to staleness) for up to ``reuse_wait_s``; after that
   the fraction wins and the least-used experts are reused beyond the bound,
   which is counted (``stats["reuse_over_bound"]``).

Cold start: while no group is queued, an ``expert_only`` batch (up to
``batch_trajectories`` experts, within the reuse bound) is emitted when no
batch went out for ``cold_start_batch_s`` (timed from the first ``poll``), so
the trainer never waits for dreams.

Ids (for downstream dedupe after an at-least-once redelivery): a trajectory's
id is its ``episode_id`` (deterministic: it comes from the producer). A mixed
batch's id is ``m-<sha1 of its sorted non-expert episode ids>``, so the same
groups produce the same batch id after a restart. Expert-only batches carry
``e-<worker>-<seq>``. The trainer should dedupe non-expert trajectories by
``episode_id`` (each dream/on-policy rollout is trained on at most once);
expert trajectories are reused by design and must not be deduped.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass

from core.config import StreamConfig
from streams.records import TrainingBatch, Trajectory


@dataclass
class _Expert:
    traj: Trajectory
    uses: int = 0
    seq: int = 0
    slot: int = -1  # its place in its bucket of ``_UseIndex``


class _UseIndex:
    """The pool's experts bucketed by their use count, so the least used ``n`` are picked in
    O(n + distinct counts), not O(pool) (three scans and a sort of the pool were the stream
    worker's largest per-batch cost: 2,000 experts by default)."""

    def __init__(self) -> None:
        self.buckets: dict[int, list[_Expert]] = {}

    def add(self, e: _Expert) -> None:
        b = self.buckets.setdefault(e.uses, [])
        e.slot = len(b)
        b.append(e)

    def remove(self, e: _Expert) -> None:
        b = self.buckets[e.uses]
        last = b.pop()
        if last is not e:
            b[e.slot] = last
            last.slot = e.slot
        if not b:
            del self.buckets[e.uses]

    def bump(self, e: _Expert) -> None:
        self.remove(e)
        e.uses += 1
        self.add(e)

    def count(self, below: float | None) -> int:
        return sum(len(b) for u, b in self.buckets.items() if below is None or u < below)

    def pick(self, n: int, below: float | None, rng: random.Random) -> list[_Expert] | None:
        """The ``n`` least used (used fewer than ``below`` times, if given): every expert used less
        than the n-th least used one, then a random sample of those used as often; None when fewer
        than ``n`` qualify."""
        out: list[_Expert] = []
        for u in sorted(self.buckets):
            if below is not None and u >= below:
                break
            b, need = self.buckets[u], n - len(out)
            if len(b) <= need:
                out.extend(b)
            else:
                out.extend(b[i] for i in rng.sample(range(len(b)), need))
            if len(out) == n:
                return out
        return None


@dataclass
class _Pending:
    trajs: list
    since: float


class HybridMixer:
    def __init__(
        self,
        run_id: str,
        worker_id: str = "worker",
        expert_fraction: float = StreamConfig.expert_fraction,
        batch_trajectories: int = StreamConfig.batch_trajectories,
        max_staleness: int = StreamConfig.max_staleness,
        samples_per_insert: float = StreamConfig.samples_per_insert,
        expert_pool_size: int = StreamConfig.expert_pool_size,
        cold_start_batch_s: float = StreamConfig.cold_start_batch_s,
        reuse_wait_s: float = StreamConfig.reuse_wait_s,
        batch_wait_s: float | None = None,
        max_pending_groups: int = 1000,
        seed: int = 0,
    ):
        if not 0.0 <= expert_fraction <= 1.0:
            raise ValueError(f"expert_fraction must be in [0, 1], got {expert_fraction}")
        self.run_id = run_id
        self.worker_id = worker_id
        self.f = float(expert_fraction)
        self.batch_trajectories = max(1, int(batch_trajectories))
        self.max_staleness = int(max_staleness)
        self.spi = float(samples_per_insert)
        self.pool_size = max(1, int(expert_pool_size))
        self.cold_start_batch_s = float(cold_start_batch_s)
        self.reuse_wait_s = float(reuse_wait_s)
        # a partly filled mixed batch waits this long for more groups
        self.batch_wait_s = self.cold_start_batch_s if batch_wait_s is None else float(batch_wait_s)
        self.max_pending_groups = max(1, int(max_pending_groups))
        self.rng = random.Random(seed)

        self.pool: OrderedDict[str, _Expert] = OrderedDict()  # episode_id -> entry, oldest first
        self.index = _UseIndex()  # the same entries by use count
        self.pending: deque[_Pending] = deque()
        self.latest_version = 0
        self.last_batch_at: float | None = None
        self.started_at: float | None = None  # first poll: cold-start batches are timed from it
        self._seq = 0
        self._expert_seq = 0
        self.stats: Counter = Counter()
        self.drops: Counter = Counter()  # reason -> trajectories dropped
        self.stale_by_source: Counter = Counter()  # source -> trajectories dropped as stale
        self.emitted_by_source: Counter = Counter()  # trajectories placed in batches

    # --- inputs -------------------------------------------------------------

    def add_expert(self, traj: Trajectory) -> bool:
        if traj.episode_id in self.pool:
            self.stats["expert_duplicates"] += 1
            return False
        self._expert_seq += 1
        e = self.pool[traj.episode_id] = _Expert(traj, 0, self._expert_seq)
        self.index.add(e)
        self.stats["experts_inserted"] += 1
        while len(self.pool) > self.pool_size:
            self.index.remove(self.pool.popitem(last=False)[1])
            self.stats["experts_evicted"] += 1
        return True

    def is_stale(self, traj: Trajectory) -> bool:
        return (
            traj.source != "expert"
            and traj.policy_version < self.latest_version - self.max_staleness
        )

    def add_group(self, trajs: list[Trajectory], now: float) -> int:
        """Queue one group; returns how many of its trajectories were kept."""
        self.stats["groups_in"] += 1
        experts = [t for t in trajs if t.source == "expert"]
        for t in experts:  # an expert never counts as a dream; route it to the pool
            self.add_expert(t)
        rest = [t for t in trajs if t.source != "expert"]
        if self.f >= 1.0:  # expert-only training: non-expert data is not wanted
            self.drops["fraction_one"] += len(rest)
            return 0
        kept = [t for t in rest if not self.is_stale(t)]
        if len(kept) < len(rest):
            self.drops["stale"] += len(rest) - len(kept)
            self.stale_by_source.update(t.source for t in rest if self.is_stale(t))
        if not kept:
            return 0
        self.pending.append(_Pending(kept, now))
        while len(self.pending) > self.max_pending_groups:
            old = self.pending.popleft()
            self.drops["queue_full"] += len(old.trajs)
        return len(kept)

    def set_latest_version(self, version: int) -> int:
        """Learn a policy version; returns how many queued trajectories became stale."""
        if version <= self.latest_version:
            return 0
        self.latest_version = int(version)
        dropped = 0
        keep: deque[_Pending] = deque()
        for p in self.pending:
            fresh = [t for t in p.trajs if not self.is_stale(t)]
            dropped += len(p.trajs) - len(fresh)
            self.stale_by_source.update(t.source for t in p.trajs if self.is_stale(t))
            if fresh:
                keep.append(_Pending(fresh, p.since))
        self.pending = keep
        if dropped:
            self.drops["stale"] += dropped
        return dropped

    # --- output -------------------------------------------------------------

    def experts_needed(self, n_d: int) -> int:
        if self.f >= 1.0:
            return n_d  # unreachable: add_group refuses non-expert data when f == 1
        return int(round(self.f * n_d / (1.0 - self.f) + 1e-9))

    def _target_nd(self) -> int:
        return max(1, int(round(self.batch_trajectories * (1.0 - self.f))))

    def _bound(self, bound: bool) -> float | None:
        return self.spi if bound and self.spi > 0 else None

    def _pick_experts(self, n: int, bound: bool) -> list[_Expert] | None:
        """The ``n`` least used experts (within the reuse bound when ``bound``), ties broken at
        random (so a fresh expert is preferred); None when the pool cannot supply them."""
        if n == 0:
            return []
        return self.index.pick(n, self._bound(bound), self.rng)

    def poll(self, now: float, allow_expert_only: bool = True) -> list[TrainingBatch]:
        if self.started_at is None:
            self.started_at = now
        out: list[TrainingBatch] = []
        while self.pending:
            b = self._try_mixed(now)
            if b is None:
                break
            out.append(b)
        if not self.pending and not out and allow_expert_only:
            b = self._try_expert_only(now)
            if b is not None:
                out.append(b)
        return out

    def _try_mixed(self, now: float) -> TrainingBatch | None:
        target = self._target_nd()
        take: list[_Pending] = []
        n_d = 0
        for p in self.pending:
            if take and n_d + len(p.trajs) > target:
                break
            take.append(p)
            n_d += len(p.trajs)
            if n_d >= target:
                break
        full = n_d >= target or len(take) < len(self.pending)
        oldest = self.pending[0].since
        if not full and now - oldest < self.batch_wait_s:
            return None  # wait a little for more groups to fill the batch
        n_e = self.experts_needed(n_d)
        experts = self._pick_experts(n_e, bound=True)
        if experts is None:
            if now - oldest < self.reuse_wait_s or len(self.pool) == 0:
                if len(self.pool) == 0:
                    self.stats["waiting_no_experts"] += 1
                else:
                    self.stats["waiting_reuse_bound"] += 1
                return None
            experts = self._pick_experts(n_e, bound=False)
            if experts is None:  # pool smaller than n_e: reuse with repetition
                pool = list(self.pool.values())
                experts = [pool[i % len(pool)] for i in range(n_e)]
            over = sum(1 for e in experts if self.spi > 0 and e.uses >= self.spi)
            self.stats["reuse_over_bound"] += over
        for _ in take:
            self.pending.popleft()
        non_expert = [t for p in take for t in p.trajs]
        self.stats["groups_out"] += len(take)
        bid = (
            "m-"
            + hashlib.sha1("|".join(sorted(t.episode_id for t in non_expert)).encode()).hexdigest()[
                :24
            ]
        )
        return self._make(bid, "mixed", non_expert, experts, now)

    def _try_expert_only(self, now: float) -> TrainingBatch | None:
        if not self.pool:
            return None
        since = self.started_at if self.last_batch_at is None else self.last_batch_at
        if now - since < self.cold_start_batch_s:
            return None
        n = min(self.batch_trajectories, self.index.count(self._bound(True)))
        if n == 0:
            self.stats["expert_only_reuse_bound"] += 1
            return None
        experts = self._pick_experts(n, bound=True)
        self._seq += 1
        return self._make(f"e-{self.worker_id}-{self._seq}", "expert_only", [], experts, now)

    def _make(
        self, bid: str, kind: str, non_expert: list, experts: list[_Expert], now: float
    ) -> TrainingBatch:
        for e in experts:
            self.index.bump(e)
        trajs = non_expert + [e.traj for e in experts]
        random.Random(bid).shuffle(trajs)
        n_e = len(experts)
        frac = n_e / len(trajs) if trajs else 0.0
        self.last_batch_at = now
        self.stats["batches_" + kind] += 1
        if kind == "mixed":
            self.stats["mixed_trajectories"] += len(trajs)
            self.stats["mixed_experts"] += n_e
        self.stats["expert_samples"] += n_e
        for t in non_expert:
            self.emitted_by_source[t.source] += 1
        self.emitted_by_source["expert"] += n_e
        self.last_fraction = frac
        return TrainingBatch(
            run_id=self.run_id,
            batch_id=bid,
            worker_id=self.worker_id,
            kind=kind,
            trajectories=[dict(vars(t)) for t in trajs],
            expert_fraction=frac,
            latest_policy_version=self.latest_version,
        )

    # --- observability ------------------------------------------------------

    last_fraction: float = 0.0

    @property
    def realised_reuse(self) -> float:
        """Expert samples emitted per expert trajectory inserted (Reverb's SPI, realised)."""
        ins = self.stats["experts_inserted"]
        return self.stats["expert_samples"] / ins if ins else 0.0

    @property
    def realised_fraction(self) -> float:
        """Expert share over every mixed+expert-only trajectory emitted so far."""
        total = sum(self.emitted_by_source.values())
        return self.emitted_by_source["expert"] / total if total else 0.0

    @property
    def realised_mixed_fraction(self) -> float:
        """Expert share over the mixed batches only (should track ``expert_fraction``)."""
        n = self.stats["mixed_trajectories"]
        return self.stats["mixed_experts"] / n if n else 0.0

    @property
    def pending_trajectories(self) -> int:
        return sum(len(p.trajs) for p in self.pending)
