"""A probe (docs/results/performance/README.md, "Backbones").

Acting speed of the policy on the captured start pages of the study's tasks, for the default
scratch policy (GPT-Neo from ``ModelConfig``) and for SmolLM2-135M-Instruct
(``configs/smollm2.yaml``): greedy ``PolicyRunner.act_info`` on batches of 4 pages, decisions per
second and scored tokens per second, after one warm-up batch.  Run from the repository root:
``python -m evaluation.studies.probes.acting_backbones OBS.json`` (OBS: ``dynaweb check-behaviour
capture --out OBS.json``); one JSON line per policy.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

from core.config import load_config
from core.spaces import Observation
from models.lm.saved import make_model
from models.policy.model import Policy
from models.policy.runner import PolicyRunner

TASKS = ("click-link", "click-checkboxes", "click-button", "click-tab", "enter-text", "choose-list")
CONFIGS = {"scratch": None, "smollm2": "configs/smollm2.yaml"}


def pages(path: str) -> list[Observation]:
    d = json.load(open(path))
    return [
        Observation(**t["obs"])
        for t in d["tasks"]
        if t.get("obs") and t["task"].split("/")[1] in TASKS
    ]


def act_rate(name: str, obs: list[Observation], rounds: int = 3) -> dict:
    cfg = load_config(CONFIGS[name])
    pol, tok = make_model(Policy, cfg.model)
    runner = PolicyRunner(pol, tok, cfg.model, seed=0)
    runner.act_info(obs[:4], [[] for _ in obs[:4]], greedy=True)  # warm-up
    runner.stats["tokens"] = 0
    t0, n = time.perf_counter(), 0
    for _ in range(rounds):
        for i in range(0, len(obs), 4):
            batch = obs[i : i + 4]
            runner.act_info(batch, [[] for _ in batch], greedy=True)
            n += len(batch)
    dt = time.perf_counter() - t0
    return {
        "policy": name,
        "backbone": type(pol.lm).__name__,
        "parameters": sum(p.numel() for p in pol.parameters()),
        "decisions_per_s": round(n / dt, 2),
        "scored_tokens_per_s": round(runner.stats["tokens"] / dt, 1),
        "decisions": n,
        "threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    torch.set_num_threads(2)
    obs = pages(sys.argv[1])
    for name in CONFIGS:
        print(json.dumps(act_rate(name, obs)), flush=True)
