"""The per-task trust gate (``models.dream.trust``, ``models.train.trust_judge``): its measures, its
decision, the replay's episode ends waiting to be judged, the judge on a real world model and the
dream generator dreaming only trusted tasks."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from core.config import DreamConfig
from models.dream.dreamer import StartState
from models.dream.trust import TaskTrust, balanced_accuracy, task_trusted, trusted_tasks
from models.lm.saved import make_model
from models.train.replay import WorldModelReplay
from models.train.trust_judge import judge_episode_ends, predicted_success
from models.world_model.model import WorldModel
from tests.factories import DREAM_PAGE, WM_CFG, dreamer, wm_transition
from tests.factories import WM_A2 as A2
from tests.factories import WM_B2 as B2

pytestmark = pytest.mark.unit


def test_balanced_accuracy_is_the_mean_recall_of_the_classes_present() -> None:
    assert balanced_accuracy([]) == 0.0
    # successes: 1 of 2 recalled; failures: 3 of 3
    pairs = [(True, True), (False, True), (False, False), (False, False), (False, False)]
    assert balanced_accuracy(pairs) == pytest.approx(0.75)
    assert balanced_accuracy([(True, True), (True, True)]) == 1.0  # one class: its recall
    assert balanced_accuracy([(True, False)] * 4) == 0.0  # always says success on failures


def test_window_summary_and_the_gate() -> None:
    t = TaskTrust(size=4)
    for p, r in [(True, True)] * 2 + [(False, False)] * 2:
        t.add("a", p, r)
    for _ in range(6):  # the biased task of the imagination study: success predicted, failure real
        t.add("b", True, False)
    s = t.summary()
    assert s["a"] == {
        "balanced_accuracy": 1.0,
        "calibration_gap": 0.0,
        "predicted": 0.5,
        "real": 0.5,
        "episodes": 4,
    }
    assert s["b"]["episodes"] == 4 and s["b"]["calibration_gap"] == 1.0
    assert trusted_tasks(s, 0.7, 0.1, 4) == {"a"}
    assert trusted_tasks(s, 0.7, 0.1, 5) == set()  # too few judged
    assert (
        trusted_tasks(None, 0.7, 0.1, 1) == set() and trusted_tasks({"x": 3}, 0.7, 0.1, 1) == set()
    )
    near = {"balanced_accuracy": 0.8, "calibration_gap": 0.15, "episodes": 30}
    assert not task_trusted(near, 0.7, 0.1, 20) and task_trusted(near, 0.7, 0.2, 20)


def test_the_replay_keeps_real_episode_ends_to_judge() -> None:
    r = WorldModelReplay()
    end = wm_transition(A2, "click(4)", B2, 1.0, True, 1)
    middle = wm_transition(A2, "click(5)", A2, 0.0, False, 2)
    expert = dataclasses.replace(wm_transition(A2, "click(4)", B2, 1.0, True, 3), source="expert")
    cut = dataclasses.replace(middle, episode_id="e4", truncated=True)
    for t in (end, middle, expert):
        r.add(t)
    r.add_eval(cut)
    assert [t.episode_id for t in r.take_unjudged()] == ["e1", "e4"]
    assert r.take_unjudged() == []


def test_the_judge_predicts_the_dreamed_reward_on_real_episode_ends() -> None:
    assert predicted_success(0.9, None, None, 1.0) and not predicted_success(0.4, None, None, 1.0)
    assert not predicted_success(0.9, 0.7, 0.3, 1.0) and predicted_success(0.9, 0.9, 0.0, 1.0)
    model, tok = make_model(
        WorldModel, dataclasses.replace(WM_CFG, layers=1, d_model=32, world_model_ensemble=4)
    )
    ends = [
        wm_transition(A2, "click(4)", B2, 1.0, True, 1),
        wm_transition(A2, "click(5)", A2, 0.0, True, 2),
    ]
    assert judge_episode_ends(model, tok, ends, DreamConfig()) == []  # untrained heads: none
    with torch.no_grad():  # the reward head says success everywhere; the members agree
        model.reward_head.weight.zero_()
        model.reward_head.bias.copy_(torch.tensor([0.0, 4.0]))
        model.ensemble.weight.zero_()
        model.ensemble.bias.copy_(torch.tensor([0.0, 3.0, 0.0, 0.0] * 4))
    model.mark_heads_trained(change_head=True)
    got = judge_episode_ends(model, tok, ends, DreamConfig())
    assert got == [("t", True, True), ("t", True, False)]
    with torch.no_grad():  # two members say failure: the pessimistic reward is no success
        model.ensemble.bias.copy_(torch.tensor([0.0, 3.0, 0, 0] * 2 + [3.0, 0.0, 0, 0] * 2))
    wary = DreamConfig(pessimism=1.0)
    assert [p for _, p, _ in judge_episode_ends(model, tok, ends, wary)] == [False] * 2
    # without pessimism (the default) the reward head alone judges
    assert [p for _, p, _ in judge_episode_ends(model, tok, ends, DreamConfig())] == [True] * 2


def test_the_dream_generator_dreams_only_trusted_tasks() -> None:
    d = dreamer()
    d.starts.append(StartState(DREAM_PAGE, "miniwob/click-tab", 2))
    d.slots = {
        "policy": SimpleNamespace(version=3, extra={}),
        "world_model": SimpleNamespace(version=3, extra={}),
    }
    assert len(d.trusted_starts()) == 2  # the gate is off by default
    d.dream.trust_gate = True
    assert d.trusted_starts() == [] and d.dream_once() == 0  # nothing judged: nothing dreamed
    good = {"balanced_accuracy": 0.9, "calibration_gap": 0.05, "episodes": 40}
    bad = {"balanced_accuracy": 0.5, "calibration_gap": 0.3, "episodes": 40}
    d.slots["world_model"].extra = {
        "task_trust": {"miniwob/click-test": bad, "miniwob/click-tab": good}
    }
    assert [s.task for s in d.trusted_starts()] == ["miniwob/click-tab"]
    d.dream.group_size, d.dream.batch, d.dream.horizon = 2, 4, 1
    assert d.dream_once() > 0
    assert {rec.task for rec in d.sent} == {"miniwob/click-tab"}
