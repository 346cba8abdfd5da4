"""Bounded memory for "seen before?" checks (the trainer's and the stream worker's dedupe)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable


class BoundedSet:
    """Insertion-ordered set that forgets its oldest members beyond ``capacity``."""

    def __init__(self, capacity: int = 100_000):
        self.capacity = max(1, int(capacity))
        self._d: OrderedDict = OrderedDict()

    def add(self, key: Hashable) -> bool:
        """Add ``key``; return False if it was already present."""
        if key in self._d:
            return False
        self._d[key] = None
        if len(self._d) > self.capacity:
            self._d.popitem(last=False)
        return True

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)
