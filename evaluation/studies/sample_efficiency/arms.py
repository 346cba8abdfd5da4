"""The sample-efficiency study's design: its configuration, the run config of every arm, and
which checkpoint versions each arm reads out.

``resolve_experiment`` checks the study config's ``experiment`` section (or the ``--quick``
plumbing check, ``QUICK``); ``cell_config`` is the resolved runtime config of one (arm, seed)
run, without the study's section: the same model, tokenizer,
optimiser and learning rate in every arm, the arm's batch mix, pacing and step count
(``evaluation.studies.sample_efficiency.study`` describes the arms).  ``online_points`` and ``matched_points``
turn a cell's checkpoint history into its read-out points.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json

from core.config import Config
from evaluation.studies.sample_efficiency.arm_names import DREAM_ARMS
from evaluation.studies.sample_efficiency.config import (
    ExperimentConfig,
    SampleEfficiencyConfig,
    expert_samples_per_step,
    live_groups_per_step,
)

QUICK = {  # --quick: every artifact through every real component in a few minutes, not a result
    "tasks": ["miniwob/click-collapsible", "miniwob/enter-text"],
    "demos_per_task": 2,
    "seeds": [0],
    "budget": [14, 22, 30],
    "imitation_steps": 3,
    "online_policy_steps": 5,  # dream-fed steps are fast: room for the first live group to land
    "group_size": 2,
    "batch_trajectories": 4,
    "dream_real_share": 0.5,
    "dream_horizon": 2,
    "max_steps": 4,
    "eval_seeds_per_task": 2,
    "layers": 1,
    "d_model": 64,
    "heads": 2,
    "cell_timeout_s": 480.0,
    "replay_rollouts": 6,
    "wm_corpus": "docs/results/world-model/transitions.jsonl.gz",  # its enter-text transitions
    "wm_pretrain_steps": 20,
}
REWARD = "binary: 1 if MiniWoB's raw reward > 0 else 0 (live and dreamed groups; evaluation counts the same success)"


def resolve_experiment(cfg: SampleEfficiencyConfig, quick: bool) -> ExperimentConfig:
    """The study's ``experiment`` section, or with ``quick`` the scaled-down plumbing check
    (``QUICK``), validated (``ExperimentConfig.checks``)."""
    ex = copy.deepcopy(cfg.experiment)
    if quick:
        for k, v in QUICK.items():
            setattr(ex, k, copy.deepcopy(v))
    ex.validate()
    if bad := overridden_settings(cfg.runtime(), ex):
        raise ValueError(
            "the study sets these runtime settings itself; set the study's own (experiment.*) "
            "or leave them at their defaults: " + "; ".join(bad)
        )
    return ex


def bc_temperature(ex: ExperimentConfig) -> float:
    """The T of the distribution behaviour cloning fits (``experiment.bc_temperature``; 0 = the
    sampling temperature)."""
    return ex.bc_temperature or ex.temperature


# which cells a study runs, and how long one may take: not the configuration of any cell, so a
# study extended by more training seeds or arms stays the same experiment (its cells are kept)
NOT_CELL_SETTINGS = (
    "cell_timeout_s",
    "seeds",
    "arms",
    "keep_checkpoints",
    "statement",
    "apart_tasks",
)


def cell_settings(ex: ExperimentConfig | dict) -> dict:
    """The experiment's settings that every cell's configuration follows (as JSON values)."""
    d = dict(ex) if isinstance(ex, dict) else dataclasses.asdict(ex)
    for k in NOT_CELL_SETTINGS:
        d.pop(k, None)
    if not d.get("wm_corpus"):  # no pretraining: the same id as before these settings existed
        d.pop("wm_corpus", None)
        d.pop("wm_pretrain_steps", None)
    if not d.get("policy_match_feature"):  # off: the same id as before the setting existed
        d.pop("policy_match_feature", None)
    if not d.get("policy_pointer"):  # off: the same id as before the setting existed
        d.pop("policy_pointer", None)
    if not d.get("policy_lr"):  # the trainer's: the same id as before the setting existed
        d.pop("policy_lr", None)
    if not d.get("corpus_tasks"):  # the corpus's transitions of `tasks`: as before
        d.pop("corpus_tasks", None)
    if d.get("instruction_match", True):  # on: what every study before the switch ran
        d.pop("instruction_match", None)
    if not d.get("dream_drop_uniform"):  # off: the same id as before the setting existed
        d.pop("dream_drop_uniform", None)
    return json.loads(json.dumps(d))


def experiment_id(ex: ExperimentConfig) -> str:
    """The hash of ``cell_settings``: cells of one id were run with one configuration."""
    return (
        "se" + hashlib.sha1(json.dumps(cell_settings(ex), sort_keys=True).encode()).hexdigest()[:6]
    )


# The study's settings that are runtime settings of every cell: (experiment field, runtime
# setting).  ``cell_config`` composes a cell's config from the user's runtime config and these;
# the arms' own settings follow in ``cell_config`` and ``_online_arm``.
STUDY_SETTINGS = (
    ("layers", "model.layers"),
    ("d_model", "model.d_model"),
    ("heads", "model.heads"),
    ("policy_match_feature", "model.policy_match_feature"),
    ("policy_pointer", "model.policy_pointer"),
    ("instruction_match", "model.instruction_match"),
    ("tasks", "collector.tasks"),
    ("max_steps", "collector.max_steps"),
    ("episode_time_limit_ms", "collector.episode_time_limit_ms"),
    ("contexts", "collector.contexts"),
    ("batch_trajectories", "stream.batch_trajectories"),
    ("group_size", "stream.group_size"),
    ("group_size", "dream.group_size"),
    ("wm_steps_per_policy_step", "trainer.wm_steps_per_policy_step"),
    ("dream_horizon", "dream.horizon"),
    ("dream_drop_uniform", "dream.drop_uniform_groups"),
    ("temperature", "dream.temperature"),  # frozen: live (collectors) and dreamed rollouts
)


def _set(c: Config, path: str, value: object) -> None:
    section, name = path.split(".")
    setattr(getattr(c, section), name, copy.deepcopy(value))


def cell_config(
    base: Config,
    ex: ExperimentConfig,
    run_id: str,
    arm: str,
    seed: int,
    init_from: str = "",
    wm_init: str = "",
) -> Config:
    """The resolved config of one (arm, seed) run: the user's runtime config with the study's
    settings (``STUDY_SETTINGS``) and the arm's; the same model, tokenizer, optimiser and learning
    rate in every arm; every arm but ``imitation`` starts from ``init_from`` (the imitation
    checkpoint 'RUN:VERSION', weights only: the optimizer starts fresh in each); the DynaWeb arms'
    world model from ``wm_init`` when given (the study's pretrained world model,
    ``experiment.wm_corpus``).  The runtime config only (``Config.runtime``): a cell's components
    never see the study's section.  What the user set and the study does not (the staleness bound
    ``stream.max_staleness``, the tokenizer, ...) is the user's; ``overridden_settings`` names
    what a study would change of the user's."""
    c = base.runtime()
    c.run_id = run_id
    for field_name, path in STUDY_SETTINGS:
        _set(c, path, getattr(ex, field_name))
    if arm != "imitation":
        c.trainer.init_from = init_from
    if arm in DREAM_ARMS and wm_init:
        c.trainer.wm_init_from = wm_init
    c.model.seed = int(seed)
    if ex.policy_lr:
        c.trainer.lr = float(ex.policy_lr)
    cc = c.collector
    if ex.eval_seed_start < cc.seed_stop:
        cc.seed_stop = ex.eval_seed_start  # evaluation seeds are never training seeds
    s = c.stream
    s.samples_per_insert = 0  # the K demonstrations are scarce on purpose: reuse them freely
    s.reuse_wait_s = 0.0
    s.heldout_fraction = 0.0  # every real interaction is training data (the budget counts all)
    t = c.trainer
    t.checkpoint_every_s = 1e9
    t.keep_checkpoints = 1_000_000  # every version may be evaluated afterwards
    c.dream.max_dropped_per_published = 0  # the studies ran without the cap: cells stay as run
    t.dream_adv_cap = 1.0  # nor with the dreamed advantage's cap: cells stay as run
    # the trainer's pi_T for BC and for records without a temperature (acting records its own)
    t.policy_temperature = bc_temperature(ex)
    if arm == "imitation":
        s.expert_fraction = 1.0
        s.cold_start_batch_s = 0.05
        t.max_steps = ex.imitation_steps
        t.checkpoint_every = ex.imitation_steps
    elif arm == "imitation_matched":
        # the online arms' optimizer steps, each on the same number of demonstration samples,
        # from the same checkpoint with the same optimiser and learning rate; only demonstrations
        s.expert_fraction = 1.0
        s.batch_trajectories = expert_samples_per_step(ex)
        s.cold_start_batch_s = 0.05
        t.max_steps = ex.online_policy_steps
        t.checkpoint_every = 1  # every step count can be read out, as in the online arms
        t.train_world_model = False  # nothing dreams from it (the policy's update ignores it)
    else:
        _online_arm(c, ex, arm, seed)
    return c


def overridden_settings(base: Config, ex: ExperimentConfig) -> list[str]:
    """The runtime settings the user gave a value other than the default that some arm's cell
    would change (its run id aside): a study composes the user's runtime config and changes
    none of it silently (``resolve_experiment`` refuses them)."""
    default, found = Config(), {}
    starts = {"init_from": "<the imitation checkpoint>"}
    if ex.wm_corpus:
        starts["wm_init"] = "<the pretrained world model>"
    for arm, seed in ((a, s) for a in ex.arms for s in ex.seeds):
        cell = cell_config(base, ex, base.run_id, arm, seed, **starts)
        for section in dataclasses.fields(Config):
            b, d, c = (getattr(x, section.name) for x in (base, default, cell))
            if not dataclasses.is_dataclass(b):
                continue
            for f in dataclasses.fields(b):
                user, mine = getattr(b, f.name), getattr(c, f.name)
                if user != getattr(d, f.name) and mine != user:
                    found[f"{section.name}.{f.name}"] = (user, mine)
    owner = {path: f"experiment.{name}" for name, path in STUDY_SETTINGS}
    return [
        f"{path} = {user!r} (the study sets {mine!r}"
        + (f" from {owner[path]})" if path in owner else ")")
        for path, (user, mine) in found.items()
    ]


def _online_arm(c: Config, ex: ExperimentConfig, arm: str, seed: int) -> None:
    """The settings of ``real_only``, ``dynaweb`` and ``dynaweb_dream_only`` (in place)."""
    s, t, cc = c.stream, c.trainer, c.collector
    s.expert_fraction = ex.expert_fraction
    s.expert_only_batches = False  # every policy step holds an online group
    s.group_timeout_s = 120.0
    if live_groups_per_step(ex) > 1:  # a step waits for its whole online share
        s.batch_wait_s = s.group_timeout_s
    t.max_steps = ex.online_policy_steps  # fixed: the cell ends when this many steps are taken
    t.checkpoint_every = 1  # a new version per step: on-policy collectors wait for it
    t.train_world_model = arm in DREAM_ARMS
    if arm == "dynaweb_dream_only":  # the paper's setting: the policy learns from dreams
        s.policy_sources = ["dream"]  # and demonstrations; real groups train the world model
    cc.group_size = ex.group_size
    cc.run_length = ex.group_size
    cc.policy = "latest"
    cc.groups_per_version = (
        float(live_groups_per_step(ex)) if arm == "real_only" else ex.dream_real_share
    )
    cc.seed_offset = 7919 * (int(seed) + 1)  # the online arms of one seed walk the same task seeds


def pick_versions(history: list[tuple[int, int]], budget: list[int], demo_steps: int) -> list[dict]:
    """For each budget point, the newest version first seen at a real-step count <= the point.
    ``history`` is [(version, real steps incl. demos when it was first seen)], in order."""
    out = []
    for b in budget:
        ok = [(v, s) for v, s in history if s <= b]
        v, s = ok[-1] if ok else history[0]
        out.append({"budget": int(b), "version": int(v), "real_steps": int(max(s, demo_steps))})
    return out


def online_points(history: list[tuple[int, int]], budget: list[int], demo_steps: int) -> list[dict]:
    """The read-outs of an online cell: ``pick_versions`` at every budget point, then the final version
    (``budget`` None) at the real steps counted when it was announced.  One checkpoint per policy step
    from version 0, so ``policy_steps`` = version."""
    pts = pick_versions(history, budget, demo_steps)
    v, s = history[-1]
    pts.append({"budget": None, "version": int(v), "real_steps": int(max(s, demo_steps))})
    return [dict(p, policy_steps=p["version"]) for p in pts]


def matched_points(
    online: list[list[dict]], budget: list[int], steps: int, demo_steps: int
) -> list[dict]:
    """The read-outs of ``imitation_matched``, aligned with the online arms' points (one per budget point,
    then the final one): point i is its checkpoint after the largest policy-step count that an online arm
    of the same seed had at its point i (``online``: those cells' points), so at no point does an online
    arm have more behaviour-cloning updates than this control; the final point is ``steps``
    (= ``online_policy_steps``, as in every online arm).  Without online cells, evenly spaced.
    ``real_steps`` is the demonstrations only: this arm never interacts."""
    n = len(budget) + 1
    out = []
    for i in range(n):
        have = [
            int(pts[i]["policy_steps"])
            for pts in online
            if i < len(pts) and pts[i].get("policy_steps") is not None
        ]
        if have:
            k = max(have)
        else:
            k = steps if i == n - 1 else int(round(steps * (i + 1) / n))
        k = min(max(k, 0), int(steps))
        out.append(
            {
                "budget": int(budget[i]) if i < len(budget) else None,
                "version": k,
                "policy_steps": k,
                "real_steps": int(demo_steps),
            }
        )
    return out
