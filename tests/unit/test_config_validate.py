"""``Config.validate`` (called by ``load_config``) and the study configs' ``validate``: values of
the wrong type, out of their field's bounds, and the contradictions between fields, each named
by its key; list fields typed by element."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import Config, load_config
from evaluation.studies.sample_efficiency.arms import resolve_experiment
from evaluation.studies.sample_efficiency.config import ExperimentConfig, SampleEfficiencyConfig
from evaluation.studies.world_model.config import WorldModelStudyConfig, WorldModelStudyRunConfig


def _load(overrides: dict, cls: type = Config, env: dict | None = None) -> Config:
    return load_config(env=env or {}, overrides=overrides, cls=cls)


def test_the_defaults_are_valid() -> None:
    for cls in (Config, SampleEfficiencyConfig, WorldModelStudyRunConfig):
        assert cls().problems() == []
        _load({}, cls)
    ExperimentConfig().validate()
    WorldModelStudyConfig().validate()
    WorldModelStudyConfig.make_quick().validate()
    resolve_experiment(SampleEfficiencyConfig(), quick=True)  # --quick's values too


# --- bounds: one field of each kind of rule --------------------------------------------------

BOUNDS = [
    # fractions in [0, 1]
    ("stream.expert_fraction", "1.5", r"stream.expert_fraction = 1.5 must be in \[0, 1\]"),
    ("stream.heldout_fraction", "-0.1", r"stream.heldout_fraction = -0.1 must be in \[0, 1\]"),
    ("collector.perturb_prob", "2", r"collector.perturb_prob = 2.0 must be in \[0, 1\]"),
    ("trainer.min_lr_ratio", "1.5", "trainer.min_lr_ratio"),
    ("trainer.wm_terminal_share", "-1", "trainer.wm_terminal_share"),
    ("trainer.clip_low", "1", r"trainer.clip_low = 1.0 must be in \[0, 1\)"),
    # ports
    ("stack.s3_port", "70000", r"stack.s3_port = 70000 must be in \[1, 65535\]"),
    ("stack.broker_port", "0", "stack.broker_port"),
    ("stack.s3_aux_port_base", "65533", "stack.s3_aux_port_base"),  # base+4 past 65535
    ("metrics_port", "-1", r"metrics_port = -1 must be in \[0, 65535\]"),
    # sizes and counts
    ("stream.batch_trajectories", "0", "stream.batch_trajectories = 0 must be >= 1"),
    ("stream.group_size", "0", "stream.group_size = 0 must be >= 1"),
    ("trainer.wm_batch", "0", "trainer.wm_batch = 0 must be >= 1"),
    ("dream.batch", "0", "dream.batch = 0 must be >= 1"),
    ("dream.horizon", "0", "dream.horizon = 0 must be >= 1"),
    ("kafka.partitions", "0", "kafka.partitions = 0 must be >= 1"),
    ("collector.contexts", "0", "collector.contexts = 0 must be >= 1"),
    ("threads", "0", "threads = 0 must be >= 1"),
    ("trainer.keep_checkpoints", "0", "trainer.keep_checkpoints"),
    ("trainer.checkpoint_every", "0", "trainer.checkpoint_every"),
    ("up.expert_contexts", "0", "up.expert_contexts"),
    ("gate.max_steps", "0", "gate.max_steps"),
    # rates, times, weights
    ("trainer.lr", "0", "trainer.lr = 0.0 must be > 0"),
    ("dream.temperature", "0", "dream.temperature = 0.0 must be > 0"),
    ("trainer.policy_temperature", "-1", "trainer.policy_temperature"),
    ("trainer.bc_weight", "-0.5", "trainer.bc_weight = -0.5 must be >= 0"),
    ("stream.group_timeout_s", "0", "stream.group_timeout_s = 0.0 must be > 0"),
    ("collector.max_steps_per_s", "-1", "collector.max_steps_per_s"),
    ("kafka.retention_ms", "-2", "kafka.retention_ms = -2 must be >= -1"),
    ("trainer.zero_stage", "4", r"trainer.zero_stage = 4 must be in \[0, 3\]"),
    ("collector.seed_offset", "-2", "collector.seed_offset = -2 must be >= -1"),
    # gate margins: a negative one asks the candidate to beat LATEST; beyond 1 no score can
    ("gate.wm_margin", "1.5", r"gate.wm_margin = 1.5 must be in \[-1, 1\]"),
    ("gate.policy_margin", "-1.5", r"gate.policy_margin = -1.5 must be in \[-1, 1\]"),
    ("dream.wm_gate_margin", "2", "dream.wm_gate_margin"),
]


@pytest.mark.parametrize(("key", "value", "message"), BOUNDS)
def test_a_value_out_of_its_bounds_is_named(key: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _load({key: value})


def test_a_negative_gate_margin_is_allowed() -> None:
    assert _load({"gate.policy_margin": "-0.5"}).gate.policy_margin == -0.5


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(ValueError) as e:
        _load({"stream.expert_fraction": "2", "dream.batch": "0"})
    assert "stream.expert_fraction" in str(e.value) and "dream.batch" in str(e.value)


def test_a_value_set_in_code_is_checked_by_validate() -> None:
    cfg = Config()
    cfg.stream.expert_fraction = 1.5
    cfg.collector.tasks = ["miniwob/click-button", 3]  # type: ignore[list-item]
    found = cfg.problems()
    assert any("stream.expert_fraction" in p for p in found)
    assert any("collector.tasks[1] = 3: expected str" in p for p in found)
    with pytest.raises(ValueError, match="invalid configuration"):
        cfg.validate()


# --- contradictions between fields --------------------------------------------------------

CROSS = [
    ({"kafka.security_protocol": "SASL_SSL"}, "kafka.sasl_mechanism: security_protocol SASL_SSL"),
    ({"kafka.sasl_mechanism": "PLAIN"}, "kafka.sasl_mechanism: PLAIN is set but security_protocol"),
    ({"s3.secret_key": "x"}, "s3.access_key: set both access_key and secret_key, or neither"),
    ({"s3.access_key": "x"}, "s3.secret_key: set both"),
    ({"stack.broker_port": "9000"}, "stack.broker_port: 9000 is also s3_port"),
    ({"stack.s3_aux_port_base": "9088"}, "stack.s3_aux_port_base: broker_port 9092 lies in"),
    ({"stack.taskserver_url": "localhost:8765"}, "stack.taskserver_url: 'localhost:8765'"),
    ({"collector.seed_start": "10", "collector.seed_stop": "10"}, "collector.seed_stop: 10 <="),
    ({"collector.settle_ms": "600", "collector.settle_max_ms": "500"}, "collector.settle_max_ms"),
    ({"collector.tasks": "[]"}, "collector.tasks: no task"),
    ({"stream.policy_sources": "[]"}, "stream.policy_sources: empty"),
    ({"trainer.init_from": "run:latest"}, "trainer.init_from: 'run:latest' is not 'RUN'"),
    ({"trainer.init_from": ":3"}, "trainer.init_from"),
    ({"gate.seeds": "5"}, "gate.seeds: '5' is not A:B"),
    ({"gate.seeds": "2000010:2000010"}, "gate.seeds: '2000010:2000010': B <= A"),
    ({"gate.seeds": "5:7"}, r"gate.seeds: 5:7 overlap the training seeds \[0, 1000000\)"),
    ({"model.d_model": "130", "model.heads": "4"}, "model.d_model: 130 is not a multiple"),
    ({"model.layers": "0"}, "model.layers: 0 must be >= 1"),
]


@pytest.mark.parametrize(("overrides", "message"), CROSS)
def test_a_contradiction_is_named(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _load(overrides)


def test_what_the_contradictions_leave_alone() -> None:
    ok = {
        "kafka.security_protocol": "SASL_SSL",
        "kafka.sasl_mechanism": "SCRAM-SHA-512",
        "s3.access_key": "a",
        "s3.secret_key": "b",
        "collector.settle_ms": "0",  # no settle wait: no cap to respect
        "collector.settle_max_ms": "0",
        "trainer.init_from": "other-run:12",
        "gate.seeds": "2000000:2000004",
        "stack.taskserver_url": "http://tasks:8765",
    }
    cfg = _load(ok)
    assert cfg.gate.seed_range() == range(2000000, 2000004)
    assert _load({"trainer.init_from": "other-run"}).trainer.init_from == "other-run"


# --- the studies' sections -----------------------------------------------------------------

EXPERIMENT = [
    ({"experiment.arms": '["imitation", "bogus"]'}, r"experiment.arms: unknown \['bogus'\]"),
    ({"experiment.arms": '["real_only"]'}, "experiment.arms: must include 'imitation'"),
    ({"experiment.budget": "[300, 200]"}, "experiment.budget: must be increasing"),
    ({"experiment.budget": "[]"}, "experiment.budget: must be increasing"),
    ({"experiment.budget": "[0, 200]"}, r"experiment.budget\[0\] = 0 must be >= 1"),
    ({"experiment.seeds": "[1, 1]"}, "experiment.seeds: must be distinct"),
    ({"experiment.seeds": "[-1]"}, r"experiment.seeds\[0\] = -1 must be >= 0"),
    ({"experiment.tasks": "[]"}, "experiment.tasks: no task"),
    ({"experiment.expert_fraction": "1"}, r"experiment.expert_fraction = 1.0 must be in \(0, 1\)"),
    (
        {"experiment.dream_real_share": "0"},
        r"experiment.dream_real_share = 0.0 must be in \(0, 1\]",
    ),
    ({"experiment.temperature": "0"}, "experiment.temperature = 0.0 must be > 0"),
    ({"experiment.bc_temperature": "-1"}, "experiment.bc_temperature = -1.0 must be >= 0"),
    ({"experiment.online_policy_steps": "0"}, "experiment.online_policy_steps"),
    ({"experiment.d_model": "100", "experiment.heads": "3"}, "experiment.d_model: 100 is not"),
    (
        {"experiment.batch_trajectories": "2", "experiment.expert_fraction": "0.05"},
        "experiment.expert_fraction: batch_trajectories \\* expert_fraction",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), EXPERIMENT)
def test_the_sample_efficiency_study_names_its_contradictions(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        _load(overrides, SampleEfficiencyConfig)


def test_resolve_experiment_validates_what_code_set() -> None:
    cfg = SampleEfficiencyConfig()
    cfg.experiment.arms = ["imitation", "bogus"]
    with pytest.raises(ValueError, match="bogus"):
        resolve_experiment(cfg, quick=False)


WM_STUDY = [
    ({"wm_study.heldout_fraction": "0"}, r"wm_study.heldout_fraction = 0.0 must be in \(0, 1\)"),
    ({"wm_study.heldout_fraction": "1"}, "wm_study.heldout_fraction"),
    ({"wm_study.tasks": "[]"}, "wm_study.tasks: no task"),
    ({"wm_study.d_model": "100", "wm_study.heads": "3"}, "wm_study.d_model: 100 is not"),
    ({"wm_study.terminal_share": "1.5"}, "wm_study.terminal_share"),
    ({"wm_study.batch": "0"}, "wm_study.batch = 0 must be >= 1"),
    ({"wm_study.lr": "0"}, "wm_study.lr = 0.0 must be > 0"),
    ({"wm_study.perturb_prob": "-0.1"}, "wm_study.perturb_prob"),
]


@pytest.mark.parametrize(("overrides", "message"), WM_STUDY)
def test_the_world_model_study_names_its_contradictions(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        _load(overrides, WorldModelStudyRunConfig)


def test_the_world_model_command_validates_its_own_options() -> None:
    from types import SimpleNamespace

    from evaluation.studies.world_model.config import resolve_study

    args = SimpleNamespace(quick=False, batch=0, heldout_fraction=None)
    with pytest.raises(ValueError, match="wm_study.batch = 0"):
        resolve_study(WorldModelStudyRunConfig(), args)
    x = resolve_study(WorldModelStudyRunConfig(), SimpleNamespace(quick=True, steps=7))
    assert x.quick and x.steps == 7


# --- list fields are typed by element ------------------------------------------------------


def test_list_fields_have_element_types() -> None:
    import dataclasses
    import typing

    from core.config.fields import hints

    def lists(cls: type) -> list[str]:
        out = []
        for f in dataclasses.fields(cls):
            h = hints(cls)[f.name]
            if isinstance(h, type) and dataclasses.is_dataclass(h):
                out += [f"{f.name}.{k}" for k in lists(h)]
            elif h is list or typing.get_origin(h) is list:
                assert typing.get_args(h), f"{cls.__name__}.{f.name} is a bare list"
                out.append(f.name)
        return out

    found = lists(SampleEfficiencyConfig) + lists(WorldModelStudyRunConfig)
    assert {"experiment.tasks", "experiment.corpus_tasks", "wm_study.tasks"} <= set(found), found
    assert len(set(found)) >= 13, found  # every list field of both study configs is visited


def test_list_items_are_read_as_the_element_type() -> None:
    cfg = _load(
        {"experiment.seeds": "3,4", "experiment.budget": "[100, 200]"}, SampleEfficiencyConfig
    )
    assert cfg.experiment.seeds == [3, 4] and cfg.experiment.budget == [100, 200]
    cfg = _load({}, SampleEfficiencyConfig, env={"DYNAWEB_EXPERIMENT__SEEDS": "[5, 6]"})
    assert cfg.experiment.seeds == [5, 6]
    assert _load({"gate.probes": "policy"}).gate.probes == ["policy"]
    # bare items in brackets, as a shell user writes them (the imagination statement's command)
    cfg = _load(
        {"experiment.arms": "[imitation,imitation_matched, real_only]"}, SampleEfficiencyConfig
    )
    assert cfg.experiment.arms == ["imitation", "imitation_matched", "real_only"]
    assert _load({"experiment.seeds": "[7,8]"}, SampleEfficiencyConfig).experiment.seeds == [7, 8]
    assert _load({"stream.policy_sources": ["dream"]}).stream.policy_sources == ["dream"]


WRONG_TYPES = [
    ({"experiment.seeds": "0,a"}, r"experiment.seeds\[1\] = 'a': expected int"),
    ({"experiment.seeds": '["0"]'}, r"experiment.seeds\[0\] = '0': expected int"),
    ({"experiment.seeds": [0, True]}, r"experiment.seeds\[1\] = True: expected int"),
    ({"experiment.tasks": "[1]"}, r"experiment.tasks\[0\] = 1: expected str"),
    ({"experiment.seeds": "[0,a]"}, r"experiment.seeds\[1\] = 'a': expected int"),
    ({"experiment.arms": "imitation"}, None),  # one item: fine
    ({"experiment.tasks": 3}, "experiment.tasks = 3: expected a list of str"),
    ({"experiment.seeds": "[0, 1"}, r"experiment.seeds = '\[0, 1': expected a list of int"),
    ({"stream.policy_sources": ["live"]}, r"stream.policy_sources\[0\] = 'live' is not one of"),
    ({"gate.probes": "vibes"}, r"gate.probes\[0\] = 'vibes' is not one of"),
    ({"collector.tasks": ["a", None]}, r"collector.tasks\[1\] = None: expected str"),
    ({"trainer.train_world_model": "maybe"}, "trainer.train_world_model = 'maybe': expected bool"),
    ({"trainer.max_steps": "ten"}, "trainer.max_steps = 'ten': expected int"),
    ({"trainer.max_steps": 2.5}, "trainer.max_steps = 2.5: expected int"),
    ({"trainer.lr": "fast"}, "trainer.lr = 'fast': expected float"),
    ({"run_id": 7}, "run_id = 7: expected str"),
    ({"dream.wm_decode": "beam"}, "dream.wm_decode = 'beam' is not one of"),
    ({"stream": "x"}, "stream is a section"),
]


@pytest.mark.parametrize(("overrides", "message"), WRONG_TYPES)
def test_a_value_of_the_wrong_type_is_named(overrides: dict, message: str | None) -> None:
    if message is None:
        _load(overrides, SampleEfficiencyConfig)
        return
    with pytest.raises(ValueError, match=message):
        _load(overrides, SampleEfficiencyConfig)


def test_numbers_from_a_file_keep_their_field_types(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"trainer": {"lr": 1, "max_steps": 3.0}, "stream": {"group_size": 4}}))
    cfg = load_config(str(f), env={})
    assert cfg.trainer.lr == 1.0 and isinstance(cfg.trainer.lr, float)
    assert cfg.trainer.max_steps == 3 and isinstance(cfg.trainer.max_steps, int)
    assert (
        load_config(env={"DYNAWEB_TRAINER__TRAIN_WORLD_MODEL": "off"}).trainer.train_world_model
        is False
    )
