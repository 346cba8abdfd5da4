"""Diagnostic (not product code; docs/algorithm.md, "Exact-match feature for the policy").

Behaviour cloning on 10 expert episodes per task of the study's four tasks, 60 steps of 16 (the
imitation arm's), with and without the policy's exact-match feature; then the greedy action
against the expert's on 30 other expert episodes per task.  Run from the repository root:
``python docs/results/policy-match/bc_probe.py``; one JSON line per (seed, feature).
"""

from __future__ import annotations

import collections
import json
import random
import time

import torch

from core.config import ModelConfig, TrainerConfig
from core.spaces import Observation
from evaluation.sources import read_jsonl
from models.policy import PolicyRunner, make_policy
from models.policy_loss import policy_batch_loss
from streams.records import Trajectory, Transition

TASKS = [
    "miniwob/click-link",
    "miniwob/click-checkboxes",
    "miniwob/click-button",
    "miniwob/click-tab",
]


def expert_episodes() -> dict[str, list[list[Transition]]]:
    eps: dict = collections.defaultdict(list)
    for f in ("transitions", "transitions-checkboxes"):
        for t in read_jsonl(f"docs/results/world-model/{f}.jsonl.gz"):
            if t.task in TASKS and t.source == "expert":
                eps[(t.task, t.run_id, t.episode_id)].append(t)
    by_task = collections.defaultdict(list)
    for k, v in eps.items():
        by_task[k[0]].append(sorted(v, key=lambda t: t.step))
    return by_task


def run(by_task: dict, feature: bool, seed: int, steps: int = 60) -> dict:
    rng = random.Random(seed)
    train, test = [], []
    for t in TASKS:
        v = list(by_task[t])
        rng.shuffle(v)
        train += v[:10]
        test += v[10:40]
    cfg = ModelConfig(
        layers=2, d_model=128, heads=4, max_positions=1024, seed=seed, policy_match_feature=feature
    )
    torch.manual_seed(seed)
    model, tok = make_policy(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    trajs = [Trajectory.from_transitions(e) for e in train]
    t0 = time.time()
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = 3e-4 * min(1.0, (s + 1) / 10)  # the trainer's 10 warm-up steps
        batch = [trajs[rng.randrange(len(trajs))] for _ in range(16)]
        opt.zero_grad()
        loss, _ = policy_batch_loss(model, tok, batch, TrainerConfig(), cfg)
        loss.backward()
        opt.step()
    model.eval()
    runner = PolicyRunner(model, tok, cfg, seed=0)
    hit, n, all_right = collections.Counter(), collections.Counter(), collections.Counter()
    with torch.no_grad():
        for e in test:
            hist: list[str] = []
            ok = True
            for t in e:
                obs = Observation.from_dict(t.obs)
                a = runner.act_info([obs], [hist], temperature=0.0)[0][0].to_text()
                n[t.task] += 1
                hit[t.task] += a == t.action
                ok = ok and a == t.action
                hist.append(t.action)
            all_right[e[0].task] += ok
    eps = {t.split("/")[1]: round(all_right[t] / 30, 3) for t in TASKS}
    return {
        "feature": feature,
        "seed": seed,
        "step_acc": {t.split("/")[1]: round(hit[t] / n[t], 3) for t in TASKS},
        "episode_all_right": eps,
        "mean_ep": round(sum(eps.values()) / len(eps), 3),
        "train_s": round(time.time() - t0),
    }


if __name__ == "__main__":
    data = expert_episodes()
    for seed in (0, 1):
        for feature in (False, True):
            print(json.dumps(run(data, feature, seed)), flush=True)
