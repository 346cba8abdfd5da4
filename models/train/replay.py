"""What the trainer keeps of the world-model topics: the replay its world-model batches are drawn
from, and the held-out window its fidelity is checked on.

Rank 0 reads ``train.world_model`` (real and expert transitions) into the replay, deduplicated by
transition key (the broker may deliver a record again), and ``eval.world_model`` into the held-out
window; ``batch`` draws a world-model batch (``world_model_batch``).  The replay holds each
transition packed (``Packed``: its key, whether it ends an episode, and its record as
zlib-compressed JSON) and decodes only the ones a batch draws, so 20,000 transitions of a
real application's long pages are held as compressed bytes rather than as decoded pages.  Real episode ends (done or
truncated, source ``real``) of either topic also wait in ``unjudged`` until the trainer judges the
world model on them before its next step (``models.train.trust_judge``, the per-task trust gate).  The sizes bound rank 0's
memory; they are not a correctness bound (an evicted transition was trained on or drawn from).
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.bounded import BoundedSet
from streams import records

WM_REPLAY = 20_000  # the replay the world model's batches are drawn from (newest kept)
WM_FRESH = 256  # transitions not yet trained on: up to half of each batch comes from these first
WM_TERMINAL = 5_000  # the replay's episode-ending steps, drawn at ``trainer.wm_terminal_share``
WM_SEEN = 500_000  # transition keys remembered to drop the broker's redeliveries
EVAL_WINDOW = 64  # held-out transitions kept; the trainer's fidelity check reads the newest 8
UNJUDGED = 1_024  # real episode ends waiting to be judged (the oldest dropped past this)


@dataclass(frozen=True, slots=True)
class Packed:
    """A transition as the replay keeps it: ``blob`` is its record's JSON, zlib-compressed."""

    key: tuple[str, int]
    done: bool
    blob: bytes

    @classmethod
    def of(cls, t: Any, raw: bytes | None = None) -> Packed:
        """``t`` packed; ``raw``: its record's JSON as read (encoded from ``t`` when absent)."""
        return cls(
            t.key, bool(t.done), zlib.compress(raw if raw is not None else records.encode(t), 1)
        )

    def unpack(self) -> Any:
        return records.decode(zlib.decompress(self.blob), expect="transition")


class WorldModelReplay:
    def __init__(self) -> None:
        self.seen = BoundedSet(WM_SEEN)
        self.buffer: deque = deque(maxlen=WM_REPLAY)
        self.fresh: deque = deque(maxlen=WM_FRESH)
        self.terminal: deque = deque(maxlen=WM_TERMINAL)  # the buffer's done steps
        self.eval_window: deque = deque(maxlen=EVAL_WINDOW)
        self.unjudged: deque = deque(maxlen=UNJUDGED)

    def __bool__(self) -> bool:
        """Whether there is anything to train the world model on."""
        return bool(self.buffer)

    def add(self, t: Any, raw: bytes | None = None) -> bool:
        """A training transition into the replay (``raw``: its record as read, kept packed);
        False for one seen before (not added)."""
        if not self.seen.add(t.key):
            return False
        p = Packed.of(t, raw)
        self.buffer.append(p)
        self.fresh.append(p)
        if t.done:
            self.terminal.append(p)
        self._to_judge(t)
        return True

    def add_eval(self, t: Any) -> None:
        """A held-out transition into the fidelity window."""
        self.eval_window.append(t)
        self._to_judge(t)

    def _to_judge(self, t: Any) -> None:
        if t.source == "real" and t.final:
            self.unjudged.append(t)

    def take_unjudged(self) -> list:
        """The real episode ends not judged yet (emptied)."""
        out = list(self.unjudged)
        self.unjudged.clear()
        return out

    def batch(self, n: int, terminal_share: float = 0.0) -> list:
        """A world-model batch of ``n`` transitions (``world_model_batch``), decoded."""
        drawn = world_model_batch(self.fresh, self.buffer, self.terminal, n, terminal_share)
        return [p.unpack() for p in drawn]


def world_model_batch(
    fresh: deque,
    buffer: Sequence,
    terminal: Sequence,
    n: int,
    terminal_share: float = 0.0,
    rng: Any = random,
) -> list:
    """The trainer's world-model batch of ``n``: the newest transitions first (up to half, taken
    off ``fresh``), ``round(n * terminal_share)`` drawn from ``terminal`` (the steps that end an
    episode, where the reward heads learn success from failure: a few percent of the data;
    ``trainer.wm_terminal_share``, as ``wm_study.terminal_share`` offline), the rest drawn from
    ``buffer``.  Fewer when the buffers hold fewer."""
    got = [fresh.popleft() for _ in range(min(len(fresh), n // 2 or 1))]
    k = min(len(terminal), round(n * terminal_share), n - len(got)) if terminal_share > 0 else 0
    got += rng.sample(list(terminal), k) if k else []
    return got + rng.sample(list(buffer), min(len(buffer), n - len(got)))
