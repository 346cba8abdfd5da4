"""`dynaweb ablation`: a setting's share, paired by arm and seed (pure functions on cell dicts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.studies.sample_efficiency import ablation

pytestmark = pytest.mark.unit


def _cell(arm: str, seed: int, success: float, per_task: dict[str, float]) -> dict:
    return {
        "arm": arm,
        "seed": seed,
        "points": [
            {"success": 0.1, "per_task": {}},  # an earlier point: never the final one
            {"success": success, "per_task": per_task},
        ],
    }


def _run(values: dict[tuple[str, int], float]) -> dict[tuple[str, int], dict]:
    return {(a, s): _cell(a, s, v, {"t/a": v, "t/b": 1.0 - v}) for (a, s), v in values.items()}


ON = _run(
    {
        ("real_only", 1): 0.80,
        ("real_only", 2): 0.70,
        ("real_only", 3): 0.75,
        ("imitation_matched", 1): 0.60,
        ("imitation_matched", 2): 0.60,
        ("imitation_matched", 3): 0.65,
    }
)
OFF = _run(
    {
        ("real_only", 1): 0.70,
        ("real_only", 2): 0.70,
        ("imitation_matched", 1): 0.60,
        ("imitation_matched", 2): 0.50,
        ("dynaweb", 1): 0.9,  # an arm only one run holds: left out
    }
)


def test_the_share_pairs_only_the_seeds_both_runs_finished() -> None:
    res = ablation.share(ON, OFF)
    assert set(res["arms"]) == {"real_only", "imitation_matched"}
    r = res["arms"]["real_only"]
    assert r["on - off"]["per_seed"] == {1: 0.1, 2: 0.0}  # seed 3 has no off cell
    assert r["on - off"]["mean"] == pytest.approx(0.05)
    lo, hi = r["on - off"]["ci95"]
    # two seeds: t(1) = 12.706, sd = 0.0707: a wide interval around the mean
    assert lo == pytest.approx(0.05 - 12.706 * 0.05, abs=1e-3) and hi > 0.6
    assert r["on"] == pytest.approx(0.75) and r["off"] == pytest.approx(0.70)
    assert r["per_task"]["t/a"]["on - off"] == pytest.approx(0.05)
    assert r["per_task"]["t/b"]["on - off"] == pytest.approx(-0.05)


def test_the_setting_s_effect_on_a_within_run_contrast() -> None:
    c = ablation.share(ON, OFF)["contrasts"]["real_only - imitation_matched"]
    assert c["on"]["per_seed"] == {1: pytest.approx(0.2), 2: pytest.approx(0.1)}
    assert c["off"]["per_seed"] == {1: pytest.approx(0.1), 2: pytest.approx(0.2)}
    assert c["on - off"]["per_seed"] == {1: pytest.approx(0.1), 2: pytest.approx(-0.1)}
    assert c["on - off"]["mean"] == pytest.approx(0.0)
    assert "dynaweb - real_only" not in ablation.share(ON, OFF)["contrasts"]


def test_runs_without_a_shared_cell_are_refused() -> None:
    with pytest.raises(ValueError, match="share no"):
        ablation.share(ON, _run({("dynaweb", 1): 0.5}))


def test_the_command_reads_two_output_folders(tmp_path: Path, capsys) -> None:
    for name, run, eid in (("on", ON, "se_on"), ("off", OFF, "se_off")):
        d = tmp_path / name / "cells"
        d.mkdir(parents=True)
        for (a, s), c in run.items():
            (d / f"{a}-s{s}.json").write_text(json.dumps(c))
        (d / f"{'real_only'}-s99.attempts").write_text("1")  # not a cell
        (tmp_path / name / "experiment.json").write_text(json.dumps({"experiment_id": eid}))
    md = tmp_path / "share.md"
    res = ablation.main(str(tmp_path / "on"), str(tmp_path / "off"), out=str(md))
    assert res["on_experiment"] == "se_on" and res["off_experiment"] == "se_off"
    text = md.read_text()
    assert "| real_only | 75.0 % | 70.0 % | +5.0 |" in text
    assert "| t/a | 75.0 % | 70.0 % | +5.0 |" in text
    assert text in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="no cells/ folder"):
        ablation.main(str(tmp_path / "nowhere"), str(tmp_path / "off"))
