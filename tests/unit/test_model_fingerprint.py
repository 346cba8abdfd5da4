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


MACHINE = GOLDEN.with_suffix(".machine.json")  # the kernels the figures were written with


def _machine() -> dict:
    import torch

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}


def _close(a: object, b: object) -> list[str]:
    """On other kernels (another CPU capability or torch build) floats may differ in their last
    bits: numbers within 1e-4 relative, digests of raw bytes not compared, everything else exact."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in a for d in (_close(a[k], b[k]) if k in b else [f"{k}: missing"])]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for x, y in zip(a, b, strict=True) for d in _close(x, y)]
    if isinstance(a, str) and isinstance(b, str) and a.startswith(("0x", "-0x")):
        x, y = float.fromhex(a), float.fromhex(b)
        return [] if abs(x - y) <= 1e-4 * max(1.0, abs(x)) else [f"{x} != {y}"]
    if isinstance(a, str) and len(a) == 64 and isinstance(b, str) and len(b) == 64:
        return []  # a sha256 of raw bytes
    return [] if a == b else [f"{a!r} != {b!r}"]


def test_seeded_model_outputs_are_unchanged() -> None:
    """Byte for byte on the kernels the figures were written with (``MACHINE``); elsewhere within
    float rounding (a different CPU capability changes the last bits of a matrix product)."""
    want = json.loads(GOLDEN.read_text())
    got = json.loads(json.dumps(fingerprint(), sort_keys=True))
    if _machine() == json.loads(MACHINE.read_text()):
        diff = differences(want, got)
    else:
        diff = _close(want, got)
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
