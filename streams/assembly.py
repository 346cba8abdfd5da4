"""Pure stream-assembly logic (no Kafka): dedupe, episodes, dream groups.

Everything here is driven by explicit ``now`` timestamps so it can be unit
tested without sleeping; the Faust agents pass ``time.monotonic()``.

- ``Deduper``: drops redelivered transitions by ``(episode_id, step)`` with a
  bounded FIFO memory, and remembers a bounded set of already-emitted
  episodes so a late redelivery cannot re-open a finished episode.
- ``EpisodeAssembler``: collects transitions per episode id; an episode is
  emitted when its final step (``done`` or ``truncated``) and every step
  before it have arrived, or after ``idle_timeout_s`` without a new step
  (then it is marked truncated and cut to its contiguous prefix; one without
  step 0 is dropped and counted as ``headless``). Open episodes are bounded (oldest evicted,
  emitted as truncated).
- ``GroupAssembler``: collects non-expert trajectories that share a
  ``group_id``, named once at the source (the collector that ran the G rollouts
  of one (task, seed), or the dream generator); it never invents a group: a
  trajectory without one is counted (``ungrouped``) and goes no further.  A
  group is emitted when all ``group_size`` members arrived or, after
  ``timeout_s``, emitted with its real size or dropped (config).  On emission
  its members are checked to agree (``check_group``: task, seed, start page,
  policy versions within ``max_staleness`` of the newest member); members that
  do not are dropped and counted by reason (``stats["mismatch_<reason>"]``).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from core.bounded import BoundedSet
from core.config import StreamConfig
from streams.records import Trajectory, Transition


class Deduper:
    """Drop transitions seen before (by ``(episode_id, step)``), bounded memory."""

    def __init__(self, capacity: int = 200_000, closed_capacity: int = 50_000):
        self.seen = BoundedSet(capacity)
        self.closed = BoundedSet(closed_capacity)
        self.duplicates = 0
        self.late = 0

    def accept(self, t: Transition) -> bool:
        if t.episode_id in self.closed:
            self.late += 1
            self.duplicates += 1
            return False
        if not self.seen.add(t.key):
            self.duplicates += 1
            return False
        return True

    def close(self, episode_id: str) -> None:
        """Mark an episode as emitted; later steps of it are duplicates."""
        self.closed.add(episode_id)


@dataclass
class _Open:
    steps: dict = field(default_factory=dict)  # step -> Transition
    last_seen: float = 0.0
    final_step: int | None = None


class EpisodeAssembler:
    def __init__(
        self,
        idle_timeout_s: float = StreamConfig.episode_idle_timeout_s,
        max_open: int = 20_000,
        deduper: Deduper | None = None,
        next_obs: bool = True,
    ):
        """``next_obs=False``: the trajectories' steps carry no ``next_obs`` (the stream worker's
        episodes go into policy batches only: ``Trajectory.from_transitions``)."""
        self.next_obs = next_obs
        self.idle_timeout_s = float(idle_timeout_s)
        self.max_open = max(1, int(max_open))
        self.deduper = deduper
        self.open: OrderedDict[str, _Open] = OrderedDict()  # least recently touched first
        self.stats: Counter = Counter()
        self._pending: list[Trajectory] = []  # evicted episodes, handed out by sweep()

    def add(self, t: Transition, now: float) -> Trajectory | None:
        """Add one (deduplicated) transition; return the finished trajectory, if any."""
        ep = self.open.get(t.episode_id)
        if ep is None:
            ep = self.open[t.episode_id] = _Open()
        else:
            self.open.move_to_end(t.episode_id)
        ep.steps[t.step] = t
        ep.last_seen = now
        if t.final:
            ep.final_step = t.step if ep.final_step is None else min(ep.final_step, t.step)
        out = None
        if ep.final_step is not None and all(s in ep.steps for s in range(ep.final_step + 1)):
            out = self._emit(t.episode_id, truncated=False)
        if len(self.open) > self.max_open:
            oldest = next(iter(self.open))
            self.stats["evicted"] += 1
            evicted = self._emit(oldest, truncated=True)
            self._pending.append(evicted)  # handed out by the next sweep()
        return out

    def sweep(self, now: float) -> list[Trajectory]:
        """Emit (truncated) every episode idle for longer than the timeout."""
        out, self._pending = self._pending, []
        expired = [
            eid for eid, ep in self.open.items() if now - ep.last_seen >= self.idle_timeout_s
        ]
        for eid in expired:
            self.stats["idle_timeout"] += 1
            out.append(self._emit(eid, truncated=True))
        # an episode whose first steps never arrived (e.g. committed before a restart) is unusable
        kept = [t for t in out if t.transitions[0]["step"] == 0]
        self.stats["headless"] += len(out) - len(kept)
        return kept

    def _emit(self, episode_id: str, truncated: bool) -> Trajectory:
        ep = self.open.pop(episode_id)
        steps = [ep.steps[s] for s in sorted(ep.steps)]
        if ep.final_step is not None:
            steps = [t for t in steps if t.step <= ep.final_step]
        if truncated:
            # keep the contiguous prefix only: a gap means the steps after it are unusable
            prefix = []
            for i, t in enumerate(steps):
                if t.step != (steps[0].step + i):
                    break
                prefix.append(t)
            steps = prefix or steps[:1]
        if self.deduper is not None:
            self.deduper.close(episode_id)
        self.stats["truncated" if truncated else "complete"] += 1
        return Trajectory.from_transitions(
            steps, truncated=truncated, deep=False, next_obs=self.next_obs
        )

    def __len__(self) -> int:
        return len(self.open)


def _start_page(traj: Trajectory) -> tuple:
    obs = traj.transitions[0].get("obs") or {}
    return obs.get("instruction", ""), obs.get("tree", "")


def check_group(members: list[Trajectory], max_staleness: int) -> tuple[list[Trajectory], Counter]:
    """(members that agree, Counter of rejected members by reason).

    The reference is the most common (task, seed, start page) of the group; a member that
    differs in task, seed or start page is rejected (``task``, ``seed``, ``start_page``), and so is
    one whose policy version is older than the newest member's minus ``max_staleness``
    (``version``).  Deterministic: ties go to the first member in episode-id order."""
    keys = [(t.task, t.seed, _start_page(t)) for t in members]
    ref = Counter(keys).most_common(1)[0][0] if keys else None
    rejected: Counter = Counter()
    agree = []
    for t, k in zip(members, keys, strict=True):
        if k != ref:
            rejected["task" if k[0] != ref[0] else "seed" if k[1] != ref[1] else "start_page"] += 1
        else:
            agree.append(t)
    newest = max((t.policy_version for t in agree), default=0)
    kept = [t for t in agree if t.policy_version >= newest - max_staleness]
    rejected["version"] += len(agree) - len(kept)
    return kept, +rejected


@dataclass
class _Group:
    members: dict = field(default_factory=dict)  # episode_id -> Trajectory
    first_seen: float = 0.0


class GroupAssembler:
    def __init__(
        self,
        group_size: int = StreamConfig.group_size,
        timeout_s: float = StreamConfig.group_timeout_s,
        emit_incomplete: bool = StreamConfig.emit_incomplete_groups,
        max_open: int = 10_000,
        max_staleness: int = StreamConfig.max_staleness,
    ):
        self.group_size = max(1, int(group_size))
        self.max_staleness = int(max_staleness)
        self.timeout_s = float(timeout_s)
        self.emit_incomplete = bool(emit_incomplete)
        self.max_open = max(1, int(max_open))
        self.open: OrderedDict[str, _Group] = OrderedDict()
        # complete, incomplete_emitted, incomplete_dropped, ungrouped, mismatch_<reason>
        self.stats: Counter = Counter()
        self.sizes: Counter = Counter()  # emitted group size -> count
        self._overflow: list[list[Trajectory]] = []

    def add(self, traj: Trajectory, now: float) -> list[Trajectory] | None:
        """Add one trajectory; return its group once complete.  Without a ``group_id`` it is
        counted (``ungrouped``) and dropped: the learner must never see it as a group of one."""
        key = traj.group_id
        if not key:
            self.stats["ungrouped"] += 1
            return None
        g = self.open.get(key)
        if g is None:
            g = self.open[key] = _Group(first_seen=now)
        g.members[traj.episode_id] = traj
        if len(g.members) >= self.group_size:
            self.stats["complete"] += 1
            return self._emit(key)  # None when no member agreed (counted)
        if len(self.open) > self.max_open:
            oldest = next(iter(self.open))
            res = self._timeout(oldest)
            if res:
                self._overflow.append(res)
        return None

    def sweep(self, now: float) -> list[list[Trajectory]]:
        out, self._overflow = self._overflow, []
        for key in [k for k, g in self.open.items() if now - g.first_seen >= self.timeout_s]:
            res = self._timeout(key)
            if res:
                out.append(res)
        return out

    def _timeout(self, key: str) -> list[Trajectory] | None:
        if self.emit_incomplete:
            self.stats["incomplete_emitted"] += 1
            return self._emit(key)
        self.stats["incomplete_dropped"] += 1
        self.open.pop(key)
        return None

    def _emit(self, key: str) -> list[Trajectory] | None:
        g = self.open.pop(key)
        members, rejected = check_group(
            sorted(g.members.values(), key=lambda t: t.episode_id), self.max_staleness
        )
        for reason, n in rejected.items():
            self.stats[f"mismatch_{reason}"] += n
        if not members:
            return None
        self.sizes[len(members)] += 1
        return members

    def __len__(self) -> int:
        return len(self.open)
