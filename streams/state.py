"""Everything one stream worker knows, driven by the agents (streams.agents);
plain Python, no Faust, testable without Kafka. All of it is touched from the
event loop only.

Data plane (``on_transition``, the group-partitioned transition topics):
invalid messages are dead-lettered; valid ones are deduplicated by
``(episode_id, step)``; real and expert transitions are forwarded as their
original bytes to the world-model train/eval topics (stable held-out split by
episode id); real and dream transitions are assembled into episodes, grouped
(dreams by ``group_id``) and handed to the ``HybridMixer``.

Holding acks (streams.recovery): ``on_transition`` returns True when it keeps
the message's handle; ``settle()`` hands back the handles of every episode
that has left the pipeline (emitted in a batch, or dropped), which the agent
then acks. Expert messages are never held: the expert pool is built from the
whole expert topic by the side reader (streams.side), on every worker alike.

``reset(emitted)`` runs on every (re)assignment: it forgets all in-progress
non-expert state (its messages were never acked and will be re-read) and
marks ``emitted`` episodes as closed, so their re-read steps are skipped.

Back-pressure: ``produced`` counts this worker's batches (continuing the
count of an earlier incarnation with the same worker id, learned from its
``Control(kind="produced")`` reports). The trainer reports consumed batches;
with ``info={"by_worker": {worker_id: N}}`` the lag is this worker's own
``produced - N``, else the run's: the sum of every worker's latest produced
report minus the total consumed. Over ``lag_bound`` the worker publishes
``Control(kind="backpressure", value=max(0.05, bound / lag))`` (repeated every
``_BP_REPEAT_S``) and ``value=1.0`` once back within the bound.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter, defaultdict, deque

from core.config import Config
from streams import kafka as sk
from streams import metrics as M
from streams import records
from streams.app import worker_id as default_worker_id
from streams.assembly import Deduper, EpisodeAssembler, GroupAssembler
from streams.checkpoints import announcement_of
from streams.mixer import HybridMixer
from streams.records import Control, RecordError, Trajectory, heldout
from streams.topics import Topics

log = logging.getLogger(__name__)

_BP_REPEAT_S = 5.0
_NO_TRAINER_LAG = 64  # expert-only batches waiting, at most, before any trainer reported
_REPORT_S = 1.0
_WINDOW_S = 60.0
_TOPIC_SOURCE = {"real": "real", "expert": "expert", "dream": "dream"}


class StreamState:
    def __init__(self, cfg: Config, topics: Topics, clock=time.monotonic):
        bad = set(cfg.stream.policy_sources) - {"real", "dream"}
        if bad or not cfg.stream.policy_sources:
            raise ValueError(
                f"stream.policy_sources must be a non-empty subset of ['real', 'dream'], "
                f"got {cfg.stream.policy_sources!r}"
            )
        s = cfg.stream
        self.cfg, self.topics, self.clock = cfg, topics, clock
        self.worker_id = default_worker_id(cfg.stream)
        self.run_id = cfg.run_id
        self.incarnation = records.new_id()[:12]
        self.m = M.Bound(cfg.run_id, self.worker_id)
        self.dedupe = Deduper(capacity=s.dedupe_capacity)
        self.episodes = EpisodeAssembler(
            s.episode_idle_timeout_s, deduper=self.dedupe, next_obs=False
        )
        self.groups = GroupAssembler(
            s.group_size, s.group_timeout_s, s.emit_incomplete_groups, max_staleness=s.max_staleness
        )
        self.expert_dedupe = Deduper(capacity=10_000_000)
        self.expert_asm = EpisodeAssembler(
            s.episode_idle_timeout_s, max_open=1_000_000, deduper=self.expert_dedupe, next_obs=False
        )
        self.mixer = HybridMixer(
            run_id=cfg.run_id,
            worker_id=self.worker_id,
            expert_fraction=s.expert_fraction,
            batch_trajectories=s.batch_trajectories,
            max_staleness=s.max_staleness,
            samples_per_insert=s.samples_per_insert,
            expert_pool_size=s.expert_pool_size,
            cold_start_batch_s=s.cold_start_batch_s,
            reuse_wait_s=s.reuse_wait_s,
            batch_wait_s=s.batch_wait_s or None,
        )
        self.topic_source = {topics.name(k): v for k, v in _TOPIC_SOURCE.items()}
        self.held: dict[str, list] = defaultdict(list)  # episode id -> [(tp, offset)]
        self.positions: dict = {}  # tp -> one past the last offset processed
        self.committed: dict = {}  # tp -> last offset committed by us
        self.out = None  # a Publisher-like sender (streams.agents._Sender)
        self.dead: sk.DeadLetters | None = None
        self.produced = 0  # batches emitted by this incarnation
        self.produced_prior = 0  # ... by earlier incarnations with the same worker id
        self.reports: dict[str, int] = {}  # worker id -> latest produced report
        self.consumed_total = 0
        self.consumed_mine: int | None = None  # from by_worker, when the trainer sends it
        self.trainer_seen = (
            False  # a trainer has reported what it consumed (it reports every second)
        )
        self.throttled = False
        self.rate = 1.0
        self._bp_sent_at = 0.0
        self._reported_at, self._reported = -1e9, -1
        self.window: deque = deque()  # (time, experts, trajectories) of recent mixed batches
        self.counts: Counter = Counter()  # transitions, duplicates, forwarded, skipped, ...
        self.side_info = Counter()
        self.first_at: float | None = None  # wall time of the first / last message processed
        self.last_at: float | None = None
        self.done_at: float | None = None  # ... and when its output was last handed over (agents)

    def attach(self, sender) -> None:
        self.out = sender
        self.dead = sk.DeadLetters(
            sender,
            self.topics.deadletter,
            f"stream-worker:{self.worker_id}",
            counter=self.m.dead_letter_counter(),
        )

    # --- data plane ----------------------------------------------------------

    def on_transition(
        self, topic: str, raw: bytes | None, offset: int = -1, tp=None, now: float | None = None
    ) -> bool:
        """Process one message of partition ``tp``; True when it is held (its
        partition's commit point waits until its episode has left the pipeline)."""
        self.last_at = time.time()
        if self.first_at is None:
            self.first_at = self.last_at
        if tp is not None:
            nxt = self.positions.get(tp)
            if nxt is None or offset + 1 > nxt:
                self.positions[tp] = offset + 1
        if raw is not None and sk.is_control(raw):
            return False  # sentinels and other control records are not data
        try:
            t = records.decode(raw, expect="transition", max_bytes=self.cfg.kafka.max_message_bytes)
            want = self.topic_source.get(topic)
            if want is not None and t.source != want:
                raise RecordError("source_mismatch", f"source {t.source!r} on the {want} topic")
            if t.run_id != self.run_id:
                raise RecordError("wrong_run", f"run_id {t.run_id!r} != {self.run_id!r}")
        except RecordError as e:
            self.counts["invalid"] += 1
            # tp: a (topic, partition) tuple (Faust's and aiokafka's are named tuples)
            self.dead.route(raw, e, topic, offset, tp[1] if tp is not None else -1)
            return False
        if not self.dedupe.accept(t):
            self.counts["duplicates"] += 1
            return False
        self.counts["t_" + t.source] += 1
        if t.source != "dream":
            eval_ = heldout(t.episode_id, self.cfg.stream.heldout_fraction)
            self.out.send(
                self.topics.world_model_eval if eval_ else self.topics.world_model,
                raw,
                key=t.episode_id,
            )
            self.counts["fwd_eval" if eval_ else "fwd_train"] += 1
            if t.source == "expert":
                return False  # forwarded only: the pool comes from the side reader
        if tp is not None:
            self.held[t.episode_id].append((tp, offset))
        traj = self.episodes.add(t, self.clock() if now is None else now)
        if traj is not None:
            self.on_trajectory(traj, self.clock() if now is None else now)
        return tp is not None

    def on_trajectory(self, traj: Trajectory, now: float) -> None:
        outcome = "truncated" if traj.truncated else "complete"
        self.m(M.trajectories, source=traj.source, outcome=outcome).inc()
        if traj.source == "expert":
            self.mixer.add_expert(traj)
            return
        if traj.source == "dream":  # generators run a hot-reloaded checkpoint: its version exists
            self.mixer.set_latest_version(traj.policy_version)
        if traj.source not in self.cfg.stream.policy_sources:
            self.mixer.drops["source_not_trained"] += 1  # it fed the world model only
            return
        group = self.groups.add(traj, now)
        if group is not None:
            self.mixer.add_group(group, now)

    def in_progress(self) -> set[str]:
        live = set(self.episodes.open)
        for g in self.groups.open.values():
            live.update(g.members)
        for p in self.mixer.pending:
            live.update(t.episode_id for t in p.trajs)
        return live

    def settle(self) -> int:
        """Release every held episode no longer in progress (call after the
        emitted batches were handed to the producer); returns how many."""
        if not self.held:
            return 0
        live = self.in_progress()
        done = [eid for eid in self.held if eid not in live]
        for eid in done:
            del self.held[eid]
        return len(done)

    def commit_points(self) -> dict:
        """{tp: offset} safe to commit now and not committed yet: the oldest held
        message of the partition, else one past the last message processed."""
        low = dict(self.positions)
        for entries in self.held.values():
            for tp, off in entries:
                if off < low.get(tp, off + 1):
                    low[tp] = off
        out = {tp: o for tp, o in low.items() if self.committed.get(tp) != o}
        return out

    def reset(self, emitted: set[str]) -> dict:
        """Forget in-progress non-expert state (re-read after a rebalance) and skip ``emitted``."""
        s = self.cfg.stream
        info = {
            "dropped_open_episodes": len(self.episodes),
            "dropped_held_episodes": len(self.held),
            "dropped_pending": self.mixer.pending_trajectories,
            "emitted_skip": len(emitted),
        }
        self.held.clear()
        self.positions.clear()
        self.committed.clear()
        old = self.dedupe
        self.dedupe = Deduper(capacity=s.dedupe_capacity)
        self.dedupe.closed, self.dedupe.duplicates, self.dedupe.late = (
            old.closed,
            old.duplicates,
            old.late,
        )
        for eid in emitted:
            self.dedupe.close(eid)
        stats, gstats = self.episodes.stats, self.groups.stats
        self.episodes = EpisodeAssembler(
            s.episode_idle_timeout_s, deduper=self.dedupe, next_obs=False
        )
        self.groups = GroupAssembler(
            s.group_size, s.group_timeout_s, s.emit_incomplete_groups, max_staleness=s.max_staleness
        )
        self.episodes.stats, self.groups.stats = stats, gstats
        self.mixer.pending.clear()
        log.info("stream state reset for a new assignment: %s", info)
        return info

    # --- side topics (every worker reads them in full) -----------------------

    def on_side(self, topic: str, raw: bytes | None) -> None:
        if raw is None or (sk.is_control(raw) and b'"sentinel"' in raw[:300]):
            return
        if topic == self.topics.expert:
            self.on_expert(raw)
        elif topic == self.topics.checkpoints:
            self.on_checkpoint(raw)
        elif topic == self.topics.control:
            self.on_control(raw)

    def on_expert(self, raw: bytes) -> None:
        try:
            t = records.decode(raw, expect="transition", max_bytes=self.cfg.kafka.max_message_bytes)
        except RecordError:
            return  # dead-lettered by the worker that owns its partition
        if t.source != "expert" or t.run_id != self.run_id or not self.expert_dedupe.accept(t):
            return
        self.side_info["expert_transitions"] += 1
        traj = self.expert_asm.add(t, self.clock())
        if traj is not None:
            self.on_trajectory(traj, self.clock())

    def on_checkpoint(self, raw: bytes) -> None:
        c = announcement_of(raw, ("policy",))
        if c is not None and c.run_id == self.run_id:
            self.mixer.set_latest_version(c.version)

    def on_control(self, raw: bytes) -> None:
        try:
            c = records.decode(raw, expect="control")
        except RecordError:
            return
        if c.run_id != self.run_id:
            return
        info = c.info if isinstance(c.info, dict) else {}
        try:
            value = int(c.value)
        except (TypeError, ValueError):
            return
        if c.kind == "produced":
            self.reports[c.sender] = max(self.reports.get(c.sender, 0), value)
            if c.sender == self.worker_id and info.get("incarnation") != self.incarnation:
                self.produced_prior = max(self.produced_prior, value)
        elif c.kind == "consumed":
            self.trainer_seen = True
            self.consumed_total = max(self.consumed_total, value)
            by_worker = info.get("by_worker")
            if isinstance(by_worker, dict) and self.worker_id in by_worker:
                try:
                    self.consumed_mine = max(
                        self.consumed_mine or 0, int(by_worker[self.worker_id])
                    )
                except (TypeError, ValueError):
                    pass

    def side_snapshot(self) -> dict:
        ids = "|".join(sorted(self.mixer.pool)).encode()
        return {
            "expert_transitions": self.side_info["expert_transitions"],
            "expert_pool_sha1": hashlib.sha1(ids).hexdigest(),
            "expert_pool": len(self.mixer.pool),
            "open_expert_episodes": len(self.expert_asm),
            "latest_policy_version": self.mixer.latest_version,
        }

    # --- output and timer ----------------------------------------------------

    def emit(self, now: float | None = None) -> int:
        """Send every batch the mixer can form now."""
        now = self.clock() if now is None else now
        n = 0
        latest = self.mixer.latest_version
        for b in self.mixer.poll(now, allow_expert_only=self.expert_only_allowed()):
            raw = records.encode(b)
            self.out.send(self.topics.policy_batches, raw, key=b.batch_id)
            self.m(M.batches, kind=b.kind).inc()
            self.m(M.last_expert_fraction).set(b.expert_fraction)
            n_e = 0
            for t in b.trajectories:
                if t["source"] == "expert":
                    n_e += 1
                else:
                    self.m(M.staleness).observe(max(0, latest - t["policy_version"]))
                    self.m(M.emit_latency).observe(max(0.0, time.time() - t["last_produced_at"]))
            if b.kind == "mixed":
                self.window.append((now, n_e, len(b.trajectories)))
            n += 1
        self.produced += n
        return n

    def expert_only_allowed(self) -> bool:
        """Cold-start (expert-only) batches only keep an idle trainer busy: none once
        ``stream.expert_only_max_lag`` batches wait for the trainer (a queue of them would sit ahead of
        the online groups, which would then be stale when they are trained on).  Until a trainer has
        reported (it may still be starting), at most ``_NO_TRAINER_LAG`` wait."""
        s = self.cfg.stream
        bound = int(s.expert_only_max_lag) if self.trainer_seen else _NO_TRAINER_LAG
        return bool(s.expert_only_batches) and (bound <= 0 or self.lag < bound)

    def tick(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        for traj in self.expert_asm.sweep(now):
            self.on_trajectory(traj, now)
        for traj in self.episodes.sweep(now):
            self.on_trajectory(traj, now)
        for group in self.groups.sweep(now):
            self.mixer.add_group(group, now)
        self.emit(now)
        self.backpressure(now)
        self.sync_metrics(now)

    @property
    def lag(self) -> int:
        mine = self.produced_prior + self.produced
        if self.consumed_mine is not None:
            return max(0, mine - self.consumed_mine)
        reports = dict(self.reports)
        reports[self.worker_id] = mine
        return max(0, sum(reports.values()) - self.consumed_total)

    def backpressure(self, now: float) -> None:
        mine = self.produced_prior + self.produced
        if (
            mine != self._reported and now - self._reported_at >= _REPORT_S
        ) or now - self._reported_at >= 30:
            self._reported_at, self._reported = now, mine
            self.out.send(
                self.topics.control,
                Control(
                    run_id=self.run_id,
                    kind="produced",
                    sender=self.worker_id,
                    value=float(mine),
                    info={"incarnation": self.incarnation},
                ),
                key=self.worker_id,
            )
        lag, bound = self.lag, max(1, int(self.cfg.stream.lag_bound))
        self.m(M.lag).set(lag)
        if lag > bound:
            rate = max(0.05, round(bound / lag, 3))
            changed = not self.throttled or abs(rate - self.rate) > 0.1 * self.rate
            if changed or now - self._bp_sent_at >= _BP_REPEAT_S:
                self._publish_rate(rate, lag, now)
            self.throttled = True
        elif self.throttled:
            self.throttled = False
            self._publish_rate(1.0, lag, now)

    def _publish_rate(self, rate: float, lag: int, now: float) -> None:
        self.rate, self._bp_sent_at = rate, now
        msg = Control(
            run_id=self.run_id,
            kind="backpressure",
            sender=self.worker_id,
            value=rate,
            info={
                "lag": lag,
                "produced": self.produced_prior + self.produced,
                "consumed": self.consumed_total
                if self.consumed_mine is None
                else self.consumed_mine,
                "lag_bound": self.cfg.stream.lag_bound,
            },
        )
        self.out.send(self.topics.control, msg, key=self.worker_id)
        self.m(M.backpressure_msgs).inc()
        self.m(M.rate_factor).set(rate)
        log.info(
            "back-pressure: lag %d (bound %d) -> rate %.3f", lag, self.cfg.stream.lag_bound, rate
        )

    def sync_metrics(self, now: float | None = None) -> None:
        M.sync_state(self, self.clock() if now is None else now, _WINDOW_S)

    def snapshot(self) -> dict:
        mx = self.mixer
        return {
            "produced": self.produced_prior + self.produced,
            "consumed": self.consumed_total,
            "lag": self.lag,
            "throttled": self.throttled,
            "pool": len(mx.pool),
            "pending": mx.pending_trajectories,
            "latest": mx.latest_version,
            "duplicates": self.dedupe.duplicates,
            "drops": dict(mx.drops),
            "groups": dict(self.groups.stats),
            "reuse": mx.realised_reuse,
            "mixed_fraction": mx.realised_mixed_fraction,
            "dead_letters": self.dead.count if self.dead else 0,
            "held": len(self.held),
            "processed": sum(self.counts[k] for k in ("t_real", "t_expert", "t_dream", "invalid"))
            + self.dedupe.duplicates,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "done_at": self.done_at,
        }
