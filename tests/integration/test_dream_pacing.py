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
from models.train.run import build_trainer
from streams import kafka as sk
from streams import records
from tests.factories import transition
from tests.integration.dream_support import SMALL, _sum, _two_button_episode
from tests.support import ROOT, Worker, env_for, wait_for

pytestmark = pytest.mark.integration


def _dream_and_train(
    cfg: Config, tmp_path, at_loss: int = 40, two_buttons: bool = False, **env_extra: str
) -> tuple[dict, float, str]:
    """The trainer and a dream generator on the session's stack until ``at_loss`` dreamed
    episodes reached the policy loss over 8 versions: (the components' counters, the mixer's
    stale drops, the dream generator's log).  The experts are two-step episodes that all
    succeed, or with ``two_buttons`` ``_two_button_episode``s."""
    cfg.model.layers, cfg.model.d_model, cfg.model.heads = 1, 32, 2
    topics = sk.ensure_topics(cfg)
    tr = build_trainer(cfg)
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
        steps = (
            _two_button_episode(cfg.run_id, i)
            if two_buttons
            else [transition(cfg.run_id, ep, s, "expert", s == 1, seed=i) for s in range(2)]
        )
        for t in steps:
            p.send(topics.expert, value=records.encode(t), key=t.episode_id.encode())
    p.flush()
    p.close()
    env = env_for(cfg, **SMALL, **env_extra, PYTHONPATH=str(ROOT))
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
        counts["uniform_dropped"] = _sum(
            sc, "dream", "dynaweb_dream_groups_dropped_total", reason="uniform"
        )
        counts["at_loss"] = _sum(
            sc, "trainer", "dynaweb_trainer_gspo_trajectories_total", source="dream"
        )
        counts["groups"] = _sum(sc, "trainer", "dynaweb_trainer_gspo_groups_total", source="dream")
        counts["groups_nonzero"] = _sum(
            sc, "trainer", "dynaweb_trainer_gspo_groups_nonzero_total", source="dream"
        )
        counts["trainer_stale"] = _sum(
            sc, "trainer", "dynaweb_trainer_stale_dropped_total", source="dream"
        )
        counts["versions"] = _sum(
            sc, "trainer", "dynaweb_trainer_checkpoint_version", kind="policy"
        )
        return counts["at_loss"] >= at_loss and counts["versions"] >= 8

    try:
        try:
            wait_for(progress, 400, f"{at_loss} dreamed episodes at the loss", every=2.0)
        except AssertionError as e:
            tail = (tmp_path / "dream.log").read_text(errors="replace")[-2000:]
            raise AssertionError(f"{e}: {counts}\n{tail}") from None
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
    return counts, mixer_stale, (tmp_path / "dream.log").read_text(errors="replace")


def test_paced_dreams_reach_the_loss_and_few_go_stale(run_cfg: Config, tmp_path) -> None:
    counts, mixer_stale, dream_log = _dream_and_train(run_cfg, tmp_path)
    stale = mixer_stale + counts["trainer_stale"]
    share = stale / counts["produced"]
    print(
        f"\n{counts['produced']:.0f} dreamed episodes, {counts['at_loss']:.0f} at the loss, "
        f"{stale:.0f} stale (mixer {mixer_stale:.0f}, trainer {counts['trainer_stale']:.0f}): "
        f"share {share:.1%} over {counts['versions']:.0f} versions; "
        f"{dream_log.count('pacing: waiting')} paced waits logged"
    )
    assert share <= 0.25, (counts, mixer_stale, dream_log[-3000:])
    assert "pacing: waiting" in dream_log  # the window was full at least once: pacing, not luck


def test_dropping_uniform_groups_puts_only_groups_with_an_advantage_at_the_loss(
    run_cfg: Config, tmp_path
) -> None:
    # the world model learns that "OK" succeeds and "No" fails; the policy imitates both clicks,
    # so some groups' rollouts differ in reward and others (every rollout clicked alike) do not
    counts, mixer_stale, dream_log = _dream_and_train(
        run_cfg,
        tmp_path,
        at_loss=20,
        two_buttons=True,
        DYNAWEB_DREAM__DROP_UNIFORM_GROUPS="true",
        # no uniform group published for liveness (dream.max_dropped_per_published): only the drop
        DYNAWEB_DREAM__MAX_DROPPED_PER_PUBLISHED="0",
    )
    print(
        f"\n{counts['groups']:.0f} dream groups at the loss, {counts['groups_nonzero']:.0f} with "
        f"a nonzero advantage; {counts['uniform_dropped']:.0f} uniform groups not published"
    )
    assert counts["uniform_dropped"] > 0, counts  # some groups had no advantage: they were left out
    assert counts["groups"] >= 10, counts
    # read from the trainer's own counters: every dream group that reached the loss carried an
    # advantage (an incomplete group cut by a timeout or a stale drop may not: at most one in 10)
    assert counts["groups_nonzero"] >= 0.9 * counts["groups"], (counts, dream_log[-3000:])
