"""The sample-efficiency study's configuration: its section ``experiment`` (``ExperimentConfig``)
and ``SampleEfficiencyConfig``, the runtime config with that section, which ``dynaweb experiment
sample-efficiency`` loads (``--set experiment.FIELD=...``, ``DYNAWEB_EXPERIMENT__FIELD``).  The
cells it runs get the runtime part only (``Config.runtime``, ``arms.cell_config``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.config import Config
from core.config.fields import _f, raise_problems
from evaluation.studies.sample_efficiency.arm_names import ARMS


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

    tasks: list[str] = _f(
        [
            "miniwob/click-link",
            "miniwob/click-checkboxes",
            "miniwob/click-button",
            "miniwob/click-tab",
        ],
        "Tasks (scripted experts). Frozen to the four tasks whose sampled "
        "success after imitation lay between 10 and 90 % on training seeds (docs/experiment.md, "
        "'Looking for a configuration with live signal'): a group of 8 rollouts then has "
        "varying rewards.",
    )
    demos_per_task: int = _f(
        10, "K: expert demonstrations per task, from training seeds (scarce on purpose).", ge=1
    )
    seeds: list[int] = _f(
        [0, 1, 2],
        "Training seeds (model init, sampling, demo and rollout seeds); one cell per arm each.",
        ge=0,
    )
    arms: list[str] = _f(
        ["imitation", "imitation_matched", "real_only", "dynaweb", "dynaweb_dream_only"],
        "Arms to run: imitation (BC on the demos), imitation_matched (BC with the online arms' "
        "policy steps and expert samples per step), real_only (live GSPO), dynaweb (dreamed GSPO "
        "and a share of real groups), dynaweb_dream_only (dreamed GSPO; real groups train the "
        "world model only).",
    )
    budget: list[int] = _f(
        [200, 350, 500],
        "Real-step budget points (demonstrations count): each online cell is read "
        "out at the newest checkpoint within each point, then at its final checkpoint.",
        ge=1,
    )
    imitation_steps: int = _f(
        60,
        "Arm imitation: behaviour-cloning steps on the demonstrations (its checkpoint is "
        "where every other arm starts).",
        ge=1,
    )
    online_policy_steps: int = _f(
        20,
        "Policy optimizer steps of real_only, dynaweb and imitation_matched (the "
        "cell's trainer.max_steps; one checkpoint per step), the same in each. Frozen.",
        ge=1,
    )
    group_size: int = _f(
        8,
        "G: rollouts per GSPO group (live: the same seed G times; dreams: one start state). "
        "Frozen.",
        ge=1,
    )
    temperature: float = _f(
        1.0,
        "Policy sampling temperature of live and dreamed training rollouts "
        "(dream.temperature, used by the collectors and the dream generator; evaluation is "
        "greedy). Frozen.",
        gt=0,
    )
    bc_temperature: float = _f(
        0.0,
        "T of the distribution behaviour cloning fits (trainer.policy_temperature) in every "
        "arm; 0 = the sampling temperature. BC on pi_T makes the sampled distribution after "
        "imitation the same whatever T is: a sampling temperature above a BC temperature of 1 "
        "is what explores.",
        ge=0,
    )
    batch_trajectories: int = _f(
        16,
        "Trajectories per training batch of the online arms (the expert share is "
        "expert_fraction; imitation_matched trains on batch_trajectories * expert_fraction "
        "experts per step, the same expert samples; real_only collects the online share, in "
        "whole groups of group_size, per policy step).",
        ge=1,
    )
    expert_fraction: float = _f(
        0.5, "Expert share of every training batch, the same in real_only and dynaweb.", gt=0, lt=1
    )
    dream_real_share: float = _f(
        0.25,
        "Arm dynaweb: real on-policy groups per policy version (the rest are dreams).",
        gt=0,
        le=1,
    )
    dream_horizon: int = _f(5, "Arm dynaweb: dream length in steps.", ge=1)
    dream_drop_uniform: bool = _f(
        False,
        "The DynaWeb arms publish only dream groups with a nonzero GSPO advantage "
        "(dream.drop_uniform_groups: DAPO's dynamic sampling); off: every dreamed group.",
    )
    max_steps: int = _f(
        6, "Episode step limit (live training and evaluation; the experts need 2-3).", ge=1
    )
    episode_time_limit_ms: int = _f(
        60_000, "MiniWoB episode time limit (raised from 10 s; time-outs are counted).", ge=1
    )
    eval_seeds_per_task: int = _f(30, "Evaluation episodes per task and point.", ge=1)
    eval_seed_start: int = _f(
        1_000_000, "First evaluation seed (training seeds lie below collector.seed_stop).", ge=1
    )
    contexts: int = _f(2, "Browser contexts of each live collector and of the evaluation.", ge=1)
    layers: int = _f(2, "Model layers (policy and world model, the same in every arm).", ge=1)
    d_model: int = _f(128, "Model hidden size.", ge=1)
    heads: int = _f(4, "Attention heads.", ge=1)
    wm_steps_per_policy_step: float = _f(
        2.0,
        "World-model steps per policy step in arms imitation, dynaweb and dynaweb_dream_only "
        "(fixed, so runs are reproducible whatever the machine's speed).",
        ge=0,
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
        3000, "Optimizer steps of that pretraining (wm_study's loss, batch and schedule).", ge=1
    )
    corpus_tasks: list[str] = _f(
        [],
        "Tasks whose wm_corpus transitions the DynaWeb arms' world model is pretrained on, "
        "disjoint from `tasks` (the method's setting: the world model learns from existing "
        "trajectories of other tasks, then adapts on the arm's online real data). Empty = the "
        "corpus's transitions of `tasks`.",
    )
    instruction_match: bool = _f(
        True,
        "The hand-written instruction-word features in every arm (model.instruction_match: the "
        "element head's bit for a candidate whose label is a word of the instruction, and the "
        "world model's match feature). Off measures their share.",
    )
    statement: str = _f(
        "",
        "The study's committed statement (a path in the checkout): a full study refuses to run "
        "without it, from a dirty tree, or after its code changed; experiment.json records the "
        "commit it ran from and the statement's commit. --quick runs without one.",
    )
    apart_tasks: list[str] = _f(
        ["miniwob/click-link"],
        "Tasks reported apart from the mean of the others in the per-task table (click-link: "
        "the instruction-word bit alone singles out its target in 97.7 % of expert steps).",
    )
    policy_lr: float = _f(
        0.0,
        "Policy learning rate (trainer.lr, the schedule's peak) of every arm; 0 = the trainer's.",
        ge=0,
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
        ge=0,
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
        3600.0, "A cell (one arm, one seed) that has not finished after this fails.", gt=0
    )

    def checks(self) -> list[tuple[str, str]]:
        """The contradictions between the study's fields (``validate`` raises them)."""
        out = []
        bad = [a for a in self.arms if a not in ARMS]
        if bad:
            out.append(("arms", f"unknown {bad}; choose from {list(ARMS)}"))
        if "imitation" not in self.arms:
            out.append(
                ("arms", "must include 'imitation' (every other arm starts from its checkpoint)")
            )
        if not self.budget or sorted(self.budget) != list(self.budget):
            out.append(("budget", f"must be increasing real-step counts, got {self.budget}"))
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            out.append(("seeds", f"must be distinct training seeds, got {self.seeds}"))
        if not self.tasks:
            out.append(("tasks", "no task to train and evaluate on"))
        both = sorted(set(self.corpus_tasks) & set(self.tasks))
        if both:
            out.append(("corpus_tasks", f"must be disjoint from tasks; both hold {both}"))
        if self.corpus_tasks and not self.wm_corpus:
            out.append(("corpus_tasks", "set, but experiment.wm_corpus names no corpus file"))
        if self.heads >= 1 and self.d_model % self.heads:
            out.append(("d_model", f"{self.d_model} is not a multiple of heads {self.heads}"))
        if (
            0 < self.expert_fraction < 1
            and self.group_size >= 1
            and expert_samples_per_step(self) < 1
        ):
            out.append(
                (
                    "expert_fraction",
                    f"batch_trajectories * expert_fraction ({self.batch_trajectories} * "
                    f"{self.expert_fraction}) must give at least one expert per step",
                )
            )
        return out

    def validate(self) -> None:
        """ValueError naming every problem of the section (``experiment.*``)."""
        raise_problems(self, "experiment.")


@dataclass
class SampleEfficiencyConfig(Config):
    """The runtime config and the study's ``experiment`` section."""

    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)


def expert_samples_per_step(ex: ExperimentConfig) -> int:
    """Expert (behaviour-cloning) trajectories in every policy step of the online arms, as the hybrid
    mixer (``streams/mixer.py``) builds a mixed batch: whole groups of G up to its non-expert target
    ``round(batch * (1 - f))`` (at least one group), then ``round(f * n_d / (1 - f))`` experts.  With the
    defaults (16, 0.5, G = 8): 8 = ``batch_trajectories * expert_fraction``.  ``imitation_matched`` trains
    on expert-only batches of exactly this size, so every arm gets the same BC samples per step."""
    f = float(ex.expert_fraction)
    n_d = ex.group_size * live_groups_per_step(ex)
    return int(round(f * n_d / (1.0 - f) + 1e-9))


def live_groups_per_step(ex: ExperimentConfig) -> int:
    """Whole groups of G in the online share of a mixed batch, ``round(batch * (1 - f))``, at least
    one: what ``real_only`` collects per policy step (``collector.groups_per_version``) and what the
    mixer waits for before a step.  The defaults (16, 0.5, G = 8): 1."""
    target = max(1, int(round(ex.batch_trajectories * (1.0 - float(ex.expert_fraction)))))
    return max(1, target // max(1, ex.group_size))
