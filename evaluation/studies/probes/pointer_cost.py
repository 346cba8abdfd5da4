"""A probe (docs/results/policy-pointer/README.md): what the pointer costs.

Two policies of the study's size (2 layers, d=128), the same seed, without and with the pointer:
per round, greedy acting on 32 expert pages (one batch) and one learner step (loss + backward) on 16
expert trajectories, timed for each policy alternately, 7 rounds.  Prints one JSON line: each
one's median seconds and the ratio with/without (paired per round, so a busy machine slows both).
Run from the repository root: ``python -m evaluation.studies.probes.pointer_cost``.
"""

from __future__ import annotations

import json
import statistics
import time

import torch

from core.config import TrainerConfig
from core.spaces import Observation
from evaluation.studies.probes.bc_scale import TASKS, episodes, study_policy
from models.lm.saved import make_model
from models.policy.loss import policy_batch_loss
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from streams.records import Trajectory


def main(rounds: int = 7) -> dict:
    by = episodes(["docs/results/policy-pointer/demos-s40.jsonl.gz"])
    eps = [e for t in TASKS for e in by[t][:8]]
    obs = [Observation.from_dict(e[0].obs) for e in eps]
    trajs = [Trajectory.from_transitions(e) for e in eps[:16]]
    pols = {}
    for name, on in (("without", False), ("with", True)):
        cfg = study_policy(0, pointer=on)
        torch.manual_seed(0)
        model, tok = make_model(Policy, cfg)
        pols[name] = (model, tok, cfg, PolicyRunner(model, tok, cfg, seed=0))
    times: dict = {f"{k}_{n}": [] for k in ("act", "learn") for n in pols}
    for _ in range(rounds):
        for name, (model, tok, cfg, runner) in pols.items():
            t0 = time.perf_counter()
            with torch.no_grad():
                runner.act_info(obs, [[] for _ in obs], temperature=0.0)
            times[f"act_{name}"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            model.zero_grad()
            loss, _ = policy_batch_loss(model, tok, trajs, TrainerConfig(), cfg)
            loss.backward()
            times[f"learn_{name}"].append(time.perf_counter() - t0)
    out = {k: round(statistics.median(v), 4) for k, v in times.items()}
    for k in ("act", "learn"):
        ratios = [a / b for a, b in zip(times[f"{k}_with"], times[f"{k}_without"], strict=True)]
        out[f"{k}_ratio"] = round(statistics.median(ratios), 3)
    out["pages"], out["trajectories"], out["rounds"] = len(obs), len(trajs), rounds
    return out


if __name__ == "__main__":
    print(json.dumps(main()), flush=True)
