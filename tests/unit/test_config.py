"""Typed config: defaults, file, env and CLI overrides; unknown keys are named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import Config, describe, load_config


def test_defaults_are_the_endpoints_users_know() -> None:
    cfg = load_config(env={})
    assert cfg.kafka.bootstrap == "127.0.0.1:9092"
    assert cfg.s3.endpoint == "127.0.0.1:9000"
    assert cfg.stack.prometheus_port == 9090 and cfg.stack.bind == "127.0.0.1"
    assert cfg.stream.expert_fraction == 0.5 and cfg.threads == 1


def test_file_then_env_then_overrides(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(
        json.dumps({"run_id": "a", "stream": {"expert_fraction": 0.25}, "kafka": {"partitions": 4}})
    )
    env = {
        "DYNAWEB_KAFKA__PARTITIONS": "3",
        "DYNAWEB_COLLECTOR__TASKS": "miniwob/a,miniwob/b",
        "DYNAWEB_STACK__BIND": "127.0.0.1",
    }
    cfg = load_config(str(f), overrides={"run_id": "b"}, env=env)
    assert cfg.stream.expert_fraction == 0.25
    assert cfg.kafka.partitions == 3
    assert cfg.collector.tasks == ["miniwob/a", "miniwob/b"]
    assert cfg.run_id == "b"


def test_unknown_key_is_named_with_valid_keys() -> None:
    with pytest.raises(
        ValueError, match=r"unknown config key 'stream.expert_frac'.*expert_fraction"
    ):
        load_config(env={}, overrides={"stream.expert_frac": "0.1"})


def test_secrets_are_masked_or_dropped() -> None:
    cfg = load_config(env={"DYNAWEB_S3__ACCESS_KEY": "dw", "DYNAWEB_S3__SECRET_KEY": "hunter2"})
    assert cfg.to_dict()["s3"]["secret_key"] == "***"
    assert "secret_key" not in cfg.to_dict(drop_secrets=True)["s3"]
    assert "hunter2" not in json.dumps(cfg.to_dict())


def test_every_field_has_help() -> None:
    rows = describe()
    assert len(rows) > 50
    assert all(h for _, _, h in rows), [k for k, _, h in rows if not h]


# --- the studies' configs compose with the runtime config -----------------------------------


def test_the_public_api_is_the_package() -> None:
    import core.config as config

    for name in ("Config", "load_config", "apply_overrides", "describe", "ModelConfig"):
        assert name in config.__all__ and hasattr(config, name)
    assert "experiment" not in config.Config().to_dict()
    assert "wm_study" not in config.Config().to_dict()


def test_every_study_section_is_known_to_the_runtime_config() -> None:
    import dataclasses

    from core.config import Config
    from infra.study_configs import STUDY_CONFIGS, study_config_class

    runtime = {f.name for f in dataclasses.fields(Config)}
    for study in STUDY_CONFIGS:
        extra = {f.name for f in dataclasses.fields(study_config_class(study))} - runtime
        assert extra and extra <= set(Config.STUDY_SECTIONS), (study, extra)
        assert all(Config.STUDY_SECTIONS[s].endswith(study) for s in extra)


def test_a_study_config_loads_its_section_from_file_env_and_overrides(tmp_path: Path) -> None:
    from evaluation.studies.sample_efficiency.config import SampleEfficiencyConfig
    from evaluation.studies.world_model.config import WorldModelStudyRunConfig

    f = tmp_path / "c.yaml"
    f.write_text(
        "experiment:\n  demos_per_task: 7\nwm_study:\n  seed: 3\nstream:\n  lag_bound: 9\n"
    )
    env = {"DYNAWEB_EXPERIMENT__ONLINE_POLICY_STEPS": "100", "DYNAWEB_WM_STUDY__STEPS": "11"}
    se = load_config(str(f), {"model.layers": "2"}, env, cls=SampleEfficiencyConfig)
    assert (se.experiment.demos_per_task, se.experiment.online_policy_steps) == (7, 100)
    assert se.stream.lag_bound == 9 and se.model.layers == 2
    wm = load_config(str(f), {"wm_study.threads": "1"}, env, cls=WorldModelStudyRunConfig)
    assert (wm.wm_study.seed, wm.wm_study.steps, wm.wm_study.threads) == (3, 11, 1)
    # the runtime config reads the same file and environment and leaves the studies' sections
    rt = load_config(str(f), env=env)
    assert type(rt) is Config and rt.stream.lag_bound == 9
    with pytest.raises(ValueError, match="experiment sample-efficiency"):
        load_config(env={}, overrides={"experiment.seeds": "1"})
    with pytest.raises(ValueError, match=r"unknown config key 'strem.x'; sections: kafka"):
        load_config(env={}, overrides={"strem.x": "1"})
    with pytest.raises(ValueError, match="unknown config key 'nope.x'"):
        load_config(env={"DYNAWEB_NOPE__X": "1"})


def test_the_components_of_a_study_get_the_runtime_config_only(tmp_path: Path) -> None:
    from core.supervise import Supervisor
    from evaluation.studies.sample_efficiency.arms import cell_config, resolve_experiment
    from evaluation.studies.sample_efficiency.config import SampleEfficiencyConfig

    cfg = load_config(env={}, overrides={"home": str(tmp_path)}, cls=SampleEfficiencyConfig)
    ex = resolve_experiment(cfg, quick=False)
    cell = cell_config(cfg, ex, "r-1", "dynaweb", 0, init_from="imit:1")
    assert type(cell) is Config and "experiment" not in cell.to_dict()
    assert cfg.runtime().to_dict() == {k: v for k, v in cfg.to_dict().items() if k != "experiment"}
    sup = Supervisor(cfg, {})  # the config file every child (trainer, collector ...) reads
    written = json.loads(sup.config_file.read_text())
    assert "experiment" not in written and written["run_id"] == cfg.run_id
    assert type(load_config(str(sup.config_file), env={})) is Config  # as a child reads it
    for quick in (False, True):  # every cell's config is valid and reads back as it was written
        ex = resolve_experiment(cfg, quick)
        for arm in ("imitation", "imitation_matched", "real_only", "dynaweb", "dynaweb_dream_only"):
            c = cell_config(cfg, ex, "r", arm, 2, init_from="i:1", wm_init="/x")
            f = tmp_path / f"{arm}-{quick}.json"
            f.write_text(json.dumps(c.to_dict(drop_secrets=True)))
            assert load_config(str(f), env={}) == c, arm


def test_describe_lists_the_runtime_fields_then_each_studys_section(capsys) -> None:
    from infra.cli import main

    assert main(["config", "--describe"]) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert keys[0] == "run_id" and "gate.timeout_s" in keys
    assert "experiment.online_policy_steps" in keys and "wm_study.seed" in keys
    assert keys.index("gate.timeout_s") < keys.index("experiment.tasks")
    assert main(["config", "--describe", "--study", "world-model"]) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert "wm_study.seed" in keys and not any(k.startswith("experiment.") for k in keys)
    env_set = ["--set", "experiment.online_policy_steps=100", "--set", "model.layers=2"]
    assert main(["config", "--study", "sample-efficiency", *env_set]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["experiment"]["online_policy_steps"] == 100 and d["model"]["layers"] == 2
    assert main(["config", "--set", "stream.expert_fraction=2"]) == 2
    assert "stream.expert_fraction = 2.0 must be in [0, 1]" in capsys.readouterr().err
