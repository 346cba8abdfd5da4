"""The world-model study's sampler and schedule (``evaluation.studies.world_model.train.train_world_model``):
shuffled epochs over the training transitions, with a share of every batch drawn from the steps
that end an episode, each task's as often (``wm_study.terminal_share``); the learning rate's
warm-up and cosine decay."""

from __future__ import annotations

import math
import random


def batches(
    n: int,
    batch: int,
    rng: random.Random,
    extra: list[list[int]] | None = None,
    share: float = 0.0,
):
    """Endless shuffled epochs of index batches (the last short batch of an epoch is dropped
    when there is more than one batch per epoch).

    ``extra`` (groups of indices) and ``share``: ``round(batch * share)`` places of every batch
    (never all of them) are filled from ``extra``, each from a group drawn uniformly, then the
    group's next index (its own endless shuffled passes); the rest from the epochs over all
    ``n``.  The study passes the terminal steps grouped by task (``wm_study.terminal_share``,
    ``terminal_indices``), so the reward and done heads see the steps that decide an episode
    more often than their share of the data, every task as often, whichever task holds most."""
    if n <= 0:
        raise ValueError("no training transitions")
    b = max(1, min(batch, n))
    groups = [g for g in extra or [] if g]
    k = min(b - 1, round(b * share)) if groups and share > 0 else 0
    main = _epochs(list(range(n)), b - k, rng)
    more = [_cycle(list(g), rng) for g in groups]
    while True:
        yield next(main) + [next(more[rng.randrange(len(more))]) for _ in range(k)]


def _epochs(idx: list[int], b: int, rng: random.Random):
    n = len(idx)
    while True:
        rng.shuffle(idx)
        stop = n - n % b if n >= 2 * b else n
        for i in range(0, stop, b):
            yield idx[i : i + b]


def _cycle(idx: list[int], rng: random.Random):
    """The items of ``idx`` one at a time, in a new shuffle every pass."""
    while idx:
        rng.shuffle(idx)
        yield from idx


def terminal_indices(transitions: list) -> list[list[int]]:
    """Positions of the steps that end an episode (``done``), where the reward is decided,
    grouped by task (in order of first appearance)."""
    by: dict[str, list[int]] = {}
    for i, t in enumerate(transitions):
        if t.done:
            by.setdefault(t.task, []).append(i)
    return list(by.values())


def lr_at(step: int, progress: float, base: float, warmup: int, min_fraction: float = 0.0) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``min_fraction * base`` at ``progress`` 1.

    ``progress``: the share of the run done (the larger of steps done / steps and
    seconds spent / time budget, so the decay ends whichever limit comes first).
    """
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    p = min(1.0, max(0.0, progress))
    return base * (min_fraction + (1.0 - min_fraction) * 0.5 * (1.0 + math.cos(math.pi * p)))
