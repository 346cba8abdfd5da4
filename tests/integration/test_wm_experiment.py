"""``dynaweb experiment world-model --quick``: collect in the live browser -> train -> eval,
as a user runs it; the output is checked for shape, not for fidelity (quick mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation.studies.world_model.split import heldout_pair, pair
from streams import records
from tests.integration.conftest_collectors import require_chromium

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_quick_world_model_experiment_end_to_end(tmp_path: Path) -> None:
    require_chromium()
    out = tmp_path / "wm"
    env = {**os.environ, "DYNAWEB_HOME": str(tmp_path / "home")}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "infra.cli",
            "experiment",
            "world-model",
            "--quick",
            "--out",
            str(out),
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    metrics = ("exact_match", "change_f1", "reward_bal_acc", "done_bal_acc")
    assert res["experiment"] == "world-model" and res["quick"] is True
    for side in ("model", "baseline"):
        for k in metrics:
            assert 0.0 <= res[side][k] <= 1.0, (side, k, res[side][k])
    assert set(res["beats_baseline"]) == set(metrics) and isinstance(
        res["beats_baseline_all"], bool
    )
    assert 0.0 <= res["model"]["ok_rate"] <= 1.0
    d = res["data"]
    assert d["train_transitions"] > 0 and d["heldout_transitions"] == res["n_eval"] > 0
    assert d["collected"]["expert"]["episodes"] > 0 and d["collected"]["random"]["episodes"] > 0
    assert d["collected"]["perturbed"]["episodes"] > 0
    assert d["real_transitions_budget"] == d["train_transitions"]
    assert sum(v["transitions"] for v in d["train_by_policy"].values()) == d["train_transitions"]
    # the stage-1 figures and their targets, from the same predictions
    st = res["stage1"]
    assert st["n"] == res["n_eval"] and 0.0 <= st["apply_rate"] <= 1.0
    assert st["exact_match"] == pytest.approx(res["model"]["exact_match"], abs=1e-3)
    assert st["replay_episodes"] > 0 and set(st["targets"]) >= {"replay_auroc", "apply_rate"}
    assert isinstance(res["targets_met"], bool)
    assert res["train"]["steps"] > 0 and set(res["seconds"]) == {
        "collect",
        "train",
        "eval",
        "total",
    }
    # the artifacts: the data (split by (task, seed), wm_study.split) and a loadable model
    trans = [
        records.decode(x, expect="transition")
        for x in (out / "transitions.jsonl").read_text().splitlines()
    ]
    assert len(trans) == d["transitions"]
    # the task_seed split: whole (task, seed) pairs held out, then inputs seen in training removed
    assert res["wm_split"] == res["config"]["split"] == "task_seed"
    frac = res["config"]["heldout_fraction"]
    held = [t for t in trans if heldout_pair(t.task, t.seed, frac)]
    removed = d["heldout_removed_duplicates"]["transitions"]
    assert len(held) - removed == res["n_eval"]
    written = [
        records.decode(x, expect="transition")
        for x in (out / "heldout.jsonl").read_text().splitlines()
    ]
    assert {t.key for t in written} <= {t.key for t in held} and len(written) == res["n_eval"]
    trained = {pair(t) for t in trans if not heldout_pair(t.task, t.seed, frac)}
    assert not {pair(t) for t in written} & trained  # no held-out seed was trained on
    assert (out / "world_model" / "config.json").exists() and (out / "result.json").exists()
    # the printed command recomputes the same figures with `dynaweb eval world-model`
    cmd = res["eval_command"].split()
    assert cmd[:3] == ["dynaweb", "eval", "world-model"]
    q = subprocess.run(
        [sys.executable, "-m", "infra.cli", *cmd[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert q.returncode == 0, q.stderr[-3000:]
    ev = json.loads(q.stdout.strip().splitlines()[-1])
    assert ev["n"] == res["n_eval"]
    for k in metrics:
        assert ev[k] == pytest.approx(res["model"][k], abs=1e-3)
        assert ev["baseline_" + k] == pytest.approx(res["baseline"][k], abs=1e-3)
    assert ev["stage1"]["targets"] == res["stage1"]["targets"]
