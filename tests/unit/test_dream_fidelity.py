"""`dynaweb dream-fidelity`: the DynaWeb world models against reality, pooled per task (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.studies.sample_efficiency import fidelity

pytestmark = pytest.mark.unit


def _final(success: float, per_task: dict) -> list[dict]:
    return [{"success": success, "per_task": per_task}]


def _stage1(bal: float, by_task: dict[str, tuple[int, float, float]]) -> dict:
    return {
        "reward_bal_acc_terminal": bal,
        "exact_match_changed": 0.3,
        "exact_match": 0.6,
        "exact_match_baseline": 0.4,
        "change_rate_pred": 0.2,
        "change_rate_real": 0.6,
        "apply_rate": 0.95,
        "replay_auroc": 0.75,
        "reward_bal_acc_terminal_by_task": {t: bal for t in by_task},
        "replay_by_task": {
            t: {"episodes": n, "dreamed_success": d, "real_success": r}
            for t, (n, d, r) in by_task.items()
        },
    }


def _cells() -> dict[tuple[str, int], dict]:
    cells = {
        ("imitation_matched", 1): {"points": _final(0.5, {"t/a": 0.5, "t/b": 0.2})},
        ("imitation_matched", 2): {"points": _final(0.5, {"t/a": 0.4, "t/b": 0.2})},
        ("real_only", 1): {"points": _final(0.6, {"t/a": 0.6, "t/b": 0.5})},
        ("real_only", 2): {"points": _final(0.6, {"t/a": 0.4, "t/b": 0.3})},
        ("dynaweb", 1): {
            "points": _final(0.6, {"t/a": 0.7, "t/b": 0.2}),
            "wm_fidelity": {
                "dynaweb_final": {
                    "stage1": _stage1(0.8, {"t/a": (10, 0.9, 0.5), "t/b": (4, 0.0, 0.5)})
                }
            },
            "replay": {"dream_reward_auroc": 0.7},
        },
        ("dynaweb", 2): {
            "points": _final(0.6, {"t/a": 0.6, "t/b": 0.2}),
            "wm_fidelity": {"dynaweb_final": {"stage1": _stage1(0.6, {"t/a": (30, 0.5, 0.7)})}},
            "replay": {"dream_reward_auroc": 0.9},
        },
        ("dynaweb_dream_only", 1): {"points": _final(0.5, {})},  # never probed: left out
    }
    for (a, s), c in cells.items():
        c.update(arm=a, seed=s)
    return cells


def test_fidelity_pools_seeds_and_weights_tasks_by_their_episodes() -> None:
    res = fidelity.dream_fidelity(_cells())
    assert set(res) == {"dynaweb"}
    r = res["dynaweb"]
    assert r["seeds"] == [1, 2]
    assert r["reward_bal_acc_terminal"] == pytest.approx(0.7)
    assert r["own_dreams_replayed_auroc"] == pytest.approx(0.8)
    a, b = r["per_task"]["t/a"], r["per_task"]["t/b"]
    assert a["episodes"] == 40
    assert a["dreamed_success"] == pytest.approx((10 * 0.9 + 30 * 0.5) / 40)
    assert a["real_success"] == pytest.approx((10 * 0.5 + 30 * 0.7) / 40)
    assert b["episodes"] == 4 and b["dreamed_success"] == 0.0
    # gains over imitation_matched, paired by seed over the probed seeds
    assert a["dynaweb - imitation_matched"] == pytest.approx(((0.7 - 0.5) + (0.6 - 0.4)) / 2)
    assert a["real_only - imitation_matched"] == pytest.approx(0.05)
    assert b["real_only - imitation_matched"] == pytest.approx(0.2)


def test_a_run_without_a_probed_world_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no DynaWeb cell"):
        fidelity.dream_fidelity({k: v for k, v in _cells().items() if k[0] != "dynaweb"})
    d = tmp_path / "cells"
    d.mkdir()
    for (a, s), c in _cells().items():
        (d / f"{a}-s{s}.json").write_text(json.dumps(c))
    md = tmp_path / "f.md"
    res = fidelity.main(str(tmp_path), md=str(md), as_json=True)
    assert res["arms"]["dynaweb"]["per_task"]["t/b"]["episodes"] == 4
    assert "| t/b | 4 | 0.0 % | 50.0 % | 0.8 | +0.0 | +20.0 |" in md.read_text()
