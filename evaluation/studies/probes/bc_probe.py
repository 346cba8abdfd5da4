"""A probe (docs/results/policy-match/README.md).

Behaviour cloning on 10 expert episodes per task of the study's four tasks, 60 steps of 16 (the
imitation arm's), with and without the policy's exact-match feature; then the greedy action
against the expert's on 30 other expert episodes per task (the training and scoring of
``bc_scale``).  Run from the repository root:
``python -m evaluation.studies.probes.bc_probe``; one JSON line per (seed, feature).
"""

from __future__ import annotations

import json
import random
import time

from evaluation.studies.probes.bc_scale import (
    TASKS,
    against_expert,
    bc_policy,
    episodes,
    study_policy,
)


def expert_episodes() -> dict[str, list[list]]:
    w = "docs/results/world-model"
    return episodes([f"{w}/transitions.jsonl.gz", f"{w}/transitions-checkboxes.jsonl.gz"])


def run(by_task: dict, feature: bool, seed: int, steps: int = 60) -> dict:
    rng = random.Random(seed)
    train, test = [], []
    for t in TASKS:
        v = list(by_task[t])
        rng.shuffle(v)
        train += v[:10]
        test += v[10:40]
    cfg = study_policy(seed, feature)  # no pointer: the policy of its time (on by default since)
    t0 = time.time()
    model, tok = bc_policy(cfg, train, steps, rng)
    c = against_expert(model, tok, cfg, test)
    eps = {t.split("/")[1]: round(c["episodes_right"][t] / 30, 3) for t in TASKS}
    return {
        "feature": feature,
        "seed": seed,
        "step_acc": {t.split("/")[1]: round(c["steps_right"][t] / c["steps"][t], 3) for t in TASKS},
        "episode_all_right": eps,
        "mean_ep": round(sum(eps.values()) / len(eps), 3),
        "train_s": round(time.time() - t0),
    }


if __name__ == "__main__":
    data = expert_episodes()
    for seed in (0, 1):
        for feature in (False, True):
            print(json.dumps(run(data, feature, seed)), flush=True)
