"""Hot reload of the ``latest`` collector policy on the real S3 and broker.

A lost announcement delays a reload, never prevents it: on the real S3 a checkpoint is written
(files, manifest, LATEST) and never announced, and the ``latest`` collector policy still loads it,
from LATEST, within its poll interval.  An announced checkpoint is prefetched while the old
one acts, then installed at once."""

from __future__ import annotations

import time
from pathlib import Path

from core.config import Config
from core.s3 import make_client
from core.waiting import wait_until
from models import metrics as M
from models.checkpoints.store import CheckpointStore
from models.lm.saved import make_model
from streams.kafka import ensure_topics, read_until_sentinel
from tests.factories import small_trainer

POLL_S = 1.0


def _write_policy(cfg: Config, store: CheckpointStore, version: int, tmp: Path) -> None:
    from models.policy.model import Policy

    cfg.model.seed = version
    model, tok = make_model(Policy, cfg.model)
    d = tmp / f"policy-{version}"
    (d / "hf").mkdir(parents=True)
    model.save_pretrained(str(d / "hf"))
    tok.save_pretrained(str(d / "hf"))
    store.save("policy", version, d, {}, {})  # LATEST moves; no announcement is sent


def test_latest_policy_reloads_from_latest_without_any_announcement(
    run_cfg: Config, tmp_path: Path
) -> None:
    from collectors.policy_agent import latest_policy_agent

    cfg = small_trainer(run_cfg)
    cfg.s3.latest_poll_s = POLL_S
    topics = ensure_topics(cfg)
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    _write_policy(cfg, store, 0, tmp_path)
    agent = latest_policy_agent(cfg)  # watches the checkpoints topic: nothing will ever arrive
    try:
        agent.wait_ready(timeout=120)
        assert agent.policy_version == 0
        polled = M.DREAM_POLL_RELOADS.labels(cfg.run_id, "policy")._value.get()
        _write_policy(cfg, store, 1, tmp_path)
        written = time.monotonic()
        while agent.policy_version != 1 and time.monotonic() - written < 60:
            agent._refresh()  # what every act() does first
            time.sleep(0.05)
        took = time.monotonic() - written
        assert agent.policy_version == 1, "LATEST moved to v1 but the agent never reloaded"
        # found by the poll (not an announcement): LATEST was read at most POLL_S after it moved;
        # the rest is downloading and loading the model on a busy machine
        assert agent.slot._read_at - written <= POLL_S + 0.5, took
        assert M.DREAM_POLL_RELOADS.labels(cfg.run_id, "policy")._value.get() == polled + 1
    finally:
        agent.stop.set()
    # and no announcement was ever on the topic
    anns = list(read_until_sentinel(cfg.kafka, topics.checkpoints, cfg.run_id, timeout=60))
    assert anns == []


def test_an_announced_policy_is_prefetched_while_the_old_one_acts_then_installed_at_once(
    run_cfg: Config, tmp_path: Path
) -> None:
    """On the real S3 and broker: after an announcement the ``latest`` collector policy downloads
    and loads the new version in its prefetch thread while ``policy_version`` stays the old one
    (no act has run); the next act's refresh then installs it without downloading it again."""
    from collectors.policy_agent import latest_policy_agent
    from models.checkpoints.store import announce

    cfg = small_trainer(run_cfg)
    cfg.s3.latest_poll_s = 600.0  # no poll during the test: only the announcement can bring v1
    ensure_topics(cfg)  # as every component does at start: the watcher reads an existing topic
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    _write_policy(cfg, store, 0, tmp_path)
    agent = latest_policy_agent(cfg)
    try:
        agent.wait_ready(timeout=120)
        assert agent.policy_version == 0
        in_use = agent.slot.model
        _write_policy(cfg, store, 1, tmp_path)
        announce(cfg.run_id, cfg.kafka, ensure_topics(cfg), store, "policy", 1)
        # the prefetcher tells the agent once v1 is downloaded and loaded
        wait_until(agent._dirty.is_set, 60, "the announced v1 prefetched", every=0.02)
        assert agent.slot.known(1) and agent.policy_version == 0 and agent.slot.model is in_use
        t0 = time.monotonic()
        agent._refresh()  # what every act() does first
        installed = time.monotonic() - t0
        assert agent.policy_version == 1 and agent.slot.model is not in_use
        assert installed < 1.0, installed  # a LATEST read and a swap, no download and load
    finally:
        agent.stop.set()
