"""`dynaweb experiment sample-efficiency --quick` as a user runs it, on the session's real stack.

Checks that every artifact is produced and well formed (not the result): the CSV has all
five arms, real steps within the budget at every budget point, the final point after the
configured policy steps and the arms' curves starting at the imitation point; the matched
imitation control takes the online arms' policy steps and no real step; the PNG is a PNG;
the Markdown has the headline table; the JSON summary (the last line, and summary.json) has
every arm with its keys, and the nonzero-advantage shares read from the trainer show that
live and dreamed GSPO groups reached the loss; every cell ran as its own run with checkpoints
in S3 and real transitions on the broker; a rerun with the same --out resumes (nothing is run
again)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from core.config import Config
from core.s3 import make_client
from evaluation.studies.sample_efficiency.arm_names import ARMS
from evaluation.studies.sample_efficiency.arms import QUICK
from models.checkpoints.store import CheckpointStore
from tests.support import env_for


def _run(env: dict, out: Path, log: Path) -> subprocess.CompletedProcess:
    with open(log, "w") as fh:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "infra.cli",
                "experiment",
                "sample-efficiency",
                "--quick",
                "--out",
                str(out),
                "--no-stack",
                "--json",
                "--set",
                "experiment.keep_checkpoints=true",  # version 0 is read below; then released
            ],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            timeout=900,
        )


def test_quick_experiment_writes_every_artifact(run_cfg: Config, tmp_path: Path) -> None:
    env = env_for(run_cfg)
    out = tmp_path / "se"
    log = tmp_path / "experiment.log"
    proc = _run(env, out, log)
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    summary = json.loads(text.strip().splitlines()[-1])
    assert summary["quick"] is True and summary["cells"] == 5
    assert summary == json.loads(
        (out / "summary.json").read_text()
    )  # the same object, kept in --out

    # the summary: every configured arm, each with its keys
    steps = QUICK["online_policy_steps"]
    assert (
        list(summary["arms"])
        == list(ARMS)
        == ["imitation", "imitation_matched", "real_only", "dynaweb", "dynaweb_dream_only"]
    )
    for arm, a in summary["arms"].items():
        assert {"final_success", "ci95", "real_steps", "policy_steps", "nonzero_adv_share"} <= set(
            a
        ), (arm, a)
        assert 0.0 <= a["final_success"] <= 1.0 and a["ci95"] == [
            None,
            None,
        ]  # one seed: no interval
        assert set(a["nonzero_adv_share"]) == {"live", "dream"}
        assert a["policy_steps"] == (QUICK["imitation_steps"] if arm == "imitation" else steps), (
            arm,
            a,
        )
    shares = {arm: a["nonzero_adv_share"] for arm, a in summary["arms"].items()}
    assert (
        shares["imitation"] == shares["imitation_matched"] == {"live": None, "dream": None}
    )  # BC only
    # live on-policy groups reached the trainer's loss (the share is a number, not null), and dreamed ones
    assert shares["real_only"]["live"] is not None and shares["real_only"]["dream"] is None, shares
    assert shares["dynaweb"]["dream"] is not None, shares
    # dreams only: dreamed groups reached the loss, no live group did (they trained the world model)
    assert shares["dynaweb_dream_only"]["dream"] is not None, shares
    assert shares["dynaweb_dream_only"]["live"] is None, shares
    for arm in ("dynaweb", "dynaweb_dream_only"):
        a = summary["arms"][arm]
        assert a["dream_steps"] > 0 and a["world_model_steps_real"] > 0, (arm, a)
        assert {"wm_reward_bal_acc", "wm_exact_match", "wm_exact_match_baseline"} <= set(a)
        assert a["dream_apply_rate"] is not None and 0.0 <= a["dream_apply_rate"] <= 1.0, a
        assert "dream_reward_auroc" in a  # null when every replay had the same outcome
    m, ro = summary["arms"]["imitation_matched"], summary["arms"]["real_only"]
    assert (
        m["real_steps"] == summary["arms"]["imitation"]["real_steps"] < ro["real_steps"]
    )  # demos only
    assert (
        m["expert_samples_per_step"]
        == ro["expert_samples_per_step"]
        == QUICK["batch_trajectories"] // 2
    )
    assert (
        summary["config"]["group_size"] == QUICK["group_size"]
        and "binary" in summary["config"]["reward"]
    )

    with open(out / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    arms = {r["arm"] for r in rows}
    assert arms == set(ARMS), rows
    by_arm = {a: [r for r in rows if r["arm"] == a] for a in arms}
    assert len(by_arm["imitation"]) == 1
    for arm in ("real_only", "dynaweb", "dynaweb_dream_only", "imitation_matched"):
        pts = by_arm[arm]
        assert [int(r["point"]) for r in pts] == [0, 1, 2, 3, 4], pts
        assert (
            pts[0]["real_steps"] == by_arm["imitation"][0]["real_steps"]
        )  # starts from the imitation point
        for r, budget in zip(pts[1:-1], QUICK["budget"], strict=True):
            assert int(r["budget"]) == budget and int(r["real_steps"]) <= budget, r
            assert int(r["episodes"]) == QUICK["eval_seeds_per_task"] * len(QUICK["tasks"])
            assert 0.0 <= float(r["success"]) <= 1.0
        final = pts[-1]  # the final checkpoint: the configured policy steps, one version per step
        assert (
            final["budget"] == "" and int(final["policy_steps"]) == int(final["version"]) == steps
        ), pts
        if arm == "imitation_matched":
            assert {r["real_steps"] for r in pts} == {
                by_arm["imitation"][0]["real_steps"]
            }  # no interaction
    png = (out / "success_vs_real.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "results.md").read_text()
    assert (
        "## Headline" in md
        and "Real-only online GSPO" in md
        and "DynaWeb" in md
        and "matched updates" in md
    )

    cells = {
        c["arm"]: c for c in (json.loads(f.read_text()) for f in (out / "cells").glob("*-s0.json"))
    }
    assert len({c["run_id"] for c in cells.values()}) == 5  # one run id per arm
    client = make_client(run_cfg)
    for arm, c in cells.items():
        store = CheckpointStore(client, run_cfg.s3.bucket, c["run_id"])
        assert store.latest("policy") is not None, arm
        if arm in ("real_only", "dynaweb", "dynaweb_dream_only"):
            assert c["live_steps"] > 0, c  # real interactions in the live browser
        else:
            assert c["live_steps"] == 0, c
        # the trainer's counters were read after its last step (it keeps serving them: train --linger)
        assert c["diagnostics"].get("trainer_policy_steps") == c["policy_steps"], (
            arm,
            c["diagnostics"],
        )
    # the replay check ran on each DynaWeb arm's dreams (live Chromium)
    for arm in ("dynaweb", "dynaweb_dream_only"):
        rep = cells[arm]["replay"]
        assert rep.get("n", 0) > 0 or "error" in rep, (arm, rep)
        assert rep.get("n", 0) <= QUICK["replay_rollouts"], rep
    # the DynaWeb arms' world model started from the one pretrained on the corpus (its version 0 holds
    # the same weights), and its real transitions are charged to them in the headline accounting only
    pre = summary["world_model_pretrained"]
    assert pre["real_transitions"] > 0 and pre["steps"] == QUICK["wm_pretrain_steps"], pre
    from safetensors.torch import load_file

    def weights(d: Path) -> dict:  # the backbone's file and the model's own parts
        return {
            **load_file(str(d / "model.safetensors")),
            **load_file(str(d / "parts.safetensors")),
        }

    want = weights(Path(pre["dir"]))
    for arm in ("dynaweb", "dynaweb_dream_only"):
        a, c = summary["arms"][arm], cells[arm]
        assert c["offline_real_steps"] == a["real_steps_offline"] == pre["real_transitions"], a
        assert a["real_steps"] == round(a["real_steps_online"] + pre["real_transitions"], 1), a
        v0 = tmp_path / f"wm0-{arm}"
        CheckpointStore(client, run_cfg.s3.bucket, c["run_id"]).download("world_model", 0, v0)
        got = weights(v0 / "hf")
        for k in ("transformer.wte.weight", "change_head.weight", "reward_head.weight"):
            assert (got[k] == want[k]).all(), (arm, k)
    for arm in ("imitation", "imitation_matched", "real_only"):
        a = summary["arms"][arm]
        assert a["real_steps_offline"] == 0 and a["real_steps"] == a["real_steps_online"], a
    assert summary["headline_online"]["arms"].keys() == summary["headline"]["arms"].keys()
    # the dreaming arm spent fewer real steps per policy version than the real-only arm
    assert len(cells["dynaweb"]["history"]) > 0 and len(cells["real_only"]["history"]) > 0

    # once a seed is done its runs keep only their final checkpoints (here called by hand: the run
    # above kept them all), on the real S3 store
    from evaluation.studies.sample_efficiency.config import SampleEfficiencyConfig
    from evaluation.studies.sample_efficiency.study import SampleEfficiency

    study_cfg = SampleEfficiencyConfig(
        **vars(run_cfg)
    )  # the runtime config and the study's section
    study = SampleEfficiency(study_cfg, out, quick=True, start_stack=False, echo=False)
    assert study.release_checkpoints(0) > 0
    for arm, c in cells.items():
        store = CheckpointStore(client, run_cfg.s3.bucket, c["run_id"])
        assert store.versions("policy") == [store.latest("policy")["version"]], arm
        if arm.startswith("dynaweb"):
            assert store.versions("world_model") == [store.latest("world_model")["version"]]

    # resume: a second call finds every cell done and only rewrites the report
    proc2 = _run(env, out, tmp_path / "again.log")
    again = (tmp_path / "again.log").read_text()
    assert proc2.returncode == 0, again[-3000:]
    assert "run " not in "".join(
        line for line in again.splitlines() if line.startswith("[experiment")
    )
    assert json.loads(again.strip().splitlines()[-1])["rows"] == summary["rows"]
