"""Checkpoint manifest: one sha256 per file, verification catches every change."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.checkpoints.store import (
    CorruptCheckpoint,
    build_manifest,
    sha256_file,
    verify_manifest_files,
)


def _tree(tmp: Path) -> Path:
    (tmp / "hf").mkdir(parents=True)
    (tmp / "hf" / "w.bin").write_bytes(b"abc")
    (tmp / "state").mkdir()
    (tmp / "state" / "opt.pt").write_bytes(b"o" * 10)
    return tmp


def test_manifest_lists_every_file_with_hash_and_metadata(tmp_path: Path) -> None:
    d = _tree(tmp_path)
    m = build_manifest(
        "policy", 7, "run", d, {"trainer": {"lr": 0.1}}, {"t": {0: 5}}, {"policy_steps": 70}
    )
    assert set(m["files"]) == {"hf/w.bin", "state/opt.pt"}
    assert m["files"]["hf/w.bin"] == {
        "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        "size": 3,
    }
    assert m["version"] == 7 and m["offsets"] == {"t": {0: 5}} and m["extra"]["policy_steps"] == 70
    verify_manifest_files(m, d)  # unchanged: passes
    assert sha256_file(d / "hf" / "w.bin") == m["files"]["hf/w.bin"]["sha256"]


def test_changed_or_missing_file_is_refused(tmp_path: Path) -> None:
    d = _tree(tmp_path)
    m = build_manifest("world_model", 1, "run", d, {}, {})
    (d / "hf" / "w.bin").write_bytes(b"abd")
    with pytest.raises(CorruptCheckpoint, match="sha256 of hf/w.bin"):
        verify_manifest_files(m, d)
    (d / "hf" / "w.bin").unlink()
    with pytest.raises(CorruptCheckpoint, match="missing"):
        verify_manifest_files(m, d)
