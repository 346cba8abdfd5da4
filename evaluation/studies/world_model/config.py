"""The world-model study's configuration: its section ``wm_study`` (``WorldModelStudyConfig``) and
``WorldModelStudyRunConfig``, the runtime config with that section, which ``dynaweb experiment
world-model`` loads (``--set wm_study.FIELD=...``, ``DYNAWEB_WM_STUDY__FIELD``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from core.config import Config, ModelConfig
from core.config.fields import _f, raise_problems

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
    tasks: list[str] = _f(list(WM_STUDY_TASKS), "Tasks the study collects and evaluates on.")
    expert_episodes: int = _f(500, "Scripted-expert episodes collected.", ge=0)
    random_episodes: int = _f(500, "Random-policy episodes collected.", ge=0)
    perturbed_episodes: int = _f(
        1000,
        "Perturbed-expert episodes collected (collectors/perturbed.py: the expert with near "
        "misses, wrong element, option or text, at perturb_prob per step): failures next to "
        "success.",
        ge=0,
    )
    perturb_prob: float = _f(
        0.7,
        "Chance of a near miss at each perturbed-expert step (at 0.25, 80 % of the episodes "
        "still succeeded, at 0.5 64 %: the tasks take 1-3 steps and some near misses are "
        "harmless).",
        ge=0,
        le=1,
    )
    max_steps: int = _f(8, "Step limit per episode (random episodes mostly run out of them).", ge=1)
    contexts: int = _f(2, "Browser contexts of the collection.", ge=1)
    heldout_fraction: float = _f(
        0.2,
        "Share held out for evaluation: of the (task, seed) pairs (split task_seed), or of the "
        "episodes (split episode).",
        gt=0,
        lt=1,
    )
    split: Literal["task_seed", "episode"] = _f(
        "task_seed",
        "How the held-out set is chosen (evaluation/studies/world_model/split.py): task_seed holds "
        "out whole (task, seed) pairs (every episode of a held-out seed, also those of the "
        "--train-data files) and then removes the held-out transitions whose exact world-model "
        "input occurs in training; episode is the earlier per-episode rule, under which episodes "
        "of one seed land on both sides (kept to reproduce the earlier figures).",
    )
    heldout_tasks: list[str] = _f(
        [],
        "Tasks that never enter training (--data and --train-data alike): their transitions are "
        "scored separately, as the result's unseen_tasks figures, beside the seen tasks' ones.",
    )
    seed_start: int = _f(
        0, "First collection seed (training seeds of the run's collector range).", ge=0
    )
    layers: int = _f(
        2, "World-model layers (GPT-Neo from config, tokenizer model.tokenizer).", ge=1
    )
    d_model: int = _f(128, "World-model hidden size.", ge=1)
    heads: int = _f(4, "Attention heads.", ge=1)
    max_positions: int = _f(640, "Context length in tokens.", ge=1)
    steps: int = _f(5000, "Optimizer steps at most.", ge=1)
    time_budget_s: float = _f(840.0, "Training stops after this many seconds.", gt=0)
    batch: int = _f(8, "Transitions per optimizer step.", ge=1)
    chunk_rows: int = _f(
        8, "Micro-batch of the chunked backward (same gradient, less memory and padding).", ge=0
    )
    lr: float = _f(2e-3, "Peak learning rate.", gt=0)
    warmup: int = _f(30, "Warm-up steps.", ge=0)
    min_lr_fraction: float = _f(0.05, "Final learning rate as a fraction of the peak.", ge=0, le=1)
    grad_clip: float = _f(1.0, "Gradient-norm clip.", gt=0)
    infonce_weight: float = _f(0.1, "Weight of the InfoNCE page-embedding loss.", ge=0)
    head_weight: float = _f(
        1.0, "trainer.wm_head_weight: the reward/done heads (reward and done in the eval).", ge=0
    )
    terminal_share: float = _f(
        0.25,
        "Share of every training batch drawn from the terminal steps (done), each task's as "
        "often (evaluation/studies/world_model/study.py batches), beside the shuffled epochs over all "
        "transitions: the steps where the reward heads learn success from failure are a few "
        "percent of the data, most of them one task's. 0 = plain epochs.",
        ge=0,
        le=1,
    )
    max_change_tokens: int = _f(160, "Decoding limit of a predicted change.", ge=1)
    seed: int = _f(0, "Initialisation and sampling seed.", ge=0)
    threads: int = _f(2, "torch threads.", ge=1)
    log_every: int = _f(50, "Log every N steps.", ge=1)
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

    def checks(self) -> list[tuple[str, str]]:
        """The contradictions between the study's fields (``validate`` raises them)."""
        out = []
        if not self.tasks:
            out.append(("tasks", "no task to collect and evaluate on"))
        if self.tasks and set(self.tasks) <= set(self.heldout_tasks):
            out.append(("heldout_tasks", "every task is held out: nothing left to train on"))
        if self.heads >= 1 and self.d_model % self.heads:
            out.append(("d_model", f"{self.d_model} is not a multiple of heads {self.heads}"))
        return out

    def validate(self) -> None:
        """ValueError naming every problem of the section (``wm_study.*``)."""
        raise_problems(self, "wm_study.")


@dataclass
class WorldModelStudyRunConfig(Config):
    """The runtime config and the study's ``wm_study`` section."""

    wm_study: WorldModelStudyConfig = field(default_factory=WorldModelStudyConfig)


# the options of ``dynaweb experiment world-model`` that set a field of the section
CLI_OPTIONS = (
    "steps",
    "time_budget_s",
    "batch",
    "lr",
    "expert_episodes",
    "random_episodes",
    "perturbed_episodes",
    "layers",
    "d_model",
    "heldout_fraction",
    "seed",
)


# the runtime model settings the study's own fields set (``model_config``): the world model it
# trains is the user's ``model`` section with these from ``wm_study``
MODEL_SETTINGS = ("layers", "d_model", "heads", "max_positions", "seed")


def model_config(x: WorldModelStudyConfig, base: ModelConfig) -> ModelConfig:
    """The world model the study trains: the user's ``model`` section (tokenizer, instruction
    match, ...) with the study's ``MODEL_SETTINGS``."""
    return dataclasses.replace(base, **{name: getattr(x, name) for name in MODEL_SETTINGS})


def overridden_settings(base: ModelConfig, x: WorldModelStudyConfig) -> list[str]:
    """The ``model.*`` settings the user gave a value other than the default that the study's
    own would change (``resolve_study`` refuses them: never overridden silently)."""
    default = ModelConfig()
    return [
        f"model.{n} = {getattr(base, n)!r} (the study sets {getattr(x, n)!r} from wm_study.{n})"
        for n in MODEL_SETTINGS
        if getattr(base, n) != getattr(default, n) and getattr(base, n) != getattr(x, n)
    ]


def resolve_study(cfg: WorldModelStudyRunConfig, args: Any) -> WorldModelStudyConfig:
    """The section the command runs: the study config's ``wm_study`` (config file,
    ``DYNAWEB_WM_STUDY__*``, ``--set wm_study.*``), or with ``--quick`` the scaled-down plumbing
    check; the command's own options (``CLI_OPTIONS``) win; validated, and a ``model.*`` setting
    of the user's that the study's would change is refused (``overridden_settings``)."""
    x = WorldModelStudyConfig.make_quick() if getattr(args, "quick", False) else cfg.wm_study
    for name in CLI_OPTIONS:
        v = getattr(args, name, None)
        if v is not None:
            setattr(x, name, type(getattr(x, name))(v))
    if getattr(args, "threads_wm", None):
        x.threads = int(args.threads_wm)
    x.validate()
    if bad := overridden_settings(cfg.model, x):
        raise ValueError(
            "the study sets these model settings itself; set wm_study.* instead: " + "; ".join(bad)
        )
    return x
