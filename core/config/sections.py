"""The sections of the runtime configuration (``core.config.runtime.Config``): one dataclass per
component or concern, each field with its default, help string and bounds, and a section's
``checks()``: the contradictions between its own fields (``Config.checks`` has those across
sections)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.config.dream import DreamConfig as DreamConfig  # its own module (the pacing fields)
from core.config.fields import _f


@dataclass
class KafkaConfig:
    bootstrap: str = _f("127.0.0.1:9092", "Kafka bootstrap servers (comma separated).")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = _f(
        "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."
    )
    sasl_mechanism: Literal["", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = _f(
        "", "SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)."
    )
    sasl_username: str = _f("", "SASL user name.")
    sasl_password: str = _f("", "SASL password (prefer the env variable).")
    ssl_cafile: str = _f("", "CA bundle for TLS to the brokers.")
    partitions: int = _f(2, "Partitions per data topic at creation.", ge=1)
    replication_factor: int = _f(1, "Replication factor at creation.", ge=1)
    retention_ms: int = _f(7 * 24 * 3600 * 1000, "Topic retention time (ms).", ge=-1)
    retention_bytes: int = _f(
        -1, "Topic retention size per partition (bytes, -1 = unlimited).", ge=-1
    )
    linger_ms: int = _f(20, "Producer batching delay (ms).", ge=0)
    session_timeout_ms: int = _f(
        6000, "Consumer-group session timeout (Tansu joins take ~half).", ge=1
    )
    max_message_bytes: int = _f(
        4 * 1024 * 1024, "Largest accepted message; larger is dead-lettered.", ge=1
    )
    idempotence: bool = _f(
        False,
        "Idempotent producers (kafka-python's enable_idempotence, which it turns on by default). "
        "Off: on the embedded Tansu an idempotent producer can lose an acknowledged record "
        "after its S3 store stalls (broker defect 7) and a broker UnknownError makes it fatal; "
        "consumers dedupe by ids, so retries are harmless. On Apache Kafka either is safe "
        "(docs/broker.md).",
    )
    reconnect_backoff_max_ms: int = _f(
        2000,
        "Longest wait between reconnect attempts to a broker (ms; kafka-python's default is "
        "30 s, so clients lag a broker restart by up to that).",
        ge=0,
    )
    producer_dead_after_s: float = _f(
        300.0,
        "A Publisher whose deliveries fail or stall this long (s), rebuilt producers included, "
        "raises PublisherDead: the component exits non-zero and its supervisor restarts it.",
        gt=0,
    )
    resend_buffer_bytes: int = _f(
        64 * 1024 * 1024,
        "Records kept for re-sending after a failed delivery (bytes); past it the oldest are "
        "dropped and counted in dynaweb_client_lost_records_total.",
        ge=0,
    )

    def checks(self) -> list[tuple[str, str]]:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and not self.sasl_mechanism:
            return [("sasl_mechanism", f"security_protocol {self.security_protocol} needs one")]
        if self.sasl_mechanism and not sasl:
            return [
                (
                    "sasl_mechanism",
                    f"{self.sasl_mechanism} is set but security_protocol "
                    f"{self.security_protocol} does not use SASL (SASL_PLAINTEXT or SASL_SSL)",
                )
            ]
        return []


@dataclass
class S3Config:
    endpoint: str = _f("127.0.0.1:9000", "S3 endpoint host:port (MinIO, SeaweedFS, AWS).")
    secure: bool = _f(False, "Use TLS to the S3 endpoint.")
    bucket: str = _f("dynaweb", "Bucket for checkpoints and artifacts.")
    region: str = _f("us-east-1", "S3 region.")
    access_key: str = _f("", "Access key; empty = read the credentials file.")
    secret_key: str = _f("", "Secret key; empty = read the credentials file.")
    credentials_file: str = _f(
        "", "JSON file with access_key/secret_key (default HOME/s3/credentials.json)."
    )
    cert_check: bool = _f(True, "Verify the TLS certificate of the S3 endpoint.")
    latest_poll_s: float = _f(
        5.0,
        "Checkpoint readers (dream generator, `latest` collector policy) also re-read LATEST this "
        "often (s), so a lost announcement delays a reload but never prevents it (0 = only on "
        "announcements).",
        ge=0,
    )
    reader_dir: str = _f(
        "",
        "Folder where checkpoint readers (dream generators, `latest` collectors) download the "
        "weights they load. Empty: RAM (/dev/shm) when it has 2 GiB free, else the temp dir; "
        "a download written to disk waits on the kernel's write-back of everything else "
        "written (S3 store, logs): 0.2-0.6 s instead of 0.04 s for the default model.",
    )

    def checks(self) -> list[tuple[str, str]]:
        if bool(self.access_key) != bool(self.secret_key):
            return [
                (
                    "access_key" if not self.access_key else "secret_key",
                    "set both access_key and secret_key, or neither (the credentials file)",
                )
            ]
        return []


@dataclass
class StackConfig:
    broker_storage: Literal["s3", "memory"] = _f(
        "s3", "Embedded broker storage: 's3' (survives restarts) or 'memory'."
    )
    s3_port: int = _f(9000, "Embedded S3 port.", ge=1, le=65535)
    broker_port: int = _f(9092, "Embedded broker port.", ge=1, le=65535)
    prometheus_port: int = _f(9090, "Prometheus port.", ge=1, le=65535)
    taskserver_port: int = _f(8765, "MiniWoB++ task server port.", ge=1, le=65535)
    s3_aux_port_base: int = _f(
        19300,
        "SeaweedFS internal ports: master, volume, filer, metrics, admin = base+0..4.",
        ge=1,
        le=65531,
    )
    broker_bucket: str = _f("tansu", "Bucket holding the embedded broker's log (s3 storage).")
    bind: str = _f("127.0.0.1", "Address every embedded server binds.")
    scrape_interval_s: float = _f(2.0, "Prometheus scrape interval (s).", gt=0)
    taskserver_url: str = _f(
        "", "Base URL of the task server (empty = http://127.0.0.1:<taskserver_port>)."
    )
    shop: bool = _f(
        False,
        "Start the django-oscar shop of the shop/... tasks with the stack (`infra up --only shop` "
        "starts it regardless; docs/own-app.md).",
    )
    shop_port: int = _f(
        8770, "Port of the shop (the shop/... tasks' web application).", ge=1, le=65535
    )

    def checks(self) -> list[tuple[str, str]]:
        out = []
        ports = {
            "s3_port": self.s3_port,
            "broker_port": self.broker_port,
            "prometheus_port": self.prometheus_port,
            "taskserver_port": self.taskserver_port,
            "shop_port": self.shop_port,
        }
        seen: dict[int, str] = {}
        for name, port in ports.items():
            if port in seen:
                out.append((name, f"{port} is also {seen[port]}"))
            seen.setdefault(port, name)
        aux = range(self.s3_aux_port_base, self.s3_aux_port_base + 5)
        for name, port in ports.items():
            if port in aux:
                out.append(
                    (
                        "s3_aux_port_base",
                        f"{name} {port} lies in the aux ports {aux.start}..{aux.stop - 1}",
                    )
                )
        if self.taskserver_url and not self.taskserver_url.startswith(("http://", "https://")):
            out.append(("taskserver_url", f"{self.taskserver_url!r} is not an http(s):// URL"))
        return out


@dataclass
class CollectorConfig:
    tasks: list[str] = _f(
        ["miniwob/click-button", "miniwob/click-link", "miniwob/enter-text"], "Tasks to collect on."
    )
    policy: Literal["expert", "latest", "random", "perturbed"] = _f(
        "expert",
        "expert, latest, random or perturbed (the expert with near misses, "
        "collectors/perturbed.py).",
    )
    perturb_prob: float = _f(
        0.25,
        "perturbed: chance of a near miss (wrong element, option or text) at each step.",
        ge=0,
        le=1,
    )
    contexts: int = _f(2, "Browser contexts (one page each) run concurrently.", ge=1)
    seed_start: int = _f(0, "First training seed.", ge=0)
    seed_stop: int = _f(
        1_000_000, "Training seeds are [seed_start, seed_stop); eval seeds lie above.", ge=1
    )
    episode_time_limit_ms: int = _f(
        60_000, "MiniWoB episode time limit (raised from 10 s for CPU policies).", ge=1
    )
    max_steps: int = _f(12, "Steps before an episode is truncated.", ge=1)
    settle_ms: float = _f(
        30.0,
        "After an action, observe once the page rendered a frame and its DOM did not change "
        "for this long (ms; two 60 Hz frames, two jQuery animation ticks). 0 = observe at once.",
        ge=0,
    )
    settle_max_ms: float = _f(
        500.0, "Cap on the settle wait (ms), for pages that never stop changing.", ge=0
    )
    allowed_origins: list[str] = _f(
        [], "Extra origins the browser may reach (the task server is always allowed)."
    )
    headless: bool = _f(True, "Run Chromium headless.")
    obs_token_budget: int = _f(
        512,
        "Budget of the page tree in UTF-8 bytes (= byte-tokenizer tokens; the BPE "
        "tokenizer needs ~3.3x fewer tokens for the same tree); 0 = no truncation.",
        ge=0,
    )
    app_obs_tokens: int = _f(
        768,
        "Budget of an app page's tree (collectors.webapps: pruned, then truncated) in tokens of "
        "model.tokenizer; a task's obs_budget overrides it. The prompts add the instruction, "
        "history or action (up to ~120 tokens on the shop suite) and keep 96 (policy) or "
        "dream.max_change_tokens (world model) for the output: 768 fits model.max_positions "
        "1024. 0 = no truncation.",
        ge=0,
    )
    heartbeat_s: float = _f(2.0, "Heartbeat period (s).", gt=0)
    max_episodes: int = _f(0, "Stop after this many episodes (0 = run forever).", ge=0)
    max_steps_per_s: float = _f(
        0.0, "Rate limit over all contexts of this collector (0 = unlimited).", ge=0
    )
    group_size: int = _f(
        0,
        "G: episodes run on the same (task, seed), one group id at the source (live GSPO "
        "groups). 0 = auto: stream.group_size for a policy that samples (latest), 1 for "
        "expert and random collectors.",
        ge=0,
    )
    run_length: int = _f(
        32,
        "Consecutive episodes of one task per context before it moves to the next task "
        "(the page is loaded again only when the task changes: a load costs ~150 ms of CPU).",
        ge=1,
    )
    seed_offset: int = _f(
        -1, "Offset into the training seeds (-1 = derived from the collector id).", ge=-1
    )
    groups_per_version: float = _f(
        0.0,
        "On-policy pacing: start at most this many groups per new policy "
        "version (0 = unpaced). 1 = one group, then wait for the trainer.",
        ge=0,
    )

    def checks(self) -> list[tuple[str, str]]:
        out = []
        if self.seed_stop <= self.seed_start:
            out.append(
                ("seed_stop", f"{self.seed_stop} <= seed_start {self.seed_start}: no training seed")
            )
        if self.settle_ms > 0 and self.settle_max_ms < self.settle_ms:
            out.append(
                (
                    "settle_max_ms",
                    f"{self.settle_max_ms} is below settle_ms {self.settle_ms}: the cap of the "
                    "wait would end every quiet window",
                )
            )
        if not self.tasks:
            out.append(("tasks", "no task to collect on"))
        return out


@dataclass
class StreamConfig:
    expert_fraction: float = _f(
        0.5, "Fraction of trajectories per training batch that are expert.", ge=0, le=1
    )
    batch_trajectories: int = _f(16, "Trajectories per training batch.", ge=1)
    group_size: int = _f(8, "Rollouts per GSPO group.", ge=1)
    group_timeout_s: float = _f(30.0, "Emit or drop an incomplete group after this (s).", gt=0)
    policy_sources: list[Literal["real", "dream"]] = _f(
        ["real", "dream"],
        "Non-expert sources whose trajectories go into policy batches; the others still feed the "
        "world model (the study's dynaweb_dream_only arm: ['dream']). Dropped ones are counted "
        "(dynaweb_stream_dropped_trajectories_total{reason='source_not_trained'}).",
    )
    fetch_wait_ms: int = _f(
        20,
        "The stream worker's fetch wait (ms): the embedded broker answers an empty fetch only "
        "after it, so it bounds the latency a record waits when it arrives just after one.",
        ge=0,
    )
    emit_incomplete_groups: bool = _f(
        True, "Emit incomplete groups (with their size) instead of dropping."
    )
    episode_idle_timeout_s: float = _f(
        60.0, "An open episode with no new step for this long is truncated.", gt=0
    )
    max_staleness: int = _f(2, "Drop dream/on-policy samples older than latest - this.", ge=0)
    samples_per_insert: float = _f(
        8.0, "Max reuses of one expert trajectory (0 = unlimited).", ge=0
    )
    expert_pool_size: int = _f(2000, "Max expert trajectories kept for mixing.", ge=1)
    heldout_fraction: float = _f(
        0.1, "Share of real episodes routed to world-model evaluation.", ge=0, le=1
    )
    cold_start_batch_s: float = _f(
        2.0, "At cold start, emit an expert-only batch at most this often (s).", ge=0
    )
    batch_wait_s: float = _f(
        0.0,
        "A mixed batch whose online share (batch_trajectories x (1 - expert_fraction), in whole "
        "groups) is not yet full waits up to this long for more groups, then trains on what it has "
        "(0 = cold_start_batch_s).",
        ge=0,
    )
    lag_bound: int = _f(
        4,
        "Training-batch lag above which dream generators are told to slow down. Keep it below "
        "max_staleness x trainer.checkpoint_every: a batch that waits longer is stale (dropped at "
        "train time) when the trainer reaches it.",
        ge=0,
    )
    worker_id: str = _f("", "Stream-worker id (default: host-pid).")
    reuse_wait_s: float = _f(
        5.0, "Wait this long for fresh experts before exceeding samples_per_insert.", ge=0
    )
    dedupe_capacity: int = _f(200_000, "Remembered (episode, step) keys for dedupe.", ge=1)
    expert_only_batches: bool = _f(
        True, "Emit expert-only batches while no online data waits (cold start)."
    )
    expert_only_max_lag: int = _f(
        4,
        "...but only while the trainer has fewer than this many batches waiting (it "
        "would otherwise idle): more would queue ahead of the online groups, which then "
        "go stale before they are trained on (0 = no bound).",
        ge=0,
    )

    def checks(self) -> list[tuple[str, str]]:
        if not self.policy_sources:
            return [("policy_sources", "empty: no online trajectory could be trained on")]
        return []


@dataclass
class UpConfig:
    expert_contexts: int = _f(2, "Browser contexts of the expert collector started by `up`.", ge=1)
    expert_steps_per_s: float = _f(
        4.0,
        "Rate limit of that collector: real data is meant to be scarce, and "
        "CPU left to the trainer is worth more than surplus expert steps.",
        ge=0,
    )
    perturbed_collectors: int = _f(
        0,
        "Perturbed-expert collectors started by `up` (collector.policy=perturbed, 1 context "
        "each, at expert_steps_per_s): near misses beside the successes for the world model.",
        ge=0,
    )
    policy_collectors: int = _f(
        1,
        "Collectors acting with the latest policy started by `up` (1 context each; "
        "G = stream.group_size rollouts per group).",
        ge=0,
    )
    policy_groups_per_version: float = _f(
        1.0,
        "On-policy pacing of those collectors (collector.groups_per_version): "
        "at most this many live groups per new policy version. Unpaced (0), an "
        "untrained policy's short episodes outrun the trainer, and every live group "
        "is stale (dropped at train time) when the trainer reaches it.",
        ge=0,
    )
    dreamers: int = _f(1, "Dream generators started by `up`.", ge=0)
    app_tasks: list[str] = _f(
        [],
        "Web-application tasks (e.g. shop/*) of an extra expert collector started by `up` "
        "(1 context, at expert_steps_per_s); the shop starts with the stack when a shop/... "
        "task is named, and `up` restarts it if its process dies.",
    )
    progress_every_s: float = _f(5.0, "Progress line period (s).", gt=0)
    restart_backoff_s: float = _f(
        2.0, "First restart delay of a crashed component (doubles, max 30 s).", gt=0
    )
    restart_healthy_s: float = _f(
        60.0,
        "A component that ran this long before it exited was healthy: its restart delay starts "
        "over at restart_backoff_s (a shorter run keeps doubling it).",
        ge=0,
    )


@dataclass
class GateConfig:
    enabled: bool = _f(
        False,
        "Gate checkpoints: the trainer writes candidates and `dynaweb gate` moves LATEST only "
        "for a candidate whose probes are not worse than LATEST's by more than the margins "
        "(off: every checkpoint becomes LATEST at once).",
    )
    probes: list[Literal["world_model", "policy"]] = _f(
        ["world_model", "policy"],
        "Probes run on the candidate and on LATEST: world_model "
        "(fidelity on held-out real transitions), policy (a short live evaluation).",
    )
    wm_metric: Literal["exact_match", "change_f1", "reward_bal_acc", "done_bal_acc", "ok_rate"] = (
        _f(
            "change_f1",
            "World-model probe score: exact_match, change_f1, reward_bal_acc, "
            "done_bal_acc or ok_rate (higher is better).",
        )
    )
    wm_margin: float = _f(
        0.05,
        "Reject when the candidate's world-model score is below LATEST's minus this.",
        ge=-1,
        le=1,
    )
    wm_transitions: int = _f(
        64, "World-model probe: the newest N held-out real transitions (0 = all).", ge=0
    )
    policy_margin: float = _f(
        0.25,
        "Reject when the candidate's live success rate is below LATEST's minus this.",
        ge=-1,
        le=1,
    )
    tasks: list[str] = _f([], "Policy probe tasks (empty = collector.tasks).")
    seeds: str = _f(
        "",
        "Policy probe seeds A:B, outside the training seeds (empty = 4 seeds from "
        "collector.seed_stop + 100000, apart from `dynaweb eval policy`'s default seeds).",
    )
    max_steps: int = _f(6, "Policy probe: steps before an episode is truncated.", ge=1)
    policy_timeout_s: float = _f(
        600.0,
        "Policy probe: overall time limit (s); a probe cut by it has no score, "
        "so the candidate is rejected (0 = no limit).",
        ge=0,
    )
    poll_s: float = _f(2.0, "How often `dynaweb gate` looks for a new candidate in S3 (s).", gt=0)
    timeout_s: float = _f(
        60.0, "Seconds to read the held-out topic to its sentinel for the world-model probe.", gt=0
    )

    def checks(self) -> list[tuple[str, str]]:
        if not self.seeds:
            return []
        a, sep, b = self.seeds.partition(":")
        try:
            lo, hi = int(a), int(b)
        except ValueError:
            return [("seeds", f"{self.seeds!r} is not A:B (two integers)")]
        if hi <= lo:
            return [("seeds", f"{self.seeds!r}: B <= A, an empty range")]
        return []

    def seed_range(self) -> range | None:
        """``seeds`` as a range (None when empty = the default seeds)."""
        if not self.seeds:
            return None
        a, _, b = self.seeds.partition(":")
        return range(int(a), int(b))
