"""Dream fidelity: a world model's predictions against the real transitions, and the same for
"nothing changes" (the unchanged page, reward 0, not done).  ``fidelity`` is what
``dynaweb eval world-model``, the gate and the trainer's fidelity check report."""

from __future__ import annotations

from core.spaces import Observation
from models.world_model.change import change_f1
from models.world_model.outputs import Prediction


def balanced_accuracy(pred: list[bool], real: list[bool]) -> float:
    """Mean per-class recall over the classes present in ``real`` (1.0 if empty)."""
    recalls = []
    for cls in (False, True):
        idx = [i for i, r in enumerate(real) if r == cls]
        if idx:
            recalls.append(sum(pred[i] == cls for i in idx) / len(idx))
    return sum(recalls) / len(recalls) if recalls else 1.0


def _scores(obs_trees, pred_trees, pred_r, pred_d, real_trees, real_r, real_d) -> dict:
    n = max(1, len(real_trees))
    return {
        "exact_match": sum(p == r for p, r in zip(pred_trees, real_trees, strict=True)) / n,
        "change_f1": sum(
            change_f1(o, p, r) for o, p, r in zip(obs_trees, pred_trees, real_trees, strict=True)
        )
        / n,
        "reward_bal_acc": balanced_accuracy([x > 0 for x in pred_r], [x > 0 for x in real_r]),
        "done_bal_acc": balanced_accuracy([bool(x) for x in pred_d], [bool(x) for x in real_d]),
    }


def fidelity(
    predictions: list[Prediction], real_next_obs: list, real_rewards: list, real_dones: list
) -> dict:
    """Dream fidelity vs. the real transitions, and the same for "nothing changes".

    Keys: exact_match (next tree identical), change_f1 (line-level F1 of the
    change, ``models.world_model.change.change_f1``), reward_bal_acc (reward > 0 as the
    class), done_bal_acc, ok_rate; ``baseline_*`` = predicting the unchanged
    page, reward 0, not done.  ``real_next_obs``: Observations or their dicts.
    """
    real_trees = [o.tree if isinstance(o, Observation) else o["tree"] for o in real_next_obs]
    obs_trees = [p.obs_tree for p in predictions]
    n = len(predictions)
    out = _scores(
        obs_trees,
        [p.next_obs.tree for p in predictions],
        [p.reward for p in predictions],
        [p.done for p in predictions],
        real_trees,
        real_rewards,
        real_dones,
    )
    base = _scores(
        obs_trees, obs_trees, [0.0] * n, [False] * n, real_trees, real_rewards, real_dones
    )
    out.update({f"baseline_{k}": v for k, v in base.items()})
    out["ok_rate"] = sum(p.ok for p in predictions) / max(1, n)
    out["n"] = n
    return out
