"""The gate's decision function and probe configuration (no services)."""

from __future__ import annotations

import pytest

from core.config import load_config
from evaluation.gate import Gate, decide, probe_seeds, probe_tasks

M = {"world_model": 0.05, "policy": 0.25}


def test_first_version_is_always_promoted() -> None:
    d = decide({"world_model": 0.0, "policy": 0.0}, None, M)
    assert d.promote and d.decision == "promoted" and "first version" in d.reason
    assert d.figures["policy"] == {"candidate": 0.0, "baseline": None, "margin": 0.25}


def test_within_margin_passes_beyond_margin_fails() -> None:
    base = {"world_model": 0.80, "policy": 0.50}
    assert decide(
        {"world_model": 0.76, "policy": 0.26}, base, M
    ).promote  # worse, but by less than the margins
    assert decide(
        {"world_model": 0.75, "policy": 0.25}, base, M
    ).promote  # exactly at the margin is not worse
    assert decide({"world_model": 0.95, "policy": 1.0}, base, M).promote
    d = decide({"world_model": 0.74, "policy": 0.9}, base, M)
    assert not d.promote and d.decision == "rejected"
    assert d.reason.startswith("world_model: candidate 0.740 < baseline 0.800 - margin 0.05")
    assert d.figures["world_model"] == {"candidate": 0.74, "baseline": 0.80, "margin": 0.05}
    d = decide({"world_model": 0.8, "policy": 0.2}, base, M)
    assert not d.promote and "policy: candidate 0.200 < baseline 0.500" in d.reason


def test_one_failing_probe_rejects_and_both_are_named() -> None:
    d = decide({"world_model": 0.0, "policy": 0.0}, {"world_model": 1.0, "policy": 1.0}, M)
    assert not d.promote and "world_model:" in d.reason and "policy:" in d.reason


def test_missing_scores() -> None:
    base = {"world_model": 0.5, "policy": None}
    # no baseline score for a probe: nothing to compare, the candidate passes that probe
    assert decide({"world_model": 0.5, "policy": 0.0}, base, M).promote
    # no score on either side (no held-out data yet): skipped
    d = decide({"world_model": None, "policy": 0.0}, {"world_model": None, "policy": 0.0}, M)
    assert d.promote and "world_model: skipped" in d.reason
    # the candidate could not be probed where the baseline could: rejected
    d = decide({"world_model": None, "policy": 0.0}, {"world_model": 0.1, "policy": 0.0}, M)
    assert not d.promote and "world_model: the candidate has no score" in d.reason


def test_only_configured_probes_count() -> None:
    assert decide(
        {"world_model": 0.0, "policy": 1.0}, {"world_model": 1.0, "policy": 0.0}, {"policy": 0.0}
    ).promote
    assert decide({}, {}, {}).promote


def test_negative_margin_demands_improvement() -> None:
    assert not decide({"policy": 0.5}, {"policy": 0.5}, {"policy": -0.1}).promote
    assert decide({"policy": 0.7}, {"policy": 0.5}, {"policy": -0.1}).promote


def test_probe_seeds_lie_outside_training_and_eval_defaults() -> None:
    cfg = load_config(env={})
    seeds = probe_seeds(cfg)
    hi = cfg.collector.seed_stop
    assert (
        len(seeds) == 4 and min(seeds) >= hi + 20
    )  # apart from `dynaweb eval policy`'s default seeds
    cfg.gate.seeds = f"{hi}:{hi + 2}"
    assert probe_seeds(cfg) == [hi, hi + 1]
    cfg.gate.seeds = "5:7"
    with pytest.raises(ValueError, match="overlap the training seeds"):
        probe_seeds(cfg)


def test_probe_tasks_default_to_the_collector_tasks_and_config_from_env() -> None:
    cfg = load_config(
        env={
            "DYNAWEB_GATE__ENABLED": "true",
            "DYNAWEB_GATE__TASKS": "click-button",
            "DYNAWEB_GATE__WM_MARGIN": "0.2",
            "DYNAWEB_GATE__SEEDS": "2000000:2000003",
        }
    )
    assert (
        cfg.gate.enabled
        and cfg.gate.wm_margin == 0.2
        and probe_tasks(cfg) == ["miniwob/click-button"]
    )
    assert probe_seeds(cfg) == [2000000, 2000001, 2000002]
    assert not load_config(env={}).gate.enabled  # off by default: LATEST moves at every checkpoint
    assert probe_tasks(load_config(env={})) == load_config(env={}).collector.tasks


def test_gate_refuses_a_bad_configuration_before_touching_services() -> None:
    cfg = load_config(env={})
    cfg.gate.wm_metric = "accuracy"
    with pytest.raises(
        ValueError, match="gate.wm_metric='accuracy'; choose one of exact_match, change_f1"
    ):
        Gate(cfg, store=object())
    cfg = load_config(env={})
    cfg.gate.probes = ["vibes"]
    with pytest.raises(ValueError, match=r"unknown gate probes \['vibes'\]"):
        Gate(cfg, store=object())
