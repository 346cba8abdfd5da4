"""The trainer's consumption signal for dream pacing: per dream producer and policy version, the
dreamed episodes that reached the policy loss.  The trainer publishes it in its progress message
(``Control(kind="consumed")``, ``info["dreams"]``) for the versions still fresh; each dream
generator keeps at most a window of its episodes in flight ahead of it (``models/dream/pacing.py``)."""

from __future__ import annotations

from collections.abc import Iterable


class DreamConsumption:
    def __init__(self) -> None:
        self.counts: dict[str, dict[int, int]] = {}  # producer id -> policy version -> episodes

    def add(self, trajs: Iterable) -> None:
        """Count the dreamed trajectories of a batch that reached the loss (by their producer, read
        from their first step, and their policy version)."""
        for t in trajs:
            if t.source != "dream" or not t.transitions:
                continue
            producer = str(t.transitions[0].get("producer_id") or "")
            by_v = self.counts.setdefault(producer, {})
            v = int(t.policy_version)
            by_v[v] = by_v.get(v, 0) + 1

    def report(self, version: int, max_staleness: int) -> dict[str, dict[str, int]]:
        """The counts of the versions still fresh (``>= version - max_staleness``), the older ones
        forgotten: ``{producer: {str(version): episodes}}`` (string keys: a JSON-safe message)."""
        floor = int(version) - int(max_staleness)
        out: dict[str, dict[str, int]] = {}
        for producer in list(self.counts):
            by_v = {v: n for v, n in self.counts[producer].items() if v >= floor}
            if by_v:
                self.counts[producer] = by_v
                out[producer] = {str(v): n for v, n in sorted(by_v.items())}
            else:
                del self.counts[producer]
        return out
