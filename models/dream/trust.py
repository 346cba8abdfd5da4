"""The per-task trust gate: dream a task only while the world model has lately judged that task's
real episodes right (``dream.trust_gate``).

The trainer judges every new real episode end before its world model trains on it
(``models.train.trust_judge.judge_episode_ends``): at the episode's last real step (done or
truncated) the world model predicts the dreamed reward it would give there (its reward head and,
with a trained ensemble, the pessimistic rule, ``models.world_model.ensemble``) and the real
reward says whether the episode succeeded.  ``TaskTrust`` keeps the last ``dream.trust_window``
(predicted, real) pairs per task; ``summary`` gives per task the balanced accuracy (the mean of
the recalls of the classes present: success and failure), the predicted and real success rates,
their gap (calibration: the dreamed success rate against the real one) and the count.  That goes
into the world model's checkpoint manifest (``extra.task_trust``) and the trainer's metric
``dynaweb_trainer_task_trust{task,measure}``.

``trusted_tasks`` is the gate: a task is trusted with at least ``dream.trust_min_episodes`` judged
ends, balanced accuracy at least ``dream.trust_min_accuracy`` and a gap at most
``dream.trust_max_gap``.  The dream generator with ``dream.trust_gate`` dreams only from start
states of trusted tasks (``models.dream.dreamer.Dreamer``), and waits (state ``gated``) while no
start state's task is trusted.
"""

from __future__ import annotations

from collections import deque
from typing import Any

MEASURES = ("balanced_accuracy", "calibration_gap", "predicted", "real", "episodes")


def balanced_accuracy(pairs: list[tuple[bool, bool]]) -> float:
    """The mean recall of the real classes present in (predicted, real) ``pairs`` (0 for none)."""
    recalls = []
    for cls in (True, False):
        preds = [p for p, r in pairs if r is cls]
        if preds:
            recalls.append(sum(p is cls for p in preds) / len(preds))
    return sum(recalls) / len(recalls) if recalls else 0.0


class TaskTrust:
    """Per task, the last ``size`` judged real episode ends: (predicted success, real success)."""

    def __init__(self, size: int = 50):
        self.size = int(size)
        self.pairs: dict[str, deque[tuple[bool, bool]]] = {}

    def add(self, task: str, predicted: bool, real: bool) -> None:
        self.pairs.setdefault(task, deque(maxlen=self.size)).append((bool(predicted), bool(real)))

    def summary(self) -> dict[str, dict[str, float]]:
        """task -> ``MEASURES`` (rates and accuracy rounded to 4 places)."""
        out = {}
        for task, q in sorted(self.pairs.items()):
            pairs = list(q)
            n = len(pairs)
            pred = sum(p for p, _ in pairs) / n
            real = sum(r for _, r in pairs) / n
            out[task] = {
                "balanced_accuracy": round(balanced_accuracy(pairs), 4),
                "calibration_gap": round(abs(pred - real), 4),
                "predicted": round(pred, 4),
                "real": round(real, 4),
                "episodes": n,
            }
        return out


def task_trusted(measures: Any, min_accuracy: float, max_gap: float, min_episodes: int) -> bool:
    """Whether one task's ``TaskTrust.summary`` entry passes the gate."""
    if not isinstance(measures, dict):
        return False
    return (
        int(measures.get("episodes", 0)) >= min_episodes
        and float(measures.get("balanced_accuracy", 0.0)) >= min_accuracy
        and float(measures.get("calibration_gap", 1.0)) <= max_gap
    )


def trusted_tasks(summary: Any, min_accuracy: float, max_gap: float, min_episodes: int) -> set:
    """The tasks of a ``TaskTrust.summary`` (as read from a manifest: anything) that pass."""
    if not isinstance(summary, dict):
        return set()
    return {
        task for task, m in summary.items() if task_trusted(m, min_accuracy, max_gap, min_episodes)
    }
