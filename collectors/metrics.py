"""Prometheus metrics of a collector, declared once (``dynaweb_collector_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

STEPS = Counter(
    "dynaweb_collector_steps_total", "Live browser steps.", ["run", "collector", "policy", "task"]
)
EPISODES = Counter(
    "dynaweb_collector_episodes_total",
    "Episodes by outcome (success, failure, truncated).",
    ["run", "collector", "policy", "task", "outcome"],
)
SUCCESS_RATE = Gauge(
    "dynaweb_collector_success_rate",
    "Success rate over the last 50 episodes per task.",
    ["run", "collector", "policy", "task"],
)
STEP_LATENCY = Histogram(
    "dynaweb_collector_step_latency_seconds",
    "Action + observation latency.",
    ["run", "collector", "policy"],
    buckets=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
)
BLOCKED = Counter(
    "dynaweb_collector_blocked_requests_total",
    "Requests aborted by the origin allowlist.",
    ["run", "collector"],
)
RESTARTS = Counter(
    "dynaweb_collector_browser_restarts_total",
    "Page/browser restarts after a crash.",
    ["run", "collector"],
)
TIMEOUTS = Counter(
    "dynaweb_collector_timeouts_total",
    "Episodes ended by the MiniWoB time limit.",
    ["run", "collector", "task"],
)
HEARTBEAT = Gauge(
    "dynaweb_collector_heartbeat_timestamp_seconds", "Last heartbeat sent.", ["run", "collector"]
)
POLICY_VERSION = Gauge(
    "dynaweb_collector_policy_version", "Policy version acting.", ["run", "collector"]
)
GROUPS_CUT = Counter(
    "dynaweb_collector_groups_cut_total",
    "Groups closed short because the policy moved on by more than stream.max_staleness "
    "versions while they were collected (a new group started).",
    ["run", "collector"],
)
APP_FAILURES = Counter(
    "dynaweb_collector_app_failures_total",
    "Episodes of a web-application task failed (reward 0) or not started because the app was "
    "unavailable (died, restarting).",
    ["run", "collector", "task"],
)
PUBLISH_ERRORS = Counter(
    "dynaweb_collector_publish_errors_total", "Failed asynchronous publishes.", ["run", "collector"]
)
