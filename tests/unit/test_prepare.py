"""The trainer's prepare thread (models/train/prepare.py): decisions built ahead give the loss bit for bit,
and the batch is built on the prepare thread, not the caller's."""

import dataclasses
import threading

import torch

from core.config import Config
from core.spaces import Observation
from evaluation.bench.synthetic import synthetic_batch
from models.lm.saved import make_model
from models.policy import decisions as policy_decisions
from models.policy.decisions import prepare_decisions
from models.policy.loss import policy_batch_loss
from models.policy.model import Policy
from models.train.prepare import BatchPreparer
from streams import records


def _setup():
    cfg = Config()
    cfg = dataclasses.replace(
        cfg,
        model=dataclasses.replace(cfg.model, layers=1, d_model=64, heads=2),
        stream=dataclasses.replace(cfg.stream, batch_trajectories=4),
    )
    obs = []
    for i in range(3):
        tree = "\n".join(f'[{j}] button "B{i}-{j}"' for j in range(1, 5)) + '\n[5] textbox "name"'
        obs.append(
            Observation(instruction=f"Click B{i}-2", url="http://127.0.0.1/t", tree=tree, next_id=6)
        )
    torch.manual_seed(0)
    pol, tok = make_model(Policy, cfg.model)
    trajs, _ = synthetic_batch(cfg, obs, 0)
    return cfg, pol, tok, trajs


def test_prepared_decisions_give_the_same_loss():
    cfg, pol, tok, trajs = _setup()
    mp = cfg.model.max_positions
    plain, s1 = policy_batch_loss(pol, tok, trajs, cfg.trainer, cfg.model)
    prepared = prepare_decisions(tok, trajs, mp, float(cfg.trainer.policy_temperature or 1.0))
    assert set(prepared) == {id(t) for t in trajs}
    ahead, s2 = policy_batch_loss(pol, tok, trajs, cfg.trainer, cfg.model, prepared=prepared)
    assert float(plain) == float(ahead)
    assert s1["cand_rows"] == s2["cand_rows"] and s1["cand_per_step"] == s2["cand_per_step"]


def test_the_next_batch_is_built_on_the_prepare_thread(monkeypatch):
    cfg, _, tok, trajs = _setup()
    batch = records.TrainingBatch(
        run_id="u", batch_id="b1", worker_id="w", kind="mixed",
        trajectories=[dict(vars(t)) for t in trajs], expert_fraction=0.5,
    )  # fmt: skip
    where = []
    real = policy_decisions.trajectory_decisions

    def spy(*a, **k):
        where.append(threading.current_thread().name)
        return real(*a, **k)

    monkeypatch.setattr(policy_decisions, "trajectory_decisions", spy)
    prep = BatchPreparer(tok, cfg.model.max_positions, 1.0)
    try:
        prep.prepare([(None, "t", 0, 1), (batch, "t", 0, 2)])  # skips a skipped record
        got, decisions = prep.take(batch)
        assert decisions is not None and len(got) == len(trajs)
        assert where and all(n.startswith("trainer-prepare") for n in where)
        # not prepared: the step builds the trajectories itself, no decisions
        got2, none = prep.take(batch)
        assert none is None and len(got2) == len(trajs)
    finally:
        prep.close()
