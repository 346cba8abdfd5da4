"""Typed configuration for every component, composed in one place.

Resolution order (later wins): dataclass defaults, a YAML/JSON config file
(``--config`` or ``DYNAWEB_CONFIG``), environment variables of the form
``DYNAWEB_<SECTION>__<FIELD>`` (for example ``DYNAWEB_KAFKA__BOOTSTRAP=host:9092``),
then explicit overrides from the CLI.  Every field has a help string in its
metadata; ``dynaweb config`` prints the resolved config.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from core.config.fields import _f, check_choice
from core.config.model import ModelConfig
from core.config.studies import ExperimentConfig, WorldModelStudyConfig


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
    partitions: int = _f(2, "Partitions per data topic at creation.")
    replication_factor: int = _f(1, "Replication factor at creation.")
    retention_ms: int = _f(7 * 24 * 3600 * 1000, "Topic retention time (ms).")
    retention_bytes: int = _f(-1, "Topic retention size per partition (bytes, -1 = unlimited).")
    linger_ms: int = _f(20, "Producer batching delay (ms).")
    session_timeout_ms: int = _f(6000, "Consumer-group session timeout (Tansu joins take ~half).")
    max_message_bytes: int = _f(
        4 * 1024 * 1024, "Largest accepted message; larger is dead-lettered."
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
    )
    producer_dead_after_s: float = _f(
        300.0,
        "A Publisher whose deliveries fail or stall this long (s), rebuilt producers included, "
        "raises PublisherDead: the component exits non-zero and its supervisor restarts it.",
    )
    resend_buffer_bytes: int = _f(
        64 * 1024 * 1024,
        "Records kept for re-sending after a failed delivery (bytes); past it the oldest are "
        "dropped and counted in dynaweb_client_lost_records_total.",
    )


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
    )
    reader_dir: str = _f(
        "",
        "Folder where checkpoint readers (dream generators, `latest` collectors) download the "
        "weights they load. Empty: RAM (/dev/shm) when it has 2 GiB free, else the temp dir; "
        "a download written to disk waits on the kernel's write-back of everything else "
        "written (S3 store, logs): 0.2-0.6 s instead of 0.04 s for the default model.",
    )


@dataclass
class StackConfig:
    broker_storage: Literal["s3", "memory"] = _f(
        "s3", "Embedded broker storage: 's3' (survives restarts) or 'memory'."
    )
    s3_port: int = _f(9000, "Embedded S3 port.")
    broker_port: int = _f(9092, "Embedded broker port.")
    prometheus_port: int = _f(9090, "Prometheus port.")
    taskserver_port: int = _f(8765, "MiniWoB++ task server port.")
    s3_aux_port_base: int = _f(
        19300, "SeaweedFS internal ports: master, volume, filer, metrics, admin = base+0..4."
    )
    broker_bucket: str = _f("tansu", "Bucket holding the embedded broker's log (s3 storage).")
    bind: str = _f("127.0.0.1", "Address every embedded server binds.")
    scrape_interval_s: float = _f(2.0, "Prometheus scrape interval (s).")
    taskserver_url: str = _f(
        "", "Base URL of the task server (empty = http://127.0.0.1:<taskserver_port>)."
    )


@dataclass
class CollectorConfig:
    tasks: list = _f(
        ["miniwob/click-button", "miniwob/click-link", "miniwob/enter-text"], "Tasks to collect on."
    )
    policy: Literal["expert", "latest", "random", "perturbed"] = _f(
        "expert",
        "expert, latest, random or perturbed (the expert with near misses, "
        "collectors/perturbed.py).",
    )
    perturb_prob: float = _f(
        0.25, "perturbed: chance of a near miss (wrong element, option or text) at each step."
    )
    contexts: int = _f(2, "Browser contexts (one page each) run concurrently.")
    seed_start: int = _f(0, "First training seed.")
    seed_stop: int = _f(
        1_000_000, "Training seeds are [seed_start, seed_stop); eval seeds lie above."
    )
    episode_time_limit_ms: int = _f(
        60_000, "MiniWoB episode time limit (raised from 10 s for CPU policies)."
    )
    max_steps: int = _f(12, "Steps before an episode is truncated.")
    settle_ms: float = _f(
        30.0,
        "After an action, observe once the page rendered a frame and its DOM did not change "
        "for this long (ms; two 60 Hz frames, two jQuery animation ticks). 0 = observe at once.",
    )
    settle_max_ms: float = _f(
        500.0, "Cap on the settle wait (ms), for pages that never stop changing."
    )
    allowed_origins: list = _f(
        [], "Extra origins the browser may reach (the task server is always allowed)."
    )
    headless: bool = _f(True, "Run Chromium headless.")
    obs_token_budget: int = _f(
        512,
        "Budget of the page tree in UTF-8 bytes (= byte-tokenizer tokens; the BPE "
        "tokenizer needs ~3.3x fewer tokens for the same tree); 0 = no truncation.",
    )
    heartbeat_s: float = _f(2.0, "Heartbeat period (s).")
    max_episodes: int = _f(0, "Stop after this many episodes (0 = run forever).")
    max_steps_per_s: float = _f(
        0.0, "Rate limit over all contexts of this collector (0 = unlimited)."
    )
    group_size: int = _f(
        0,
        "G: episodes run on the same (task, seed), one group id at the source (live GSPO "
        "groups). 0 = auto: stream.group_size for a policy that samples (latest), 1 for "
        "expert and random collectors.",
    )
    run_length: int = _f(
        32,
        "Consecutive episodes of one task per context before it moves to the next task "
        "(the page is loaded again only when the task changes: a load costs ~150 ms of CPU).",
    )
    seed_offset: int = _f(
        -1, "Offset into the training seeds (-1 = derived from the collector id)."
    )
    groups_per_version: float = _f(
        0.0,
        "On-policy pacing: start at most this many groups per new policy "
        "version (0 = unpaced). 1 = one group, then wait for the trainer.",
    )


@dataclass
class StreamConfig:
    expert_fraction: float = _f(0.5, "Fraction of trajectories per training batch that are expert.")
    batch_trajectories: int = _f(16, "Trajectories per training batch.")
    group_size: int = _f(8, "Rollouts per GSPO group.")
    group_timeout_s: float = _f(30.0, "Emit or drop an incomplete group after this (s).")
    policy_sources: list = _f(
        ["real", "dream"],
        "Non-expert sources whose trajectories go into policy batches; the others still feed the "
        "world model (the study's dynaweb_dream_only arm: ['dream']). Dropped ones are counted "
        "(dynaweb_stream_dropped_trajectories_total{reason='source_not_trained'}).",
    )
    fetch_wait_ms: int = _f(
        20,
        "The stream worker's fetch wait (ms): the embedded broker answers an empty fetch only "
        "after it, so it bounds the latency a record waits when it arrives just after one.",
    )
    emit_incomplete_groups: bool = _f(
        True, "Emit incomplete groups (with their size) instead of dropping."
    )
    episode_idle_timeout_s: float = _f(
        60.0, "An open episode with no new step for this long is truncated."
    )
    max_staleness: int = _f(2, "Drop dream/on-policy samples older than latest - this.")
    samples_per_insert: float = _f(8.0, "Max reuses of one expert trajectory (0 = unlimited).")
    expert_pool_size: int = _f(2000, "Max expert trajectories kept for mixing.")
    heldout_fraction: float = _f(0.1, "Share of real episodes routed to world-model evaluation.")
    cold_start_batch_s: float = _f(
        2.0, "At cold start, emit an expert-only batch at most this often (s)."
    )
    batch_wait_s: float = _f(
        0.0,
        "A mixed batch whose online share (batch_trajectories x (1 - expert_fraction), in whole "
        "groups) is not yet full waits up to this long for more groups, then trains on what it has "
        "(0 = cold_start_batch_s).",
    )
    lag_bound: int = _f(
        4,
        "Training-batch lag above which dream generators are told to slow down. Keep it below "
        "max_staleness x trainer.checkpoint_every: a batch that waits longer is stale (dropped at "
        "train time) when the trainer reaches it.",
    )
    worker_id: str = _f("", "Stream-worker id (default: host-pid).")
    reuse_wait_s: float = _f(
        5.0, "Wait this long for fresh experts before exceeding samples_per_insert."
    )
    dedupe_capacity: int = _f(200_000, "Remembered (episode, step) keys for dedupe.")
    expert_only_batches: bool = _f(
        True, "Emit expert-only batches while no online data waits (cold start)."
    )
    expert_only_max_lag: int = _f(
        4,
        "...but only while the trainer has fewer than this many batches waiting (it "
        "would otherwise idle): more would queue ahead of the online groups, which then "
        "go stale before they are trained on (0 = no bound).",
    )


@dataclass
class TrainerConfig:
    lr: float = _f(3e-4, "Policy learning rate (AdamW, peak of the schedule below).")
    wm_lr: float = _f(3e-4, "World-model learning rate (peak).")
    warmup_steps: int = _f(
        10,
        "Learning-rate schedule, both models (each counts its own optimizer steps; peak = lr / "
        "wm_lr): linear warm-up over the first N steps (0 = none).",
    )
    decay_steps: int = _f(
        0,
        "...then cosine decay to min_lr_ratio x peak over N steps and flat at that floor "
        "(0 = constant peak after the warm-up: the always-on default).",
    )
    min_lr_ratio: float = _f(0.1, "Floor of the decay as a share of the peak learning rate.")
    checkpoint_every: int = _f(5, "Write a checkpoint every N policy steps.")
    checkpoint_every_s: float = _f(
        60.0, "...or after this many seconds with at least one new step."
    )
    wm_batch: int = _f(8, "World-model transitions per step.")
    wm_terminal_share: float = _f(
        0.25,
        "Share of each world-model batch drawn from episode-ending steps (models/train/learner.py).",
    )
    chunk_rows: int = _f(
        32,
        "Policy loss: forward + backward in micro-batches of about this many step rows, so only "
        "one micro-batch's graph is in memory; the gradient is unchanged (0 = whole batch).",
    )
    wm_chunk_rows: int = _f(
        8,
        "World-model loss: the same for batches of more than this many transitions "
        "(InfoNCE keeps its whole-batch negatives through a GradCache pre-pass, one extra "
        "no-grad forward; 0 = whole batch).",
    )
    max_steps: int = _f(0, "Stop after N policy steps (0 = forever).")
    clip_low: float = _f(
        0.2,
        "GSPO lower clip range (on the ratio per decision, geometric mean over a "
        "trajectory's steps; docs/algorithm.md).",
    )
    clip_high: float = _f(0.28, "GSPO upper clip range (clip-higher, as DAPO).")
    policy_temperature: float = _f(
        1.0,
        "T of the policy pi_T(a|s) = softmax over the page's candidate actions of "
        "score/T, for BC on expert steps and for records that carry no temperature (acting "
        "records its own, dream.temperature); keep it equal to dream.temperature.",
    )
    bc_weight: float = _f(1.0, "Weight of the behaviour-cloning term on expert trajectories.")
    infonce_weight: float = _f(0.1, "Weight of the world model's InfoNCE term.")
    wm_head_weight: float = _f(
        1.0,
        "Weight of the world model's reward and done heads (each a class-balanced "
        "cross-entropy on the world model's hidden states of the acted element's page line and the "
        "action: task success, done); "
        "predict() takes reward and done from them once trained (0 = heads not trained).",
    )
    zero_stage: int = _f(0, "DeepSpeed ZeRO stage.")
    dist_interface: str = _f(
        "",
        "Network interface the ranks of a multi-node trainer talk over (e.g. eth0, ib0; sets "
        "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME). Required when MASTER_ADDR is another host "
        "(unless those variables are set); empty = loopback for one rank or several on one host "
        "(a single-rank trainer opens no rendezvous port at all).",
    )
    keep_checkpoints: int = _f(5, "Keep the last N checkpoints in S3 (promoted ones always kept).")
    grad_clip: float = _f(1.0, "Gradient clipping norm.")
    init_from: str = _f(
        "", "Start a fresh run from another run's checkpoint: 'RUN' (its LATEST) or 'RUN:VERSION'."
    )
    wm_init_from: str = _f(
        "",
        "Start the world model of a fresh run from this local Hugging Face directory (a world "
        "model trained offline: `dynaweb experiment world-model`'s OUT/world_model, or the "
        "sample-efficiency study's pretrained one) instead of a new one or init_from's; a resumed "
        "run keeps its own.",
    )
    wm_steps_per_policy_step: float = _f(
        0.0,
        "World-model steps per policy step (0 = whenever the trainer "
        "has time: always-on; > 0 = reproducible, as in experiments).",
    )
    train_world_model: bool = _f(
        True, "Train the world model (off when nothing dreams, e.g. a real-only run)."
    )


@dataclass
class DreamConfig:
    group_size: int = _f(8, "Rollouts per start state (GSPO group).")
    horizon: int = _f(5, "Dream length in steps.")
    batch: int = _f(16, "Rollouts advanced together.")
    temperature: float = _f(1.0, "Policy sampling temperature.")
    max_change_tokens: int = _f(160, "World-model output budget per step (tokens).")
    wm_decode: Literal["greedy", "rerank", "head"] = _f(
        "head",
        "World-model decoding in dreams and the trainer's fidelity check: 'greedy' (the generated text), "
        "'rerank' (the generated text and proposals built from the page and the action, scored by the model, "
        "the most likely kept; always parses, slower) or 'head' (the change head picks a proposal's kind, "
        "or 'other' and the generated text; greedy until the head is trained; models/world_model/proposals.py). "
        "Reward and done come from the reward/done heads (once trained) with every decoding.",
    )
    start_pool: int = _f(256, "Real start states kept.")
    wm_gate: bool = _f(
        False,
        "Dream only with a world model that beats 'nothing changes' on held-out real transitions "
        "(models/dream/gate.py; off by default: a run from scratch starts at the baseline).",
    )
    wm_gate_margin: float = _f(
        0.0, "wm_gate: exact-match margin over 'nothing changes' the world model must reach."
    )
    wm_gate_min_samples: int = _f(
        32, "wm_gate: held-out transitions the margin must be measured on."
    )
    start_from: Literal["any", "first"] = _f(
        "any",
        "Dream start states: 'any' real step's page (expert and live), or 'first' (step-0 pages "
        "only). A dream from a later step starts with an empty action history, as its trajectory "
        "is rebuilt by the trainer (its own steps only), so the behaviour log-probs match.",
    )
    rate_limit_per_s: float = _f(0.0, "Max dream steps/s (0 = unlimited; back-pressure lowers it).")


@dataclass
class UpConfig:
    expert_contexts: int = _f(2, "Browser contexts of the expert collector started by `up`.")
    expert_steps_per_s: float = _f(
        4.0,
        "Rate limit of that collector: real data is meant to be scarce, and "
        "CPU left to the trainer is worth more than surplus expert steps.",
    )
    perturbed_collectors: int = _f(
        0,
        "Perturbed-expert collectors started by `up` (collector.policy=perturbed, 1 context "
        "each, at expert_steps_per_s): near misses beside the successes for the world model.",
    )
    policy_collectors: int = _f(
        1,
        "Collectors acting with the latest policy started by `up` (1 context each; "
        "G = stream.group_size rollouts per group).",
    )
    policy_groups_per_version: float = _f(
        1.0,
        "On-policy pacing of those collectors (collector.groups_per_version): "
        "at most this many live groups per new policy version. Unpaced (0), an "
        "untrained policy's short episodes outrun the trainer, and every live group "
        "is stale (dropped at train time) when the trainer reaches it.",
    )
    dreamers: int = _f(1, "Dream generators started by `up`.")
    progress_every_s: float = _f(5.0, "Progress line period (s).")
    restart_backoff_s: float = _f(
        2.0, "First restart delay of a crashed component (doubles, max 30 s)."
    )
    restart_healthy_s: float = _f(
        60.0,
        "A component that ran this long before it exited was healthy: its restart delay starts "
        "over at restart_backoff_s (a shorter run keeps doubling it).",
    )


@dataclass
class GateConfig:
    enabled: bool = _f(
        False,
        "Gate checkpoints: the trainer writes candidates and `dynaweb gate` moves LATEST only "
        "for a candidate whose probes are not worse than LATEST's by more than the margins "
        "(off: every checkpoint becomes LATEST at once).",
    )
    probes: list = _f(
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
        0.05, "Reject when the candidate's world-model score is below LATEST's minus this."
    )
    wm_transitions: int = _f(
        64, "World-model probe: the newest N held-out real transitions (0 = all)."
    )
    policy_margin: float = _f(
        0.25, "Reject when the candidate's live success rate is below LATEST's minus this."
    )
    tasks: list = _f([], "Policy probe tasks (empty = collector.tasks).")
    seeds: str = _f(
        "",
        "Policy probe seeds A:B, outside the training seeds (empty = 4 seeds from "
        "collector.seed_stop + 100000, apart from `dynaweb eval policy`'s default seeds).",
    )
    max_steps: int = _f(6, "Policy probe: steps before an episode is truncated.")
    policy_timeout_s: float = _f(
        600.0,
        "Policy probe: overall time limit (s); a probe cut by it has no score, "
        "so the candidate is rejected (0 = no limit).",
    )
    poll_s: float = _f(2.0, "How often `dynaweb gate` looks for a new candidate in S3 (s).")
    timeout_s: float = _f(
        60.0, "Seconds to read the held-out topic to its sentinel for the world-model probe."
    )


SECRETS = (("s3", "secret_key"), ("s3", "access_key"), ("kafka", "sasl_password"))


@dataclass
class Config:
    run_id: str = _f("default", "Run id; namespaces every topic and S3 prefix.")
    home: str = _f(".dynaweb", "State directory (data, logs, pids, credentials); env DYNAWEB_HOME.")
    threads: int = _f(1, "torch threads per component.")
    metrics_port: int = _f(0, "Metrics port of this process (0 = pick a free one).")
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    s3: S3Config = field(default_factory=S3Config)
    stack: StackConfig = field(default_factory=StackConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    dream: DreamConfig = field(default_factory=DreamConfig)
    up: UpConfig = field(default_factory=UpConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    wm_study: WorldModelStudyConfig = field(default_factory=WorldModelStudyConfig)
    gate: GateConfig = field(default_factory=GateConfig)

    @property
    def home_path(self) -> Path:
        return Path(self.home).resolve()

    def to_dict(self, redact: bool = True, drop_secrets: bool = False) -> dict:
        """Resolved config; secrets are masked (or dropped, for a file a child process reads:
        children get secrets from the environment or the credentials file, never a config file)."""
        d = dataclasses.asdict(self)
        for sec, key in SECRETS:
            if drop_secrets:
                d[sec].pop(key)
            elif redact and d[sec][key]:
                d[sec][key] = "***"
        return d


def _coerce(value: str, typ: Any, current: Any) -> Any:
    if isinstance(current, bool):
        return value.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(current, int):
        return int(value)
    if isinstance(current, float):
        return float(value)
    if isinstance(current, list):
        v = value.strip()
        if v.startswith("["):
            return json.loads(v)
        return [x for x in (p.strip() for p in v.split(",")) if x]
    return value


def apply_overrides(cfg: Config, overrides: dict) -> Config:
    """Apply a nested dict (from a file) or flat 'section.field' keys."""
    for key, value in overrides.items():
        if (
            isinstance(value, dict)
            and hasattr(cfg, key)
            and dataclasses.is_dataclass(getattr(cfg, key))
        ):
            sub = getattr(cfg, key)
            for k2, v2 in value.items():
                _set(sub, k2, v2, f"{key}.{k2}")
        elif "." in key:
            sec, k2 = key.split(".", 1)
            _set(getattr(cfg, sec), k2, value, key)
        else:
            _set(cfg, key, value, key)
    return cfg


def _set(obj: Any, name: str, value: Any, path: str) -> None:
    if not hasattr(obj, name) or name.startswith("_"):
        valid = ", ".join(f.name for f in dataclasses.fields(obj))
        raise ValueError(f"unknown config key {path!r}; valid keys here: {valid}")
    current = getattr(obj, name)
    if isinstance(value, str) and not isinstance(current, str):
        value = _coerce(value, type(current), current)
    check_choice(obj, name, value, path)
    setattr(obj, name, value)


def load_config(
    path: str | None = None, overrides: dict | None = None, env: dict | None = None
) -> Config:
    env = dict(os.environ if env is None else env)
    cfg = Config()
    path = path or env.get("DYNAWEB_CONFIG")
    if path:
        text = Path(path).read_text()
        if path.endswith((".yaml", ".yml")):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        apply_overrides(cfg, data)
    if env.get("DYNAWEB_HOME"):
        cfg.home = env["DYNAWEB_HOME"]
    if env.get("DYNAWEB_RUN_ID"):
        cfg.run_id = env["DYNAWEB_RUN_ID"]
    flat = {}
    for k, v in env.items():
        if k.startswith("DYNAWEB_") and "__" in k:
            sec, name = k[len("DYNAWEB_") :].lower().split("__", 1)
            flat[f"{sec}.{name}"] = v
    apply_overrides(cfg, flat)
    if overrides:
        apply_overrides(cfg, overrides)
    return cfg


def describe(cls: type = Config, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(key, default, help) for every field: the config reference."""
    out = []
    inst = cls()
    for f in dataclasses.fields(cls):
        val = getattr(inst, f.name)
        if dataclasses.is_dataclass(val):
            out.extend(describe(type(val), prefix + f.name + "."))
        else:
            out.append((prefix + f.name, val, f.metadata.get("help", "")))
    return out
