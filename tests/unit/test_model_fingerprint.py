"""The seeded models' outputs are byte-identical to the figures recorded before the last
refactor (``evaluation.fingerprint``; ``dynaweb check-behaviour models``): acting's log-probs, the
learner's losses, reports, gradient norms and weights after real DeepSpeed steps, and the world
model's predictions.  The golden file is written once from code known to be right and never
regenerated to make a refactor pass: a difference means behaviour changed."""

from __future__ import annotations

import json
from pathlib import Path

from evaluation.fingerprint import differences, fingerprint

GOLDEN = Path(__file__).resolve().parent / "golden" / "model_fingerprint.json"


def test_seeded_model_outputs_are_unchanged() -> None:
    want = json.loads(GOLDEN.read_text())
    got = json.loads(json.dumps(fingerprint(), sort_keys=True))
    diff = differences(want, got)
    assert not diff, f"{len(diff)} model outputs changed, first: {diff[:5]}"


def test_the_fingerprint_sees_a_changed_weight() -> None:
    """The check can fail: one parameter nudged by one ulp changes the weights' digest."""
    import torch

    from evaluation.fingerprint import weights_digest

    m = torch.nn.Linear(3, 2)
    before = weights_digest(m)
    with torch.no_grad():
        m.weight[0, 0] = torch.nextafter(m.weight[0, 0], torch.tensor(1.0))
    assert weights_digest(m) != before


def test_a_new_figure_is_not_a_difference_but_a_missing_or_changed_one_is() -> None:
    from evaluation.fingerprint import differences

    before = {"stats": {"loss": "0x1p+0"}}
    assert differences(before, {"stats": {"loss": "0x1p+0", "new": 1}}) == []
    assert differences(before, {"stats": {}}) == ["/stats/loss: no longer reported"]
    assert differences(before, {"stats": {"loss": "0x1p-1"}})
