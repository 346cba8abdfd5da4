"""The learning-rate schedule: its values, a real DeepSpeed engine following it, and a checkpoint
restoring its step count (what a trainer restart relies on)."""

from __future__ import annotations

import math

import pytest
import torch

from core.config import TrainerConfig
from models.train.engine import current_lr, engine_step, lr_factor, make_engine, trainer_engine


def test_lr_factor_values() -> None:
    # warm-up 4 steps, cosine over 10 steps to 0.1, then flat
    f = [lr_factor(k, 4, 10, 0.1) for k in range(20)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]
    assert f[4] == 1.0  # the decay starts at the peak
    assert math.isclose(f[9], 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))  # half way: 0.55
    assert math.isclose(f[9], 0.55)
    assert math.isclose(f[14], 0.1) and f[19] == f[14]  # the floor, then flat
    assert all(a >= b for a, b in zip(f[3:], f[4:], strict=False))  # never rises after the warm-up
    assert [lr_factor(k, 0, 0, 0.1) for k in (0, 1, 1000)] == [1.0, 1.0, 1.0]  # constant
    assert [lr_factor(k, 3, 0, 0.1) for k in (0, 2, 3, 10**6)] == [
        1 / 3,
        1.0,
        1.0,
        1.0,
    ]  # warm-up only
    assert math.isclose(lr_factor(5, 0, 10, 0.0), 0.5)  # decay without warm-up
    d = TrainerConfig()
    assert (d.warmup_steps, d.decay_steps) == (
        10,
        0,
    )  # defaults: warm-up, then constant (always-on)


def _step(engine: torch.nn.Module) -> None:
    """A loss with a constant gradient: every AdamW update then moves each weight by exactly ~lr."""
    engine_step(engine, engine(torch.ones(2, 4)).sum())


def test_engine_follows_schedule_and_checkpoint_restores_it(tmp_path) -> None:
    torch.manual_seed(0)
    peak, w, d, m = 1e-2, 3, 5, 0.2
    engine = make_engine(torch.nn.Linear(4, 3), peak, warmup_steps=w, decay_steps=d, min_lr_ratio=m)
    assert math.isclose(current_lr(engine), peak * lr_factor(0, w, d, m))  # step 0 already warms up
    for n in range(1, 7):
        _step(engine)
        assert math.isclose(current_lr(engine), peak * lr_factor(n, w, d, m)), n
    # the optimizer really used the scheduled lr: one more AdamW step moves a weight by ~lr
    before = engine.module.weight.detach().clone()
    lr6 = current_lr(engine)
    _step(engine)
    assert torch.allclose(
        (engine.module.weight.detach() - before).abs(), torch.full((3, 4), lr6), rtol=1e-3
    )
    engine.save_checkpoint(str(tmp_path), tag="ds")
    assert engine.lr_scheduler.last_epoch == 7

    fresh = make_engine(torch.nn.Linear(4, 3), peak, warmup_steps=w, decay_steps=d, min_lr_ratio=m)
    assert math.isclose(current_lr(fresh), peak * lr_factor(0, w, d, m))
    fresh.load_checkpoint(str(tmp_path), tag="ds", load_module_strict=True)
    assert fresh.lr_scheduler.last_epoch == 7
    assert math.isclose(current_lr(fresh), peak * lr_factor(7, w, d, m))
    _step(fresh)
    _step(engine)
    assert (
        math.isclose(current_lr(fresh), current_lr(engine)) and fresh.lr_scheduler.last_epoch == 8
    )
    assert torch.allclose(fresh.module.weight, engine.module.weight)


@pytest.mark.parametrize("kind", ["policy", "world_model"])
def test_trainer_engine_peaks(kind: str) -> None:
    tc = TrainerConfig(lr=1e-3, wm_lr=5e-4, warmup_steps=2, decay_steps=0)
    e = trainer_engine(torch.nn.Linear(2, 2), tc, kind)
    peak = tc.lr if kind == "policy" else tc.wm_lr
    assert math.isclose(current_lr(e), peak / 2)
    _step_2x2 = lambda: engine_step(e, e(torch.ones(1, 2)).sum())  # noqa: E731
    _step_2x2()
    assert math.isclose(current_lr(e), peak)
    _step_2x2()
    assert math.isclose(current_lr(e), peak)
