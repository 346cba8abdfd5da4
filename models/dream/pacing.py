"""Dream pacing: a dream generator produces only as fast as the trainer consumes its dreams.

Pure logic (no Kafka, no clock of its own: callers pass ``now``).

The contract: the trainer's progress message (``Control(kind="consumed")`` on the control topic,
about once a second) carries its policy version and, per dream producer, how many of that
producer's dreamed episodes reached the policy loss, per policy version, for the versions still
fresh (``info["dreams"] = {producer_id: {version: episodes}}``;
``models.train.trainer.Trainer.publish_progress``).  ``CreditWindow`` keeps this producer's
ledger: episodes published per policy version, and the trainer's count of them consumed.  An
episode is *in flight* until the trainer consumed it, or until its version fell below the
staleness floor (``trainer version - stream.max_staleness``: it is dropped wherever it waits, so
it no longer holds a credit).  The generator dreams a round only while fewer than the window's
episodes are in flight.

The window (``window_episodes``) is sized so that a full window is consumed within the shortest
time a version stays fresh: ``(max_staleness - 1) x checkpoint_every + 1`` policy steps of
``batch_trajectories x (1 - expert_fraction) x dream share`` dreamed episodes each
(``auto_window_groups``); it is shared by the producers the trainer reports (several dreamers
split it).

Never a deadlock: the trainer's counts are kept as the highest seen per version (a restarted
trainer counting again from 0 takes back nothing), and when nothing in flight settled for
``timeout_s`` (no trainer, a restart, episodes lost before the loss) the in-flight episodes are
written off, so the generator dreams one more window and waits again: a bounded rate, never a
spin and never a stop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def auto_window_groups(
    max_staleness: int,
    checkpoint_every: int,
    batch_trajectories: int,
    expert_fraction: float,
    dream_share: float,
    group_size: int,
) -> int:
    """Groups a producer may keep in flight: the dreamed episodes the trainer consumes in the
    shortest time a version stays fresh (a version made just before a checkpoint: ``(max_staleness
    - 1) x checkpoint_every + 1`` policy steps), at least one group."""
    online = max(1, round(batch_trajectories * (1.0 - expert_fraction)))
    per_step = online * max(0.0, min(1.0, dream_share))
    fresh_steps = max(1, (max_staleness - 1) * max(1, checkpoint_every) + 1)
    return max(1, math.floor(fresh_steps * per_step / max(1, group_size)))


@dataclass
class CreditWindow:
    """One producer's dreamed episodes in flight ahead of the trainer's consumption."""

    window_episodes: int
    max_staleness: int
    timeout_s: float = 60.0
    produced: dict[int, int] = field(default_factory=dict)  # policy version -> episodes published
    consumed: dict[int, int] = field(default_factory=dict)  # policy version -> trainer's count
    written_off: dict[int, int] = field(default_factory=dict)  # given up after a timeout
    trainer_version: int = -1  # the highest version the trainer (or a checkpoint) reported
    producers: int = 1  # producers sharing the window (this one and those the trainer reports)
    last_signal_at: float | None = None  # the trainer's last consumption message
    last_settled_at: float = 0.0  # when the in-flight count last went down (or started)
    written_off_total: int = 0
    waiting_since: float | None = None  # a stale policy's wait for the reload began

    def floor(self) -> int:
        """The oldest policy version still fresh; older episodes hold no credit."""
        return self.trainer_version - self.max_staleness

    def in_flight(self) -> int:
        f = self.floor()
        return sum(
            max(0, n - self.consumed.get(v, 0) - self.written_off.get(v, 0))
            for v, n in self.produced.items()
            if v >= f
        )

    def limit(self) -> int:
        """This producer's share of the window (at least one episode)."""
        return max(1, self.window_episodes // max(1, self.producers))

    def room(self) -> int:
        """Episodes that may still be published before the window is full."""
        return max(0, self.limit() - self.in_flight())

    def groups_allowed(self, wanted: int, group_size: int) -> int:
        """How many of ``wanted`` groups the next round may dream: those the window has room for
        (a part of a group counts as one), at least one (``decide`` said a round may start)."""
        return max(1, min(int(wanted), math.ceil(self.room() / max(1, group_size))))

    def on_produced(self, version: int, episodes: int, now: float) -> None:
        if self.in_flight() == 0:
            self.last_settled_at = now  # the timeout counts from the first episode in flight
        self.produced[version] = self.produced.get(version, 0) + int(episodes)

    def on_version(self, version: int, now: float) -> None:
        """A policy version learned elsewhere (a checkpoint announcement, the loaded policy)."""
        before = self.in_flight()
        self.trainer_version = max(self.trainer_version, int(version))
        self._settled(before, now)

    def on_consumed(self, version: int, by_version: dict, producers: int, now: float) -> None:
        """The trainer's progress message: its version, this producer's consumed episodes per
        policy version, and how many producers it reports (this one included)."""
        before = self.in_flight()
        self.trainer_version = max(self.trainer_version, int(version))
        for v, n in by_version.items():
            self.consumed[int(v)] = max(self.consumed.get(int(v), 0), int(n))
        self.last_signal_at = now
        self.producers = max(1, int(producers))
        self._settled(before, now)

    def _settled(self, before: int, now: float) -> None:
        if self.in_flight() < before:
            self.last_settled_at = now
        f = self.floor()  # older versions hold no credit: forget them
        for d in (self.produced, self.consumed, self.written_off):
            for v in [v for v in d if v < f]:
                del d[v]

    def decide(self, now: float, version: int | None = None) -> tuple[bool, str]:
        """Whether a round stamped with policy ``version`` may be dreamed now, and why not (empty
        when it may).  A round whose version is below the floor already would be dropped whole:
        it waits for the reload (at most ``timeout_s``, then one round goes)."""
        if version is not None and version < self.floor():
            if self.waiting_since is None:
                self.waiting_since = now
            if now - self.waiting_since < self.timeout_s:
                return False, (
                    f"policy v{version} is stale already (trainer at v{self.trainer_version}, "
                    f"max_staleness {self.max_staleness}): waiting for the reload"
                )
        elif self.in_flight() >= self.limit():
            if now - self.last_settled_at >= self.timeout_s:
                self.write_off(now)
            else:
                return False, self._full_reason(now)
        self.waiting_since = None
        return True, ""

    def _full_reason(self, now: float) -> str:
        n, lim = self.in_flight(), self.limit()
        if self.last_signal_at is None:
            why = "no consumption message from the trainer yet"
        else:
            why = f"trainer's last consumption message {now - self.last_signal_at:.0f}s ago"
        return f"{n} dreamed episodes in flight >= window {lim} ({why})"

    def write_off(self, now: float) -> int:
        """Give up the episodes in flight (nothing settled for ``timeout_s``); returns how many."""
        f = self.floor()
        n = 0
        for v, k in self.produced.items():
            if v >= f:
                left = max(0, k - self.consumed.get(v, 0) - self.written_off.get(v, 0))
                self.written_off[v] = self.written_off.get(v, 0) + left
                n += left
        self.written_off_total += n
        self.last_settled_at = now
        return n
