"""Typed config: defaults, file, env and CLI overrides; unknown keys are named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config.runtime import describe, load_config


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
    cfg = load_config(env={"DYNAWEB_S3__SECRET_KEY": "hunter2"})
    assert cfg.to_dict()["s3"]["secret_key"] == "***"
    assert "secret_key" not in cfg.to_dict(drop_secrets=True)["s3"]
    assert "hunter2" not in json.dumps(cfg.to_dict())


def test_every_field_has_help() -> None:
    rows = describe()
    assert len(rows) > 50
    assert all(h for _, _, h in rows), [k for k, _, h in rows if not h]
