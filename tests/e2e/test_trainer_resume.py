"""SIGKILL the trainer mid-stream: it resumes from its last checkpoint with versions
continuing, the optimizer state restored and consumption restarting at the manifest's offsets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from core.config import Config
from core.s3 import make_client
from models.checkpoints.store import CheckpointStore
from streams import records
from streams.kafka import Publisher, ensure_topics, make_producer
from tests.support import env_for, wait_for

N_BATCHES = 8


def _batch(cfg: Config, i: int) -> records.TrainingBatch:
    trajs = []
    for j in range(2):
        ep = f"b{i}-{j}"
        obs = {
            "instruction": f'Click on the "OK{j}" button.',
            "url": "",
            "tree": f'[1] text "pick one"\n[2] button "OK{j}"\n[3] button "No"',
        }
        nxt = {**obs, "tree": '[1] text "done"'}
        t = records.Transition(
            run_id=cfg.run_id,
            episode_id=ep,
            step=0,
            task="miniwob/click-button",
            seed=i,
            source="expert",
            policy_version=0,
            world_model_version=0,
            obs=obs,
            action="click(2)",
            next_obs=nxt,
            reward=1.0,
            done=True,
        )
        trajs.append(records.Trajectory.from_transitions([t]).__dict__)
    return records.TrainingBatch(
        run_id=cfg.run_id,
        batch_id=f"batch-{i}",
        worker_id="test",
        kind="expert_only",
        trajectories=trajs,
        expert_fraction=1.0,
    )


def _start(cfg: Config, log: Path) -> subprocess.Popen:
    env = env_for(
        cfg,
        DYNAWEB_TRAINER__CHECKPOINT_EVERY="2",
        DYNAWEB_TRAINER__CHECKPOINT_EVERY_S="100000",
        DYNAWEB_MODEL__LAYERS="2",
        DYNAWEB_MODEL__D_MODEL="64",
        DYNAWEB_MODEL__HEADS="2",
        DYNAWEB_TRAINER__KEEP_CHECKPOINTS="20",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "infra.cli", "train"],
        env=env,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _opt_steps(store: CheckpointStore, version: int, tmp: Path) -> int:
    d = tmp / f"v{version}"
    store.download("policy", version, d)
    state = torch.load(
        next((d / "state").rglob("*model_states.pt")), map_location="cpu", weights_only=False
    )
    steps = {int(s["step"]) for s in state["optimizer"]["state"].values()}
    assert len(steps) == 1, steps
    return steps.pop()


def test_sigkill_resume(run_cfg: Config, tmp_path: Path) -> None:
    topics = ensure_topics(run_cfg)
    store = CheckpointStore(make_client(run_cfg), run_cfg.s3.bucket, run_cfg.run_id)
    pub = Publisher(make_producer(run_cfg.kafka))
    for i in range(N_BATCHES):
        pub.send(topics.policy_batches, _batch(run_cfg, i))
    pub.flush()
    log = tmp_path / "trainer.log"
    p = _start(run_cfg, log)
    try:
        wait_for(
            lambda: (store.latest("policy") or {}).get("version", -1) >= 2,
            240,
            f"policy v2 (log {log})",
        )
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        killed_at = store.latest("policy")["version"]
        before, _ = store.manifest("policy", killed_at)
        assert before["extra"]["policy_steps"] == 2 * killed_at
        p = _start(run_cfg, log)
        final = N_BATCHES // 2
        wait_for(
            lambda: store.latest("policy")["version"] >= final, 240, f"policy v{final} after resume"
        )
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    versions = store.versions("policy")
    assert versions == list(range(final + 1)), (
        versions
    )  # versions continue, none repeated or skipped
    after, _ = store.manifest("policy", final)
    # consumption restarted from the manifest's offsets: each batch trained exactly once overall
    assert after["extra"]["policy_steps"] == N_BATCHES
    # the world model's held-out score travels with the checkpoint (dream.wm_gate reads it)
    assert set(after["extra"]["wm_gate"]) == {"n", "exact_match", "baseline_exact_match", "margin"}
    assert after["offsets"][topics.policy_batches] == {"0": N_BATCHES}
    # the optimizer state was restored, not rebuilt: Adam's step count continues across the kill
    assert _opt_steps(store, killed_at, tmp_path) == 2 * killed_at
    assert _opt_steps(store, final, tmp_path) == N_BATCHES
    assert f"resumed from v{killed_at}" in log.read_text()
