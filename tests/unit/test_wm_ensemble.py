"""The world model's ensemble (``models.world_model.ensemble``): its bootstrap, its statistics, the
pessimistic reward, its training and saving, and the dreams that end on its disagreement."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.config import Config, DreamConfig, TrainerConfig
from core.spaces import Action
from models.checkpoints.spec import ModelSpecMismatch, check_manifest
from models.dream.env import dream_rollouts, end_on_disagreement
from models.dream.groups import rollout_end
from models.lm.saved import load_model, make_model
from models.world_model.ensemble import (
    bootstrap_weights,
    ensemble_stats,
    pessimistic_success,
)
from models.world_model.loss import world_model_batch_loss
from models.world_model.model import WorldModel
from models.world_model.outputs import Prediction
from models.world_model.runner import WorldModelRunner
from tests.factories import WM_A as A
from tests.factories import WM_A2 as A2
from tests.factories import WM_B as B
from tests.factories import WM_B2 as B2
from tests.factories import WM_CFG, wm_transition

pytestmark = pytest.mark.unit
CFG = dataclasses.replace(WM_CFG, layers=1, d_model=32, world_model_ensemble=4)


def test_bootstrap_is_double_or_nothing_stable_and_differs_per_member() -> None:
    keys = [f"e{i}:0" for i in range(400)]
    w = bootstrap_weights(keys, 4)
    assert w.shape == (4, 400) and set(w.unique().tolist()) == {0.0, 2.0}
    assert torch.equal(w, bootstrap_weights(keys, 4))  # a row keeps its bags across batches
    assert torch.equal(w[:, :10], bootstrap_weights(keys[:10], 4))
    assert 0.85 < float(w.mean()) < 1.15
    assert not torch.equal(w[0], w[1])


def test_stats_and_the_pessimistic_success() -> None:
    mean, std = ensemble_stats(torch.tensor([[0.9, 0.6], [0.9, 0.2], [0.9, 1.0], [0.9, 0.6]]))
    assert mean == pytest.approx([0.9, 0.6]) and std == pytest.approx([0.0, (0.08) ** 0.5])
    assert pessimistic_success(0.9, 0.9, 0.0, 1.0)
    assert not pessimistic_success(0.9, 0.7, 0.3, 1.0)  # confident head, unsure members
    assert pessimistic_success(0.9, 0.7, 0.3, 0.0)  # pessimism 0: the reward head alone
    assert pessimistic_success(0.9, 0.2, 0.0, 0.0)
    assert not pessimistic_success(0.4, 0.9, 0.0, 1.0)  # the single head must agree


def test_a_step_the_members_disagree_on_ends_the_dream_as_a_failure() -> None:
    step = {"done": False, "reward": 1.0, "reason": "", "disagreement": 0.3}
    assert end_on_disagreement(step, 0.2) == {
        **step,
        "done": True,
        "reward": 0.0,
        "reason": "disagreement",
    }
    assert end_on_disagreement(step, 0.0) is step  # off
    assert end_on_disagreement({**step, "disagreement": 0.1}, 0.2)["reward"] == 1.0
    assert end_on_disagreement({**step, "disagreement": None}, 0.2)["done"] is False


class ClickPolicy:
    """The first rollout's first step clicks [1], every other step [2]."""

    def act_info(self, obs, hists, temperature=1.0, greedy=False):
        return [
            (Action.click(1 if k == 0 and not hists[k] else 2), -0.5, 2, {})
            for k in range(len(obs))
        ]


class SplitWorldModel:
    """Element [1]: success with disagreement 0.4; [2]: not done, agreed (0.01)."""

    def predict(self, obs, acts, sample=False):
        return [
            Prediction(
                o,
                1.0 if a.element == 1 else 0.0,
                False,
                True,
                "",
                "",
                p_success=0.9,
                ensemble_mean=0.7,
                disagreement=0.4 if a.element == 1 else 0.01,
            )
            for o, a in zip(obs, acts, strict=True)
        ]


def test_dream_rollouts_end_on_disagreement_and_keep_the_rollout_in_its_group() -> None:
    from tests.factories import TWO_BUTTONS as PAGE

    ros = dream_rollouts(ClickPolicy(), SplitWorldModel(), [PAGE], 3, 3, max_disagreement=0.2)
    assert len(ros) == 3 and len({ro.group_id for ro in ros}) == 1
    assert len(ros[0]) == 1 and ros[0].reward == 0.0 and rollout_end(ros[0]) == "disagreement"
    assert [len(ro) for ro in ros[1:]] == [3, 3]
    assert [st["disagreement"] for st in ros[1]] == [0.01] * 3
    off = dream_rollouts(ClickPolicy(), SplitWorldModel(), [PAGE], 1, 2, max_disagreement=0.0)
    assert len(off[0]) == 2 and rollout_end(off[0]) == "horizon"


def _batch() -> list:
    return [
        wm_transition(A, Action.type(1, "Kiera").to_text(), B, 0.0, False, 0),
        wm_transition(A2, "click(4)", B2, 1.0, True, 1),
        wm_transition(A, "click(2)", A, 0.0, False, 2),
        wm_transition(A2, "click(5)", A2, 0.0, False, 3),
    ]


def test_the_members_train_on_their_bootstrap_and_never_move_the_trunk() -> None:
    torch.manual_seed(0)
    model, tok = make_model(WorldModel, CFG)
    assert model.ensemble is not None and model.ensemble.k == 4 and not model.ensemble_trained()
    tc = TrainerConfig(wm_chunk_rows=0, infonce_weight=0.0)
    loss, stats = world_model_batch_loss(model, tok, _batch(), tc, max_change_tokens=48)
    assert stats["ensemble_head_loss"] > 0 and 0.0 <= stats["ensemble_head_acc"] <= 1.0
    loss.backward()
    g = model.ensemble.weight.grad
    assert g is not None and float(g.abs().sum()) > 0
    # the members' own terms: the trunk gets the same gradient as without them
    trunk = {n: p.grad.clone() for n, p in model.lm.named_parameters() if p.grad is not None}
    plain, _ = make_model(WorldModel, dataclasses.replace(CFG, world_model_ensemble=0))
    plain.load_state_dict(
        {k: v for k, v in model.state_dict().items() if not k.startswith("ensemble.")}
    )
    world_model_batch_loss(plain, tok, _batch(), tc, max_change_tokens=48)[0].backward()
    for n, p in plain.lm.named_parameters():
        if p.grad is not None:
            assert torch.allclose(p.grad, trunk[n], atol=1e-6), n


def test_members_save_load_and_a_model_without_them_gets_fresh_ones(tmp_path) -> None:
    model, tok = make_model(WorldModel, CFG)
    with torch.no_grad():
        model.ensemble.bias.fill_(0.25)
    model.mark_heads_trained(change_head=True)
    model.save_pretrained(str(tmp_path / "m"))
    tok.save_pretrained(str(tmp_path / "m"))
    back, _ = load_model(WorldModel, str(tmp_path / "m"))
    assert back.spec.ensemble == 4 and back.ensemble_trained()
    assert torch.equal(back.ensemble.bias, model.ensemble.bias)
    old, _ = make_model(WorldModel, dataclasses.replace(CFG, world_model_ensemble=0))
    old.save_pretrained(str(tmp_path / "old"))
    tok.save_pretrained(str(tmp_path / "old"))
    read, _ = load_model(WorldModel, str(tmp_path / "old"))
    assert read.ensemble is None and read.spec.ensemble == 0
    assert read.set_ensemble(4) and read.spec.ensemble == 4 and not read.ensemble_trained()
    assert read.ensemble_probs(torch.zeros(2, 32)) is None  # untrained members say nothing
    assert not read.set_ensemble(4)


def _runner_with(member_success: list[float], pessimism: float = 1.0) -> WorldModelRunner:
    """A world model whose single reward head says success (p ~ 0.98) and whose members each say
    success with the given probability, whatever the input (weights 0, biases set)."""
    model, tok = make_model(WorldModel, CFG)
    with torch.no_grad():
        model.reward_head.weight.zero_()
        model.reward_head.bias.copy_(torch.tensor([0.0, 4.0]))
        model.ensemble.weight.zero_()
        bias = torch.zeros(4, 4)
        for m, p in enumerate(member_success):
            bias[m, 1] = float(torch.logit(torch.tensor(p)))
        model.ensemble.bias.copy_(bias.flatten())
    model.mark_heads_trained(change_head=True)
    dream = DreamConfig(max_change_tokens=16, wm_decode="greedy", pessimism=pessimism)
    return WorldModelRunner(model, tok, dream)


def test_predict_takes_the_pessimistic_reward_and_reports_the_disagreement() -> None:
    agree = _runner_with([0.9, 0.9, 0.9, 0.9]).predict([A2], ["click(4)"])[0]
    assert agree.reward == 1.0 and agree.disagreement == pytest.approx(0.0, abs=1e-5)
    assert agree.ensemble_mean == pytest.approx(0.9, abs=1e-4) and agree.p_success > 0.9
    split = _runner_with([0.95, 0.95, 0.2, 0.95]).predict([A2], ["click(4)"])[0]
    assert split.disagreement == pytest.approx(0.3248, abs=1e-3)
    assert split.reward == 0.0  # mean 0.76 - 0.32 < 0.5: not a dreamed success
    assert (
        _runner_with([0.95, 0.95, 0.2, 0.95], pessimism=0.0).predict([A2], ["click(4)"])[0].reward
        == 1.0
    )


def test_a_run_stored_without_the_ensemble_is_refused_under_one_that_asks_for_it() -> None:
    model = dataclasses.asdict(Config().model)
    old = {k: v for k, v in model.items() if k != "world_model_ensemble"}
    manifest = {"kind": "world_model", "version": 3, "run_id": "r", "config": {"model": old}}
    with pytest.raises(ModelSpecMismatch, match="world_model_ensemble: stored 0, configured 4"):
        check_manifest(manifest, model)
    check_manifest(manifest, {**model, "world_model_ensemble": 0})  # the same model: passes
    check_manifest({**manifest, "config": {"model": model}}, model)
    policy = {**manifest, "kind": "policy"}
    check_manifest(policy, model)  # the policy has no ensemble
