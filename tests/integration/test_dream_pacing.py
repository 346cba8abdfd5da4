"""Dream pacing end to end: the real trainer (``dynaweb train``), a real dream generator
(``dynaweb dream``, tiny models hot-loaded from S3) and the real stream worker on the session's
stack (S3 + broker).  The trainer reports its consumed dreams per producer in its progress message;
the generator keeps at most its window in flight ahead of it (``dream.pace``, on by default).  The
dreams reach the trainer's policy loss, and at most 25 % of the dreamed episodes are dropped as
stale (by the mixer or at train time), although the trainer moves a version every few steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from core.config import Config
from core.metrics import scrape_targets
from models.train.trainer import Trainer
from streams import kafka as sk
from streams import records
from tests.factories import transition
from tests.support import ROOT, Worker, env_for, wait_for

pytestmark = pytest.mark.integration

SMALL = {
    "DYNAWEB_MODEL__LAYERS": "1",
    "DYNAWEB_MODEL__D_MODEL": "32",
    "DYNAWEB_MODEL__HEADS": "2",
    "DYNAWEB_DREAM__GROUP_SIZE": "2",
    "DYNAWEB_DREAM__HORIZON": "2",
    "DYNAWEB_DREAM__BATCH": "4",
    "DYNAWEB_DREAM__MAX_CHANGE_TOKENS": "12",
    "DYNAWEB_STREAM__GROUP_SIZE": "2",
    "DYNAWEB_STREAM__BATCH_TRAJECTORIES": "4",
    "DYNAWEB_TRAINER__CHECKPOINT_EVERY": "2",  # a new version every 2 steps: staleness bites
    "DYNAWEB_THREADS": "1",
}


def _sum(scraped: list, component: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for lab, text in scraped:
        if lab.get("component") != component:
            continue
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += float(s.value)
    return total


def test_paced_dreams_reach_the_loss_and_few_go_stale(run_cfg: Config, tmp_path) -> None:
    cfg = run_cfg
    cfg.model.layers, cfg.model.d_model, cfg.model.heads = 1, 32, 2
    topics = sk.ensure_topics(cfg)
    tr = Trainer(cfg)
    try:
        tr.setup()  # the version-0 policy and world model in S3 (the generator's first load)
    finally:
        tr.close()
    w = Worker(
        cfg.kafka.bootstrap,
        tmp_path,
        cfg.run_id,
        group_size=2,
        batch_trajectories=4,
        expert_fraction=0.5,
        samples_per_insert=0,
        cold_start_batch_s=1.0,
        group_timeout_s=20,
    )
    w.start()
    p = sk.make_producer(cfg.kafka, linger_ms=0)
    for i in range(12):  # experts: start states for the dreamer and the worker's pool
        ep = f"expert-{uuid.uuid4().hex[:10]}"
        for s in range(2):
            t = transition(cfg.run_id, ep, s, "expert", s == 1, seed=i)
            p.send(topics.expert, value=records.encode(t), key=ep.encode())
    p.flush()
    p.close()
    env = env_for(cfg, **SMALL, PYTHONPATH=str(ROOT))
    procs, logs = {}, {}
    for name in ("train", "dream"):
        logs[name] = open(tmp_path / f"{name}.log", "wb")
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "infra.cli", name],
            cwd=ROOT,
            env=env,
            stdout=logs[name],
            stderr=subprocess.STDOUT,
        )
    counts: dict = {}

    def progress() -> bool:
        for name, proc in procs.items():
            if proc.poll() is not None:
                tail = (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{name} exited {proc.returncode}:\n{tail}")
        sc = scrape_targets(cfg)
        counts["produced"] = _sum(sc, "dream", "dynaweb_dream_rollouts_total")
        counts["at_loss"] = _sum(
            sc, "trainer", "dynaweb_trainer_gspo_trajectories_total", source="dream"
        )
        counts["trainer_stale"] = _sum(
            sc, "trainer", "dynaweb_trainer_stale_dropped_total", source="dream"
        )
        counts["versions"] = _sum(
            sc, "trainer", "dynaweb_trainer_checkpoint_version", kind="policy"
        )
        return counts["at_loss"] >= 40 and counts["versions"] >= 8

    try:
        wait_for(progress, 400, "40 dreamed episodes at the loss over 8 versions", every=2.0)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for fh in logs.values():
            fh.close()
        mixer_stale = w.metric("dynaweb_stream_stale_dropped_dream_trajectories_total")
        w.stop()
        if os.environ.get("DYNAWEB_TEST_KEEP_LOGS"):
            print((tmp_path / "dream.log").read_text()[-3000:])
    stale = mixer_stale + counts["trainer_stale"]
    share = stale / counts["produced"]
    dream_log = (tmp_path / "dream.log").read_text(errors="replace")
    print(
        f"\n{counts['produced']:.0f} dreamed episodes, {counts['at_loss']:.0f} at the loss, "
        f"{stale:.0f} stale (mixer {mixer_stale:.0f}, trainer {counts['trainer_stale']:.0f}): "
        f"share {share:.1%} over {counts['versions']:.0f} versions; "
        f"{dream_log.count('pacing: waiting')} paced waits logged"
    )
    assert share <= 0.25, (counts, mixer_stale, dream_log[-3000:])
    assert "pacing: waiting" in dream_log  # the window was full at least once: pacing, not luck
