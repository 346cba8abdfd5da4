"""Reproducible training: the same seed gives the same losses (on the same machine).

The trainer's own update path (``models.train.learner.policy_update`` / ``world_model_update`` on DeepSpeed
engines, as ``Trainer.setup`` seeds it with ``model.seed``) runs three steps on the stream worker's
batch shape twice from one seed: every loss agrees within 1e-6 relative (stated tolerance, docs/
performance.md); from another seed the losses differ, so the comparison can fail."""

import dataclasses
import random

import torch

from core.config import Config
from core.spaces import Observation
from evaluation.bench.synthetic import synthetic_batch
from models.lm.saved import make_model
from models.policy.model import Policy
from models.train.engine import trainer_engine
from models.train.learner import policy_update, world_model_update
from models.world_model.model import WorldModel

TOLERANCE = 1e-6


def _obs() -> list[Observation]:
    out = []
    for i in range(4):
        tree = "\n".join(f'[{j}] button "B{i}-{j}"' for j in range(1, 5)) + '\n[5] textbox "name"'
        out.append(
            Observation(instruction=f"Click B{i}-2", url="http://127.0.0.1/t", tree=tree, next_id=6)
        )
    return out


def _losses(seed: int) -> list[float]:
    cfg = Config()
    cfg = dataclasses.replace(
        cfg,
        model=dataclasses.replace(cfg.model, layers=1, d_model=64, heads=2, seed=seed),
        stream=dataclasses.replace(cfg.stream, batch_trajectories=4),
        trainer=dataclasses.replace(cfg.trainer, wm_batch=6, infonce_weight=0.0),
    )
    torch.manual_seed(cfg.model.seed)  # what Trainer.setup does
    random.seed(cfg.model.seed)
    pol, tok = make_model(Policy, cfg.model)
    wm, wtok = make_model(WorldModel, cfg.model)
    pe, we = (
        trainer_engine(pol, cfg.trainer, "policy"),
        trainer_engine(wm, cfg.trainer, "world_model"),
    )
    out = []
    for k in range(3):
        trajs, trans = synthetic_batch(cfg, _obs(), k)
        pe.train()
        out.append(float(policy_update(pe, tok, trajs, cfg.trainer, cfg.model)[0]))
        we.train()
        loss = world_model_update(we, wtok, trans, cfg.trainer, None, cfg.dream.max_change_tokens)[
            0
        ]
        out.append(float(loss))
    return out


def test_same_seed_same_losses_other_seed_other_losses():
    a, b, c = _losses(7), _losses(7), _losses(8)
    assert all(x == x for x in a) and len(a) == 6
    for x, y in zip(a, b, strict=True):
        assert abs(x - y) <= TOLERANCE * max(1.0, abs(x)), (a, b)
    assert max(abs(x - y) for x, y in zip(a, c, strict=True)) > 1e-4, (a, c)
