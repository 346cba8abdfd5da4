"""Dream only with a world model worth dreaming in (models/dream/gate.py, Dreamer.gate_open)."""

from __future__ import annotations

from types import SimpleNamespace

from models.dream.gate import FidelityWindow, dream_gate_decision
from tests.factories import dreamer


def _pred(obs_tree: str, next_tree: str):
    return SimpleNamespace(obs_tree=obs_tree, next_obs=SimpleNamespace(tree=next_tree))


def test_window_scores_the_model_against_nothing_changes():
    w = FidelityWindow(size=4)
    # real pages: changed, changed, unchanged; the model gets both changes right, misses the last
    w.add([_pred("a", "b"), _pred("a", "c"), _pred("a", "x")], ["b", "c", "a"])
    s = w.summary()
    assert s["n"] == 3 and s["exact_match"] == round(2 / 3, 4)
    assert s["baseline_exact_match"] == round(1 / 3, 4) and s["margin"] == round(1 / 3, 4)
    w.add([_pred("a", "a")] * 4, ["z"] * 4)  # the window keeps the last 4 only
    assert w.summary() == {"n": 4, "exact_match": 0.0, "baseline_exact_match": 0.0, "margin": 0.0}


def test_gate_decision():
    assert dream_gate_decision(None, 0.0, 32)[0] is False
    ok, why = dream_gate_decision({"n": 10, "margin": 0.5}, 0.0, 32)
    assert not ok and "fewer than 32" in why
    ok, why = dream_gate_decision({"n": 64, "margin": -0.02}, 0.0, 32)
    assert not ok and "below the margin" in why
    assert dream_gate_decision({"n": 64, "margin": 0.05}, 0.05, 32)[0] is True


def test_the_dream_generator_waits_for_a_world_model_worth_dreaming_in():
    d = dreamer()
    d.gate_reason = ""
    d.slots = {
        "policy": SimpleNamespace(version=3, extra={}),
        "world_model": SimpleNamespace(version=3, extra={}),
    }
    assert d.gate_open()  # the gate is off by default
    d.dream.wm_gate = True
    d.dream.wm_gate_margin, d.dream.wm_gate_min_samples = 0.05, 16
    assert not d.gate_open() and "no held-out score" in d.gate_reason
    d.slots["world_model"].extra = {"wm_gate": {"n": 40, "margin": 0.01}}
    assert not d.gate_open() and "below the margin" in d.gate_reason
    d.slots["world_model"].extra = {"wm_gate": {"n": 40, "margin": 0.10}}
    assert d.gate_open()
