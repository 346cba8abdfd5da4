"""The trainer's section of the runtime configuration (``core.config.runtime.Config.trainer``):
the optimisers and their schedules, the GSPO and behaviour-cloning loss weights, DeepSpeed and
the data-parallel ranks, checkpoints, and where a run's models start from."""

from __future__ import annotations

from dataclasses import dataclass

from core.config.fields import _f


@dataclass
class TrainerConfig:
    lr: float = _f(3e-4, "Policy learning rate (AdamW, peak of the schedule below).", gt=0)
    wm_lr: float = _f(3e-4, "World-model learning rate (peak).", gt=0)
    warmup_steps: int = _f(
        10,
        "Learning-rate schedule, both models (each counts its own optimizer steps; peak = lr / "
        "wm_lr): linear warm-up over the first N steps (0 = none).",
        ge=0,
    )
    decay_steps: int = _f(
        0,
        "...then cosine decay to min_lr_ratio x peak over N steps and flat at that floor "
        "(0 = constant peak after the warm-up: the always-on default).",
        ge=0,
    )
    min_lr_ratio: float = _f(
        0.1, "Floor of the decay as a share of the peak learning rate.", ge=0, le=1
    )
    checkpoint_every: int = _f(5, "Write a checkpoint every N policy steps.", ge=1)
    checkpoint_every_s: float = _f(
        60.0, "...or after this many seconds with at least one new step.", gt=0
    )
    upload_in_background: bool = _f(
        False,
        "Upload each checkpoint to S3 in a background thread while training goes on: the version "
        "is saved locally at once, announced when its upload is done, and the next checkpoint "
        "waits for it (for large models, whose upload takes tens of seconds: the first updates "
        "need not wait for version 0's). Off: the trainer waits for each upload.",
    )
    wm_batch: int = _f(8, "World-model transitions per step.", ge=1)
    wm_terminal_share: float = _f(
        0.25,
        "Share of each world-model batch drawn from episode-ending steps (models/train/learner.py).",
        ge=0,
        le=1,
    )
    chunk_rows: int = _f(
        32,
        "Policy loss: forward + backward in micro-batches of about this many step rows, so only "
        "one micro-batch's graph is in memory; the gradient is unchanged (0 = whole batch).",
        ge=0,
    )
    wm_chunk_rows: int = _f(
        8,
        "World-model loss: the same for batches of more than this many transitions "
        "(InfoNCE keeps its whole-batch negatives through a GradCache pre-pass, one extra "
        "no-grad forward; 0 = whole batch).",
        ge=0,
    )
    max_steps: int = _f(0, "Stop after N policy steps (0 = forever).", ge=0)
    clip_low: float = _f(
        0.2,
        "GSPO lower clip range (on the ratio per decision, geometric mean over a "
        "trajectory's steps; docs/method.md).",
        ge=0,
        lt=1,
    )
    clip_high: float = _f(0.28, "GSPO upper clip range (clip-higher, as DAPO).", ge=0)
    policy_temperature: float = _f(
        1.0,
        "T of the policy pi_T(a|s) = softmax over the page's candidate actions of "
        "score/T, for BC on expert steps and for records that carry no temperature (acting "
        "records its own, dream.temperature); keep it equal to dream.temperature.",
        gt=0,
    )
    bc_weight: float = _f(1.0, "Weight of the behaviour-cloning term on expert trajectories.", ge=0)
    dream_adv_cap: float = _f(
        0.5,
        "The most of a policy batch's summed |GSPO advantage| that dreamed trajectories may carry "
        "(dreams weighted no more than reality): past it their advantages are scaled down to it "
        "(models.losses.cap_dream_share). A batch without real GSPO advantage is not capped "
        "(nothing to weigh the dreams against). 1.0: off.",
        gt=0,
        le=1,
    )
    infonce_weight: float = _f(0.1, "Weight of the world model's InfoNCE term.", ge=0)
    wm_head_weight: float = _f(
        1.0,
        "Weight of the world model's reward and done heads (each a class-balanced "
        "cross-entropy on the world model's hidden states of the acted element's page line and the "
        "action: task success, done); "
        "predict() takes reward and done from them once trained (0 = heads not trained).",
        ge=0,
    )
    zero_stage: int = _f(0, "DeepSpeed ZeRO stage.", ge=0, le=3)
    dist_interface: str = _f(
        "",
        "Network interface the ranks of a multi-node trainer talk over (e.g. eth0, ib0; sets "
        "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME). Required when MASTER_ADDR is another host "
        "(unless those variables are set); empty = loopback for one rank or several on one host "
        "(a single-rank trainer opens no rendezvous port at all).",
    )
    ranks: int = _f(
        1, "Data-parallel ranks of `dynaweb train` / `up` on this host (docs/scaling.md).", ge=1
    )
    dist_timeout_s: float = _f(
        300.0, "Seconds a collective of several trainer ranks waits for the others.", gt=0
    )
    keep_checkpoints: int = _f(
        5, "Keep the last N checkpoints in S3 (promoted ones always kept).", ge=1
    )
    grad_clip: float = _f(1.0, "Gradient clipping norm.", ge=0)
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
        ge=0,
    )
    train_world_model: bool = _f(
        True, "Train the world model (off when nothing dreams, e.g. a real-only run)."
    )

    def checks(self) -> list[tuple[str, str]]:
        run, sep, version = self.init_from.partition(":")
        if self.init_from and (not run or (sep and not version.isdigit())):
            return [("init_from", f"{self.init_from!r} is not 'RUN' or 'RUN:VERSION'")]
        return []
