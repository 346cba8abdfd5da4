"""Prometheus metrics of the stream worker, declared once (default registry).

Names follow ``dynaweb_stream_<what>_<unit>``; every series carries the labels
``run`` and ``worker`` (the ``dynaweb_client_*`` series at the end are any component's
``streams.delivery.Publisher``: labels ``run`` and ``client``). Consumer lag is measured in
training batches (``lag_batches``: produced - consumed by the trainer) and in held source
messages (``held_messages``); a lag in records would need the broker's
high-water mark, which Tansu reports wrongly (docs/broker.md, defect 1). Counters are exposed with the ``_total`` suffix that
prometheus_client appends.
"""

from __future__ import annotations

from collections import Counter as _Counter

from prometheus_client import Counter, Gauge, Histogram

L = ("run", "worker")
# ``streams.records.RecordError`` reasons, initialised at 0 (others still count when they occur)
DEAD_LETTER_REASONS = (
    "not_json",
    "empty",
    "oversize",
    "schema_version",
    "missing_field",
    "wrong_type",
    "bad_value",
    "unknown_type",
    "unexpected_type",
    "source_mismatch",
    "wrong_run",
)

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
stale_dropped_dreams = Counter(
    "dynaweb_stream_stale_dropped_dream_trajectories",
    "Dreamed trajectories the mixer dropped as stale (with dynaweb_trainer_stale_dropped_total"
    "{source='dream'}, over dynaweb_dream_rollouts_total: the dreams' stale share).",
    L,
)
groups = Counter(
    "dynaweb_stream_groups",
    "Dream/live groups closed, by outcome (complete, incomplete_emitted, incomplete_dropped); also trajectories "
    "refused: ungrouped (no group id from the source), mismatch_<task|seed|start_page|version> (a member that "
    "disagrees with its group).",
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
recovery_skipped = Counter(
    "dynaweb_stream_closed_episode_skipped_transitions",
    "Transitions of episodes already emitted (re-read after a restart or rebalance, or late).",
    L,
)
held = Gauge(
    "dynaweb_stream_held_messages",
    "Source messages whose ack is held until their episode is emitted (the commit point waits).",
    L,
)
expert_fraction_window = Gauge(
    "dynaweb_stream_expert_fraction_window_ratio",
    "Realised expert fraction over the mixed batches of the last 60 s.",
    L,
)
staleness = Histogram(
    "dynaweb_stream_staleness_versions",
    "Policy versions between the latest and a batched non-expert trajectory's version.",
    L,
    buckets=(0, 1, 2, 3, 4, 6, 8, 16),
)
emit_latency = Histogram(
    "dynaweb_stream_emit_latency_seconds",
    "From a trajectory's last transition being produced to its batch being emitted.",
    L,
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)


# --- clients: the Publisher of any component (``streams.delivery``), labels run and client ------
C = ("run", "client")
client_publish_errors = Counter(
    "dynaweb_client_publish_errors",
    "Failed deliveries of a component's Publisher (each record is re-sent, or counted lost).",
    C,
)
client_acked = Counter(
    "dynaweb_client_acked_records",
    "Records the broker acknowledged (acks=all), by topic: what the component may count as "
    "delivered (dynaweb chaos compares it with what a reader finds in the topic).",
    C + ("topic",),
)
client_rebuilds = Counter(
    "dynaweb_client_producer_rebuilds",
    "Kafka producers replaced after a fatal or failing state.",
    C,
)
client_resent = Counter(
    "dynaweb_client_resent_records", "Records re-sent after a failed delivery.", C
)
client_lost = Counter(
    "dynaweb_client_lost_records",
    "Records given up, by reason (resend_buffer_full, unsent_at_close, or the error of a record "
    "no broker takes, e.g. MessageSizeTooLargeError).",
    C + ("reason",),
)
client_healthy = Gauge(
    "dynaweb_client_publisher_healthy",
    "1 while the Publisher delivers; 0 while deliveries fail or records wait unacknowledged "
    "for over 30 s.",
    C,
)


class Bound:
    """The worker's metrics with run/worker bound, plus delta syncing of plain Counters."""

    def __init__(self, run: str, worker: str):
        self.run, self.worker = run, worker
        self._last: dict[tuple, int] = {}
        self._children: dict[tuple, object] = {}
        self.init_series()

    def init_series(self) -> None:
        """Create the error/drop counters at 0 so dashboards and alerts see series before
        the first increment (a counter without children exports nothing)."""
        for metric in (
            duplicates,
            stale_dropped,
            stale_dropped_dreams,
            publish_errors,
            backpressure_msgs,
            reuse_over_bound,
        ):
            self(metric)
        for reason in DEAD_LETTER_REASONS:
            self(dead_letters, reason=reason)
        for reason in ("stale", "queue_full"):
            self(dropped, reason=reason)
        self(rate_factor).set(1.0)  # full speed until back-pressure says otherwise

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

    def sync_value(self, metric, value: int, tag: str = "", **labels: str) -> None:
        key = (id(metric), tag)
        delta = value - self._last.get(key, 0)
        if delta > 0:
            self(metric, **labels).inc(delta)
            self._last[key] = value

    def dead_letter_counter(self) -> _ReasonCounter:
        return _ReasonCounter(self)


class _ReasonCounter:
    """Adapter for ``streams.kafka.DeadLetters(counter=...)``: ``.labels(reason=)``."""

    def __init__(self, b: Bound):
        self.b = b

    def labels(self, reason: str):
        return self.b(dead_letters, reason=reason)


def sync_state(st, now: float, window_s: float) -> None:
    """Export a ``streams.state.StreamState`` (counters are synced by delta)."""
    mx, m, c = st.mixer, st.m, st.counts
    for src in ("real", "expert", "dream"):
        m.sync_value(transitions, c["t_" + src], tag=src, source=src)
    m.sync_value(duplicates, st.dedupe.duplicates)
    m.sync_value(forwarded, c["fwd_train"], tag="train", dest="train")
    m.sync_value(forwarded, c["fwd_eval"], tag="eval", dest="eval")
    m.sync(dropped, mx.drops, label="reason")
    m.sync_value(stale_dropped, mx.drops["stale"])
    m.sync_value(stale_dropped_dreams, mx.stale_by_source["dream"])
    m.sync(groups, st.groups.stats, label="outcome")
    m.sync(episodes, st.episodes.stats, label="outcome")
    m.sync(batch_trajectories, mx.emitted_by_source, label="source")
    m.sync_value(reuse_over_bound, mx.stats["reuse_over_bound"])
    m.sync_value(recovery_skipped, st.dedupe.late)
    closed = sum(
        st.groups.stats[k] for k in ("complete", "incomplete_emitted", "incomplete_dropped")
    )
    m(group_completeness).set(st.groups.stats["complete"] / closed if closed else 1.0)
    m(expert_fraction).set(mx.realised_mixed_fraction)
    while st.window and now - st.window[0][0] > window_s:
        st.window.popleft()
    n = sum(x[2] for x in st.window)
    m(expert_fraction_window).set(sum(x[1] for x in st.window) / n if n else 0.0)
    m(pool_size).set(len(mx.pool))
    m(reuse).set(mx.realised_reuse)
    m(pending).set(mx.pending_trajectories)
    m(open_episodes).set(len(st.episodes))
    m(open_groups).set(len(st.groups))
    m(held).set(sum(len(v) for v in st.held.values()))
    m(latest_version).set(mx.latest_version)
