"""What a collector runs next: the (task, seed) schedule, its live groups and on-policy pacing.

* ``_Schedule``: which (task, seed) each context runs next: runs of ``run_length`` episodes of one
  task per context, or (group mode, G > 1) groups of G episodes of one (task, seed), each named
  once here by a group id ``g:<prefix>:<n>`` that every member carries to the learner.
* ``_Pacer``: on-policy pacing (``collector.groups_per_version``): how many groups may be started
  for the policy version the agent acts with.
* ``collector_group_size``: G for a collector (``collector.group_size``, or auto).
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from collectors.agents import RandomAgent
from collectors.perturbed import PerturbedExpertAgent
from collectors.tasks import TaskSpec
from core.config import Config
from streams.records import new_id


class _Schedule:
    """Which (task, seed) each context runs next.

    A context runs ``run_length`` consecutive episodes of one task (so the task
    page is reused, see ``WebEnv``), then moves to the next task; context ``i``
    starts at task ``i``.  Seeds are counted per task across contexts:
    ``seed_start + (offset + n) % (seed_stop - seed_start)`` for the task's n-th episode.
    """

    def __init__(
        self,
        tasks: list[TaskSpec],
        seed_start: int,
        seed_stop: int,
        offset: int,
        limit: int,
        run_length: int,
        group_size: int = 1,
        group_prefix: str = "",
        version: Callable[[], int] | None = None,
        max_staleness: int = 2,
    ):
        self.tasks = tasks
        self.seed_start = seed_start
        self.span = max(1, seed_stop - seed_start)
        self.offset = offset % self.span
        self.limit = limit
        self.run_length = max(1, run_length)
        # group mode (G > 1): the unit of work is a group, G episodes of one (task, seed) handed to
        # whichever context asks next; groups rotate over the tasks
        self.group = max(1, int(group_size))
        self.group_index = 0
        self.group_left = 0
        self.current: tuple[TaskSpec, int] | None = None
        self.group_prefix = group_prefix or new_id()[:8]
        self.group_id = ""  # the group of the episode handed out last ('' without groups)
        # a group holds to one policy: once the agent's version is more than ``max_staleness``
        # past the one its first episode started with, the group is closed short (its members
        # so far go on as an incomplete group) and a new one starts (``groups_cut``)
        self.version, self.max_staleness = version, int(max_staleness)
        self.group_version: int | None = None
        self.groups_cut = 0
        self.k = 0
        self.per_task: Counter = Counter()
        self.slots: dict[int, list] = {}

    def next(self, slot: int = 0) -> tuple[TaskSpec, int] | None:
        if self.limit and self.k >= self.limit:
            return None
        self.k += 1
        if self.group > 1:
            if self._must_cut():
                self.group_left = 0
                self.groups_cut += 1
            if self.group_left == 0:
                t = self.tasks[self.group_index % len(self.tasks)]
                self.group_index += 1
                n = self.per_task[t.name]
                self.per_task[t.name] += 1
                self.current = (t, self.seed_start + (self.offset + n) % self.span)
                self.group_left = self.group
                # named once, here, at the source: every member carries it to the learner
                self.group_id = f"g:{self.group_prefix}:{self.group_index}"
                self.group_version = self.version() if self.version is not None else None
            self.group_left -= 1
            return self.current
        st = self.slots.setdefault(slot, [slot % len(self.tasks), 0])
        if st[1] >= self.run_length:
            st[0], st[1] = (st[0] + 1) % len(self.tasks), 0
        st[1] += 1
        t = self.tasks[st[0]]
        n = self.per_task[t.name]
        self.per_task[t.name] += 1
        return t, self.seed_start + (self.offset + n) % self.span

    def starts_group(self) -> bool:
        """Whether the next episode opens a new group (always, without groups)."""
        return self.group <= 1 or self.group_left == 0 or self._must_cut()

    def _must_cut(self) -> bool:
        """The open group's policy moved on by more than ``max_staleness`` versions."""
        if self.group_left == 0 or self.version is None or self.group_version is None:
            return False
        return self.version() - self.group_version > self.max_staleness


class _Pacer:
    """On-policy pacing (``collector.groups_per_version``): by the time the agent acts with policy
    version ``v`` (``v0``: its first), at most ``max(1, floor(gpv * (v - v0 + 1)))`` groups have
    been started; episodes of a started group never wait.  ``gpv = 1``: collect one group, then
    wait for the trainer's next checkpoint; ``gpv = 0.25``: one group every four versions."""

    def __init__(self, agent: Any, groups_per_version: float, poll_s: float = 0.25):
        self.agent, self.gpv, self.poll_s = agent, float(groups_per_version), poll_s
        self.v0: int | None = None
        self.started = 0
        self.waits = 0

    def allowed(self, version: int) -> int:
        if self.v0 is None:
            self.v0 = version
        return max(1, math.floor(self.gpv * (version - self.v0 + 1) + 1e-9))

    async def turn(self, stop: asyncio.Event, starts_group: Callable[[], bool]) -> bool:
        """Wait until the next episode may start; False if stopped while waiting.  Nothing awaits
        between a True return and the caller's ``schedule.next()``, so the check is atomic."""
        refresh = getattr(self.agent, "refresh", None)
        while not stop.is_set():
            if not starts_group():
                return True
            v = int(getattr(self.agent, "policy_version", 0) or 0)
            if v >= 0 and self.started < self.allowed(v):
                self.started += 1
                return True
            self.waits += 1
            if refresh is not None:
                r = refresh()
                if inspect.isawaitable(r):
                    await r
            if not starts_group():
                continue
            try:
                await asyncio.wait_for(stop.wait(), self.poll_s)
            except TimeoutError:
                pass
        return False


def collector_group_size(cfg: Config, source: str, agent: Any) -> int:
    """G for this collector: ``collector.group_size``, or with 0 (auto) ``stream.group_size`` for an agent
    that samples from a policy (it has a ``policy_version`` that loads checkpoints: ``latest``) and 1
    for experts, the random policy and the perturbed expert, whose episodes never reach the GSPO
    loss (a perturbed collector in groups of 8 ran each seed 8 times: 50 seeds in 400 episodes)."""
    g = int(cfg.collector.group_size)
    if g > 0:
        return g
    samples = source != "expert" and not isinstance(agent, (RandomAgent, PerturbedExpertAgent))
    return max(1, int(cfg.stream.group_size)) if samples else 1
