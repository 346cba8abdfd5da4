"""A study composes the user's runtime config: what the user set and the study does not define
reaches every cell as it was (the staleness bound is read, never re-set), and a setting the study
does define is refused when the user gave it another value, never overridden silently."""

from __future__ import annotations

import pytest

from core.config import load_config
from evaluation.studies.sample_efficiency.arm_names import ARMS
from evaluation.studies.sample_efficiency.arms import cell_config, resolve_experiment
from evaluation.studies.sample_efficiency.config import SampleEfficiencyConfig


def _study(overrides: dict[str, str]) -> SampleEfficiencyConfig:
    return load_config(env={}, overrides=overrides, cls=SampleEfficiencyConfig)


def test_a_users_max_staleness_survives_into_every_cell() -> None:
    cfg = _study({"stream.max_staleness": "5"})
    for quick in (False, True):
        ex = resolve_experiment(cfg, quick)
        for arm in ARMS:
            cell = cell_config(cfg, ex, "r", arm, 0, init_from="i:1", wm_init="/x")
            assert cell.stream.max_staleness == 5, arm


def test_the_user_s_other_runtime_settings_survive() -> None:
    cfg = _study({"model.tokenizer": "byte", "stream.dedupe_capacity": "1234"})
    ex = resolve_experiment(cfg, False)
    for arm in ARMS:
        cell = cell_config(cfg, ex, "r", arm, 0, init_from="i:1")
        assert (cell.model.tokenizer, cell.stream.dedupe_capacity) == ("byte", 1234), arm


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model.layers": "3"}, r"model.layers = 3 \(the study sets 2 from experiment.layers\)"),
        ({"dream.horizon": "9"}, r"dream.horizon = 9 \(the study sets 5 from experiment"),
        ({"stream.heldout_fraction": "0.5"}, r"stream.heldout_fraction = 0.5 \(the study sets"),
        ({"trainer.init_from": "other:3"}, "trainer.init_from = 'other:3'"),
    ],
)
def test_a_setting_the_study_defines_is_refused_not_overridden(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_experiment(_study(overrides), False)


def test_a_user_value_equal_to_the_study_s_is_accepted() -> None:
    ex = resolve_experiment(_study({"model.layers": "2", "dream.horizon": "5"}), False)
    assert (ex.layers, ex.dream_horizon) == (2, 5)


def test_the_world_model_study_trains_the_user_s_model_at_its_size() -> None:
    from types import SimpleNamespace

    from evaluation.studies.world_model.config import (
        WorldModelStudyRunConfig,
        model_config,
        resolve_study,
    )

    cfg = load_config(env={}, overrides={"model.tokenizer": "byte"}, cls=WorldModelStudyRunConfig)
    x = resolve_study(cfg, SimpleNamespace(quick=False))
    m = model_config(x, cfg.model)
    assert (m.tokenizer, m.layers, m.d_model, m.max_positions) == ("byte", 2, 128, 640)
    clash = load_config(env={}, overrides={"model.d_model": "512"}, cls=WorldModelStudyRunConfig)
    with pytest.raises(ValueError, match=r"model.d_model = 512 \(the study sets 128 from wm_study"):
        resolve_study(clash, SimpleNamespace(quick=False))
