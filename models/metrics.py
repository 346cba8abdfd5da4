"""Prometheus metrics of the trainer and the dream generator, declared once.

Names follow ``dynaweb_<component>_<what>_<unit>``; every series carries the
``run`` label (and ``component_id`` via the scrape target).

A trainer of several ranks (``trainer.ranks``, docs/scaling.md) serves one endpoint per rank (its
scrape target labelled ``rank``).  The group's figures (steps, losses of the whole batch, versions,
batches, dupes, stale drops, idle time, fidelity) come from rank 0 alone, so sums over the
trainer's targets count each once; what each rank does itself (``dynaweb_trainer_samples_total``:
the samples of its share, ``dynaweb_trainer_phase_seconds``) carries a ``rank`` label and adds up
over the ranks to the group's.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# --- trainer -----------------------------------------------------------------
TRAINER_STEPS = Counter("dynaweb_trainer_steps_total", "Optimizer steps.", ["run", "model"])
TRAINER_SAMPLES = Counter(
    "dynaweb_trainer_samples_total",
    "Samples trained on (trajectories / transitions), by the rank whose share they were.",
    ["run", "model", "source", "rank"],
)
TRAINER_RANKS = Gauge(
    "dynaweb_trainer_ranks",
    "Ranks of the trainer group (data-parallel, each trains its share of every batch).",
    ["run"],
)
TRAINER_LOSS = Gauge("dynaweb_trainer_loss", "Last loss value by term.", ["run", "model", "term"])
TRAINER_GRAD_NORM = Gauge(
    "dynaweb_trainer_grad_norm", "Gradient norm before clipping.", ["run", "model"]
)
TRAINER_LR = Gauge(
    "dynaweb_trainer_learning_rate",
    "Learning rate of the next optimizer step (the schedule of "
    "trainer.warmup_steps / decay_steps / min_lr_ratio).",
    ["run", "model"],
)
TRAINER_RATIO = Gauge(
    "dynaweb_trainer_importance_ratio", "GSPO sequence importance ratio stats.", ["run", "stat"]
)
TRAINER_CLIP_FRAC = Gauge(
    "dynaweb_trainer_clip_fraction", "Share of sequences clipped by GSPO.", ["run"]
)
TRAINER_KL = Gauge(
    "dynaweb_trainer_kl", "KL estimate between behaviour and current policy.", ["run"]
)
TRAINER_DREAM_ADV = Gauge(
    "dynaweb_trainer_dream_advantage",
    "The last policy batch's dreamed share of the summed |GSPO advantage| (share: at the loss, "
    "after trainer.dream_adv_cap; share_raw: before it) and the scale applied to dreamed "
    "advantages (scale).",
    ["run", "figure"],
)
TRAINER_NONZERO_ADV = Gauge(
    "dynaweb_trainer_nonzero_advantage_share", "Share of groups with nonzero advantage.", ["run"]
)
TRAINER_VERSION = Gauge(
    "dynaweb_trainer_checkpoint_version", "Last checkpoint version written.", ["run", "kind"]
)
TRAINER_CKPT_TIME = Gauge(
    "dynaweb_trainer_checkpoint_timestamp_seconds",
    "When the last checkpoint was written.",
    ["run", "kind"],
)
# before the first updates: what the trainer waits on, so `dynaweb up` can say it
TRAINER_WAITING = Gauge(
    "dynaweb_trainer_waiting",
    "What the trainer waits on before its first update of each model (1: now, 0: done): "
    "'models' (loading both models), 'checkpoint_v0' (writing version 0, which the collectors and "
    "dream generators start from), 'policy_batch' (its first policy batch), 'wm_transitions' (the "
    "first real transitions for the world model).",
    ["run", "phase"],
)
TRAINER_PHASE = Histogram(
    "dynaweb_trainer_phase_seconds",
    "Time per phase of a trainer step, per rank.",
    ["run", "phase", "rank"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
TRAINER_IDLE = Counter(
    "dynaweb_trainer_idle_seconds_total", "Time the trainer waited for data.", ["run"]
)
TRAINER_DUPES = Counter(
    "dynaweb_trainer_duplicates_total",
    "Batches/transitions skipped as already trained.",
    ["run", "model"],
)
TRAINER_FIDELITY = Gauge(
    "dynaweb_trainer_world_model_fidelity",
    "World-model fidelity on a rolling window of fresh real transitions.",
    ["run", "metric"],
)
TRAINER_TASK_TRUST = Gauge(
    "dynaweb_trainer_task_trust",
    "Per task, the world model judged on real episode ends before training on them "
    "(models/dream/trust.py): balanced_accuracy, calibration_gap (|predicted - real success "
    "rate|), predicted, real, episodes (in the window) and gated (1: the trust gate admits "
    "the task under dream.trust_*).",
    ["run", "task", "measure"],
)
TRAINER_CKPT_RETRIES = Counter(
    "dynaweb_trainer_checkpoint_retries_total",
    "Failed attempts to write a checkpoint, by stage: upload (files, manifest, LATEST to S3) and "
    "announce (the announcement's flush) are retried with back-off; prune is skipped until the "
    "next checkpoint.",
    ["run", "stage"],
)
TRAINER_BATCH_KIND = Counter(
    "dynaweb_trainer_batches_total", "Training batches consumed by kind.", ["run", "kind"]
)
# what the policy loss learned from, per source (``real`` = live on-policy rollouts, ``dream``); running
# totals, so shares over any window are ratios of ``increase()`` and survive nothing but a restart's reset
GSPO_TRAJ = Counter(
    "dynaweb_trainer_gspo_trajectories_total",
    "Trajectories that reached the GSPO loss.",
    ["run", "source"],
)
GSPO_GROUPS = Counter(
    "dynaweb_trainer_gspo_groups_total", "GSPO groups that reached the loss.", ["run", "source"]
)
GSPO_GROUPS_NONZERO = Counter(
    "dynaweb_trainer_gspo_groups_nonzero_total",
    "GSPO groups that reached the loss with a nonzero advantage (their rewards differ).",
    ["run", "source"],
)
GSPO_ADV_ABS = Counter(
    "dynaweb_trainer_gspo_advantage_abs",
    "Sum of |advantage| over trajectories at the loss (mean = this / trajectories).",
    ["run", "source"],
)
GSPO_CLIPPED = Counter(
    "dynaweb_trainer_gspo_clipped_total",
    "Trajectories whose clipped GSPO term was the active one.",
    ["run", "source"],
)
GSPO_RATIO_SUM = Counter(
    "dynaweb_trainer_gspo_ratio",
    "Sum of GSPO importance ratios at the loss (mean = this / trajectories).",
    ["run", "source"],
)
TRAINER_STALE = Counter(
    "dynaweb_trainer_stale_dropped_total",
    "Samples dropped at train time as older than latest - stream.max_staleness.",
    ["run", "source"],
)
TRAINER_UNGROUPED = Counter(
    "dynaweb_trainer_ungrouped_total",
    "Non-expert trajectories on the GSPO path without a group id: counted, never trained on.",
    ["run", "source"],
)
TRAINER_SOURCE_NONZERO = Gauge(
    "dynaweb_trainer_source_nonzero_advantage_share",
    "Share of the last batch's GSPO groups with a nonzero advantage, per source.",
    ["run", "source"],
)

# --- dream generator ---------------------------------------------------------
DREAM_STEPS = Counter("dynaweb_dream_steps_total", "Dreamed transitions published.", ["run"])
DREAM_ROLLOUTS = Counter("dynaweb_dream_rollouts_total", "Dreamed rollouts published.", ["run"])
DREAM_GATE_OPEN = Gauge(
    "dynaweb_dream_gate_open",
    "1 when the loaded world model may be dreamed with (dream.wm_gate off, or its held-out "
    "margin over 'nothing changes' reaches dream.wm_gate_margin), else 0.",
    ["run"],
)
DREAM_SECONDS = Counter(
    "dynaweb_dream_seconds_total",
    "Dream generator time by state: dreaming, gated (waiting for a world model worth dreaming "
    "in), paced (a full window of dreams in flight ahead of the trainer: dream.pace), idle (no "
    "models or start states yet).",
    ["run", "state"],
)
DREAM_ABANDONED = Counter(
    "dynaweb_dream_rounds_abandoned_total",
    "Dream rounds given up because a new checkpoint was announced mid-round (the next round "
    "runs with it; never two in a row).",
    ["run"],
)
DREAM_ROLLOUT_LEN = Histogram(
    "dynaweb_dream_rollout_length_steps",
    "Dream rollout length.",
    ["run"],
    buckets=(1, 2, 3, 4, 5, 6, 8, 10, 15),
)
DREAM_VERSION = Gauge("dynaweb_dream_model_version", "Model version in use.", ["run", "kind"])
DREAM_RELOADS = Counter(
    "dynaweb_dream_reloads_total", "Hot reloads by outcome.", ["run", "kind", "outcome"]
)
DREAM_POLL_RELOADS = Counter(
    "dynaweb_dream_latest_poll_reloads_total",
    "Reloads found by re-reading LATEST every s3.latest_poll_s rather than on an announcement "
    "(dream generator and `latest` collector policy; growing steadily: announcements are lost).",
    ["run", "kind"],
)
DREAM_RELOAD_SECONDS = Histogram(
    "dynaweb_dream_reload_seconds",
    "Time to hot-reload a checkpoint.",
    ["run", "kind"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
)
RELOAD_TO_USE = Histogram(
    "dynaweb_client_checkpoint_reload_to_use_seconds",
    "From a policy checkpoint's announcement, seen by a reader, to its first use there: the "
    "first step dreamed with it (component dream; its round is published when the round ends), "
    "the first action a live collector takes with it (component collector).",
    ["run", "component"],
    buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120),
)
DREAM_RATE_FACTOR = Gauge(
    "dynaweb_dream_rate_factor", "Back-pressure rate factor (1 = full speed).", ["run"]
)
DREAM_IN_FLIGHT = Gauge(
    "dynaweb_dream_in_flight_episodes",
    "Dreamed episodes published and not yet settled (neither consumed by the trainer's loss nor "
    "older than its version - stream.max_staleness): what dream.pace bounds.",
    ["run"],
)
DREAM_PACE_WINDOW = Gauge(
    "dynaweb_dream_pace_window_episodes",
    "This generator's pacing window: dreamed episodes it may keep in flight (dream.pace).",
    ["run"],
)
DREAM_PACE_WRITTEN_OFF = Counter(
    "dynaweb_dream_pace_written_off_episodes",
    "Dreamed episodes in flight given up after dream.pace_timeout_s without any settling "
    "(no trainer, a restart, dreams lost before the loss).",
    ["run"],
)
DREAM_WM_INVALID = Counter(
    "dynaweb_dream_world_model_invalid_total",
    "World-model outputs repaired or rejected.",
    ["run", "outcome"],
)
DREAM_START_STATES = Gauge("dynaweb_dream_start_states", "Real start states available.", ["run"])
DREAM_SUCCESS = Gauge(
    "dynaweb_dream_success_rate", "Share of dreamed rollouts with predicted success.", ["run"]
)
DREAM_TASK_SUCCESS = Gauge(
    "dynaweb_dream_task_success_rate",
    "Share of the last round's dreamed rollouts of a "
    "task with predicted success (policy version: dynaweb_dream_model_version).",
    ["run", "task"],
)

# --- clients -----------------------------------------------------------------
CLIENT_ERRORS = Counter(
    "dynaweb_client_errors_total", "Broker and S3 client errors.", ["run", "component", "service"]
)
# why dream groups do or do not carry an advantage: GSPO learns from a group only if its members'
# final rewards differ, and a dream's reward is 1 if the reward head's p(success) at its last step
# is > 0.5
DREAM_P_SUCCESS = Histogram(
    "dynaweb_dream_reward_p_success",
    "The world model's p(success) (reward head) at the "
    "last step of each dreamed rollout it predicted (reward = 1 if > 0.5).",
    ["run"],
    buckets=(0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95),
)
DREAM_DISAGREEMENT = Histogram(
    "dynaweb_dream_disagreement",
    "The world model's ensemble disagreement (standard deviation of its members' p(success)) "
    "on every dreamed step it predicted; above dream.max_disagreement the dream ends there "
    "(dynaweb_dream_rollout_ends_total{end=disagreement}).",
    ["run"],
    buckets=(0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5),
)
DREAM_GROUPS = Counter(
    "dynaweb_dream_groups_total",
    "Dream groups dreamed, by whether their rollouts' final "
    "rewards differ (varied: a nonzero GSPO advantage) or not (uniform).",
    ["run", "rewards"],
)
DREAM_UNIFORM_PUBLISHED = Counter(
    "dynaweb_dream_uniform_published_total",
    "Uniform dream groups published anyway: dream.max_dropped_per_published groups had been "
    "dropped since the last published one (the learner waiting for dreams makes progress).",
    ["run"],
)
DREAM_GROUPS_DROPPED = Counter(
    "dynaweb_dream_groups_dropped_total",
    "Dream groups dreamed but not published, by reason "
    "(uniform: every rollout got the same reward, no advantage; dream.drop_uniform_groups).",
    ["run", "reason"],
)
DREAM_ROLLOUT_ENDS = Counter(
    "dynaweb_dream_rollout_ends_total",
    "How dreamed rollouts ended: done (predicted by "
    "the world model), horizon (truncated), stop (the policy quit: reward 0, no world "
    "model), disagreement (the world model's ensemble disagreed beyond "
    "dream.max_disagreement: reward 0).",
    ["run", "end"],
)
DREAM_TASK_TRUSTED = Gauge(
    "dynaweb_dream_task_trusted",
    "1 when the dream generator may dream the task (its trust gate, dream.trust_gate, admits it "
    "in the loaded world model's manifest), 0 when it holds the task back.",
    ["run", "task"],
)
DREAM_STARTS = Counter(
    "dynaweb_dream_starts_total",
    "Dream groups by the real page they start from: first (a real episode's first page) or mid "
    "(a later real step's page, dream.start_from=any: a short branch from a real state, MBPO).",
    ["run", "start"],
)
DREAM_HEADS_TRAINED = Gauge(
    "dynaweb_dream_world_model_heads_trained",
    "1 when the loaded world model's reward/done "
    "heads are trained (dream rewards come from them), 0 when from its text.",
    ["run"],
)
