"""The perturbed expert on real Chromium and the real broker: its near misses are published on the
real-transitions topic (source ``real``, ``info["perturbed"]``) and some of its episodes fail where
the expert's succeed (near-miss failures for the world model)."""

from __future__ import annotations

import asyncio

import pytest

from collectors.agents import ExpertAgent
from collectors.browser import Browser
from collectors.collector import CollectorStats, run_collector
from collectors.perturbed import KINDS, PerturbedExpertAgent
from core.config import Config
from streams import records
from streams.kafka import ensure_topics, is_control, make_publisher, read_until_sentinel

pytestmark = pytest.mark.integration


def test_perturbed_expert_publishes_near_misses_and_failures(bl, run_cfg: Config) -> None:
    cfg = run_cfg
    cfg.collector.contexts = 1
    cfg.collector.max_episodes = 12
    cfg.collector.tasks = ["miniwob/login-user", "miniwob/click-button"]
    topics = ensure_topics(cfg)
    pub = make_publisher(cfg.kafka, client="test-perturbed", run=cfg.run_id)
    agent = PerturbedExpertAgent(ExpertAgent(), p=0.5, seed=3)

    async def go():
        browser = Browser(allowed_origins=[bl.base_url])
        await browser.start()
        try:
            return await run_collector(
                cfg, pub, topics, lambda: agent, asyncio.Event(), collector_id="c-perturbed",
                base_url=bl.base_url, stats=CollectorStats(), seed_offset=0, browser=browser,
            )  # fmt: skip
        finally:
            await browser.close()

    st = bl.run(go(), timeout=300)
    pub.flush(60)
    pub.close()
    assert st.episodes == 12
    trans = [
        records.decode(raw)
        for _m, raw in read_until_sentinel(cfg.kafka, topics.real, cfg.run_id)
        if raw and not is_control(raw)
    ]
    assert trans and all(t.source == "real" and t.producer_id == "c-perturbed" for t in trans)
    expert = read_until_sentinel(cfg.kafka, topics.expert, cfg.run_id)
    assert not [raw for _m, raw in expert if raw and not is_control(raw)]  # never expert data
    missed = [t for t in trans if t.info.get("perturbed")]
    assert missed and {t.info["perturbed"] for t in missed} <= set(KINDS)
    assert sum(agent.perturbed.values()) == len(missed)
    ends: dict = {}
    for t in trans:
        if t.step >= ends.get(t.episode_id, t).step:
            ends[t.episode_id] = t
    assert len(ends) == 12
    failed = [t for t in ends.values() if t.reward <= 0]
    assert failed and len(failed) < 12  # near misses fail episodes the expert alone solves
