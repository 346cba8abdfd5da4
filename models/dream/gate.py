"""The dream gate: dream only with a world model worth dreaming in (``dream.wm_gate``; the
checkpoint gate is another thing, ``evaluation/gate.py``).

The trainer scores its world model at every checkpoint on held-out real transitions (the
stream worker's evaluation topic; ``Trainer.report_fidelity``) against "nothing changes" (the
unchanged page) and keeps the last ``WINDOW`` per-transition results.  Their summary
(``FidelityWindow.summary``: exact next-page match of the model and of the baseline, their
difference ``margin`` and the number of transitions) goes into the world model's checkpoint
manifest (``extra.wm_gate``).  A dream generator with ``dream.wm_gate`` on dreams with a world
model only when ``dream_gate_decision`` says its margin is at least ``dream.wm_gate_margin`` over at
least ``dream.wm_gate_min_samples`` transitions; otherwise it waits for a better version, and
says why (``dynaweb_dream_gate_open``, ``dynaweb_dream_seconds_total{state}``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

WINDOW = 64


class FidelityWindow:
    """The last ``size`` held-out predictions: (model's next page exact, baseline's exact)."""

    def __init__(self, size: int = WINDOW):
        self.results: deque[tuple[bool, bool]] = deque(maxlen=size)

    def add(self, predictions: list, real_next_trees: list[str]) -> None:
        for p, real in zip(predictions, real_next_trees, strict=True):
            self.results.append((p.next_obs.tree == real, p.obs_tree == real))

    def summary(self) -> dict:
        n = len(self.results)
        model = sum(m for m, _ in self.results) / n if n else 0.0
        base = sum(b for _, b in self.results) / n if n else 0.0
        return {
            "n": n,
            "exact_match": round(model, 4),
            "baseline_exact_match": round(base, 4),
            "margin": round(model - base, 4),
        }


def dream_gate_decision(summary: Any, margin: float, min_samples: int) -> tuple[bool, str]:
    """(may dream with this world model, why)."""
    if not isinstance(summary, dict) or "margin" not in summary:
        return False, "no held-out score in the checkpoint yet"
    n = int(summary.get("n", 0))
    if n < min_samples:
        return False, f"scored on {n} held-out transitions, fewer than {min_samples}"
    got = float(summary["margin"])
    if got < margin:
        return (
            False,
            f"exact match {got:+.3f} against nothing-changes, below the margin {margin:+.3f}",
        )
    return True, f"exact match {got:+.3f} against nothing-changes over {n} transitions"
