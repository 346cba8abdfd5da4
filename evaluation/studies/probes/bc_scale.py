"""A probe (docs/results/policy-pointer/README.md).

Behaviour cloning with the study's policy (2 layers, d=128) on N expert episodes per task of the
study's four tasks (seed 40's demonstrations, collected by the study's own demonstration step:
``demos-s40.jsonl.gz`` here), S steps of 16, with and without the exact-match feature and the
element pointer; then the greedy action against the expert's on 40 held-out expert episodes per
task (``docs/results/world-model/transitions*.jsonl.gz``, as ``bc_probe``).  Run from
the repository root: ``python -m evaluation.studies.probes.bc_scale``; one JSON line per setting.
"""

from __future__ import annotations

import collections
import json
import random
import time

import torch

from core.config import ModelConfig, TrainerConfig
from core.spaces import Observation
from evaluation.eval.sources import read_jsonl
from models.lm.saved import make_model
from models.policy.loss import policy_batch_loss
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from streams.records import Trajectory

TASKS = [
    "miniwob/click-link",
    "miniwob/click-checkboxes",
    "miniwob/click-button",
    "miniwob/click-tab",
]
HERE = "docs/results/policy-pointer"
SETTINGS = [  # (episodes per task, steps, seed, exact-match feature, pointer)
    (10, 60, 0, False, False),
    (10, 300, 0, False, False),
    (200, 300, 0, False, False),
    (200, 1000, 0, False, False),
    (200, 1000, 0, True, False),
    (10, 60, 0, False, True),
    (10, 60, 1, False, True),
    (10, 60, 0, True, True),
    (2, 60, 0, False, True),
]


def episodes(paths: list[str]) -> dict[str, list[list]]:
    eps: dict = collections.defaultdict(list)
    for path in paths:
        for t in read_jsonl(path):
            if t.task in TASKS and t.source == "expert":
                eps[(t.task, t.run_id, t.episode_id)].append(t)
    by_task = collections.defaultdict(list)
    for k, v in eps.items():
        by_task[k[0]].append(sorted(v, key=lambda t: t.step))
    return by_task


def bc_policy(cfg: ModelConfig, train: list[list], steps: int, rng: random.Random):
    """(model, tokenizer): a policy built from ``cfg`` (seeded by ``cfg.seed``), cloned on the
    ``train`` episodes, ``steps`` steps of 16 drawn with ``rng``, AdamW at 3e-4 after the trainer's 10
    warm-up steps; in eval mode."""
    torch.manual_seed(cfg.seed)
    model, tok = make_model(Policy, cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    trajs = [Trajectory.from_transitions(e) for e in train]
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = 3e-4 * min(1.0, (s + 1) / 10)  # the trainer's 10 warm-up steps
        batch = [trajs[rng.randrange(len(trajs))] for _ in range(16)]
        opt.zero_grad()
        loss, _ = policy_batch_loss(model, tok, batch, TrainerConfig(), cfg)
        loss.backward()
        opt.step()
    model.eval()
    return model, tok


def against_expert(
    model, tok, cfg: ModelConfig, test: list[list]
) -> dict[str, collections.Counter]:
    """The greedy action against the expert's at every step of the ``test`` episodes (the expert's
    own history fed back), per task: ``steps``, ``steps_right``, ``episodes``, ``episodes_right``
    (every action right)."""
    runner = PolicyRunner(model, tok, cfg, seed=0)
    c = {k: collections.Counter() for k in ("steps", "steps_right", "episodes", "episodes_right")}
    with torch.no_grad():
        for e in test:
            hist: list[str] = []
            ok = True
            for t in e:
                obs = Observation.from_dict(t.obs)
                a = runner.act_info([obs], [hist], temperature=0.0)[0][0].to_text()
                c["steps"][t.task] += 1
                c["steps_right"][t.task] += a == t.action
                ok = ok and a == t.action
                hist.append(t.action)
            c["episodes"][e[0].task] += 1
            c["episodes_right"][e[0].task] += ok
    return c


def study_policy(seed: int, feature: bool = False, pointer: bool = False) -> ModelConfig:
    """The sample-efficiency study's policy (2 layers, d=128), with or without the exact-match
    feature and the element pointer."""
    return ModelConfig(
        layers=2,
        d_model=128,
        heads=4,
        max_positions=1024,
        seed=seed,
        policy_match_feature=feature,
        policy_pointer=pointer,
    )


def run(train_by: dict, test_by: dict, n: int, steps: int, seed: int, feature: bool, pointer: bool):
    rng = random.Random(seed)
    train = [e for t in TASKS for e in train_by[t][:n]]
    test = [e for t in TASKS for e in test_by[t][:40]]
    cfg = study_policy(seed, feature, pointer)
    t0 = time.time()
    model, tok = bc_policy(cfg, train, steps, rng)
    c = against_expert(model, tok, cfg, test)
    eps = {t.split("/")[1]: round(c["episodes_right"][t] / c["episodes"][t], 3) for t in TASKS}
    return {
        "episodes_per_task": n,
        "steps": steps,
        "seed": seed,
        "feature": feature,
        "pointer": pointer,
        "episode_all_right": eps,
        "mean_ep": round(sum(eps.values()) / len(eps), 3),
        "train_s": round(time.time() - t0),
    }


if __name__ == "__main__":
    train_by = episodes([f"{HERE}/demos-s40.jsonl.gz"])
    w = "docs/results/world-model"
    test_by = episodes([f"{w}/transitions.jsonl.gz", f"{w}/transitions-checkboxes.jsonl.gz"])
    for setting in SETTINGS:
        print(json.dumps(run(train_by, test_by, *setting)), flush=True)
