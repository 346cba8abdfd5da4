"""The trainer's update through a real DeepSpeed engine (CPU, ZeRO 0): micro-batches, each one
``engine.backward``, then one step, land on the same weights as the whole batch at once."""

from __future__ import annotations

import copy

import torch

from core.config import TrainerConfig
from models.lm.saved import make_model
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from models.train.engine import chunked_backward_ok, make_engine
from models.train.learner import policy_update, world_model_update
from tests.factories import POLICY_CFG as CFG
from tests.factories import POLICY_OBS as OBS
from tests.factories import FakeEmbedder, policy_rollout, policy_trajectory, wm_batch, wm_model


def _same(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(
        float((p - q).detach().abs().max())
        for p, q in zip(a.parameters(), b.parameters(), strict=True)
    )


def test_policy_update_in_micro_batches_gives_the_same_step():
    torch.manual_seed(0)
    model, tok = make_model(Policy, CFG)
    r = PolicyRunner(model, tok, CFG, seed=3)
    trajs = []
    for k in range(
        4
    ):  # a GSPO group of dreams (logprobs of the policy that made them) and one expert
        steps, lps = policy_rollout(r, OBS[k % 3], 2)
        trajs.append(policy_trajectory(steps, "dream", "g", float(k % 2), lps))
    trajs.append(
        policy_trajectory([(OBS[0], 'type(1, "Kiera")'), (OBS[0], "click(2)")], "expert", "", 1.0)
    )
    twin = copy.deepcopy(model)
    e_whole, e_chunk = make_engine(model, 1e-3), make_engine(twin, 1e-3)
    assert chunked_backward_ok(e_chunk, 0) and not chunked_backward_ok(e_chunk, 2)
    l1, s1, g1, _ = policy_update(e_whole, tok, trajs, TrainerConfig(chunk_rows=0), CFG)
    l2, s2, g2, _ = policy_update(e_chunk, tok, trajs, TrainerConfig(chunk_rows=2), CFG)
    assert abs(float(l1.detach()) - float(l2)) < 1e-4 and abs(g1 - g2) < 1e-3 * max(1.0, g1)
    assert g1 > 0 and _same(model, twin) < 1e-5


def test_world_model_update_in_micro_batches_gives_the_same_step():
    torch.manual_seed(0)
    model = wm_model()
    twin = copy.deepcopy(model)
    e_whole, e_chunk = make_engine(model, 1e-3), make_engine(twin, 1e-3)
    cfg = dict(infonce_weight=0.5)
    l1, s1, g1 = world_model_update(
        e_whole, model._tok, wm_batch(), TrainerConfig(wm_chunk_rows=0, **cfg), FakeEmbedder(), 64
    )
    l2, s2, g2 = world_model_update(
        e_chunk, model._tok, wm_batch(), TrainerConfig(wm_chunk_rows=2, **cfg), FakeEmbedder(), 64
    )
    assert s2.get("chunks", 1) > 1 and "chunks" not in s1
    assert abs(float(l1.detach()) - float(l2)) < 1e-4 and abs(g1 - g2) < 1e-3 * max(1.0, g1)
    assert g1 > 0 and _same(model, twin) < 1e-5
