"""configs/imagination-loop.yaml runs `dynaweb up` in the imagination study's configuration: the
settings it mirrors are those of the study's DynaWeb cell (they cannot drift apart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Config, load_config
from evaluation.studies.sample_efficiency.arms import cell_config, resolve_experiment
from evaluation.studies.sample_efficiency.config import SampleEfficiencyConfig

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
MIRRORED = (
    ("model", ("layers", "d_model", "heads", "policy_pointer", "instruction_match")),
    ("model", ("policy_match_feature",)),
    ("collector", ("tasks", "max_steps")),
    ("dream", ("drop_uniform_groups", "horizon", "temperature", "group_size")),
    ("stream", ("group_size",)),
    ("trainer", ("wm_steps_per_policy_step",)),
)


def test_the_loop_config_is_the_study_s_dynaweb_cell() -> None:
    loop = load_config(str(REPO / "configs/imagination-loop.yaml"), env={})
    study = load_config(str(REPO / "configs/imagination.yaml"), env={}, cls=SampleEfficiencyConfig)
    ex = resolve_experiment(study, quick=False)
    cell = cell_config(study, ex, "r", "dynaweb", 40, init_from="imit:1")
    default = Config()
    for section, fields in MIRRORED:
        for f in fields:
            want = getattr(getattr(cell, section), f)
            assert getattr(getattr(loop, section), f) == want, f"{section}.{f}"
    # the settings that make it the study's and not `up`'s defaults
    assert loop.collector.tasks != default.collector.tasks
    assert loop.dream.drop_uniform_groups and not default.dream.drop_uniform_groups
    assert (loop.model.layers, loop.model.d_model) != (default.model.layers, default.model.d_model)
