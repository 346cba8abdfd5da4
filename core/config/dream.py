"""The dream generator's section of the runtime configuration (``core.config.runtime.Config.dream``):
what a dream round is, which world model may be dreamed in, and how fast dreams are made
(back-pressure's rate limit and the pacing by the trainer's consumption, ``models/dream/pacing.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.config.fields import _f


@dataclass
class DreamConfig:
    group_size: int = _f(8, "Rollouts per start state (GSPO group).", ge=1)
    horizon: int = _f(5, "Dream length in steps.", ge=1)
    batch: int = _f(16, "Rollouts advanced together.", ge=1)
    temperature: float = _f(1.0, "Policy sampling temperature.", gt=0)
    max_change_tokens: int = _f(160, "World-model output budget per step (tokens).", ge=1)
    wm_decode: Literal["greedy", "rerank", "head"] = _f(
        "head",
        "World-model decoding in dreams and the trainer's fidelity check: 'greedy' (the generated text), "
        "'rerank' (the generated text and proposals built from the page and the action, scored by the model, "
        "the most likely kept; always parses, slower) or 'head' (the change head picks a proposal's kind, "
        "or 'other' and the generated text; greedy until the head is trained; models/world_model/proposals.py). "
        "Reward and done come from the reward/done heads (once trained) with every decoding.",
    )
    drop_uniform_groups: bool = _f(
        False,
        "Publish only the groups whose rollouts' task-success rewards differ (a nonzero GSPO "
        "advantage: DAPO's dynamic sampling). A group whose rollouts all succeeded or all failed "
        "carries no policy gradient; it is counted (dynaweb_dream_groups_dropped_total) and not "
        "published, and the generator dreams on. Off: every group is published.",
    )
    max_dropped_per_published: int = _f(
        16,
        "drop_uniform_groups: the most groups dropped in a row before one is published anyway. "
        "A policy that learns only from dreams (stream.policy_sources=[dream]) waits for dreamed "
        "groups; without a cap it waited without bound (about 30 minutes for 10 policy steps "
        "in one study cell). When a round brings the count of groups dropped since the last "
        "published one to this, the round's first uniform group is published (no advantage: "
        "the learner steps on it with nothing to learn from it; counted in "
        "dynaweb_dream_uniform_published_total). So at most this many dreamed groups per "
        "published one. 0 = no cap.",
        ge=0,
    )
    pessimism: float = _f(
        0.0,
        "Dreamed success with the world model's ensemble (model.world_model_ensemble): above 0, a "
        "step's reward is 1 only when the reward head's p(success) > 0.5 and the members' mean "
        "p(success) - pessimism x their standard deviation > 0.5 (MOPO-style lower bound, e.g. "
        "1.0). 0 (default): the reward head alone, the members' disagreement measured: at 1.0 "
        "an early world model's dreams all failed and no dreamed group had an advantage in a "
        "4-minute `up` (test_up); a study chooses it.",
        ge=0,
    )
    max_disagreement: float = _f(
        0.0,
        "End a dream at a predicted step whose ensemble members' p(success) has a standard "
        "deviation above this (done, reward 0, reason 'disagreement'; the dream stays in its "
        "group as a failure: models/dream/env.py). 0 = off. Counted in "
        "dynaweb_dream_rollout_ends_total{end=disagreement}; every predicted step's "
        "disagreement in dynaweb_dream_disagreement. Off by default, as pessimism (e.g. 0.2).",
        ge=0,
    )
    trust_gate: bool = _f(
        False,
        "Dream a task only while the world model has judged that task's recent real episode ends "
        "right (models/dream/trust.py): the trainer predicts each real episode's outcome at its "
        "last step before training on it, and a task is admitted with at least trust_min_episodes "
        "judged, balanced accuracy >= trust_min_accuracy and |predicted - real success rate| <= "
        "trust_max_gap over the last trust_window. The trainer measures trust whether on or off "
        "(dynaweb_trainer_task_trust, dynaweb status); off by default because a run from scratch "
        "has judged nothing and would dream nothing until trust_min_episodes real episodes per "
        "task (as wm_gate).",
    )
    trust_window: int = _f(
        50, "trust_gate: the last real episode ends per task the trust is measured on.", ge=1
    )
    trust_min_episodes: int = _f(
        20, "trust_gate: judged real episode ends a task needs in its window.", ge=1
    )
    trust_min_accuracy: float = _f(
        0.7,
        "trust_gate: least balanced accuracy (mean recall of success and failure) of the "
        "predicted outcome.",
        ge=0,
        le=1,
    )
    trust_max_gap: float = _f(
        0.1,
        "trust_gate: largest |predicted - real| success rate over the window (calibration).",
        ge=0,
        le=1,
    )
    start_pool: int = _f(256, "Real start states kept.", ge=1)
    wm_gate: bool = _f(
        False,
        "Dream only with a world model that beats 'nothing changes' on held-out real transitions "
        "(models/dream/gate.py; off by default: a run from scratch starts at the baseline).",
    )
    wm_gate_margin: float = _f(
        0.0,
        "wm_gate: exact-match margin over 'nothing changes' the world model must reach.",
        ge=-1,
        le=1,
    )
    wm_gate_min_samples: int = _f(
        32, "wm_gate: held-out transitions the margin must be measured on.", ge=1
    )
    start_from: Literal["any", "first"] = _f(
        "any",
        "Dream start states: 'any' real step's page (expert and live), or 'first' (step-0 pages "
        "only). A dream from a later step starts with an empty action history, as its trajectory "
        "is rebuilt by the trainer (its own steps only), so the behaviour log-probs match.",
    )
    rate_limit_per_s: float = _f(
        0.0, "Max dream steps/s (0 = unlimited; back-pressure lowers it).", ge=0
    )
    pace: bool = _f(
        True,
        "Pace dreams by the trainer's consumption: dream a round only while fewer than the window's "
        "dreamed episodes are in flight (published, neither consumed by the trainer's loss nor older "
        "than its version - stream.max_staleness), from the per-producer counts in the trainer's "
        "progress message (models/dream/pacing.py). Off: dream flat out (back-pressure only).",
    )
    pace_window_groups: int = _f(
        0,
        "pace: groups in flight per window, shared by the producers the trainer reports (0 = auto: "
        "the dreamed episodes the trainer consumes in the shortest time a version stays fresh, "
        "(stream.max_staleness - 1) x trainer.checkpoint_every + 1 steps of batch_trajectories x "
        "(1 - expert_fraction) x the dream share of stream.policy_sources; at least one group).",
        ge=0,
    )
    pace_timeout_s: float = _f(
        60.0,
        "pace: when no episode in flight settled for this long (no trainer, a restart, dreams lost "
        "before the loss) they are written off and one more window is dreamed (logged, counted).",
        gt=0,
    )
