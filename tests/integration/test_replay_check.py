"""``dynaweb eval replay`` on real Chromium: dreamed action sequences replayed live from the same task
and seed; the expert's actions succeed, a wrong click fails, and the dreamed scores rank them."""

from __future__ import annotations

import asyncio

import pytest

from collectors.browser import Browser
from collectors.env import WebEnv
from collectors.experts import EXPERTS
from collectors.taskserver import serve
from core.config import Config
from evaluation.eval.replay import replay, summarize
from tests.integration.conftest_collectors import require_chromium

pytestmark = pytest.mark.integration
TASK, SEED = "miniwob/click-button", 7


def _expert_actions(cfg: Config) -> list[str]:
    server, _, base = serve()

    async def go() -> list[str]:
        async with Browser(allowed_origins=[base]) as browser:
            env = WebEnv(browser, base, cfg.collector)
            await env.open()
            try:
                obs, _ = await env.reset(TASK, SEED)
                out: list[str] = []
                while True:
                    a = EXPERTS[TASK].act(obs, [])
                    out.append(a.to_text())
                    obs, _r, term, trunc, _ = await env.step(a)
                    if term or trunc:
                        return out
            finally:
                await env.close()

    try:
        return asyncio.run(go())
    finally:
        server.shutdown()
        server.server_close()


def test_dreams_replayed_live_are_scored_against_real_success() -> None:
    require_chromium()
    cfg = Config(run_id="t-replay")
    good = _expert_actions(cfg)
    ro = {"task": TASK, "seed": SEED, "policy_version": 4}
    rows = replay(
        cfg,
        [
            {**ro, "episode_id": "good", "actions": good, "dreamed_success": True, "dreamed_score": 0.9},
            {**ro, "episode_id": "stop", "actions": ['stop("")'], "dreamed_success": True, "dreamed_score": 0.6},
        ],
    )  # fmt: skip
    by = {r["episode_id"]: r for r in rows}
    assert by["good"]["real_success"] and not by["stop"]["real_success"]
    assert "error" not in by["good"] and by["good"]["real_steps"] == len(good)
    s = summarize(rows)
    assert s["dream_reward_auroc"] == 1.0 and s["real_success"] == 0.5 and s["agreement"] == 0.5
