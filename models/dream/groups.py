"""What a dream round's groups carry: how each rollout ended, which groups have a GSPO advantage
(their rollouts' final rewards differ), the uniform groups ``dream.drop_uniform_groups`` leaves
out, and the reward signal's metrics (``models.dream.dreamer.Dreamer.dream_once``)."""

from __future__ import annotations

from typing import Any

from models import metrics as M


def rollout_end(ro: Any) -> str:
    """How a dreamed rollout ended: ``stop`` (the policy quit), ``disagreement`` (the world
    model's ensemble disagreed, ``models.dream.env.end_on_disagreement``), ``done`` (predicted),
    ``horizon``."""
    last = ro.steps[-1]
    if last.get("reason") in ("stop", "disagreement"):
        return str(last["reason"])
    return "done" if last["done"] else "horizon"


def varied_groups(rollouts: list) -> set[str]:
    """The groups whose rollouts' final rewards (task success, as the learner scores them) differ:
    those with a nonzero GSPO advantage."""
    from models.losses import task_success_reward

    finals: dict[str, set[float]] = {}
    for ro in rollouts:
        finals.setdefault(ro.group_id, set()).add(task_success_reward(float(ro.reward)))
    return {g for g, v in finals.items() if len(v) > 1}


def group_outcomes(rollouts: list) -> dict[str, int]:
    """Groups whose rollouts' final rewards differ (``varied``: a nonzero GSPO advantage) and
    those where they do not (``uniform``)."""
    varied = len(varied_groups(rollouts))
    return {"varied": varied, "uniform": len({ro.group_id for ro in rollouts}) - varied}


def keep_varied(rollouts: list) -> tuple[list, int]:
    """``dream.drop_uniform_groups``: the rollouts of varied groups (in order) and how many
    uniform groups were left out.  A group whose rollouts all succeeded or all failed has a zero
    GSPO advantage everywhere: it carries no policy gradient, only dilutes the batch (the
    dynamic sampling of DAPO, Yu et al. 2025)."""
    varied = varied_groups(rollouts)
    kept = [ro for ro in rollouts if ro.group_id in varied]
    return kept, len({ro.group_id for ro in rollouts}) - len(varied)


def keep_varied_capped(rollouts: list, streak: int, cap: int) -> tuple[list, int, int, bool]:
    """``keep_varied`` with ``dream.max_dropped_per_published``: ``streak`` groups were dropped
    since the last published one; when this round would publish none and bring the streak to
    ``cap`` (0: no cap), its first group is published anyway.  (kept rollouts, groups dropped,
    the new streak, whether a uniform group was published)."""
    kept, dropped = keep_varied(rollouts)
    if kept:
        return kept, dropped, 0, False
    if cap and rollouts and streak + dropped >= cap:
        first = rollouts[0].group_id
        return [ro for ro in rollouts if ro.group_id == first], dropped - 1, 0, True
    return kept, dropped, streak + dropped, False


def observe_reward_signal(run: str, rollouts: list) -> None:
    """Why dream groups do or do not carry an advantage: how each rollout ended, the reward head's
    p(success) at its last step (when the world model's heads gave it), the ensemble's disagreement
    on every predicted step (when it has one), varied/uniform groups."""
    for ro in rollouts:
        M.DREAM_ROLLOUT_ENDS.labels(run, rollout_end(ro)).inc()
        for st in ro.steps:
            if st.get("disagreement") is not None:
                M.DREAM_DISAGREEMENT.labels(run).observe(float(st["disagreement"]))
        if ro.steps[-1].get("p_success") is not None:
            M.DREAM_P_SUCCESS.labels(run).observe(float(ro.steps[-1]["p_success"]))
    for outcome, k in group_outcomes(rollouts).items():
        M.DREAM_GROUPS.labels(run, outcome).inc(k)
