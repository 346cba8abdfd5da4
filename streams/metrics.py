"""Prometheus metrics of the stream worker, declared once (default registry).

Names follow ``dynaweb_stream_<what>_<unit>``; every series carries the labels
``run`` and ``worker``. Counters are exposed with the ``_total`` suffix that
prometheus_client appends.
"""

from __future__ import annotations

from collections import Counter as _Counter

from prometheus_client import Counter, Gauge

L = ("run", "worker")

transitions = Counter(
    "dynaweb_stream_transitions", "Valid transitions consumed, by source.", L + ("source",)
)
duplicates = Counter(
    "dynaweb_stream_duplicates", "Transitions dropped as duplicates (episode_id, step).", L
)
dead_letters = Counter(
    "dynaweb_stream_dead_letters",
    "Messages routed to the dead-letter topic, by reason.",
    L + ("reason",),
)
trajectories = Counter(
    "dynaweb_stream_trajectories",
    "Assembled trajectories, by source and outcome.",
    L + ("source", "outcome"),
)
forwarded = Counter(
    "dynaweb_stream_forwarded_transitions",
    "Real/expert transitions forwarded, by destination (train/eval).",
    L + ("dest",),
)
episodes = Counter(
    "dynaweb_stream_episodes",
    "Episodes closed by the assembler, by outcome (complete, idle_timeout, evicted, headless).",
    L + ("outcome",),
)
batches = Counter("dynaweb_stream_batches", "Training batches emitted, by kind.", L + ("kind",))
batch_trajectories = Counter(
    "dynaweb_stream_batch_trajectories",
    "Trajectories placed in training batches, by source.",
    L + ("source",),
)
dropped = Counter(
    "dynaweb_stream_dropped_trajectories",
    "Trajectories dropped by the mixer, by reason (stale, queue_full, ...).",
    L + ("reason",),
)
stale_dropped = Counter(
    "dynaweb_stream_stale_dropped_trajectories", "Dream/on-policy trajectories dropped as stale.", L
)
groups = Counter(
    "dynaweb_stream_groups",
    "Dream/live groups closed, by outcome (complete, incomplete_emitted, incomplete_dropped).",
    L + ("outcome",),
)
reuse_over_bound = Counter(
    "dynaweb_stream_expert_reuse_over_bound_samples",
    "Expert samples beyond samples_per_insert (fraction won).",
    L,
)
publish_errors = Counter(
    "dynaweb_stream_publish_errors", "Messages the producer failed to deliver.", L
)
backpressure_msgs = Counter(
    "dynaweb_stream_backpressure_messages", "Back-pressure control messages published.", L
)

expert_fraction = Gauge(
    "dynaweb_stream_expert_fraction_ratio", "Realised expert fraction over all mixed batches.", L
)
last_expert_fraction = Gauge(
    "dynaweb_stream_last_batch_expert_fraction_ratio", "Expert fraction of the last batch.", L
)
group_completeness = Gauge(
    "dynaweb_stream_group_completeness_ratio", "Share of closed groups that were complete.", L
)
lag = Gauge(
    "dynaweb_stream_lag_batches", "Batches produced minus batches the trainer reported consumed.", L
)
rate_factor = Gauge(
    "dynaweb_stream_backpressure_rate_ratio",
    "Rate factor last asked of dream generators (1 = full speed).",
    L,
)
pool_size = Gauge(
    "dynaweb_stream_expert_pool_trajectories", "Expert trajectories in the mixing pool.", L
)
reuse = Gauge(
    "dynaweb_stream_expert_reuse_ratio", "Realised expert samples per expert inserted.", L
)
pending = Gauge(
    "dynaweb_stream_pending_trajectories", "Non-expert trajectories queued for a batch.", L
)
open_episodes = Gauge("dynaweb_stream_open_episodes", "Episodes being assembled.", L)
open_groups = Gauge("dynaweb_stream_open_groups", "Groups being assembled.", L)
latest_version = Gauge(
    "dynaweb_stream_latest_policy_version", "Latest policy version known to the worker.", L
)


class Bound:
    """The worker's metrics with run/worker bound, plus delta syncing of plain Counters."""

    def __init__(self, run: str, worker: str):
        self.run, self.worker = run, worker
        self._last: dict[tuple, int] = {}
        self._children: dict[tuple, object] = {}

    def __call__(self, metric, **labels):
        key = (id(metric), *sorted(labels.items()))
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(run=self.run, worker=self.worker, **labels)
        return child

    def sync(
        self, metric, counts: _Counter, label: str | None = None, keys: tuple | None = None
    ) -> None:
        """Increment ``metric`` by what ``counts`` grew since the last sync."""
        for k, v in list(counts.items()):
            if keys is not None and k not in keys:
                continue
            key = (id(metric), id(counts), k)
            delta = v - self._last.get(key, 0)
            if delta > 0:
                child = self(metric, **({label: k} if label else {}))
                child.inc(delta)
                self._last[key] = v

    def sync_value(self, metric, value: int, tag: str = "") -> None:
        key = (id(metric), tag)
        delta = value - self._last.get(key, 0)
        if delta > 0:
            self(metric).inc(delta)
            self._last[key] = value

    def dead_letter_counter(self) -> _ReasonCounter:
        return _ReasonCounter(self)


class _ReasonCounter:
    """Adapter for ``streams.kafka.DeadLetters(counter=...)``: ``.labels(reason=)``."""

    def __init__(self, b: Bound):
        self.b = b

    def labels(self, reason: str):
        return self.b(dead_letters, reason=reason)
