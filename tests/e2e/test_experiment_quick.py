"""`dynaweb experiment sample-efficiency --quick` as a user runs it, on the session's real stack.

Checks that every artifact is produced and well formed (not the result): the CSV has all
three arms, real steps within the budget at every point and the arms' curves starting at
the imitation point; the PNG is a PNG; the Markdown has the headline table; the JSON summary
is the last line; every cell ran as its own run with checkpoints in S3 and real transitions
on the broker; a rerun with the same --out resumes (nothing is run again)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from infra.config import Config
from infra.experiment import QUICK
from infra.s3 import make_client
from models.checkpoint import CheckpointStore
from tests.support import env_for


def _run(env: dict, out: Path, log: Path) -> subprocess.CompletedProcess:
    with open(log, "w") as fh:
        return subprocess.run([sys.executable, "-m", "infra.cli", "experiment", "sample-efficiency", "--quick",
                               "--out", str(out), "--no-stack", "--json"], env=env, stdout=fh,
                              stderr=subprocess.STDOUT, timeout=900)  # fmt: skip


def test_quick_experiment_writes_every_artifact(run_cfg: Config, tmp_path: Path) -> None:
    env = env_for(run_cfg)
    out = tmp_path / "se"
    log = tmp_path / "experiment.log"
    proc = _run(env, out, log)
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    summary = json.loads(text.strip().splitlines()[-1])
    assert summary["quick"] is True and summary["cells"] == 3

    with open(out / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    arms = {r["arm"] for r in rows}
    assert arms == {"imitation", "real_only", "dynaweb"}, rows
    by_arm = {a: [r for r in rows if r["arm"] == a] for a in arms}
    assert len(by_arm["imitation"]) == 1
    for arm in ("real_only", "dynaweb"):
        pts = by_arm[arm]
        assert [int(r["point"]) for r in pts] == [0, 1, 2, 3], pts
        assert pts[0]["real_steps"] == by_arm["imitation"][0]["real_steps"]  # starts from arm 1
        for r, budget in zip(pts[1:], QUICK["budget"], strict=True):
            assert int(r["budget"]) == budget and int(r["real_steps"]) <= budget, r
            assert int(r["episodes"]) == QUICK["eval_seeds_per_task"] * len(QUICK["tasks"])
            assert 0.0 <= float(r["success"]) <= 1.0
        assert int(pts[-1]["version"]) >= 1, pts  # trained past the initial weights
    png = (out / "success_vs_real.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "results.md").read_text()
    assert "## Headline" in md and "Real-only online GSPO" in md and "DynaWeb" in md

    cells = {c["arm"]: c for c in (json.loads(f.read_text()) for f in (out / "cells").glob("*-s0.json"))}
    assert len({c["run_id"] for c in cells.values()}) == 3  # one run id per arm
    client = make_client(run_cfg)
    for arm, c in cells.items():
        store = CheckpointStore(client, run_cfg.s3.bucket, c["run_id"])
        assert store.latest("policy") is not None, arm
        if arm != "imitation":
            assert c["live_steps"] > 0, c  # real interactions in the live browser
    # the dreaming arm spent fewer real steps per policy version than the real-only arm
    assert len(cells["dynaweb"]["history"]) > 0 and len(cells["real_only"]["history"]) > 0

    # resume: a second call finds every cell done and only rewrites the report
    proc2 = _run(env, out, tmp_path / "again.log")
    again = (tmp_path / "again.log").read_text()
    assert proc2.returncode == 0, again[-3000:]
    assert "run " not in "".join(line for line in again.splitlines() if line.startswith("[experiment"))
    assert json.loads(again.strip().splitlines()[-1])["rows"] == summary["rows"]
