"""A run id whose stored checkpoints were written for another model than the configuration asks
for is refused (``models.checkpoints.spec``), on the real S3 store: ``dynaweb up``'s check before
it starts anything, the trainer's resume and a reader's load all stop with the error naming both
models and the ways out; ``model.continue_stored`` continues the stored model."""

from __future__ import annotations

import copy

import pytest

from core.config import Config
from core.s3 import make_client
from infra.up import run_up, stored_model_refusal
from models.checkpoints.reader import ModelSlot
from models.checkpoints.spec import ModelSpecMismatch
from models.checkpoints.store import CheckpointStore
from models.train.run import build_trainer
from tests.factories import small_trainer


def _layers(model) -> int:
    """The backbone's layer count (GPT-Neo's ``num_layers``) of a policy module."""
    return next(
        m.config.num_layers
        for m in model.modules()
        if hasattr(getattr(m, "config", None), "num_layers")
    )


def test_a_changed_model_is_refused_and_continued_only_on_purpose(
    run_cfg: Config, tmp_path, capsys
) -> None:
    first = small_trainer(run_cfg)  # 2 layers x 64
    tr = build_trainer(first)
    try:
        tr.setup()  # a fresh run: version 0 written before any step
    finally:
        tr.close()
    assert stored_model_refusal(first) == ""  # the same configuration continues its run

    changed = copy.deepcopy(first)
    changed.model.layers, changed.model.d_model = 3, 96
    why = stored_model_refusal(changed)
    for part in (
        f"run {first.run_id!r}",
        "model.layers: stored 2, configured 3",
        "model.d_model: stored 64, configured 96",
        "--run-id",
        "model.continue_stored=true",
    ):
        assert part in why, (part, why)

    # `dynaweb up` (stack already running) stops before it starts a component
    assert run_up(changed, duration=1, start_stack=False) == 2
    assert "model.layers: stored 2, configured 3" in capsys.readouterr().out

    again = build_trainer(changed)
    try:
        with pytest.raises(ModelSpecMismatch, match="model.layers: stored 2, configured 3"):
            again.setup()
    finally:
        again.close()

    for d in ("reader", "reader2"):
        (tmp_path / d).mkdir()
    store = CheckpointStore(make_client(changed), changed.s3.bucket, changed.run_id)
    slot = ModelSlot(
        store, "policy", tmp_path / "reader", changed.run_id, model_config=changed.model
    )
    with pytest.raises(ModelSpecMismatch, match="policy checkpoint v0"):
        slot.refresh()
    assert slot.model is None

    # on purpose: the stored model (2 x 64) continues, whatever the configuration says
    changed.model.continue_stored = True
    assert stored_model_refusal(changed) == ""
    kept = build_trainer(changed)
    try:
        kept.setup()
        assert kept.version == 0
        assert _layers(kept.learner.policy_model) == 2
    finally:
        kept.close()
    slot = ModelSlot(
        store, "policy", tmp_path / "reader2", changed.run_id, model_config=changed.model
    )
    assert slot.refresh() and slot.version == 0 and _layers(slot.model) == 2
