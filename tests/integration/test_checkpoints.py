"""Checkpoint round trip through real S3 with sha256 verification, LATEST, retention."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from core.config import Config
from core.s3 import S3Unavailable, make_client
from models.checkpoints.store import CheckpointStore, CorruptCheckpoint


def _dir(tmp: Path, payload: bytes) -> Path:
    (tmp / "hf").mkdir(parents=True)
    (tmp / "hf" / "model.safetensors").write_bytes(payload)
    (tmp / "hf" / "config.json").write_text('{"a": 1}')
    return tmp


def test_roundtrip_verifies_sha256_and_latest(run_cfg: Config, tmp_path: Path) -> None:
    store = CheckpointStore(make_client(run_cfg), run_cfg.s3.bucket, run_cfg.run_id)
    assert store.latest("policy") is None
    src = _dir(tmp_path / "src", b"\x00weights" * 1000)
    saved = store.save("policy", 3, src, {"lr": 1}, {"topic": {0: 12}})
    assert store.latest("policy")["version"] == 3
    assert store.latest("policy")["manifest_sha256"] == saved.manifest_sha256
    m = store.download("policy", 3, tmp_path / "dst", saved.manifest_sha256)
    assert (tmp_path / "dst" / "hf" / "model.safetensors").read_bytes() == b"\x00weights" * 1000
    assert m["offsets"] == {"topic": {"0": 12}} and m["config"] == {"lr": 1}
    # an announcement whose manifest hash does not match is refused
    with pytest.raises(CorruptCheckpoint, match="manifest sha256"):
        store.download("policy", 3, tmp_path / "dst2", "0" * 64)


def test_readers_download_only_the_weights_they_act_with(run_cfg: Config, tmp_path: Path) -> None:
    """``only="hf/"`` (the dream generator, the collector, eval): the trainer's state stays in the
    store; what is downloaded is still verified, and a tampered weight file is still refused."""
    client = make_client(run_cfg)
    store = CheckpointStore(client, run_cfg.s3.bucket, run_cfg.run_id)
    src = _dir(tmp_path / "src", b"w" * 100)
    (src / "state" / "ds").mkdir(parents=True)
    (src / "state" / "ds" / "optim.pt").write_bytes(b"o" * 300)
    saved = store.save("policy", 5, src, {}, {})
    m = store.download("policy", 5, tmp_path / "hf-only", saved.manifest_sha256, only="hf/")
    assert "state/ds/optim.pt" in m["files"]  # listed in the manifest, not fetched
    got = sorted(
        p.relative_to(tmp_path / "hf-only").as_posix()
        for p in (tmp_path / "hf-only").rglob("*")
        if p.is_file()
    )
    assert got == ["hf/config.json", "hf/model.safetensors"]
    full = store.download(
        "policy", 5, tmp_path / "all", saved.manifest_sha256
    )  # the trainer's resume
    assert (tmp_path / "all" / "state" / "ds" / "optim.pt").read_bytes() == b"o" * 300 and full == m
    with pytest.raises(CorruptCheckpoint, match="no file under 'nothing/'"):
        store.download("policy", 5, tmp_path / "none", saved.manifest_sha256, only="nothing/")
    key = store.prefix("policy", 5) + "hf/model.safetensors"
    client.put_object(run_cfg.s3.bucket, key, io.BytesIO(b"evil"), 4)
    with pytest.raises(CorruptCheckpoint, match="sha256 of hf/model.safetensors"):
        store.download("policy", 5, tmp_path / "hf-only", saved.manifest_sha256, only="hf/")
    assert (tmp_path / "hf-only" / "hf" / "model.safetensors").read_bytes() == b"w" * 100


def test_corrupted_file_is_refused_and_destination_kept(run_cfg: Config, tmp_path: Path) -> None:
    client = make_client(run_cfg)
    store = CheckpointStore(client, run_cfg.s3.bucket, run_cfg.run_id)
    store.save("world_model", 1, _dir(tmp_path / "a", b"good"), {}, {})
    store.download("world_model", 1, tmp_path / "loaded")
    saved = store.save("world_model", 2, _dir(tmp_path / "b", b"good2"), {}, {})
    key = store.prefix("world_model", 2) + "hf/model.safetensors"
    client.put_object(run_cfg.s3.bucket, key, io.BytesIO(b"evil"), 4)  # tamper after the manifest
    with pytest.raises(CorruptCheckpoint, match="sha256 of hf/model.safetensors"):
        store.download("world_model", 2, tmp_path / "loaded", saved.manifest_sha256)
    assert (tmp_path / "loaded" / "hf" / "model.safetensors").read_bytes() == b"good"


def test_retention_keeps_last_n_promoted_and_latest(run_cfg: Config, tmp_path: Path) -> None:
    store = CheckpointStore(make_client(run_cfg), run_cfg.s3.bucket, run_cfg.run_id)
    for v in range(6):
        store.save("policy", v, _dir(tmp_path / str(v), bytes([v])), {}, {})
    store.promote("policy", 1)
    store.set_latest("policy", 5)
    removed = store.prune("policy", keep=2)
    assert removed == [0, 2, 3]
    assert store.versions("policy") == [1, 4, 5]
    assert json.loads(json.dumps(store.promoted("policy"))) == [1]


def test_missing_s3_names_service_and_fix(run_cfg: Config) -> None:
    run_cfg.s3.endpoint = "127.0.0.1:1"
    with pytest.raises(S3Unavailable, match=r"127\.0\.0\.1:1.*dynaweb infra up"):
        make_client(run_cfg)
