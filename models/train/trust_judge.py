"""The trainer's side of the per-task trust gate (``models.dream.trust``): judge the world model on
real episode ends before it trains on them.

Rank 0's replay collects every new real (not expert, not dreamed) transition that ends an episode
(done or truncated; ``WorldModelReplay.unjudged``).  Before the next world-model step the trainer
asks the world model, in one forward pass of the transformer per 16 steps and no decoding
(``WorldModelRunner.prefill_head_input``), the reward a dream would get on that step
(``predicted_success``: the reward head's p(success) > 0.5 and, with a trained ensemble, the
pessimistic lower bound, ``dream.pessimism``), and compares it with the real outcome (the real
reward's task success, ``models.losses.task_success_reward``).  Episode ends that arrive while the
heads are untrained are dropped unjudged (a dream then takes its reward from the text, which
costs a decode to judge).
"""

from __future__ import annotations

import torch

from core.config import DreamConfig
from core.spaces import Observation
from models.lm.types import Tokenizer
from models.losses import task_success_reward
from models.world_model.ensemble import ensemble_stats, pessimistic_success
from models.world_model.model import WorldModel


def predicted_success(p: float, mean: float | None, std: float | None, pessimism: float) -> bool:
    """The dreamed reward's decision (``WorldModelRunner.predict``): the reward head alone, or with
    the ensemble's statistics the pessimistic rule."""
    if mean is None or std is None:
        return p > 0.5
    return pessimistic_success(p, mean, std, pessimism)


def judge_episode_ends(
    model: WorldModel, tokenizer: Tokenizer, ends: list, dream: DreamConfig
) -> list[tuple[str, bool, bool]]:
    """(task, predicted success, real success) per real episode end in ``ends`` (Transition
    records); empty when the model's heads are untrained."""
    from models.world_model.runner import WorldModelRunner

    if not ends or not model.heads_trained():
        return []
    runner = WorldModelRunner(model, tokenizer, dream)
    prompts = [runner.prompt_ids(Observation.from_dict(t.obs), t.action) for t in ends]
    with torch.no_grad():
        hidden = runner.prefill_head_input(prompts)
        ps, _ = model.head_probs(hidden)
        members = model.ensemble_probs(hidden)
    p = ps.cpu().tolist()
    if members is None:
        mean, std = [None] * len(ends), [None] * len(ends)
    else:
        mean, std = ensemble_stats(members[0].cpu())
    return [
        (
            t.task or "unknown",
            predicted_success(p[i], mean[i], std[i], runner.pessimism),
            task_success_reward(float(t.reward)) > 0,
        )
        for i, t in enumerate(ends)
    ]
