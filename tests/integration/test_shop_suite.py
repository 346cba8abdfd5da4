"""The shop suite on the real application: django-oscar started as a local process on a free
loopback port (a temporary home; the migrated database comes from the machine's template,
``collectors.webapps.oscar.server.template_db``, made on first use), real Chromium.

* every shop task: its expert succeeds (the check's positive case) and ``stop`` at the start
  page fails (its negative case), on one seed;
* isolation: two contexts at once never see each other's basket, answer or login;
* reset: measured, under a second at the median;
* an app that dies mid-episode: the episode fails with the reason, the app is restarted.
"""

from __future__ import annotations

import os
import signal
import statistics

import pytest

from collectors.env import WebEnv
from collectors.tasks import get_task, list_tasks
from collectors.webapps.app import get_app
from collectors.webapps.oscar.server import ShopServer
from core.net import free_ports
from core.spaces import Action
from tests.integration.conftest_collectors import BrowserLoop, browser_loop_instance

SHOP = [t.name for t in list_tasks(suite="shop")]
WITH_EXPERTS = [t for t in SHOP if get_task(t).has_expert]  # `dynaweb experts` reports coverage


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    server = ShopServer(tmp_path_factory.mktemp("shop"), free_ports(1)[0]).start(timeout=900)
    app = get_app("shop")
    before = (app.server, app._url)
    app.use(server)
    yield server
    app.server, app._url = before
    server.stop()


@pytest.fixture(scope="module")
def bl(shop) -> BrowserLoop:
    return browser_loop_instance()


async def _expert_episode(env: WebEnv, task: str, seed: int) -> tuple[float, dict, int]:
    expert = get_task(task).app_task.expert
    obs, _ = await env.reset(task, seed)
    history: list = []
    for steps in range(1, 40):
        a = expert.act(obs, history)
        nobs, reward, term, trunc, info = await env.step(a)
        history.append((obs, a))
        obs = nobs
        if term or trunc:
            return reward, info, steps
    raise AssertionError("no end")


@pytest.mark.parametrize("task", WITH_EXPERTS)
def test_task_expert_succeeds_and_stopping_at_once_fails(bl: BrowserLoop, task: str) -> None:

    async def run() -> tuple:
        env = WebEnv(bl.browser, bl.base_url)
        await env.open()
        try:
            pos = await _expert_episode(env, task, 7)
            await env.reset(task, 7)
            neg = await env.step(Action.stop())
            return pos, neg
        finally:
            await env.close()

    (reward, info, steps), neg = bl.run(run())
    assert reward == 1.0, (task, info.get("reason"), info.get("error"))
    assert neg[1] == 0.0 and neg[2], (task, neg[4].get("reason"))
    assert "app_failure" not in neg[4]


def test_contexts_are_isolated(bl: BrowserLoop) -> None:
    """Two contexts at once: one fills its basket, answers and logs in; the other sees none of
    it (cookies per context; the control API reads each context's own session)."""

    async def run() -> tuple:
        a, b = WebEnv(bl.browser, bl.base_url), WebEnv(bl.browser, bl.base_url)
        await a.open()
        await b.open()
        try:
            await a.reset("shop/add-to-basket", 1)
            await b.reset("shop/add-to-basket", 1)
            ep_a, ep_b = a.app_episode, b.app_episode
            assert ep_a.code != ep_b.code  # same task and seed, different partitions
            upc = ep_a.params["product"]["upc"]
            await ep_a.control("basket_add", {"lines": {upc: 2}})
            await ep_a.control("login", {"email": f"iso.{ep_a.code}@example.com"})
            state_a, state_b = await ep_a.state(), await ep_b.state()
            # b's own episode: its judge sees an empty basket, a's sees its line
            await a.step(Action.stop())
            _, rb, *_ = await b.step(Action.stop())
            return state_a, state_b, rb
        finally:
            await a.close()
            await b.close()

    state_a, state_b, rb = bl.run(run())
    assert state_a["basket"] and state_a["user"] is not None
    assert state_b["basket"] == [] and state_b["user"] is None and state_b["answer"] is None
    assert rb == 0.0


def test_reset_under_a_second(bl: BrowserLoop) -> None:
    """The app's state is restored for an episode (cookies cleared, the task's reset through the
    control API, a login) in under a second at the median; the start page's load is reported
    beside it (it is the episode's first observation, and on a loaded machine it dominates)."""

    async def run() -> list[dict]:
        env = WebEnv(bl.browser, bl.base_url)
        await env.open()
        out = []
        try:
            for seed in range(8):  # a reset hook (two basket lines) and a staff login
                out.append((await env.reset("shop/remove-from-basket", seed))[1])
                out.append((await env.reset("shop/admin-rename-product", seed))[1])
        finally:
            await env.close()
        return out

    infos = bl.run(run())
    reset = [i["app_reset_s"] for i in infos[2:]]
    load = [i["start_page_s"] for i in infos[2:]]
    print(
        f"shop reset seconds: app state p50 {statistics.median(reset):.3f} max {max(reset):.3f}; "
        f"start page p50 {statistics.median(load):.3f} max {max(load):.3f}"
    )
    assert statistics.median(reset) < 1.0, reset


def test_app_that_dies_fails_the_episode_and_is_restarted(bl: BrowserLoop, shop) -> None:
    async def run() -> tuple:
        env = WebEnv(bl.browser, bl.base_url)
        await env.open()
        try:
            await env.reset("shop/price-of", 3)
            os.killpg(shop.proc.pid, signal.SIGKILL)
            shop.proc.wait(10)
            _, reward, term, trunc, info = await env.step(Action.stop())
            return reward, term, info
        finally:
            await env.close()

    restarts = shop.restarts
    reward, term, info = bl.run(run())
    assert reward == 0.0 and term
    assert "app unavailable" in info["app_failure"] and "restarted" in info["app_failure"]
    assert shop.alive() and shop.restarts == restarts + 1
    # and the next episode runs on the restarted app
    assert bl.run(_expert_episode_in_new_env(bl, "shop/open-basket"))[0] == 1.0


async def _expert_episode_in_new_env(bl: BrowserLoop, task: str) -> tuple:
    env = WebEnv(bl.browser, bl.base_url)
    await env.open()
    try:
        return await _expert_episode(env, task, 0)
    finally:
        await env.close()
