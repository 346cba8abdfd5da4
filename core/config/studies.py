"""The two studies' configuration sections: ``experiment`` (the sample-efficiency study,
``dynaweb experiment sample-efficiency``) and ``wm_study`` (the world-model study, ``dynaweb
experiment world-model``).  Composed into ``core.config.runtime.Config`` like every other section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.config.fields import _f


@dataclass
class ExperimentConfig:
    """``dynaweb experiment sample-efficiency`` (docs/experiment.md); ``--quick`` scales it down.

    Frozen: these defaults are the study's configuration, fixed before it is run (not tuned
    after the fact): G = 8 rollouts per GSPO group, the four tasks below, sampling temperature
    1.0 for live and dreamed rollouts, binary reward for RL (1 if MiniWoB's raw reward > 0,
    else 0, for live and dreamed groups: ``models.losses.task_success_reward``, not a setting),
    the same number of policy optimizer steps (``online_policy_steps``) and of expert samples
    per step in ``real_only``, ``dynaweb`` and the matched imitation control
    ``imitation_matched``.  Changing any field
    makes another experiment (its id is a hash of this section).  ``--quick`` only checks the
    plumbing with scaled-down values.

    Wall time: 60.6 min was measured on the 2-core machine for the earlier 4-arm, 5-task study
    (3 seeds, 7,200 evaluation episodes); docs/experiment.md gives the current defaults' time.
    ``--quick``: a few minutes."""

    tasks: list = _f(
        [
            "miniwob/click-link",
            "miniwob/click-checkboxes",
            "miniwob/click-button",
            "miniwob/click-tab",
        ],
        "Tasks (scripted experts). Frozen (session 12) to the four tasks whose sampled "
        "success after imitation lay between 10 and 90 % on training seeds (docs/experiment.md, "
        "'Looking for a configuration with live signal'): a group of 8 rollouts then has "
        "varying rewards.",
    )
    demos_per_task: int = _f(
        10, "K: expert demonstrations per task, from training seeds (scarce on purpose)."
    )
    seeds: list = _f(
        [0, 1, 2],
        "Training seeds (model init, sampling, demo and rollout seeds); one cell per arm each.",
    )
    arms: list = _f(
        ["imitation", "imitation_matched", "real_only", "dynaweb", "dynaweb_dream_only"],
        "Arms to run: imitation (BC on the demos), imitation_matched (BC with the online arms' "
        "policy steps and expert samples per step), real_only (live GSPO), dynaweb (dreamed GSPO "
        "and a share of real groups), dynaweb_dream_only (dreamed GSPO; real groups train the "
        "world model only).",
    )
    budget: list = _f(
        [200, 350, 500],
        "Real-step budget points (demonstrations count): each online cell is read "
        "out at the newest checkpoint within each point, then at its final checkpoint.",
    )
    imitation_steps: int = _f(
        60,
        "Arm imitation: behaviour-cloning steps on the demonstrations (its checkpoint is "
        "where every other arm starts).",
    )
    online_policy_steps: int = _f(
        20,
        "Policy optimizer steps of real_only, dynaweb and imitation_matched (the "
        "cell's trainer.max_steps; one checkpoint per step), the same in each. Frozen.",
    )
    group_size: int = _f(
        8,
        "G: rollouts per GSPO group (live: the same seed G times; dreams: one start state). "
        "Frozen.",
    )
    temperature: float = _f(
        1.0,
        "Policy sampling temperature of live and dreamed training rollouts "
        "(dream.temperature, used by the collectors and the dream generator; evaluation is "
        "greedy). Frozen.",
    )
    bc_temperature: float = _f(
        0.0,
        "T of the distribution behaviour cloning fits (trainer.policy_temperature) in every "
        "arm; 0 = the sampling temperature. BC on pi_T makes the sampled distribution after "
        "imitation the same whatever T is: a sampling temperature above a BC temperature of 1 "
        "is what explores.",
    )
    batch_trajectories: int = _f(
        16,
        "Trajectories per training batch of the online arms (the expert share is "
        "expert_fraction; imitation_matched trains on batch_trajectories * expert_fraction "
        "experts per step, the same expert samples; real_only collects the online share, in "
        "whole groups of group_size, per policy step).",
    )
    expert_fraction: float = _f(
        0.5, "Expert share of every training batch, the same in real_only and dynaweb."
    )
    dream_real_share: float = _f(
        0.25, "Arm dynaweb: real on-policy groups per policy version (the rest are dreams)."
    )
    dream_horizon: int = _f(5, "Arm dynaweb: dream length in steps.")
    max_steps: int = _f(
        6, "Episode step limit (live training and evaluation; the experts need 2-3)."
    )
    episode_time_limit_ms: int = _f(
        60_000, "MiniWoB episode time limit (raised from 10 s; time-outs are counted)."
    )
    eval_seeds_per_task: int = _f(30, "Evaluation episodes per task and point.")
    eval_seed_start: int = _f(
        1_000_000, "First evaluation seed (training seeds lie below collector.seed_stop)."
    )
    contexts: int = _f(2, "Browser contexts of each live collector and of the evaluation.")
    layers: int = _f(2, "Model layers (policy and world model, the same in every arm).")
    d_model: int = _f(128, "Model hidden size.")
    heads: int = _f(4, "Attention heads.")
    wm_steps_per_policy_step: float = _f(
        2.0,
        "World-model steps per policy step in arms imitation, dynaweb and dynaweb_dream_only "
        "(fixed, so runs are reproducible whatever the machine's speed).",
    )
    wm_corpus: str = _f(
        "",
        "Real transitions (JSONL, .gz read too; e.g. docs/results/world-model/transitions.jsonl.gz, "
        "collected by `dynaweb experiment world-model`; several files: comma-separated) the "
        "DynaWeb arms' world model is "
        "pretrained on once per study (on the transitions of `tasks`) before their cells start "
        "(trainer.wm_init_from). Those transitions are real interactions: the summary's "
        "real_steps of the DynaWeb arms count them (the headline accounting), real_steps_online "
        "does not. Empty = the world model starts from the imitation arm's.",
    )
    wm_pretrain_steps: int = _f(
        3000, "Optimizer steps of that pretraining (wm_study's loss, batch and schedule)."
    )
    policy_lr: float = _f(
        0.0,
        "Policy learning rate (trainer.lr, the schedule's peak) of every arm; 0 = the trainer's.",
    )
    policy_match_feature: bool = _f(
        False,
        "The policy of every arm gets the exact-match input feature (model.policy_match_feature: "
        "page words that are words of the instruction are flagged). Off = the frozen study.",
    )
    policy_pointer: bool = _f(
        False,
        "The policy of every arm gets the element pointer (model.policy_pointer: each candidate "
        "naming a page element is also scored from that element's page line). Off = the frozen "
        "study.",
    )
    replay_rollouts: int = _f(
        40,
        "Dreamed rollouts of each DynaWeb arm's cell replayed in the live browser after the cell "
        "(the replay check: dream_reward_auroc in the summary); 0 = none.",
    )
    keep_checkpoints: bool = _f(
        False,
        "Keep every checkpoint of every cell in S3. Off: once a seed's cells and probes are done, "
        "each of its runs keeps only its final (LATEST) checkpoints (every version read out is "
        "in the cell's record; at 100 policy steps a seed's five cells held about 10 GB).",
    )
    parallel_arms: bool = _f(
        True,
        "Run the online arms of a seed at the same time (they only share the "
        "imitation checkpoint).",
    )
    cell_timeout_s: float = _f(
        3600.0, "A cell (one arm, one seed) that has not finished after this fails."
    )


WM_STUDY_TASKS = [
    "miniwob/click-button",
    "miniwob/click-link",
    "miniwob/enter-text",
    "miniwob/click-checkboxes",
    "miniwob/focus-text",
    "miniwob/click-dialog",
    "miniwob/login-user",
    "miniwob/choose-list",
    "miniwob/click-tab",
    "miniwob/enter-password",
]


@dataclass
class WorldModelStudyConfig:
    """``dynaweb experiment world-model`` (docs/world-model.md): everything the study varies; the
    rest comes from the run's ``Config``.  ``--quick`` uses ``quick()``."""

    quick: bool = _f(False, "The scaled-down plumbing check (set by --quick).")
    tasks: list = _f(list(WM_STUDY_TASKS), "Tasks the study collects and evaluates on.")
    expert_episodes: int = _f(500, "Scripted-expert episodes collected.")
    random_episodes: int = _f(500, "Random-policy episodes collected.")
    perturbed_episodes: int = _f(
        1000,
        "Perturbed-expert episodes collected (collectors/perturbed.py: the expert with near "
        "misses, wrong element, option or text, at perturb_prob per step): failures next to "
        "success.",
    )
    perturb_prob: float = _f(
        0.7,
        "Chance of a near miss at each perturbed-expert step (at 0.25, 80 % of the episodes "
        "still succeeded, at 0.5 64 %: the tasks take 1-3 steps and some near misses are "
        "harmless).",
    )
    max_steps: int = _f(8, "Step limit per episode (random episodes mostly run out of them).")
    contexts: int = _f(2, "Browser contexts of the collection.")
    heldout_fraction: float = _f(0.2, "Share of episodes held out for evaluation (per episode).")
    seed_start: int = _f(0, "First collection seed (training seeds of the run's collector range).")
    layers: int = _f(2, "World-model layers (GPT-Neo from config, tokenizer model.tokenizer).")
    d_model: int = _f(128, "World-model hidden size.")
    heads: int = _f(4, "Attention heads.")
    max_positions: int = _f(640, "Context length in tokens.")
    steps: int = _f(5000, "Optimizer steps at most.")
    time_budget_s: float = _f(840.0, "Training stops after this many seconds.")
    batch: int = _f(8, "Transitions per optimizer step.")
    chunk_rows: int = _f(
        8, "Micro-batch of the chunked backward (same gradient, less memory and padding)."
    )
    lr: float = _f(2e-3, "Peak learning rate.")
    warmup: int = _f(30, "Warm-up steps.")
    min_lr_fraction: float = _f(0.05, "Final learning rate as a fraction of the peak.")
    grad_clip: float = _f(1.0, "Gradient-norm clip.")
    infonce_weight: float = _f(0.1, "Weight of the InfoNCE page-embedding loss.")
    head_weight: float = _f(
        1.0, "trainer.wm_head_weight: the reward/done heads (reward and done in the eval)."
    )
    terminal_share: float = _f(
        0.25,
        "Share of every training batch drawn from the terminal steps (done), each task's as "
        "often (evaluation/studies/world_model/study.py batches), beside the shuffled epochs over all "
        "transitions: the steps where the reward heads learn success from failure are a few "
        "percent of the data, most of them one task's. 0 = plain epochs.",
    )
    max_change_tokens: int = _f(160, "Decoding limit of a predicted change.")
    seed: int = _f(0, "Initialisation and sampling seed.")
    threads: int = _f(2, "torch threads.")
    log_every: int = _f(50, "Log every N steps.")
    decode: Literal["greedy", "rerank", "head"] = _f(
        "head",
        "The headline decoding (the change head picks a proposal, models/world_model/proposals.py); the "
        "rerank and greedy figures are reported next to it.",
    )

    @classmethod
    def make_quick(cls) -> WorldModelStudyConfig:
        return cls(
            quick=True,
            tasks=WM_STUDY_TASKS[:4],
            expert_episodes=16,
            random_episodes=24,
            perturbed_episodes=16,
            max_steps=5,
            heldout_fraction=0.25,
            layers=2,
            d_model=64,
            heads=2,
            max_positions=512,
            steps=40,
            time_budget_s=45.0,
            batch=8,
            lr=2e-3,
            warmup=5,
            log_every=10,
        )
